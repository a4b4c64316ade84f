//! `GET /metrics` with its own access rule, and the middleware that measures the A2A requests
//! the router answers (from the [`mew_transport::Served`] each answer carries).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use mew_transport::{Binding, Served};

use super::auth::Authenticator;
use crate::metrics::{self, MetricsAccess, Snapshot};

/// Reads what a scrape reports as it is now (live tasks, MCP states, the outbox, leases), each
/// with a bounded cost.
pub(crate) type SnapshotSource = Arc<dyn Fn() -> BoxFuture<'static, Snapshot> + Send + Sync>;

/// The path Prometheus scrapes.
pub(crate) const PATH: &str = "/metrics";

/// `GET /metrics`, answered to the callers `access` admits; `auth` is the node's `auth:`, if
/// it has one.
pub(crate) fn router(
    access: MetricsAccess,
    auth: Option<Arc<Authenticator>>,
    snapshot: SnapshotSource,
) -> Router {
    let route = Router::new().route(
        PATH,
        get(move |headers: HeaderMap| {
            let snapshot = snapshot.clone();
            async move { scrape(&snapshot, &headers).await }
        }),
    );
    route.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let auth = auth.clone();
            async move {
                let peer = request
                    .extensions()
                    .get::<ConnectInfo<SocketAddr>>()
                    .map(|ConnectInfo(peer)| *peer);
                let loopback = peer.is_some_and(|peer| peer.ip().to_canonical().is_loopback());
                match (access, auth) {
                    (MetricsAccess::Public, _) => next.run(request).await,
                    (MetricsAccess::Loopback, _) if loopback => next.run(request).await,
                    // No `auth:`: the rest of the node takes every caller, and so does this.
                    (MetricsAccess::Loopback, None) => next.run(request).await,
                    (MetricsAccess::Loopback | MetricsAccess::Authenticated, Some(auth)) => {
                        super::auth::authenticated(&auth, request, next).await
                    }
                    // Refused when the configuration is resolved; never served without a scheme.
                    (MetricsAccess::Authenticated, None) => {
                        StatusCode::UNAUTHORIZED.into_response()
                    }
                }
            }
        },
    ))
}

async fn scrape(snapshot: &SnapshotSource, headers: &HeaderMap) -> Response {
    let open_metrics = headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(metrics::wants_open_metrics);
    let snapshot = snapshot().await;
    let Some(text) = metrics::render(&snapshot, open_metrics) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let content_type = if open_metrics {
        metrics::OPENMETRICS_CONTENT_TYPE
    } else {
        metrics::TEXT_CONTENT_TYPE
    };
    let mut response = text.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The middleware: records each answer that says what it served, and counts its SSE stream as
/// open until the body is dropped (sent whole, or the client went away).
pub(crate) async fn measure(request: Request, next: Next) -> Response {
    if !metrics::enabled() {
        return next.run(request).await;
    }
    let started = Instant::now();
    let response = next.run(request).await;
    let Some(served) = response.extensions().get::<Served>().copied() else {
        return response;
    };
    let binding = match served.binding {
        Binding::JsonRpc => "jsonrpc",
        Binding::HttpJson => "rest",
        Binding::Grpc => "grpc",
    };
    let status = match served.outcome {
        Ok(()) => "ok",
        Err(kind) => kind.name(),
    };
    metrics::a2a_request(
        served.method,
        binding,
        status,
        started.elapsed().as_secs_f64(),
    );
    let streaming = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|media| media.as_bytes().starts_with(b"text/event-stream"));
    if !streaming {
        return response;
    }
    let open = metrics::open_stream();
    response.map(|body| {
        Body::from_stream(body.into_data_stream().map(move |chunk| {
            let _open = &open;
            chunk
        }))
    })
}
