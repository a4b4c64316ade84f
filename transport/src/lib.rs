//! AgentTransport: the A2A 1.0 operations as one trait, its HTTP server and its HTTP client.
