//! The request and response bodies of the A2A operations, and push notification configs.

use serde::{Deserialize, Serialize};

use crate::ids::{ContextId, TaskId};
use crate::message::{Message, Metadata};
use crate::serde_util::{is_default, lenient_i32, null_as_default};
use crate::task::{Task, TaskState};
use crate::time::Timestamp;

/// How a send should behave.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    /// Media types the client accepts in answers.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[serde(alias = "accepted_output_modes")]
    pub accepted_output_modes: Vec<String>,
    /// A webhook to notify of the task's updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(alias = "task_push_notification_config")]
    pub task_push_notification_config: Option<TaskPushNotificationConfig>,
    /// At most this many history messages in the answer.
    #[serde(
        default,
        deserialize_with = "lenient_i32",
        skip_serializing_if = "Option::is_none"
    )]
    #[serde(alias = "history_length")]
    pub history_length: Option<i32>,
    /// Answer as soon as the task exists instead of waiting for it to finish or ask.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    #[serde(alias = "return_immediately")]
    pub return_immediately: bool,
}

/// `SendMessage` and `SendStreamingMessage`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    /// Tenant, when the agent is multi-tenant.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tenant: String,
    /// The message.
    #[serde(default, deserialize_with = "null_as_default")]
    pub message: Message,
    /// How to behave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<SendMessageConfiguration>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
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

/// `GetTask`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskRequest {
    /// Tenant.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tenant: String,
    /// The task.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub id: TaskId,
    /// At most this many history messages.
    #[serde(
        default,
        deserialize_with = "lenient_i32",
        skip_serializing_if = "Option::is_none"
    )]
    #[serde(alias = "history_length")]
    pub history_length: Option<i32>,
}

/// `ListTasks`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    /// Tenant.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tenant: String,
    /// Only tasks of this context.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "ContextId::is_empty"
    )]
    #[serde(alias = "context_id")]
    pub context_id: ContextId,
    /// Only tasks in this state (unspecified: any).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub status: TaskState,
    /// Page size, 1 to 100 (default 50).
    #[serde(
        default,
        deserialize_with = "lenient_i32",
        skip_serializing_if = "Option::is_none"
    )]
    #[serde(alias = "page_size")]
    pub page_size: Option<i32>,
    /// A token from a previous page.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "page_token")]
    pub page_token: String,
    /// At most this many history messages per task.
    #[serde(
        default,
        deserialize_with = "lenient_i32",
        skip_serializing_if = "Option::is_none"
    )]
    #[serde(alias = "history_length")]
    pub history_length: Option<i32>,
    /// Only tasks whose status changed at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(alias = "status_timestamp_after")]
    pub status_timestamp_after: Option<Timestamp>,
    /// Include artifacts (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(alias = "include_artifacts")]
    pub include_artifacts: Option<bool>,
}

/// The page size a `ListTasks` request gets when it names none.
pub const DEFAULT_PAGE_SIZE: i32 = 50;
/// The largest page size `ListTasks` allows.
pub const MAX_PAGE_SIZE: i32 = 100;

/// The answer to `ListTasks`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    /// The page, newest first.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tasks: Vec<Task>,
    /// The token of the next page; empty on the last page.
    #[serde(default, deserialize_with = "null_as_default")]
    #[serde(alias = "next_page_token")]
    pub next_page_token: String,
    /// The page size used.
    #[serde(default, deserialize_with = "lenient_i32_or_zero")]
    #[serde(alias = "page_size")]
    pub page_size: i32,
    /// How many tasks match in all.
    #[serde(default, deserialize_with = "lenient_i32_or_zero")]
    #[serde(alias = "total_size")]
    pub total_size: i32,
}

fn lenient_i32_or_zero<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
    Ok(lenient_i32(deserializer)?.unwrap_or(0))
}

/// `CancelTask`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelTaskRequest {
    /// Tenant.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tenant: String,
    /// The task.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub id: TaskId,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
}

/// `SubscribeToTask`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscribeToTaskRequest {
    /// Tenant.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tenant: String,
    /// The task.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub id: TaskId,
}

/// Credentials the agent presents to a webhook.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationInfo {
    /// An HTTP authentication scheme, e.g. `Bearer`.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub scheme: String,
    /// The credentials for that scheme.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub credentials: String,
}

/// A webhook that receives a task's events (`CreateTaskPushNotificationConfig` takes it whole).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPushNotificationConfig {
    /// Tenant.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tenant: String,
    /// The config's id; the server assigns one when empty.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub id: String,
    /// The task.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "TaskId::is_empty"
    )]
    #[serde(alias = "task_id")]
    pub task_id: TaskId,
    /// Where to POST events.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub url: String,
    /// A token echoed to the webhook.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub token: String,
    /// Credentials for the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<AuthenticationInfo>,
}

/// `GetTaskPushNotificationConfig`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskPushNotificationConfigRequest {
    /// Tenant.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tenant: String,
    /// The task.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    #[serde(alias = "task_id")]
    pub task_id: TaskId,
    /// The config.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub id: String,
}

/// `DeleteTaskPushNotificationConfig`.
pub type DeleteTaskPushNotificationConfigRequest = GetTaskPushNotificationConfigRequest;

/// `ListTaskPushNotificationConfigs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTaskPushNotificationConfigsRequest {
    /// Tenant.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tenant: String,
    /// The task.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    #[serde(alias = "task_id")]
    pub task_id: TaskId,
    /// Page size (0: server default).
    #[serde(
        default,
        deserialize_with = "lenient_i32_or_zero",
        skip_serializing_if = "is_default"
    )]
    #[serde(alias = "page_size")]
    pub page_size: i32,
    /// A token from a previous page.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "page_token")]
    pub page_token: String,
}

/// The answer to `ListTaskPushNotificationConfigs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTaskPushNotificationConfigsResponse {
    /// The configs.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub configs: Vec<TaskPushNotificationConfig>,
    /// The token of the next page; empty on the last page.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "next_page_token")]
    pub next_page_token: String,
}

/// `GetExtendedAgentCard`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetExtendedAgentCardRequest {
    /// Tenant.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tenant: String,
}
