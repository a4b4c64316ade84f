//! `AgentTransport`: the A2A operations as one object-safe trait, shared by servers and clients.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;
use futures_util::{Stream, StreamExt};
use mew_cards::{
    A2aError, AgentCard, CancelTaskRequest, ErrorKind, GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse, ListTasksRequest, ListTasksResponse,
    SendMessageRequest, SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task,
    TaskPushNotificationConfig,
};

/// A stream of task events, ending after a terminal or interrupted state or a message.
///
/// An agent whose tasks number their events (a node's per-task generation) says after each
/// item which number it had ([`EventStream::event_id`]): servers send it as the SSE `id`,
/// and a caller that lost the stream asks to resume after it
/// ([`CallContext::last_event_id`]). Readers that do not care use it as any other stream.
pub struct EventStream {
    inner: Pin<Box<dyn Stream<Item = Result<Numbered, Error>> + Send>>,
    last_id: Option<u64>,
}

/// An event with its number, when the agent numbers them.
type Numbered = (Option<u64>, StreamResponse);

impl EventStream {
    /// A stream whose events carry no numbers.
    pub fn new(stream: impl Stream<Item = Result<StreamResponse, Error>> + Send + 'static) -> Self {
        Self::numbered(stream.map(|item| item.map(|event| (None, event))))
    }

    /// A stream whose events may carry their number in the task's history.
    pub fn numbered(stream: impl Stream<Item = Result<Numbered, Error>> + Send + 'static) -> Self {
        Self {
            inner: Box::pin(stream),
            last_id: None,
        }
    }

    /// The stream of one item.
    pub fn once(item: Result<StreamResponse, Error>) -> Self {
        Self::new(futures_util::stream::iter([item]))
    }

    /// The number of the event last returned, when the agent numbers them.
    pub fn event_id(&self) -> Option<u64> {
        self.last_id
    }
}

impl fmt::Debug for EventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream")
            .field("last_id", &self.last_id)
            .finish_non_exhaustive()
    }
}

impl Stream for EventStream {
    type Item = Result<StreamResponse, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok((id, event)))) => {
                self.last_id = id;
                Poll::Ready(Some(Ok(event)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.last_id = None;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Everything that can go wrong calling an agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The agent answered with an A2A error.
    #[error(transparent)]
    Protocol(#[from] A2aError),
    /// The agent could not be reached, or the HTTP exchange failed.
    #[error("transport error: {message}")]
    Transport {
        /// What failed.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The agent answered something that is not valid A2A.
    #[error("cannot decode the agent's answer: {message}")]
    Decode {
        /// What did not parse.
        message: String,
    },
}

impl Error {
    /// An A2A error of `kind`.
    pub fn protocol(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::Protocol(A2aError::new(kind, message))
    }

    /// A transport failure with no underlying error value.
    pub fn transport(message: impl Into<String>) -> Self {
        Self::Transport {
            message: message.into(),
            source: None,
        }
    }

    /// A decode failure.
    pub fn decode(message: impl Into<String>) -> Self {
        Self::Decode {
            message: message.into(),
        }
    }

    /// The A2A error kind, if the agent answered with one.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Self::Protocol(e) => Some(e.kind),
            Self::Transport { .. } | Self::Decode { .. } => None,
        }
    }

    /// This error as an A2A error, for serving it on: a peer that cannot be
    /// reached or that answers garbage is an internal error or an invalid
    /// agent response of the agent that relays it.
    pub fn into_a2a(self) -> A2aError {
        match self {
            Self::Protocol(e) => e,
            Self::Transport { message, .. } => A2aError::internal(message),
            Self::Decode { message } => A2aError::new(ErrorKind::InvalidAgentResponse, message),
        }
    }
}

/// The authenticated caller, set as a request extension by whatever layer
/// authenticates requests in front of the router; the router only carries it
/// into [`CallContext::principal`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal(pub String);

/// Who is calling and what they declared, passed with every operation.
#[derive(Clone, Debug, Default)]
pub struct CallContext {
    /// The authenticated caller, if authentication is on.
    pub principal: Option<String>,
    /// Extension URIs the caller declared (`A2A-Extensions`).
    pub extensions: Vec<String>,
    /// The number of the last event the caller saw of the task it subscribes to again (SSE
    /// `Last-Event-ID`): an agent that numbers its events sends only those after it, one
    /// that does not (or no longer has them) starts with a snapshot as always.
    pub last_event_id: Option<u64>,
}

impl CallContext {
    /// A context for an anonymous caller that declares no extensions.
    pub fn anonymous() -> Self {
        Self::default()
    }
}

/// The A2A 1.0 operations, one method each, in-process or remote.
///
/// Servers serve any implementation ([`crate::router`]); [`crate::RemoteAgent`]
/// implements it over HTTP. In-process implementations follow the same state
/// machine and return the same errors as remote ones.
///
/// Default methods only answer the spec's "not supported" errors.
#[async_trait]
pub trait AgentTransport: Send + Sync {
    /// The agent's public card.
    async fn card(&self) -> Result<AgentCard, Error>;

    /// `SendMessage`: start or continue a task and wait for it to finish or
    /// ask (unless `returnImmediately`), or get a direct message.
    async fn send_message(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<SendMessageResponse, Error>;

    /// `SendStreamingMessage`: the same, as a stream of events.
    async fn send_streaming_message(
        &self,
        ctx: &CallContext,
        request: SendMessageRequest,
    ) -> Result<EventStream, Error>;

    /// `GetTask`.
    async fn get_task(&self, ctx: &CallContext, request: GetTaskRequest) -> Result<Task, Error>;

    /// `ListTasks`.
    async fn list_tasks(
        &self,
        ctx: &CallContext,
        request: ListTasksRequest,
    ) -> Result<ListTasksResponse, Error>;

    /// `CancelTask`.
    async fn cancel_task(
        &self,
        ctx: &CallContext,
        request: CancelTaskRequest,
    ) -> Result<Task, Error>;

    /// `SubscribeToTask`: the task first, then its events.
    async fn subscribe_to_task(
        &self,
        ctx: &CallContext,
        request: SubscribeToTaskRequest,
    ) -> Result<EventStream, Error>;

    /// `CreateTaskPushNotificationConfig`.
    async fn create_task_push_notification_config(
        &self,
        _ctx: &CallContext,
        _request: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, Error> {
        Err(push_not_supported())
    }

    /// `GetTaskPushNotificationConfig`.
    async fn get_task_push_notification_config(
        &self,
        _ctx: &CallContext,
        _request: GetTaskPushNotificationConfigRequest,
    ) -> Result<TaskPushNotificationConfig, Error> {
        Err(push_not_supported())
    }

    /// `ListTaskPushNotificationConfigs`.
    async fn list_task_push_notification_configs(
        &self,
        _ctx: &CallContext,
        _request: ListTaskPushNotificationConfigsRequest,
    ) -> Result<ListTaskPushNotificationConfigsResponse, Error> {
        Err(push_not_supported())
    }

    /// `DeleteTaskPushNotificationConfig`.
    async fn delete_task_push_notification_config(
        &self,
        _ctx: &CallContext,
        _request: GetTaskPushNotificationConfigRequest,
    ) -> Result<(), Error> {
        Err(push_not_supported())
    }

    /// `GetExtendedAgentCard`.
    async fn get_extended_agent_card(
        &self,
        _ctx: &CallContext,
        _request: GetExtendedAgentCardRequest,
    ) -> Result<AgentCard, Error> {
        Err(Error::protocol(
            ErrorKind::ExtendedAgentCardNotConfigured,
            "this agent has no extended card",
        ))
    }
}

fn push_not_supported() -> Error {
    Error::protocol(
        ErrorKind::PushNotificationNotSupported,
        "push notifications are not supported",
    )
}

impl fmt::Debug for dyn AgentTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dyn AgentTransport")
    }
}

/// Collects a send stream into what a blocking send returns.
///
/// Folds events into the task until a terminal or interrupted state, or
/// returns the first direct message. With `return_immediately`, stops at the
/// first task snapshot. This is how an implementation that streams natively
/// answers `SendMessage`.
pub async fn collect_send(
    mut stream: EventStream,
    return_immediately: bool,
) -> Result<SendMessageResponse, Error> {
    let mut task: Option<Task> = None;
    while let Some(event) = stream.next().await {
        let event = event?;
        match (&event, &mut task) {
            (StreamResponse::Message(message), _) => {
                return Ok(SendMessageResponse::Message(message.clone()));
            }
            (StreamResponse::Task(snapshot), slot @ None) => *slot = Some(snapshot.clone()),
            (_, Some(current)) => current.apply(&event),
            (_, None) => {
                return Err(Error::protocol(
                    ErrorKind::InvalidAgentResponse,
                    "the stream sent an update before the task",
                ));
            }
        }
        if let Some(current) = &task
            && (return_immediately || current.status.state.ends_stream())
        {
            break;
        }
    }
    task.map(SendMessageResponse::Task).ok_or_else(|| {
        Error::protocol(
            ErrorKind::InvalidAgentResponse,
            "the stream ended with no task",
        )
    })
}
