//! The A2A 1.0 object model, Mew role definitions and agent cards.
//!
//! Everything here is plain data with its exact ProtoJSON wire form: camelCase
//! names, enum names on output (integers accepted on input), default values
//! omitted, unknown fields ignored, and oneofs as Rust enums that reject two
//! members at once. This crate does no I/O and has no async runtime.

mod build;
mod card;
mod error;
mod frontmatter;
mod ids;
mod jcs;
mod message;
pub mod mew;
mod nesting;
mod requests;
mod role;
mod serde_util;
mod task;
mod time;

pub use build::{CardOptions, extended_card, front_card, role_base_url, role_card};
pub use card::{
    AgentCapabilities, AgentCard, AgentCardSignature, AgentExtension, AgentInterface,
    AgentProvider, AgentSkill, ApiKeySecurityScheme, HttpAuthSecurityScheme,
    MutualTlsSecurityScheme, OAuth2SecurityScheme, OAuthFlow, OAuthFlows,
    OpenIdConnectSecurityScheme, PROTOCOL_VERSION, SecurityRequirement, SecurityScheme, StringList,
    WELL_KNOWN_CARD_PATH, binding,
};
pub use error::{A2aError, ErrorKind};
pub use frontmatter::{Frontmatter, parse_yaml as parse_frontmatter_yaml};
pub use ids::{ArtifactId, ContextId, MessageId, TaskId};
pub use jcs::{CanonicalError, canonical_card, canonicalize};
pub use message::{Artifact, MAX_PARTS, Message, Metadata, Part, PartContent, Role, join_text};
pub use nesting::{MAX_NESTING, TooDeep, check_nesting};
pub use requests::{
    AuthenticationInfo, CancelTaskRequest, DEFAULT_PAGE_SIZE,
    DeleteTaskPushNotificationConfigRequest, GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse, ListTasksRequest, ListTasksResponse, MAX_PAGE_SIZE,
    SendMessageConfiguration, SendMessageRequest, SubscribeToTaskRequest,
    TaskPushNotificationConfig,
};
pub use role::{
    CommandInput, CommandSpec, DEFAULT_MAX_TURNS, FrontmatterError, ModelChoice, ParsedRole,
    PermissionMode, RemoteTarget, RoleDefinition, RoleError, RoleErrorKind, RoleSource,
    RoleWarning, is_valid_role_name, parse_role, split_frontmatter,
};
pub use task::{
    SendMessageResponse, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};
pub use time::{Timestamp, TimestampError};
