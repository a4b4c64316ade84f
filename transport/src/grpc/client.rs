//! The gRPC client: `AgentTransport` over `lf.a2a.v1.A2AService`, what `RemoteAgent` speaks
//! to an interface of binding `GRPC`.
//!
//! It sends what the HTTP client sends, as metadata: `a2a-version`, the caller's
//! `a2a-extensions`, the configured headers and credentials, and the context headers (a
//! trace), and the interface's `tenant` in every request that names none. A status becomes
//! the same typed error as on the other bindings (its `ErrorInfo` reason, or its code).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue};
use mew_cards::{
    self as cards, AgentCard, AgentInterface, CancelTaskRequest, GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse, ListTasksRequest, ListTasksResponse, PROTOCOL_VERSION,
    SendMessageRequest, SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task,
    TaskPushNotificationConfig,
};
use tonic::transport::{Channel, Endpoint};

use super::convert::Invalid;
use super::proto;
use super::proto::a2a_service_client::A2aServiceClient;
use crate::agent::{AgentTransport, CallContext, Error, EventStream};
use crate::client::{ClientOptions, ContextHeaders, Credentials};
use crate::wire::parse_grpc_status;

/// The largest message the client reads, as the server's default limit.
const MAX_MESSAGE_BYTES: usize = 10 * 1024 * 1024;

/// How often the connection is pinged while idle, and how long an answer may take: what
/// tells a silent stream from a dead peer (gRPC streams have no keep-alive messages).
const PING_INTERVAL: Duration = Duration::from_secs(30);

/// An agent reached over gRPC.
pub(crate) struct GrpcAgent {
    client: A2aServiceClient<Channel>,
    card: AgentCard,
    tenant: String,
    request_timeout: Duration,
    headers: HeaderMap,
    credentials: Option<Arc<dyn Credentials>>,
    context_headers: Option<Arc<dyn ContextHeaders>>,
}

impl std::fmt::Debug for GrpcAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcAgent")
            .field("agent", &self.card.name)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

fn decode(what: &str, error: Invalid) -> Error {
    Error::decode(format!("{what}: {}", error.0))
}

/// The error a call's status stands for: gRPC's own words that the call got no answer (the
/// peer is gone or busy, the time ran out) or was refused before the agent (credentials) are
/// transport failures, as the HTTP client reports them; every other status is the A2A error
/// it carries.
fn failed(method: &str, status: &tonic::Status) -> Error {
    use tonic::Code;
    let transport =
        |what: &str| Error::transport(format!("{method} failed: {what}: {}", status.message()));
    match status.code() {
        Code::Unavailable => transport("the agent is unavailable"),
        Code::DeadlineExceeded => transport("no answer in time"),
        Code::Cancelled => transport("the call was cancelled"),
        Code::Unauthenticated => transport("unauthenticated"),
        Code::PermissionDenied => transport("forbidden"),
        _ => match parse_grpc_status(status) {
            Some(error) => Error::Protocol(error),
            None => Error::decode(format!("{method} answered OK with no message")),
        },
    }
}

/// The URI to connect to for a card's gRPC URL, and whether over TLS. Cards write it several
/// ways: `https://h:p` and `grpcs://h:p` are TLS, `http://h:p` and `grpc://h:p` are not, and a
/// bare `h:p` (as gRPC targets are written) is plaintext on a loopback host and TLS elsewhere.
/// A path is not part of a gRPC address: the service's path replaces it.
fn endpoint_of(url: &str) -> Result<(String, bool), Error> {
    let url = url.trim();
    let (tls, rest) = match url.split_once("://") {
        Some(("https" | "grpcs", rest)) => (true, rest),
        Some(("http" | "grpc", rest)) => (false, rest),
        Some((scheme, _)) => {
            return Err(Error::transport(format!(
                "the gRPC URL {url:?} has the scheme {scheme:?}; gRPC is reached over \
                 http(s) or grpc(s), or at host:port"
            )));
        }
        None => {
            let url = url.split('/').next().unwrap_or(url);
            let host = url.rsplit_once(':').map_or(url, |(host, _)| host);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let loopback = host == "localhost"
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            (!loopback, url)
        }
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    if authority.is_empty() {
        return Err(Error::transport(format!(
            "the gRPC URL {url:?} names no host"
        )));
    }
    let scheme = if tls { "https" } else { "http" };
    Ok((format!("{scheme}://{authority}"), tls))
}

impl GrpcAgent {
    /// A client of `interface`, which connects on its first call.
    pub(crate) fn new(
        card: AgentCard,
        interface: &AgentInterface,
        options: &ClientOptions,
    ) -> Result<Self, Error> {
        let (url, tls) = endpoint_of(&interface.url)?;
        let mut endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| Error::transport(format!("the gRPC URL {url:?} is not valid: {e}")))?
            .connect_timeout(options.connect_timeout)
            .http2_keep_alive_interval(PING_INTERVAL)
            .keep_alive_timeout(PING_INTERVAL)
            .keep_alive_while_idle(true);
        if tls {
            endpoint = endpoint
                .tls_config(options.tls.grpc())
                .map_err(|e| Error::transport(format!("cannot configure TLS for {url}: {e}")))?;
        }
        let client = A2aServiceClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Self {
            client,
            card,
            tenant: interface.tenant.clone(),
            request_timeout: options.request_timeout,
            headers: options.headers.clone(),
            credentials: options.credentials.clone(),
            context_headers: options.context_headers.clone(),
        })
    }

    /// The interface's tenant where the request names none.
    fn tenant(&self, tenant: String) -> String {
        if tenant.is_empty() {
            self.tenant.clone()
        } else {
            tenant
        }
    }

    /// `message` with the metadata of a call from `ctx`.
    fn request<T>(
        &self,
        ctx: &CallContext,
        message: T,
        streaming: bool,
    ) -> Result<tonic::Request<T>, Error> {
        // gRPC metadata keys are lowercase: `A2A-Version` and `A2A-Extensions` as gRPC sends them.
        let mut headers = self.headers.clone();
        headers.insert(
            HeaderName::from_static("a2a-version"),
            HeaderValue::from_static(PROTOCOL_VERSION),
        );
        if !ctx.extensions.is_empty()
            && let Ok(value) = HeaderValue::from_str(&ctx.extensions.join(","))
        {
            headers.insert(HeaderName::from_static("a2a-extensions"), value);
        }
        if streaming && let Some(id) = ctx.last_event_id {
            headers.insert(HeaderName::from_static("last-event-id"), id.into());
        }
        if let Some(credentials) = &self.credentials {
            let found = credentials
                .headers()
                .map_err(|e| Error::transport(format!("cannot get credentials: {e}")))?;
            for (name, value) in found {
                headers.insert(name, value);
            }
        }
        if let Some(context) = &self.context_headers {
            context.add_to(&mut headers);
        }
        // Connection-level headers have no place in gRPC metadata.
        for name in ["connection", "host", "content-type", "te", "content-length"] {
            headers.remove(name);
        }
        let mut request = tonic::Request::from_parts(
            tonic::metadata::MetadataMap::from_headers(headers),
            tonic::Extensions::default(),
            message,
        );
        if !streaming {
            request.set_timeout(self.request_timeout);
        }
        Ok(request)
    }

    /// The events of a server stream, ending after the one `ends` says is the last.
    fn events(
        method: &'static str,
        stream: tonic::Streaming<proto::StreamResponse>,
        ends: fn(&StreamResponse) -> bool,
    ) -> EventStream {
        EventStream::new(futures_util::stream::unfold(
            (stream, false),
            move |(mut stream, done)| async move {
                if done {
                    return None;
                }
                let item = match stream.next().await? {
                    Ok(message) => StreamResponse::try_from(message)
                        .map_err(|e| decode(&format!("an event of {method}"), e)),
                    Err(status) => Err(failed(method, &status)),
                };
                let last = item.as_ref().map_or(true, ends);
                Some((item, (stream, last)))
            },
        ))
    }
}

#[async_trait]
impl AgentTransport for GrpcAgent {
    async fn card(&self) -> Result<AgentCard, Error> {
        Ok(self.card.clone())
    }

    async fn send_message(
        &self,
        ctx: &CallContext,
        mut request: SendMessageRequest,
    ) -> Result<SendMessageResponse, Error> {
        request.tenant = self.tenant(request.tenant);
        let request = self.request(ctx, proto::SendMessageRequest::from(request), false)?;
        let answer = self
            .client
            .clone()
            .send_message(request)
            .await
            .map_err(|s| failed("SendMessage", &s))?;
        SendMessageResponse::try_from(answer.into_inner()).map_err(|e| decode("SendMessage", e))
    }

    async fn send_streaming_message(
        &self,
        ctx: &CallContext,
        mut request: SendMessageRequest,
    ) -> Result<EventStream, Error> {
        request.tenant = self.tenant(request.tenant);
        let request = self.request(ctx, proto::SendMessageRequest::from(request), true)?;
        let stream = self
            .client
            .clone()
            .send_streaming_message(request)
            .await
            .map_err(|s| failed("SendStreamingMessage", &s))?;
        Ok(Self::events(
            "SendStreamingMessage",
            stream.into_inner(),
            StreamResponse::ends_stream,
        ))
    }

    async fn get_task(
        &self,
        ctx: &CallContext,
        mut request: GetTaskRequest,
    ) -> Result<Task, Error> {
        request.tenant = self.tenant(request.tenant);
        let request = self.request(ctx, proto::GetTaskRequest::from(request), false)?;
        let task = self
            .client
            .clone()
            .get_task(request)
            .await
            .map_err(|s| failed("GetTask", &s))?;
        Task::try_from(task.into_inner()).map_err(|e| decode("GetTask", e))
    }

    async fn list_tasks(
        &self,
        ctx: &CallContext,
        mut request: ListTasksRequest,
    ) -> Result<ListTasksResponse, Error> {
        request.tenant = self.tenant(request.tenant);
        let request = self.request(ctx, proto::ListTasksRequest::from(request), false)?;
        let page = self
            .client
            .clone()
            .list_tasks(request)
            .await
            .map_err(|s| failed("ListTasks", &s))?;
        ListTasksResponse::try_from(page.into_inner()).map_err(|e| decode("ListTasks", e))
    }

    async fn cancel_task(
        &self,
        ctx: &CallContext,
        mut request: CancelTaskRequest,
    ) -> Result<Task, Error> {
        request.tenant = self.tenant(request.tenant);
        let request = self.request(ctx, proto::CancelTaskRequest::from(request), false)?;
        let task = self
            .client
            .clone()
            .cancel_task(request)
            .await
            .map_err(|s| failed("CancelTask", &s))?;
        Task::try_from(task.into_inner()).map_err(|e| decode("CancelTask", e))
    }

    async fn subscribe_to_task(
        &self,
        ctx: &CallContext,
        mut request: SubscribeToTaskRequest,
    ) -> Result<EventStream, Error> {
        request.tenant = self.tenant(request.tenant);
        let request = self.request(ctx, proto::SubscribeToTaskRequest::from(request), true)?;
        let stream = self
            .client
            .clone()
            .subscribe_to_task(request)
            .await
            .map_err(|s| failed("SubscribeToTask", &s))?;
        Ok(Self::events(
            "SubscribeToTask",
            stream.into_inner(),
            StreamResponse::ends_subscription,
        ))
    }

    async fn create_task_push_notification_config(
        &self,
        ctx: &CallContext,
        mut request: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, Error> {
        request.tenant = self.tenant(request.tenant);
        let request = self.request(ctx, proto::TaskPushNotificationConfig::from(request), false)?;
        let config = self
            .client
            .clone()
            .create_task_push_notification_config(request)
            .await
            .map_err(|s| failed("CreateTaskPushNotificationConfig", &s))?;
        Ok(config.into_inner().into())
    }

    async fn get_task_push_notification_config(
        &self,
        ctx: &CallContext,
        mut request: GetTaskPushNotificationConfigRequest,
    ) -> Result<TaskPushNotificationConfig, Error> {
        request.tenant = self.tenant(request.tenant);
        let request = self.request(
            ctx,
            proto::GetTaskPushNotificationConfigRequest::from(request),
            false,
        )?;
        let config = self
            .client
            .clone()
            .get_task_push_notification_config(request)
            .await
            .map_err(|s| failed("GetTaskPushNotificationConfig", &s))?;
        Ok(config.into_inner().into())
    }

    async fn list_task_push_notification_configs(
        &self,
        ctx: &CallContext,
        mut request: ListTaskPushNotificationConfigsRequest,
    ) -> Result<ListTaskPushNotificationConfigsResponse, Error> {
        request.tenant = self.tenant(request.tenant);
        let request = self.request(
            ctx,
            proto::ListTaskPushNotificationConfigsRequest::from(request),
            false,
        )?;
        let page = self
            .client
            .clone()
            .list_task_push_notification_configs(request)
            .await
            .map_err(|s| failed("ListTaskPushNotificationConfigs", &s))?;
        Ok(page.into_inner().into())
    }

    async fn delete_task_push_notification_config(
        &self,
        ctx: &CallContext,
        mut request: GetTaskPushNotificationConfigRequest,
    ) -> Result<(), Error> {
        request.tenant = self.tenant(request.tenant);
        let request = self.request(
            ctx,
            proto::DeleteTaskPushNotificationConfigRequest::from(request),
            false,
        )?;
        self.client
            .clone()
            .delete_task_push_notification_config(request)
            .await
            .map_err(|s| failed("DeleteTaskPushNotificationConfig", &s))?;
        Ok(())
    }

    async fn get_extended_agent_card(
        &self,
        ctx: &CallContext,
        mut request: GetExtendedAgentCardRequest,
    ) -> Result<AgentCard, Error> {
        request.tenant = self.tenant(request.tenant);
        let request = self.request(
            ctx,
            proto::GetExtendedAgentCardRequest::from(request),
            false,
        )?;
        let card = self
            .client
            .clone()
            .get_extended_agent_card(request)
            .await
            .map_err(|s| failed("GetExtendedAgentCard", &s))?;
        cards::AgentCard::try_from(card.into_inner()).map_err(|e| decode("GetExtendedAgentCard", e))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::endpoint_of;

    #[test]
    fn every_way_cards_write_a_grpc_url_is_understood() {
        let cases = [
            ("http://127.0.0.1:7777", "http://127.0.0.1:7777", false),
            ("http://127.0.0.1:7777/", "http://127.0.0.1:7777", false),
            (
                "https://a2a.example.com/grpc",
                "https://a2a.example.com",
                true,
            ),
            ("grpc://localhost:50051", "http://localhost:50051", false),
            (
                "grpcs://a2a.example.com:443",
                "https://a2a.example.com:443",
                true,
            ),
            ("localhost:50051", "http://localhost:50051", false),
            ("127.0.0.1:50051", "http://127.0.0.1:50051", false),
            ("[::1]:50051", "http://[::1]:50051", false),
            ("a2a.example.com:443", "https://a2a.example.com:443", true),
        ];
        for (url, uri, tls) in cases {
            assert_eq!(endpoint_of(url).unwrap(), (uri.to_owned(), tls), "{url}");
        }
        assert!(endpoint_of("ftp://h:1").is_err());
        assert!(endpoint_of("http://").is_err());
    }
}
