//! The request and response bodies of the A2A operations, and push notification configs.

use crate::ids::{ContextId, TaskId};
use crate::message::{Message, Metadata};
use crate::serde_util::proto_message;
use crate::task::{Task, TaskState};
use crate::time::Timestamp;

proto_message! {
    /// How a send should behave.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SendMessageConfiguration {
        /// Media types the client accepts in answers.
        #[serde(alias = "accepted_output_modes")]
        pub accepted_output_modes: Vec<String>,
        /// A webhook to notify of the task's updates.
        #[serde(alias = "task_push_notification_config")]
        pub task_push_notification_config: Option<TaskPushNotificationConfig>,
        /// At most this many history messages in the answer.
        #[serde(alias = "history_length")]
        pub history_length: Option<i32>,
        /// Answer as soon as the task exists instead of waiting for it to finish or ask.
        #[serde(alias = "return_immediately")]
        pub return_immediately: bool,
    }
}

proto_message! {
    /// `SendMessage` and `SendStreamingMessage`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SendMessageRequest {
        /// Tenant, when the agent is multi-tenant.
        pub tenant: String,
        /// The message.
        pub message: Message as always,
        /// How to behave.
        pub configuration: Option<SendMessageConfiguration>,
        /// Free-form metadata.
        pub metadata: Option<Metadata>,
    }
}

impl SendMessageRequest {
    /// A request carrying `message` with default configuration.
    pub fn new(message: Message) -> Self {
        Self {
            message,
            ..Self::default()
        }
    }

    /// The requested history length, if any.
    pub fn history_length(&self) -> Option<i32> {
        self.configuration.as_ref().and_then(|c| c.history_length)
    }

    /// Whether the caller asked not to wait.
    pub fn return_immediately(&self) -> bool {
        self.configuration
            .as_ref()
            .is_some_and(|c| c.return_immediately)
    }
}

proto_message! {
    /// `GetTask`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct GetTaskRequest {
        /// Tenant.
        pub tenant: String,
        /// The task.
        pub id: TaskId,
        /// At most this many history messages.
        #[serde(alias = "history_length")]
        pub history_length: Option<i32>,
    }
}

proto_message! {
    /// `ListTasks`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ListTasksRequest {
        /// Tenant.
        pub tenant: String,
        /// Only tasks of this context.
        #[serde(alias = "context_id")]
        pub context_id: ContextId,
        /// Only tasks in this state (unspecified: any).
        pub status: TaskState,
        /// Page size, 1 to 100 (default 50).
        #[serde(alias = "page_size")]
        pub page_size: Option<i32>,
        /// A token from a previous page.
        #[serde(alias = "page_token")]
        pub page_token: String,
        /// At most this many history messages per task.
        #[serde(alias = "history_length")]
        pub history_length: Option<i32>,
        /// Only tasks whose status changed at or after this time.
        #[serde(alias = "status_timestamp_after")]
        pub status_timestamp_after: Option<Timestamp>,
        /// Include artifacts (default false).
        #[serde(alias = "include_artifacts")]
        pub include_artifacts: Option<bool>,
    }
}

/// The page size a `ListTasks` request gets when it names none.
pub const DEFAULT_PAGE_SIZE: i32 = 50;
/// The largest page size `ListTasks` allows.
pub const MAX_PAGE_SIZE: i32 = 100;

proto_message! {
    /// The answer to `ListTasks`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ListTasksResponse {
        /// The page, newest first.
        pub tasks: Vec<Task> as always,
        /// The token of the next page; empty on the last page.
        #[serde(alias = "next_page_token")]
        pub next_page_token: String as always,
        /// The page size used.
        #[serde(alias = "page_size")]
        pub page_size: i32 as always,
        /// How many tasks match in all.
        #[serde(alias = "total_size")]
        pub total_size: i32 as always,
    }
}

proto_message! {
    /// `CancelTask`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct CancelTaskRequest {
        /// Tenant.
        pub tenant: String,
        /// The task.
        pub id: TaskId,
        /// Free-form metadata.
        pub metadata: Option<Metadata>,
    }
}

proto_message! {
    /// `SubscribeToTask`.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct SubscribeToTaskRequest {
        /// Tenant.
        pub tenant: String,
        /// The task.
        pub id: TaskId,
    }
}

proto_message! {
    /// Credentials the agent presents to a webhook.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct AuthenticationInfo {
        /// An HTTP authentication scheme, e.g. `Bearer`.
        pub scheme: String,
        /// The credentials for that scheme.
        pub credentials: String,
    }
}

proto_message! {
    /// A webhook that receives a task's events (`CreateTaskPushNotificationConfig` takes it whole).
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct TaskPushNotificationConfig {
        /// Tenant.
        pub tenant: String,
        /// The config's id; the server assigns one when empty.
        pub id: String,
        /// The task.
        #[serde(alias = "task_id")]
        pub task_id: TaskId,
        /// Where to POST events.
        pub url: String,
        /// A token echoed to the webhook.
        pub token: String,
        /// Credentials for the webhook.
        pub authentication: Option<AuthenticationInfo>,
    }
}

proto_message! {
    /// `GetTaskPushNotificationConfig`.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct GetTaskPushNotificationConfigRequest {
        /// Tenant.
        pub tenant: String,
        /// The task.
        #[serde(alias = "task_id")]
        pub task_id: TaskId,
        /// The config.
        pub id: String,
    }
}

/// `DeleteTaskPushNotificationConfig`.
pub type DeleteTaskPushNotificationConfigRequest = GetTaskPushNotificationConfigRequest;

proto_message! {
    /// `ListTaskPushNotificationConfigs`.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct ListTaskPushNotificationConfigsRequest {
        /// Tenant.
        pub tenant: String,
        /// The task.
        #[serde(alias = "task_id")]
        pub task_id: TaskId,
        /// Page size (0: server default).
        #[serde(alias = "page_size")]
        pub page_size: i32,
        /// A token from a previous page.
        #[serde(alias = "page_token")]
        pub page_token: String,
    }
}

proto_message! {
    /// The answer to `ListTaskPushNotificationConfigs`.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct ListTaskPushNotificationConfigsResponse {
        /// The configs.
        pub configs: Vec<TaskPushNotificationConfig>,
        /// The token of the next page; empty on the last page.
        #[serde(alias = "next_page_token")]
        pub next_page_token: String,
    }
}

proto_message! {
    /// `GetExtendedAgentCard`.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct GetExtendedAgentCardRequest {
        /// Tenant.
        pub tenant: String,
    }
}
