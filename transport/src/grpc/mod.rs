//! The gRPC binding of A2A 1.0: the generated `lf.a2a.v1` types and service, and their
//! conversion to and from the `mew-cards` object model.

mod budget;
mod client;
pub(crate) mod convert;
pub(crate) mod proto;
mod server;

pub(crate) use client::GrpcAgent;
pub use server::{
    GRPC_SERVICE_PATH, GrpcRefusal, TenantRefusal, Tenants, grpc_refusal, grpc_router,
    grpc_router_with,
};
