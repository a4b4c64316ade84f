//! AgentTransport: the A2A 1.0 operations as one trait, its servers and its client.
//!
//! [`AgentTransport`] is both sides: [`router`] serves any implementation over
//! the JSON-RPC and HTTP+JSON bindings, [`grpc_router`] over gRPC, and
//! [`RemoteAgent`] implements it over all three, so a node can serve a local
//! role, call a remote one, or relay one to the other with the same code. This
//! crate alone knows envelopes, wire codes, HTTP and protobuf; it knows nothing
//! of models, tools or roles.

mod agent;
mod client;
mod grpc;
mod server;
mod sse;
mod wire;

pub use agent::{AgentTransport, CallContext, Error, EventStream, Principal, collect_send};
pub use client::{
    Binding, ClientOptions, ContextHeaders, Credentials, RemoteAgent, TlsOptions, fetch_card,
};
pub use grpc::{
    GRPC_SERVICE_PATH, GrpcRefusal, TenantRefusal, Tenants, grpc_refusal, grpc_router,
    grpc_router_with,
};
pub use server::{Served, ServerOptions, method_not_allowed, router, router_with};
pub use sse::{SseDecoder, SseError, SseEvent};
pub use wire::{
    A2A_JSON, EXTENSIONS_HEADER, VERSION_HEADER, http_status, jsonrpc_code, kind_from_jsonrpc_code,
};
