//! The span of every A2A request the node serves (every binding, streams until they end): it
//! continues the caller's W3C trace context when the `telemetry.inbound` rule trusts the
//! caller, and says the operation, role, task and outcome.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use mew_cards::TaskId;
use mew_transport::{Binding, Principal, Served};
use tracing::field::Empty;

use crate::telemetry::{self, Inbound};

/// What the request spans need to know: whose trace context to continue, and the role the
/// node's own root (`/`) serves.
#[derive(Clone, Debug)]
pub(crate) struct Observe {
    pub(crate) inbound: Inbound,
    pub(crate) front_role: String,
}

tokio::task_local! {
    /// The role a request reached, when its path does not name it: a gRPC call names its role
    /// in the request's `tenant`, which the service reads after the span is made.
    static REACHED: std::sync::Arc<std::sync::OnceLock<String>>;
}

/// Says which role the request being served reached (see [`REACHED`]); outside a request's
/// span it does nothing.
pub(crate) fn record_role(role: &str) {
    let _ = REACHED.try_with(|reached| reached.set(role.to_owned()));
}

/// Paths that are no A2A operation and are asked often (probes, scrapes; the cards too):
/// no span.
const QUIET: &[&str] = &["/healthz", "/readyz", "/metrics", "/status"];

/// The middleware: runs the request inside its span, and keeps the span open until the
/// response body (an SSE stream, say) has ended.
pub(crate) async fn observe(
    State(observe): State<Observe>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if !telemetry::enabled()
        || QUIET.contains(&path)
        || path.ends_with(mew_cards::WELL_KNOWN_CARD_PATH)
        || path == "/agents"
    {
        return next.run(request).await;
    }
    let role = match path.strip_prefix("/agents/") {
        Some(rest) => rest.split('/').next().unwrap_or_default(),
        None => observe.front_role.as_str(),
    }
    .to_owned();
    let span = telemetry::span!(
        "a2a.request",
        otel.kind = "server",
        otel.status_code = Empty,
        rpc.system = "a2a",
        rpc.method = Empty,
        a2a.binding = Empty,
        a2a.role = %role,
        a2a.task_id = Empty,
        a2a.error = Empty,
        http.request.method = %request.method(),
        url.path = %path,
        http.response.status_code = Empty,
    );
    if span.is_disabled() {
        return next.run(request).await;
    }
    let trusted = match observe.inbound {
        Inbound::All => true,
        Inbound::Authenticated => request.extensions().get::<Principal>().is_some(),
        Inbound::None => false,
    };
    if trusted {
        telemetry::set_parent(&span, telemetry::extract(request.headers()));
    }
    let reached = std::sync::Arc::new(std::sync::OnceLock::new());
    let call = tracing::Instrument::instrument(next.run(request), span.clone());
    let response = REACHED.scope(reached.clone(), call).await;
    let role = match reached.get() {
        Some(reached) => {
            span.record("a2a.role", reached.as_str());
            reached.clone()
        }
        None => role,
    };
    span.record("http.response.status_code", response.status().as_u16());
    match response.extensions().get::<Served>() {
        Some(served) => {
            let operation = served.method.unwrap_or("unknown");
            telemetry::rename(&span, format!("{operation} {role}"));
            span.record("rpc.method", operation);
            span.record(
                "a2a.binding",
                match served.binding {
                    Binding::JsonRpc => "jsonrpc",
                    Binding::HttpJson => "http+json",
                    Binding::Grpc => "grpc",
                },
            );
            if let Err(kind) = served.outcome {
                span.record("a2a.error", kind.name());
                span.record("otel.status_code", "error");
            }
        }
        None => {
            telemetry::rename(&span, format!("HTTP {role}"));
        }
    }
    if response.status().is_server_error() {
        span.record("otel.status_code", "error");
    }
    response.map(|body| Body::new(Traced { body, span }))
}

/// Names the task a request is about on the request's span.
pub(crate) fn record_task(id: &TaskId) {
    tracing::Span::current().record("a2a.task_id", id.as_str());
}

/// A response body that holds the request's span until it ends: a stream's span lasts as long
/// as the stream.
struct Traced {
    body: Body,
    span: tracing::Span,
}

impl HttpBody for Traced {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        Pin::new(&mut this.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
