//! The gRPC server: `lf.a2a.v1.A2AService` over any `AgentTransport`, one per tenant.
//!
//! gRPC has one path per method (`/lf.a2a.v1.A2AService/SendMessage`), so several agents
//! behind one endpoint are told apart by the request's `tenant` field, as the spec's
//! `AgentInterface.tenant` says: a [`Tenants`] resolver names the agent of each tenant (and
//! may refuse the caller). The caller's context comes from the request's metadata as from
//! HTTP headers (`a2a-version`, `a2a-extensions`) and the [`Principal`] an authenticating
//! layer in front attached to the HTTP request. A2A errors are gRPC statuses with the
//! spec's code and a `google.rpc.ErrorInfo` detail; gRPC's own answers (unknown method,
//! undecodable or oversized message) stay gRPC's.

use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, Response};
use futures_util::{Stream, StreamExt};
use mew_cards::{self as cards, A2aError, ErrorKind};
use tonic::{Code, Status};

use super::budget::{Budgeted, UNIT};
use super::convert::Invalid;
use super::proto;
use super::proto::a2a_service_server::{A2aService, A2aServiceServer};
use crate::agent::{AgentTransport, CallContext, EventStream, Principal};
use crate::client::Binding;
use crate::server::{Served, ServerOptions, call_context, check_version, end_after_last};
use crate::wire::{grpc_status, parse_grpc_status};

/// The path prefix of the service's methods.
pub const GRPC_SERVICE_PATH: &str = "/lf.a2a.v1.A2AService/";

/// Why a tenant is not served to a caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TenantRefusal {
    /// No agent has this tenant.
    Unknown,
    /// The caller may not use this tenant's agent; the reason is for the caller.
    Forbidden(String),
}

/// The agent of each tenant of a gRPC endpoint (`""` is the request that names none).
pub trait Tenants: Send + Sync {
    /// The agent that serves `tenant` to `principal`.
    fn agent(
        &self,
        tenant: &str,
        principal: Option<&Principal>,
    ) -> Result<Arc<dyn AgentTransport>, TenantRefusal>;
}

/// Why a layer in front of the service turns a caller away.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrpcRefusal {
    /// No valid credentials: `UNAUTHENTICATED`.
    Unauthenticated(String),
    /// Credentials that may not make this call: `PERMISSION_DENIED`.
    PermissionDenied(String),
}

/// The answer to a gRPC call turned away before the service (by authentication, for
/// instance): a trailers-only answer with the refusal's status.
pub fn grpc_refusal(refusal: GrpcRefusal) -> Response<Body> {
    let status = match refusal {
        GrpcRefusal::Unauthenticated(message) => Status::unauthenticated(message),
        GrpcRefusal::PermissionDenied(message) => Status::permission_denied(message),
    };
    status.into_http()
}

/// One agent for every tenant.
struct Single(Arc<dyn AgentTransport>);

impl Tenants for Single {
    fn agent(
        &self,
        _: &str,
        _: Option<&Principal>,
    ) -> Result<Arc<dyn AgentTransport>, TenantRefusal> {
        Ok(self.0.clone())
    }
}

/// Serves `agent` over gRPC, whatever tenant a request names: see [`grpc_router_with`].
pub fn grpc_router(agent: Arc<dyn AgentTransport>, options: &ServerOptions) -> axum::Router {
    grpc_router_with(Arc::new(Single(agent)), options)
}

/// Serves the agents of `tenants` over gRPC, at [`GRPC_SERVICE_PATH`]`{method}`: an axum
/// router to merge into an HTTP/2 server's. Messages are limited to `max_body_bytes` each way,
/// and request bodies are read within `body_timeout` and the `max_inflight_body_bytes` budget
/// (`budget.rs`). Each answer carries a [`Served`] (for an error, read from its status).
pub fn grpc_router_with(tenants: Arc<dyn Tenants>, options: &ServerOptions) -> axum::Router {
    let service = A2aServiceServer::new(Service { tenants })
        .max_decoding_message_size(options.max_body_bytes)
        .max_encoding_message_size(options.max_body_bytes);
    let units = options.max_inflight_body_bytes.div_ceil(UNIT).max(1);
    let units = units.min(tokio::sync::Semaphore::MAX_PERMITS);
    let room = Arc::new(tokio::sync::Semaphore::new(units));
    let total = u32::try_from(units).unwrap_or(u32::MAX);
    let body_timeout = options.body_timeout;
    let service = tower::service_fn(move |request: Request<Body>| {
        // The method, for the answer's `Served`.
        let method = method_of(request.uri().path());
        let request =
            request.map(|body| Body::new(Budgeted::new(body, room.clone(), total, body_timeout)));
        let call = tower::ServiceExt::oneshot(service.clone(), request);
        async move {
            let response = call.await?;
            Ok::<_, std::convert::Infallible>(served_grpc(method, response.map(Body::new)))
        }
    });
    axum::Router::new().route_service(&format!("{GRPC_SERVICE_PATH}{{method}}"), service)
}

/// The A2A operation a gRPC path names, if it names one.
fn method_of(path: &str) -> Option<&'static str> {
    let name = path.strip_prefix(GRPC_SERVICE_PATH)?;
    crate::wire::METHODS.iter().copied().find(|m| *m == name)
}

/// Attaches a [`Served`] to an answer that has none: an error, whose status is in the
/// headers (gRPC's trailers-only answer).
fn served_grpc(method: Option<&'static str>, mut response: Response<Body>) -> Response<Body> {
    if response.extensions().get::<Served>().is_some() {
        return response;
    }
    let outcome = match Status::from_header_map(response.headers()) {
        Some(status) => match parse_grpc_status(&status) {
            Some(error) => Err(error.kind),
            None => Ok(()),
        },
        None => Ok(()),
    };
    response.extensions_mut().insert(Served {
        binding: Binding::Grpc,
        method,
        outcome,
    });
    response
}

struct Service {
    tenants: Arc<dyn Tenants>,
}

/// A stream of the service's answers.
type Answers = Pin<Box<dyn Stream<Item = Result<proto::StreamResponse, Status>> + Send>>;

fn invalid_params(error: Invalid) -> Status {
    grpc_status(&A2aError::invalid_params(error.0))
}

fn status(error: crate::Error) -> Status {
    grpc_status(&error.into_a2a())
}

impl Service {
    /// The caller's context and the tenant's agent, or the status that refuses the call.
    fn prepare<T>(
        &self,
        request: &tonic::Request<T>,
        tenant: &str,
    ) -> Result<(CallContext, Arc<dyn AgentTransport>), Status> {
        let headers = request.metadata().clone().into_headers();
        check_version(&headers, None).map_err(|e| grpc_status(&e))?;
        let principal = request.extensions().get::<Principal>().cloned();
        let agent =
            self.tenants
                .agent(tenant, principal.as_ref())
                .map_err(|refusal| match refusal {
                    TenantRefusal::Unknown => grpc_status(&A2aError::new(
                        ErrorKind::MethodNotFound,
                        format!("no agent is served under the tenant {tenant:?}"),
                    )),
                    TenantRefusal::Forbidden(reason) => {
                        Status::new(Code::PermissionDenied, format!("forbidden: {reason}"))
                    }
                })?;
        Ok((call_context(&headers, principal), agent))
    }

    /// A success, marked as served.
    fn answer<T>(method: &'static str, message: T) -> tonic::Response<T> {
        let mut response = tonic::Response::new(message);
        response.extensions_mut().insert(Served {
            binding: Binding::Grpc,
            method: Some(method),
            outcome: Ok(()),
        });
        response
    }
}

/// The events of `stream` as gRPC messages, ending after the one `ends` says is the last,
/// or with the first error as the stream's status.
fn answers(stream: EventStream, ends: fn(&cards::StreamResponse) -> bool) -> Answers {
    Box::pin(end_after_last(stream, ends).map(|(item, _)| match item {
        Ok(event) => Ok(proto::StreamResponse::from(event)),
        Err(error) => Err(status(error)),
    }))
}

#[tonic::async_trait]
impl A2aService for Service {
    async fn send_message(
        &self,
        request: tonic::Request<proto::SendMessageRequest>,
    ) -> Result<tonic::Response<proto::SendMessageResponse>, Status> {
        let (ctx, agent) = self.prepare(&request, &request.get_ref().tenant)?;
        let request =
            cards::SendMessageRequest::try_from(request.into_inner()).map_err(invalid_params)?;
        let answer = agent.send_message(&ctx, request).await.map_err(status)?;
        Ok(Self::answer("SendMessage", answer.into()))
    }

    type SendStreamingMessageStream = Answers;

    async fn send_streaming_message(
        &self,
        request: tonic::Request<proto::SendMessageRequest>,
    ) -> Result<tonic::Response<Answers>, Status> {
        let (ctx, agent) = self.prepare(&request, &request.get_ref().tenant)?;
        let request =
            cards::SendMessageRequest::try_from(request.into_inner()).map_err(invalid_params)?;
        let stream = agent
            .send_streaming_message(&ctx, request)
            .await
            .map_err(status)?;
        Ok(Self::answer(
            "SendStreamingMessage",
            answers(stream, cards::StreamResponse::ends_stream),
        ))
    }

    async fn get_task(
        &self,
        request: tonic::Request<proto::GetTaskRequest>,
    ) -> Result<tonic::Response<proto::Task>, Status> {
        let (ctx, agent) = self.prepare(&request, &request.get_ref().tenant)?;
        let task = agent
            .get_task(&ctx, request.into_inner().into())
            .await
            .map_err(status)?;
        Ok(Self::answer("GetTask", task.into()))
    }

    async fn list_tasks(
        &self,
        request: tonic::Request<proto::ListTasksRequest>,
    ) -> Result<tonic::Response<proto::ListTasksResponse>, Status> {
        let (ctx, agent) = self.prepare(&request, &request.get_ref().tenant)?;
        let request =
            cards::ListTasksRequest::try_from(request.into_inner()).map_err(invalid_params)?;
        let page = agent.list_tasks(&ctx, request).await.map_err(status)?;
        Ok(Self::answer("ListTasks", page.into()))
    }

    async fn cancel_task(
        &self,
        request: tonic::Request<proto::CancelTaskRequest>,
    ) -> Result<tonic::Response<proto::Task>, Status> {
        let (ctx, agent) = self.prepare(&request, &request.get_ref().tenant)?;
        let request =
            cards::CancelTaskRequest::try_from(request.into_inner()).map_err(invalid_params)?;
        let task = agent.cancel_task(&ctx, request).await.map_err(status)?;
        Ok(Self::answer("CancelTask", task.into()))
    }

    type SubscribeToTaskStream = Answers;

    async fn subscribe_to_task(
        &self,
        request: tonic::Request<proto::SubscribeToTaskRequest>,
    ) -> Result<tonic::Response<Answers>, Status> {
        let (ctx, agent) = self.prepare(&request, &request.get_ref().tenant)?;
        let stream = agent
            .subscribe_to_task(&ctx, request.into_inner().into())
            .await
            .map_err(status)?;
        Ok(Self::answer(
            "SubscribeToTask",
            answers(stream, cards::StreamResponse::ends_subscription),
        ))
    }

    async fn create_task_push_notification_config(
        &self,
        request: tonic::Request<proto::TaskPushNotificationConfig>,
    ) -> Result<tonic::Response<proto::TaskPushNotificationConfig>, Status> {
        let (ctx, agent) = self.prepare(&request, &request.get_ref().tenant)?;
        let config = agent
            .create_task_push_notification_config(&ctx, request.into_inner().into())
            .await
            .map_err(status)?;
        Ok(Self::answer(
            "CreateTaskPushNotificationConfig",
            config.into(),
        ))
    }

    async fn get_task_push_notification_config(
        &self,
        request: tonic::Request<proto::GetTaskPushNotificationConfigRequest>,
    ) -> Result<tonic::Response<proto::TaskPushNotificationConfig>, Status> {
        let (ctx, agent) = self.prepare(&request, &request.get_ref().tenant)?;
        let config = agent
            .get_task_push_notification_config(&ctx, request.into_inner().into())
            .await
            .map_err(status)?;
        Ok(Self::answer("GetTaskPushNotificationConfig", config.into()))
    }

    async fn list_task_push_notification_configs(
        &self,
        request: tonic::Request<proto::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<tonic::Response<proto::ListTaskPushNotificationConfigsResponse>, Status> {
        let (ctx, agent) = self.prepare(&request, &request.get_ref().tenant)?;
        let page = agent
            .list_task_push_notification_configs(&ctx, request.into_inner().into())
            .await
            .map_err(status)?;
        Ok(Self::answer("ListTaskPushNotificationConfigs", page.into()))
    }

    async fn get_extended_agent_card(
        &self,
        request: tonic::Request<proto::GetExtendedAgentCardRequest>,
    ) -> Result<tonic::Response<proto::AgentCard>, Status> {
        let (ctx, agent) = self.prepare(&request, &request.get_ref().tenant)?;
        let card = agent
            .get_extended_agent_card(&ctx, request.into_inner().into())
            .await
            .map_err(status)?;
        Ok(Self::answer("GetExtendedAgentCard", card.into()))
    }

    async fn delete_task_push_notification_config(
        &self,
        request: tonic::Request<proto::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<tonic::Response<()>, Status> {
        let (ctx, agent) = self.prepare(&request, &request.get_ref().tenant)?;
        agent
            .delete_task_push_notification_config(&ctx, request.into_inner().into())
            .await
            .map_err(status)?;
        Ok(Self::answer("DeleteTaskPushNotificationConfig", ()))
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
