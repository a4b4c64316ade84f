//! The messages and the `A2AService` of `lf.a2a.v1`, generated from `proto/a2a.proto`.

#![allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used
)]

tonic::include_proto!("lf.a2a.v1");
