//! Tasks, their states and the events that move them: the A2A unit of work.

use crate::ids::{ContextId, TaskId};
use crate::message::{Artifact, Message, Metadata};
use crate::serde_util::{proto_enum, proto_message};
use crate::time::Timestamp;

proto_enum! {
    /// Where a task is in its life cycle.
    pub enum TaskState: "task state" {
        /// Not set; invalid in a real task.
        Unspecified = 0 => "TASK_STATE_UNSPECIFIED",
        /// Accepted, not yet started.
        Submitted = 1 => "TASK_STATE_SUBMITTED",
        /// Being worked on.
        Working = 2 => "TASK_STATE_WORKING",
        /// Finished successfully (terminal).
        Completed = 3 => "TASK_STATE_COMPLETED",
        /// Finished with an error (terminal).
        Failed = 4 => "TASK_STATE_FAILED",
        /// Canceled before it finished (terminal).
        Canceled = 5 => "TASK_STATE_CANCELED",
        /// Waiting for the caller's input (interrupted).
        InputRequired = 6 => "TASK_STATE_INPUT_REQUIRED",
        /// The agent declined the task (terminal).
        Rejected = 7 => "TASK_STATE_REJECTED",
        /// Waiting for authentication (interrupted).
        AuthRequired = 8 => "TASK_STATE_AUTH_REQUIRED",
    }
}

impl TaskState {
    /// Completed, failed, canceled or rejected: nothing more happens to the task.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }

    /// Input-required or auth-required: the task waits for the caller.
    pub fn is_interrupted(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }

    /// Terminal or interrupted: a blocking send returns and a stream closes here.
    pub fn ends_stream(self) -> bool {
        self.is_terminal() || self.is_interrupted()
    }

    /// Whether the A2A life cycle allows moving from `self` to `next`.
    ///
    /// Terminal states are final; interrupted states resume into working (or end);
    /// everything else moves forward. Staying in the same state is allowed
    /// (a new status message for the same state).
    pub fn can_become(self, next: TaskState) -> bool {
        use TaskState::*;
        if next == Unspecified || self.is_terminal() {
            return false;
        }
        match self {
            Unspecified => true,
            Submitted => true,
            Working | InputRequired | AuthRequired => next != Submitted,
            Completed | Failed | Canceled | Rejected => false,
        }
    }
}

proto_message! {
    /// A task's state, with an optional message and the time it was set.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct TaskStatus {
        /// The state.
        pub state: TaskState,
        /// An agent message that explains the state (a question, an error, a result summary).
        pub message: Option<Message>,
        /// When the state was set.
        pub timestamp: Option<Timestamp>,
    }
}

impl TaskStatus {
    /// A status stamped now.
    pub fn new(state: TaskState) -> Self {
        Self {
            state,
            message: None,
            timestamp: Some(Timestamp::now()),
        }
    }

    /// A status stamped now, with an explaining message.
    pub fn with_message(state: TaskState, message: Message) -> Self {
        Self {
            state,
            message: Some(message),
            timestamp: Some(Timestamp::now()),
        }
    }
}

proto_message! {
    /// The A2A unit of work.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Task {
        /// Set by the server.
        pub id: TaskId,
        /// The conversation the task belongs to.
        #[serde(alias = "context_id")]
        pub context_id: ContextId,
        /// The current status.
        pub status: TaskStatus as always,
        /// Outputs so far.
        pub artifacts: Vec<Artifact>,
        /// The messages exchanged, oldest first.
        pub history: Vec<Message>,
        /// Free-form metadata.
        pub metadata: Option<Metadata>,
    }
}

impl Task {
    /// Keeps at most the `n` newest history messages (`None` keeps all).
    pub fn truncate_history(&mut self, n: Option<i32>) {
        if let Some(n) = n {
            let keep = usize::try_from(n.max(0)).unwrap_or(0);
            let len = self.history.len();
            if len > keep {
                self.history.drain(..len - keep);
            }
        }
    }

    /// Folds one stream event into this task snapshot, as a client does.
    ///
    /// A status update replaces the status (its message joins the history);
    /// an artifact update adds, replaces or appends to the artifact with its id;
    /// a full task replaces the snapshot. Events for another task are ignored.
    pub fn apply(&mut self, event: &StreamResponse) {
        match event {
            StreamResponse::Task(task) => *self = task.clone(),
            StreamResponse::StatusUpdate(update) if update.task_id == self.id => {
                if let Some(message) = &update.status.message
                    && !self
                        .history
                        .iter()
                        .any(|m| m.message_id == message.message_id)
                {
                    self.history.push(message.clone());
                }
                self.status = update.status.clone();
            }
            StreamResponse::ArtifactUpdate(update) if update.task_id == self.id => {
                let incoming = &update.artifact;
                match self
                    .artifacts
                    .iter_mut()
                    .find(|a| a.artifact_id == incoming.artifact_id)
                {
                    Some(existing) if update.append => {
                        existing.parts.extend(incoming.parts.iter().cloned())
                    }
                    Some(existing) => *existing = incoming.clone(),
                    None => self.artifacts.push(incoming.clone()),
                }
            }
            _ => {}
        }
    }
}

proto_message! {
    /// A change of a task's status.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct TaskStatusUpdateEvent {
        /// The task.
        #[serde(alias = "task_id")]
        pub task_id: TaskId,
        /// The task's context.
        #[serde(alias = "context_id")]
        pub context_id: ContextId,
        /// The new status.
        pub status: TaskStatus as always,
        /// Free-form metadata.
        pub metadata: Option<Metadata>,
    }
}

proto_message! {
    /// A new artifact, or a chunk of one.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct TaskArtifactUpdateEvent {
        /// The task.
        #[serde(alias = "task_id")]
        pub task_id: TaskId,
        /// The task's context.
        #[serde(alias = "context_id")]
        pub context_id: ContextId,
        /// The artifact or chunk.
        pub artifact: Artifact as always,
        /// Append these parts to the artifact with the same id.
        pub append: bool,
        /// This is the artifact's last chunk.
        #[serde(alias = "last_chunk")]
        pub last_chunk: bool,
        /// Free-form metadata.
        pub metadata: Option<Metadata>,
    }
}

/// Declares a proto oneof wrapper: serializes as `{"member": value}` (the member's proto JSON
/// name, as written in the declaration) and rejects objects that set two members, while
/// ignoring unknown fields.
macro_rules! oneof {
    (
        $(#[$doc:meta])*
        pub enum $name:ident : $what:literal {
            $( $(#[$vdoc:meta])* $variant:ident($ty:ty) = $field:ident $(/ $proto:literal)?, )+
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub enum $name {
            $( $(#[$vdoc])* $variant($ty), )+
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap as _;
                // The key is the proto member name, which need not match the variant's name
                // (`ApiKey` travels as `apiKeySecurityScheme`).
                let mut map = serializer.serialize_map(Some(1))?;
                match self {
                    $( $name::$variant(value) => map.serialize_entry(stringify!($field), value)?, )+
                }
                map.end()
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                #[derive(serde::Deserialize)]
                #[serde(rename_all = "camelCase")]
                #[allow(non_snake_case)]
                struct Members {
                    $( #[serde(default $(, alias = $proto)?)] $field: Option<$ty>, )+
                }
                let members = Members::deserialize(deserializer)?;
                let mut found: Option<$name> = None;
                $(
                    if let Some(value) = members.$field {
                        if found.is_some() {
                            return Err(serde::de::Error::custom(concat!("a ", $what, " sets more than one member")));
                        }
                        found = Some($name::$variant(value));
                    }
                )+
                found.ok_or_else(|| serde::de::Error::custom(concat!("a ", $what, " sets no member")))
            }
        }
    };
}

pub(crate) use oneof;

oneof! {
    /// One item of a stream: a task snapshot, a message, or an update.
    pub enum StreamResponse: "stream response" {
        /// The task as it is now.
        Task(Task) = task,
        /// A direct message from the agent.
        Message(Message) = message,
        /// A status change.
        StatusUpdate(TaskStatusUpdateEvent) = statusUpdate / "status_update",
        /// An artifact or chunk.
        ArtifactUpdate(TaskArtifactUpdateEvent) = artifactUpdate / "artifact_update",
    }
}

impl StreamResponse {
    /// The task this item is about, if any.
    pub fn task_id(&self) -> Option<&TaskId> {
        match self {
            Self::Task(task) => Some(&task.id),
            Self::Message(message) => message.task_id.as_ref(),
            Self::StatusUpdate(update) => Some(&update.task_id),
            Self::ArtifactUpdate(update) => Some(&update.task_id),
        }
    }

    /// True when a stream ends after this item: a message, or a terminal or interrupted state.
    pub fn ends_stream(&self) -> bool {
        match self {
            Self::Message(_) => true,
            Self::Task(task) => task.status.state.ends_stream(),
            Self::StatusUpdate(update) => update.status.state.ends_stream(),
            Self::ArtifactUpdate(_) => false,
        }
    }

    /// True when a subscription (`SubscribeToTask`) ends after this item: a message or a
    /// terminal state. Unlike a streaming send, a subscription stays open while the task
    /// waits for input and ends only when the task does (A2A 1.0, section 3.1.6).
    pub fn ends_subscription(&self) -> bool {
        match self {
            Self::Message(_) => true,
            Self::Task(task) => task.status.state.is_terminal(),
            Self::StatusUpdate(update) => update.status.state.is_terminal(),
            Self::ArtifactUpdate(_) => false,
        }
    }
}

oneof! {
    /// What a blocking send returns: the task, or a direct message.
    pub enum SendMessageResponse: "send message response" {
        /// The task created or continued by the message.
        Task(Task) = task,
        /// A direct answer, with no task.
        Message(Message) = message,
    }
}
