//! The A2A error kinds as data; their wire codes live in the transport crate.

use std::fmt;

/// Every error an A2A operation can answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The task does not exist, or the caller may not see it.
    TaskNotFound,
    /// The task is in a state that cannot be canceled.
    TaskNotCancelable,
    /// The agent does not do push notifications.
    PushNotificationNotSupported,
    /// The operation is not supported (in this state, or at all).
    UnsupportedOperation,
    /// A media type in the request is not supported.
    ContentTypeNotSupported,
    /// The agent produced a response that breaks the protocol.
    InvalidAgentResponse,
    /// There is no extended card.
    ExtendedAgentCardNotConfigured,
    /// The request needs an extension the client did not declare.
    ExtensionSupportRequired,
    /// The requested protocol version is not supported.
    VersionNotSupported,
    /// The request body is not valid JSON.
    ParseError,
    /// The request is not a valid request envelope.
    InvalidRequest,
    /// No such method or route.
    MethodNotFound,
    /// The parameters do not fit the method.
    InvalidParams,
    /// Something went wrong inside the agent.
    Internal,
}

impl ErrorKind {
    /// Every kind, for exhaustive tests.
    pub const ALL: &'static [ErrorKind] = &[
        ErrorKind::TaskNotFound,
        ErrorKind::TaskNotCancelable,
        ErrorKind::PushNotificationNotSupported,
        ErrorKind::UnsupportedOperation,
        ErrorKind::ContentTypeNotSupported,
        ErrorKind::InvalidAgentResponse,
        ErrorKind::ExtendedAgentCardNotConfigured,
        ErrorKind::ExtensionSupportRequired,
        ErrorKind::VersionNotSupported,
        ErrorKind::ParseError,
        ErrorKind::InvalidRequest,
        ErrorKind::MethodNotFound,
        ErrorKind::InvalidParams,
        ErrorKind::Internal,
    ];

    /// The spec's name of the error, e.g. `TaskNotFoundError`.
    pub fn name(self) -> &'static str {
        match self {
            Self::TaskNotFound => "TaskNotFoundError",
            Self::TaskNotCancelable => "TaskNotCancelableError",
            Self::PushNotificationNotSupported => "PushNotificationNotSupportedError",
            Self::UnsupportedOperation => "UnsupportedOperationError",
            Self::ContentTypeNotSupported => "ContentTypeNotSupportedError",
            Self::InvalidAgentResponse => "InvalidAgentResponseError",
            Self::ExtendedAgentCardNotConfigured => "ExtendedAgentCardNotConfiguredError",
            Self::ExtensionSupportRequired => "ExtensionSupportRequiredError",
            Self::VersionNotSupported => "VersionNotSupportedError",
            Self::ParseError => "JSONParseError",
            Self::InvalidRequest => "InvalidRequestError",
            Self::MethodNotFound => "MethodNotFoundError",
            Self::InvalidParams => "InvalidParamsError",
            Self::Internal => "InternalError",
        }
    }

    /// The `ErrorInfo.reason` of this kind, in UPPER_SNAKE case.
    pub fn reason(self) -> &'static str {
        match self {
            Self::TaskNotFound => "TASK_NOT_FOUND",
            Self::TaskNotCancelable => "TASK_NOT_CANCELABLE",
            Self::PushNotificationNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            Self::UnsupportedOperation => "UNSUPPORTED_OPERATION",
            Self::ContentTypeNotSupported => "CONTENT_TYPE_NOT_SUPPORTED",
            Self::InvalidAgentResponse => "INVALID_AGENT_RESPONSE",
            Self::ExtendedAgentCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            Self::ExtensionSupportRequired => "EXTENSION_SUPPORT_REQUIRED",
            Self::VersionNotSupported => "VERSION_NOT_SUPPORTED",
            Self::ParseError => "PARSE_ERROR",
            Self::InvalidRequest => "INVALID_REQUEST",
            Self::MethodNotFound => "METHOD_NOT_FOUND",
            Self::InvalidParams => "INVALID_PARAMS",
            Self::Internal => "INTERNAL_ERROR",
        }
    }

    /// The kind with this `ErrorInfo.reason`.
    pub fn from_reason(reason: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.reason() == reason)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An A2A error: its kind and a message for humans.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct A2aError {
    /// What went wrong, as the spec classifies it.
    pub kind: ErrorKind,
    /// What went wrong, for a human.
    pub message: String,
}

impl A2aError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// No task with this id (or not one the caller may see).
    pub fn task_not_found(id: impl fmt::Display) -> Self {
        Self::new(ErrorKind::TaskNotFound, format!("task {id} not found"))
    }

    /// The parameters do not fit the method.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidParams, message)
    }

    /// The operation is not supported.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::UnsupportedOperation, message)
    }

    /// Something went wrong inside the agent.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
}
