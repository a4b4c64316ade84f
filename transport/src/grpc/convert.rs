//! The generated `lf.a2a.v1` messages to and from the `mew-cards` object model, one to one.
//!
//! The node, its store, its cards and both HTTP bindings speak `mew-cards` types, whose
//! serde form is the spec's ProtoJSON; the gRPC binding is one more wire form of the same
//! values. Converting at the edge of the binding, rather than making the prost types the
//! model, keeps one model for everything above the transport: the cards' newtype ids,
//! oneofs as Rust enums that cannot hold two members, typed timestamps and enums, and the
//! bounds the model checks (at most [`MAX_PARTS`] parts a message) stay as they are, and the
//! prost types (bare `String` ids, `i32` enums, `Option` for required members) stay in this
//! module and the binding's own server and client.
//!
//! Towards the wire (`From`) nothing fails. From the wire (`TryFrom`) a message fails when it
//! is not a value of the model: a part, oneof or stream item with no member, an unknown enum
//! number, a number that JSON cannot hold, a timestamp out of range, too many parts.

use std::collections::BTreeMap;

use mew_cards as cards;
use mew_cards::MAX_PARTS;
use prost_types::value::Kind;
use serde_json::{Map, Number, Value};

use super::proto;

/// Why a message of the wire is not a value of the object model.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

type Result<T> = std::result::Result<T, Invalid>;

fn invalid(message: impl Into<String>) -> Invalid {
    Invalid(message.into())
}

/// Converts every item of a list.
fn all<A, B: TryFrom<A, Error = Invalid>>(items: Vec<A>) -> Result<Vec<B>> {
    items.into_iter().map(B::try_from).collect()
}

fn wire_all<A, B: From<A>>(items: Vec<A>) -> Vec<B> {
    items.into_iter().map(B::from).collect()
}

fn ids<T: From<String>>(items: Vec<String>) -> Vec<T> {
    items.into_iter().map(T::from).collect()
}

fn wire_ids<T: Into<String>>(items: Vec<T>) -> Vec<String> {
    items.into_iter().map(Into::into).collect()
}

/// A required member of a message, or an error naming it.
fn required<T>(value: Option<T>, name: &str) -> Result<T> {
    value.ok_or_else(|| invalid(format!("{name} is required")))
}

// --- google.protobuf.Struct, Value and Timestamp -------------------------------------------

/// The largest integer a double holds exactly: integral numbers up to it travel back as JSON
/// integers, as ProtoJSON writes them.
const EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

pub(crate) fn wire_value(value: Value) -> prost_types::Value {
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(b),
        // A `google.protobuf.Value` number is a double, as JSON's is.
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Kind::StringValue(s),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.into_iter().map(wire_value).collect(),
        }),
        Value::Object(map) => Kind::StructValue(wire_struct(map)),
    };
    prost_types::Value { kind: Some(kind) }
}

pub(crate) fn value(value: prost_types::Value) -> Result<Value> {
    Ok(match value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(b),
        Some(Kind::NumberValue(n)) => number(n)?,
        Some(Kind::StringValue(s)) => Value::String(s),
        Some(Kind::ListValue(list)) => Value::Array(
            list.values
                .into_iter()
                .map(self::value)
                .collect::<Result<_>>()?,
        ),
        Some(Kind::StructValue(s)) => Value::Object(object(s)?),
    })
}

fn number(n: f64) -> Result<Value> {
    if n.fract() == 0.0 && n.abs() <= EXACT_INTEGER {
        // Exact: the value is integral and within the range a double holds exactly.
        #[allow(clippy::cast_possible_truncation)]
        return Ok(Value::Number(Number::from(n as i64)));
    }
    Number::from_f64(n)
        .map(Value::Number)
        .ok_or_else(|| invalid(format!("the number {n} has no JSON form")))
}

pub(crate) fn wire_struct(map: Map<String, Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: map.into_iter().map(|(k, v)| (k, wire_value(v))).collect(),
    }
}

pub(crate) fn object(s: prost_types::Struct) -> Result<Map<String, Value>> {
    s.fields
        .into_iter()
        .map(|(k, v)| Ok((k, value(v)?)))
        .collect()
}

fn metadata(s: Option<prost_types::Struct>) -> Result<Option<cards::Metadata>> {
    s.map(object).transpose()
}

fn wire_metadata(map: Option<cards::Metadata>) -> Option<prost_types::Struct> {
    map.map(wire_struct)
}

fn wire_timestamp(t: cards::Timestamp) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.unix_seconds(),
        // Below 10^9: it fits.
        nanos: i32::try_from(t.subsec_nanos()).unwrap_or(0),
    }
}

fn timestamp(t: prost_types::Timestamp) -> Result<cards::Timestamp> {
    let nanos = u32::try_from(t.nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or_else(|| invalid(format!("timestamp nanos {} out of range", t.nanos)))?;
    Ok(cards::Timestamp::from_unix(t.seconds, nanos))
}

// --- enums ---------------------------------------------------------------------------------

fn task_state(n: i32) -> Result<cards::TaskState> {
    cards::TaskState::from_number(i64::from(n))
        .ok_or_else(|| invalid(format!("unknown task state number {n}")))
}

fn role(n: i32) -> Result<cards::Role> {
    cards::Role::from_number(i64::from(n))
        .ok_or_else(|| invalid(format!("unknown role number {n}")))
}

// --- messages, parts, artifacts ------------------------------------------------------------

impl From<cards::Part> for proto::Part {
    fn from(part: cards::Part) -> Self {
        use proto::part::Content;
        let content = match part.content {
            cards::PartContent::Text(text) => Content::Text(text),
            cards::PartContent::Raw(bytes) => Content::Raw(bytes),
            cards::PartContent::Url(url) => Content::Url(url),
            cards::PartContent::Data(data) => Content::Data(wire_value(data)),
        };
        Self {
            content: Some(content),
            metadata: wire_metadata(part.metadata),
            filename: part.filename,
            media_type: part.media_type,
        }
    }
}

impl TryFrom<proto::Part> for cards::Part {
    type Error = Invalid;
    fn try_from(part: proto::Part) -> Result<Self> {
        use proto::part::Content;
        let content = match part.content {
            Some(Content::Text(text)) => cards::PartContent::Text(text),
            Some(Content::Raw(bytes)) => cards::PartContent::Raw(bytes),
            Some(Content::Url(url)) => cards::PartContent::Url(url),
            Some(Content::Data(data)) => cards::PartContent::Data(value(data)?),
            None => return Err(invalid("a part needs one of text, raw, url, data")),
        };
        Ok(Self {
            content,
            metadata: metadata(part.metadata)?,
            filename: part.filename,
            media_type: part.media_type,
        })
    }
}

fn parts(parts: Vec<proto::Part>) -> Result<Vec<cards::Part>> {
    if parts.len() > MAX_PARTS {
        return Err(invalid(format!("more than {MAX_PARTS} parts")));
    }
    all(parts)
}

impl From<cards::Message> for proto::Message {
    fn from(m: cards::Message) -> Self {
        Self {
            message_id: m.message_id.into(),
            context_id: m.context_id.map(String::from).unwrap_or_default(),
            task_id: m.task_id.map(String::from).unwrap_or_default(),
            role: m.role.number(),
            parts: wire_all(m.parts),
            metadata: wire_metadata(m.metadata),
            extensions: m.extensions,
            reference_task_ids: wire_ids(m.reference_task_ids),
        }
    }
}

/// An id where proto3's `""` means absent.
fn optional_id<T: From<String>>(id: String) -> Option<T> {
    (!id.is_empty()).then(|| T::from(id))
}

impl TryFrom<proto::Message> for cards::Message {
    type Error = Invalid;
    fn try_from(m: proto::Message) -> Result<Self> {
        Ok(Self {
            message_id: m.message_id.into(),
            context_id: optional_id(m.context_id),
            task_id: optional_id(m.task_id),
            role: role(m.role)?,
            parts: parts(m.parts)?,
            metadata: metadata(m.metadata)?,
            extensions: m.extensions,
            reference_task_ids: ids(m.reference_task_ids),
        })
    }
}

impl From<cards::Artifact> for proto::Artifact {
    fn from(a: cards::Artifact) -> Self {
        Self {
            artifact_id: a.artifact_id.into(),
            name: a.name,
            description: a.description,
            parts: wire_all(a.parts),
            metadata: wire_metadata(a.metadata),
            extensions: a.extensions,
        }
    }
}

impl TryFrom<proto::Artifact> for cards::Artifact {
    type Error = Invalid;
    fn try_from(a: proto::Artifact) -> Result<Self> {
        Ok(Self {
            artifact_id: a.artifact_id.into(),
            name: a.name,
            description: a.description,
            parts: parts(a.parts)?,
            metadata: metadata(a.metadata)?,
            extensions: a.extensions,
        })
    }
}

// --- tasks and their events ----------------------------------------------------------------

impl From<cards::TaskStatus> for proto::TaskStatus {
    fn from(s: cards::TaskStatus) -> Self {
        Self {
            state: s.state.number(),
            message: s.message.map(Into::into),
            timestamp: s.timestamp.map(wire_timestamp),
        }
    }
}

impl TryFrom<proto::TaskStatus> for cards::TaskStatus {
    type Error = Invalid;
    fn try_from(s: proto::TaskStatus) -> Result<Self> {
        Ok(Self {
            state: task_state(s.state)?,
            message: s.message.map(TryInto::try_into).transpose()?,
            timestamp: s.timestamp.map(timestamp).transpose()?,
        })
    }
}

/// A status, which the model always has: an absent one is the default (unspecified) status.
fn status(s: Option<proto::TaskStatus>) -> Result<cards::TaskStatus> {
    s.map(TryInto::try_into)
        .transpose()
        .map(Option::unwrap_or_default)
}

impl From<cards::Task> for proto::Task {
    fn from(t: cards::Task) -> Self {
        Self {
            id: t.id.into(),
            context_id: t.context_id.into(),
            status: Some(t.status.into()),
            artifacts: wire_all(t.artifacts),
            history: wire_all(t.history),
            metadata: wire_metadata(t.metadata),
        }
    }
}

impl TryFrom<proto::Task> for cards::Task {
    type Error = Invalid;
    fn try_from(t: proto::Task) -> Result<Self> {
        Ok(Self {
            id: t.id.into(),
            context_id: t.context_id.into(),
            status: status(t.status)?,
            artifacts: all(t.artifacts)?,
            history: all(t.history)?,
            metadata: metadata(t.metadata)?,
        })
    }
}

impl From<cards::TaskStatusUpdateEvent> for proto::TaskStatusUpdateEvent {
    fn from(e: cards::TaskStatusUpdateEvent) -> Self {
        Self {
            task_id: e.task_id.into(),
            context_id: e.context_id.into(),
            status: Some(e.status.into()),
            metadata: wire_metadata(e.metadata),
        }
    }
}

impl TryFrom<proto::TaskStatusUpdateEvent> for cards::TaskStatusUpdateEvent {
    type Error = Invalid;
    fn try_from(e: proto::TaskStatusUpdateEvent) -> Result<Self> {
        Ok(Self {
            task_id: e.task_id.into(),
            context_id: e.context_id.into(),
            status: status(e.status)?,
            metadata: metadata(e.metadata)?,
        })
    }
}

impl From<cards::TaskArtifactUpdateEvent> for proto::TaskArtifactUpdateEvent {
    fn from(e: cards::TaskArtifactUpdateEvent) -> Self {
        Self {
            task_id: e.task_id.into(),
            context_id: e.context_id.into(),
            artifact: Some(e.artifact.into()),
            append: e.append,
            last_chunk: e.last_chunk,
            metadata: wire_metadata(e.metadata),
        }
    }
}

impl TryFrom<proto::TaskArtifactUpdateEvent> for cards::TaskArtifactUpdateEvent {
    type Error = Invalid;
    fn try_from(e: proto::TaskArtifactUpdateEvent) -> Result<Self> {
        Ok(Self {
            task_id: e.task_id.into(),
            context_id: e.context_id.into(),
            artifact: required(e.artifact, "artifactUpdate.artifact")?.try_into()?,
            append: e.append,
            last_chunk: e.last_chunk,
            metadata: metadata(e.metadata)?,
        })
    }
}

impl From<cards::StreamResponse> for proto::StreamResponse {
    fn from(r: cards::StreamResponse) -> Self {
        use proto::stream_response::Payload;
        let payload = match r {
            cards::StreamResponse::Task(t) => Payload::Task(t.into()),
            cards::StreamResponse::Message(m) => Payload::Message(m.into()),
            cards::StreamResponse::StatusUpdate(e) => Payload::StatusUpdate(e.into()),
            cards::StreamResponse::ArtifactUpdate(e) => Payload::ArtifactUpdate(e.into()),
        };
        Self {
            payload: Some(payload),
        }
    }
}

impl TryFrom<proto::StreamResponse> for cards::StreamResponse {
    type Error = Invalid;
    fn try_from(r: proto::StreamResponse) -> Result<Self> {
        use proto::stream_response::Payload;
        Ok(match r.payload {
            Some(Payload::Task(t)) => Self::Task(t.try_into()?),
            Some(Payload::Message(m)) => Self::Message(m.try_into()?),
            Some(Payload::StatusUpdate(e)) => Self::StatusUpdate(e.try_into()?),
            Some(Payload::ArtifactUpdate(e)) => Self::ArtifactUpdate(e.try_into()?),
            None => {
                return Err(invalid(
                    "a stream response needs one of task, message, statusUpdate, artifactUpdate",
                ));
            }
        })
    }
}

impl From<cards::SendMessageResponse> for proto::SendMessageResponse {
    fn from(r: cards::SendMessageResponse) -> Self {
        use proto::send_message_response::Payload;
        let payload = match r {
            cards::SendMessageResponse::Task(t) => Payload::Task(t.into()),
            cards::SendMessageResponse::Message(m) => Payload::Message(m.into()),
        };
        Self {
            payload: Some(payload),
        }
    }
}

impl TryFrom<proto::SendMessageResponse> for cards::SendMessageResponse {
    type Error = Invalid;
    fn try_from(r: proto::SendMessageResponse) -> Result<Self> {
        use proto::send_message_response::Payload;
        Ok(match r.payload {
            Some(Payload::Task(t)) => Self::Task(t.try_into()?),
            Some(Payload::Message(m)) => Self::Message(m.try_into()?),
            None => return Err(invalid("a send answer needs one of task, message")),
        })
    }
}

// --- requests ------------------------------------------------------------------------------

impl From<cards::AuthenticationInfo> for proto::AuthenticationInfo {
    fn from(a: cards::AuthenticationInfo) -> Self {
        Self {
            scheme: a.scheme,
            credentials: a.credentials,
        }
    }
}

impl From<proto::AuthenticationInfo> for cards::AuthenticationInfo {
    fn from(a: proto::AuthenticationInfo) -> Self {
        Self {
            scheme: a.scheme,
            credentials: a.credentials,
        }
    }
}

impl From<cards::TaskPushNotificationConfig> for proto::TaskPushNotificationConfig {
    fn from(c: cards::TaskPushNotificationConfig) -> Self {
        Self {
            tenant: c.tenant,
            id: c.id,
            task_id: c.task_id.into(),
            url: c.url,
            token: c.token,
            authentication: c.authentication.map(Into::into),
        }
    }
}

impl From<proto::TaskPushNotificationConfig> for cards::TaskPushNotificationConfig {
    fn from(c: proto::TaskPushNotificationConfig) -> Self {
        Self {
            tenant: c.tenant,
            id: c.id,
            task_id: c.task_id.into(),
            url: c.url,
            token: c.token,
            authentication: c.authentication.map(Into::into),
        }
    }
}

impl From<cards::SendMessageConfiguration> for proto::SendMessageConfiguration {
    fn from(c: cards::SendMessageConfiguration) -> Self {
        Self {
            accepted_output_modes: c.accepted_output_modes,
            task_push_notification_config: c.task_push_notification_config.map(Into::into),
            history_length: c.history_length,
            return_immediately: c.return_immediately,
        }
    }
}

impl From<proto::SendMessageConfiguration> for cards::SendMessageConfiguration {
    fn from(c: proto::SendMessageConfiguration) -> Self {
        Self {
            accepted_output_modes: c.accepted_output_modes,
            task_push_notification_config: c.task_push_notification_config.map(Into::into),
            history_length: c.history_length,
            return_immediately: c.return_immediately,
        }
    }
}

impl From<cards::SendMessageRequest> for proto::SendMessageRequest {
    fn from(r: cards::SendMessageRequest) -> Self {
        Self {
            tenant: r.tenant,
            message: Some(r.message.into()),
            configuration: r.configuration.map(Into::into),
            metadata: wire_metadata(r.metadata),
        }
    }
}

impl TryFrom<proto::SendMessageRequest> for cards::SendMessageRequest {
    type Error = Invalid;
    fn try_from(r: proto::SendMessageRequest) -> Result<Self> {
        Ok(Self {
            tenant: r.tenant,
            message: required(r.message, "message")?.try_into()?,
            configuration: r.configuration.map(Into::into),
            metadata: metadata(r.metadata)?,
        })
    }
}

impl From<cards::GetTaskRequest> for proto::GetTaskRequest {
    fn from(r: cards::GetTaskRequest) -> Self {
        Self {
            tenant: r.tenant,
            id: r.id.into(),
            history_length: r.history_length,
        }
    }
}

impl From<proto::GetTaskRequest> for cards::GetTaskRequest {
    fn from(r: proto::GetTaskRequest) -> Self {
        Self {
            tenant: r.tenant,
            id: r.id.into(),
            history_length: r.history_length,
        }
    }
}

impl From<cards::ListTasksRequest> for proto::ListTasksRequest {
    fn from(r: cards::ListTasksRequest) -> Self {
        Self {
            tenant: r.tenant,
            context_id: r.context_id.into(),
            status: r.status.number(),
            page_size: r.page_size,
            page_token: r.page_token,
            history_length: r.history_length,
            status_timestamp_after: r.status_timestamp_after.map(wire_timestamp),
            include_artifacts: r.include_artifacts,
        }
    }
}

impl TryFrom<proto::ListTasksRequest> for cards::ListTasksRequest {
    type Error = Invalid;
    fn try_from(r: proto::ListTasksRequest) -> Result<Self> {
        Ok(Self {
            tenant: r.tenant,
            context_id: r.context_id.into(),
            status: task_state(r.status)?,
            page_size: r.page_size,
            page_token: r.page_token,
            history_length: r.history_length,
            status_timestamp_after: r.status_timestamp_after.map(timestamp).transpose()?,
            include_artifacts: r.include_artifacts,
        })
    }
}

impl From<cards::ListTasksResponse> for proto::ListTasksResponse {
    fn from(r: cards::ListTasksResponse) -> Self {
        Self {
            tasks: wire_all(r.tasks),
            next_page_token: r.next_page_token,
            page_size: r.page_size,
            total_size: r.total_size,
        }
    }
}

impl TryFrom<proto::ListTasksResponse> for cards::ListTasksResponse {
    type Error = Invalid;
    fn try_from(r: proto::ListTasksResponse) -> Result<Self> {
        Ok(Self {
            tasks: all(r.tasks)?,
            next_page_token: r.next_page_token,
            page_size: r.page_size,
            total_size: r.total_size,
        })
    }
}

impl From<cards::CancelTaskRequest> for proto::CancelTaskRequest {
    fn from(r: cards::CancelTaskRequest) -> Self {
        Self {
            tenant: r.tenant,
            id: r.id.into(),
            metadata: wire_metadata(r.metadata),
        }
    }
}

impl TryFrom<proto::CancelTaskRequest> for cards::CancelTaskRequest {
    type Error = Invalid;
    fn try_from(r: proto::CancelTaskRequest) -> Result<Self> {
        Ok(Self {
            tenant: r.tenant,
            id: r.id.into(),
            metadata: metadata(r.metadata)?,
        })
    }
}

impl From<cards::SubscribeToTaskRequest> for proto::SubscribeToTaskRequest {
    fn from(r: cards::SubscribeToTaskRequest) -> Self {
        Self {
            tenant: r.tenant,
            id: r.id.into(),
        }
    }
}

impl From<proto::SubscribeToTaskRequest> for cards::SubscribeToTaskRequest {
    fn from(r: proto::SubscribeToTaskRequest) -> Self {
        Self {
            tenant: r.tenant,
            id: r.id.into(),
        }
    }
}

impl From<cards::GetTaskPushNotificationConfigRequest>
    for proto::GetTaskPushNotificationConfigRequest
{
    fn from(r: cards::GetTaskPushNotificationConfigRequest) -> Self {
        Self {
            tenant: r.tenant,
            task_id: r.task_id.into(),
            id: r.id,
        }
    }
}

impl From<proto::GetTaskPushNotificationConfigRequest>
    for cards::GetTaskPushNotificationConfigRequest
{
    fn from(r: proto::GetTaskPushNotificationConfigRequest) -> Self {
        Self {
            tenant: r.tenant,
            task_id: r.task_id.into(),
            id: r.id,
        }
    }
}

/// The model has one type for the get and the delete request, which have the same fields.
impl From<cards::GetTaskPushNotificationConfigRequest>
    for proto::DeleteTaskPushNotificationConfigRequest
{
    fn from(r: cards::GetTaskPushNotificationConfigRequest) -> Self {
        Self {
            tenant: r.tenant,
            task_id: r.task_id.into(),
            id: r.id,
        }
    }
}

impl From<proto::DeleteTaskPushNotificationConfigRequest>
    for cards::GetTaskPushNotificationConfigRequest
{
    fn from(r: proto::DeleteTaskPushNotificationConfigRequest) -> Self {
        Self {
            tenant: r.tenant,
            task_id: r.task_id.into(),
            id: r.id,
        }
    }
}

impl From<cards::ListTaskPushNotificationConfigsRequest>
    for proto::ListTaskPushNotificationConfigsRequest
{
    fn from(r: cards::ListTaskPushNotificationConfigsRequest) -> Self {
        Self {
            tenant: r.tenant,
            task_id: r.task_id.into(),
            page_size: r.page_size,
            page_token: r.page_token,
        }
    }
}

impl From<proto::ListTaskPushNotificationConfigsRequest>
    for cards::ListTaskPushNotificationConfigsRequest
{
    fn from(r: proto::ListTaskPushNotificationConfigsRequest) -> Self {
        Self {
            tenant: r.tenant,
            task_id: r.task_id.into(),
            page_size: r.page_size,
            page_token: r.page_token,
        }
    }
}

impl From<cards::ListTaskPushNotificationConfigsResponse>
    for proto::ListTaskPushNotificationConfigsResponse
{
    fn from(r: cards::ListTaskPushNotificationConfigsResponse) -> Self {
        Self {
            configs: wire_all(r.configs),
            next_page_token: r.next_page_token,
        }
    }
}

impl From<proto::ListTaskPushNotificationConfigsResponse>
    for cards::ListTaskPushNotificationConfigsResponse
{
    fn from(r: proto::ListTaskPushNotificationConfigsResponse) -> Self {
        Self {
            configs: wire_all(r.configs),
            next_page_token: r.next_page_token,
        }
    }
}

impl From<cards::GetExtendedAgentCardRequest> for proto::GetExtendedAgentCardRequest {
    fn from(r: cards::GetExtendedAgentCardRequest) -> Self {
        Self { tenant: r.tenant }
    }
}

impl From<proto::GetExtendedAgentCardRequest> for cards::GetExtendedAgentCardRequest {
    fn from(r: proto::GetExtendedAgentCardRequest) -> Self {
        Self { tenant: r.tenant }
    }
}

// --- the agent card ------------------------------------------------------------------------

impl From<cards::AgentInterface> for proto::AgentInterface {
    fn from(i: cards::AgentInterface) -> Self {
        Self {
            url: i.url,
            protocol_binding: i.protocol_binding,
            tenant: i.tenant,
            protocol_version: i.protocol_version,
        }
    }
}

impl From<proto::AgentInterface> for cards::AgentInterface {
    fn from(i: proto::AgentInterface) -> Self {
        Self {
            url: i.url,
            protocol_binding: i.protocol_binding,
            tenant: i.tenant,
            protocol_version: i.protocol_version,
        }
    }
}

impl From<cards::AgentProvider> for proto::AgentProvider {
    fn from(p: cards::AgentProvider) -> Self {
        Self {
            url: p.url,
            organization: p.organization,
        }
    }
}

impl From<proto::AgentProvider> for cards::AgentProvider {
    fn from(p: proto::AgentProvider) -> Self {
        Self {
            url: p.url,
            organization: p.organization,
        }
    }
}

impl From<cards::AgentExtension> for proto::AgentExtension {
    fn from(e: cards::AgentExtension) -> Self {
        Self {
            uri: e.uri,
            description: e.description,
            required: e.required,
            params: wire_metadata(e.params),
        }
    }
}

impl TryFrom<proto::AgentExtension> for cards::AgentExtension {
    type Error = Invalid;
    fn try_from(e: proto::AgentExtension) -> Result<Self> {
        Ok(Self {
            uri: e.uri,
            description: e.description,
            required: e.required,
            params: metadata(e.params)?,
        })
    }
}

impl From<cards::AgentCapabilities> for proto::AgentCapabilities {
    fn from(c: cards::AgentCapabilities) -> Self {
        Self {
            streaming: c.streaming,
            push_notifications: c.push_notifications,
            extensions: wire_all(c.extensions),
            extended_agent_card: c.extended_agent_card,
        }
    }
}

impl TryFrom<proto::AgentCapabilities> for cards::AgentCapabilities {
    type Error = Invalid;
    fn try_from(c: proto::AgentCapabilities) -> Result<Self> {
        Ok(Self {
            streaming: c.streaming,
            push_notifications: c.push_notifications,
            extensions: all(c.extensions)?,
            extended_agent_card: c.extended_agent_card,
        })
    }
}

impl From<cards::StringList> for proto::StringList {
    fn from(l: cards::StringList) -> Self {
        Self { list: l.list }
    }
}

impl From<proto::StringList> for cards::StringList {
    fn from(l: proto::StringList) -> Self {
        Self { list: l.list }
    }
}

impl From<cards::SecurityRequirement> for proto::SecurityRequirement {
    fn from(r: cards::SecurityRequirement) -> Self {
        Self {
            schemes: r.schemes.into_iter().map(|(k, v)| (k, v.into())).collect(),
        }
    }
}

impl From<proto::SecurityRequirement> for cards::SecurityRequirement {
    fn from(r: proto::SecurityRequirement) -> Self {
        Self {
            schemes: r.schemes.into_iter().map(|(k, v)| (k, v.into())).collect(),
        }
    }
}

impl From<cards::AgentSkill> for proto::AgentSkill {
    fn from(s: cards::AgentSkill) -> Self {
        Self {
            id: s.id,
            name: s.name,
            description: s.description,
            tags: s.tags,
            examples: s.examples,
            input_modes: s.input_modes,
            output_modes: s.output_modes,
            security_requirements: wire_all(s.security_requirements),
        }
    }
}

impl From<proto::AgentSkill> for cards::AgentSkill {
    fn from(s: proto::AgentSkill) -> Self {
        Self {
            id: s.id,
            name: s.name,
            description: s.description,
            tags: s.tags,
            examples: s.examples,
            input_modes: s.input_modes,
            output_modes: s.output_modes,
            security_requirements: wire_all(s.security_requirements),
        }
    }
}

impl From<cards::AgentCardSignature> for proto::AgentCardSignature {
    fn from(s: cards::AgentCardSignature) -> Self {
        Self {
            protected: s.protected,
            signature: s.signature,
            header: wire_metadata(s.header),
        }
    }
}

impl TryFrom<proto::AgentCardSignature> for cards::AgentCardSignature {
    type Error = Invalid;
    fn try_from(s: proto::AgentCardSignature) -> Result<Self> {
        Ok(Self {
            protected: s.protected,
            signature: s.signature,
            header: metadata(s.header)?,
        })
    }
}

// The implicit and password flows are deprecated in the spec, and still carried: cards have them.
#[allow(deprecated)]
impl From<cards::OAuthFlows> for proto::OAuthFlows {
    fn from(flows: cards::OAuthFlows) -> Self {
        use proto::o_auth_flows::Flow;
        // The model has one flow type; each proto flow keeps the members it has.
        let flow = match flows {
            cards::OAuthFlows::AuthorizationCode(f) => {
                Flow::AuthorizationCode(proto::AuthorizationCodeOAuthFlow {
                    authorization_url: f.authorization_url,
                    token_url: f.token_url,
                    refresh_url: f.refresh_url,
                    scopes: f.scopes,
                    pkce_required: f.pkce_required,
                })
            }
            cards::OAuthFlows::ClientCredentials(f) => {
                Flow::ClientCredentials(proto::ClientCredentialsOAuthFlow {
                    token_url: f.token_url,
                    refresh_url: f.refresh_url,
                    scopes: f.scopes,
                })
            }
            cards::OAuthFlows::Implicit(f) => Flow::Implicit(proto::ImplicitOAuthFlow {
                authorization_url: f.authorization_url,
                refresh_url: f.refresh_url,
                scopes: f.scopes,
            }),
            cards::OAuthFlows::Password(f) => Flow::Password(proto::PasswordOAuthFlow {
                token_url: f.token_url,
                refresh_url: f.refresh_url,
                scopes: f.scopes,
            }),
            cards::OAuthFlows::DeviceCode(f) => Flow::DeviceCode(proto::DeviceCodeOAuthFlow {
                device_authorization_url: f.device_authorization_url,
                token_url: f.token_url,
                refresh_url: f.refresh_url,
                scopes: f.scopes,
            }),
        };
        Self { flow: Some(flow) }
    }
}

#[allow(deprecated)]
impl TryFrom<proto::OAuthFlows> for cards::OAuthFlows {
    type Error = Invalid;
    fn try_from(flows: proto::OAuthFlows) -> Result<Self> {
        use proto::o_auth_flows::Flow;
        let flow = |authorization_url: String,
                    device_authorization_url: String,
                    token_url: String,
                    refresh_url: String,
                    scopes: BTreeMap<String, String>,
                    pkce_required: bool| cards::OAuthFlow {
            authorization_url,
            device_authorization_url,
            token_url,
            refresh_url,
            scopes,
            pkce_required,
        };
        Ok(match flows.flow {
            Some(Flow::AuthorizationCode(f)) => Self::AuthorizationCode(flow(
                f.authorization_url,
                String::new(),
                f.token_url,
                f.refresh_url,
                f.scopes,
                f.pkce_required,
            )),
            Some(Flow::ClientCredentials(f)) => Self::ClientCredentials(flow(
                String::new(),
                String::new(),
                f.token_url,
                f.refresh_url,
                f.scopes,
                false,
            )),
            Some(Flow::Implicit(f)) => Self::Implicit(flow(
                f.authorization_url,
                String::new(),
                String::new(),
                f.refresh_url,
                f.scopes,
                false,
            )),
            Some(Flow::Password(f)) => Self::Password(flow(
                String::new(),
                String::new(),
                f.token_url,
                f.refresh_url,
                f.scopes,
                false,
            )),
            Some(Flow::DeviceCode(f)) => Self::DeviceCode(flow(
                String::new(),
                f.device_authorization_url,
                f.token_url,
                f.refresh_url,
                f.scopes,
                false,
            )),
            None => return Err(invalid("OAuth flows need one flow")),
        })
    }
}

impl From<cards::SecurityScheme> for proto::SecurityScheme {
    fn from(s: cards::SecurityScheme) -> Self {
        use proto::security_scheme::Scheme;
        let scheme = match s {
            cards::SecurityScheme::ApiKey(k) => {
                Scheme::ApiKeySecurityScheme(proto::ApiKeySecurityScheme {
                    description: k.description,
                    location: k.location,
                    name: k.name,
                })
            }
            cards::SecurityScheme::HttpAuth(h) => {
                Scheme::HttpAuthSecurityScheme(proto::HttpAuthSecurityScheme {
                    description: h.description,
                    scheme: h.scheme,
                    bearer_format: h.bearer_format,
                })
            }
            cards::SecurityScheme::OAuth2(o) => {
                Scheme::Oauth2SecurityScheme(proto::OAuth2SecurityScheme {
                    description: o.description,
                    flows: Some(o.flows.into()),
                    oauth2_metadata_url: o.oauth2_metadata_url,
                })
            }
            cards::SecurityScheme::OpenIdConnect(o) => {
                Scheme::OpenIdConnectSecurityScheme(proto::OpenIdConnectSecurityScheme {
                    description: o.description,
                    open_id_connect_url: o.open_id_connect_url,
                })
            }
            cards::SecurityScheme::MutualTls(m) => {
                Scheme::MtlsSecurityScheme(proto::MutualTlsSecurityScheme {
                    description: m.description,
                })
            }
        };
        Self {
            scheme: Some(scheme),
        }
    }
}

impl TryFrom<proto::SecurityScheme> for cards::SecurityScheme {
    type Error = Invalid;
    fn try_from(s: proto::SecurityScheme) -> Result<Self> {
        use proto::security_scheme::Scheme;
        Ok(match s.scheme {
            Some(Scheme::ApiKeySecurityScheme(k)) => Self::ApiKey(cards::ApiKeySecurityScheme {
                description: k.description,
                location: k.location,
                name: k.name,
            }),
            Some(Scheme::HttpAuthSecurityScheme(h)) => {
                Self::HttpAuth(cards::HttpAuthSecurityScheme {
                    description: h.description,
                    scheme: h.scheme,
                    bearer_format: h.bearer_format,
                })
            }
            Some(Scheme::Oauth2SecurityScheme(o)) => Self::OAuth2(cards::OAuth2SecurityScheme {
                description: o.description,
                flows: required(o.flows, "oauth2SecurityScheme.flows")?.try_into()?,
                oauth2_metadata_url: o.oauth2_metadata_url,
            }),
            Some(Scheme::OpenIdConnectSecurityScheme(o)) => {
                Self::OpenIdConnect(cards::OpenIdConnectSecurityScheme {
                    description: o.description,
                    open_id_connect_url: o.open_id_connect_url,
                })
            }
            Some(Scheme::MtlsSecurityScheme(m)) => {
                Self::MutualTls(cards::MutualTlsSecurityScheme {
                    description: m.description,
                })
            }
            None => return Err(invalid("a security scheme needs one scheme")),
        })
    }
}

impl From<cards::AgentCard> for proto::AgentCard {
    fn from(c: cards::AgentCard) -> Self {
        Self {
            name: c.name,
            description: c.description,
            supported_interfaces: wire_all(c.supported_interfaces),
            provider: c.provider.map(Into::into),
            version: c.version,
            documentation_url: c.documentation_url,
            capabilities: Some(c.capabilities.into()),
            security_schemes: c
                .security_schemes
                .into_iter()
                .map(|(k, v)| (k, v.into()))
                .collect(),
            security_requirements: wire_all(c.security_requirements),
            default_input_modes: c.default_input_modes,
            default_output_modes: c.default_output_modes,
            skills: wire_all(c.skills),
            signatures: wire_all(c.signatures),
            icon_url: c.icon_url,
        }
    }
}

impl TryFrom<proto::AgentCard> for cards::AgentCard {
    type Error = Invalid;
    fn try_from(c: proto::AgentCard) -> Result<Self> {
        Ok(Self {
            name: c.name,
            description: c.description,
            supported_interfaces: wire_all(c.supported_interfaces),
            provider: c.provider.map(Into::into),
            version: c.version,
            documentation_url: c.documentation_url,
            capabilities: c
                .capabilities
                .map(TryInto::try_into)
                .transpose()?
                .unwrap_or_default(),
            security_schemes: c
                .security_schemes
                .into_iter()
                .map(|(k, v)| Ok((k, v.try_into()?)))
                .collect::<Result<_>>()?,
            security_requirements: wire_all(c.security_requirements),
            default_input_modes: c.default_input_modes,
            default_output_modes: c.default_output_modes,
            skills: wire_all(c.skills),
            signatures: all(c.signatures)?,
            icon_url: c.icon_url,
        })
    }
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
