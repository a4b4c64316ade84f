//! Shared support for the end-to-end tests: reference agents, peers and process helpers.
