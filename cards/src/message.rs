//! Messages, their parts, and artifacts: the content that flows between agents.

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::ids::{ArtifactId, ContextId, MessageId, TaskId};
use crate::serde_util::{empty_as_none, null_as_default, present_value, proto_enum, proto_message};

/// The most parts a message may have. Reading stops at the first part over it, so a request
/// of many tiny parts costs no more than this many. (An artifact grows by the chunks its agent
/// streams, and a stored task must read back: artifacts have no such bound.)
pub const MAX_PARTS: usize = 1000;

/// Reads a list of parts (`null` as none), refusing more than [`MAX_PARTS`] as soon as the
/// list passes it.
fn bounded_parts<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Part>, D::Error> {
    struct Parts;
    impl<'de> serde::de::Visitor<'de> for Parts {
        type Value = Vec<Part>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a list of at most {MAX_PARTS} parts")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut parts = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
            while let Some(part) = seq.next_element()? {
                if parts.len() == MAX_PARTS {
                    return Err(serde::de::Error::custom(format!(
                        "more than {MAX_PARTS} parts"
                    )));
                }
                parts.push(part);
            }
            Ok(parts)
        }
    }
    deserializer.deserialize_any(Parts)
}

/// A JSON object of free-form metadata (`google.protobuf.Struct`).
pub type Metadata = Map<String, Value>;

proto_enum! {
    /// Who sent a message.
    pub enum Role: "role" {
        /// Not set; invalid in a real message.
        Unspecified = 0 => "ROLE_UNSPECIFIED",
        /// The client, on behalf of a user or a calling agent.
        User = 1 => "ROLE_USER",
        /// The serving agent.
        Agent = 2 => "ROLE_AGENT",
    }
}

/// The content of a [`Part`]: exactly one of these.
#[derive(Clone, Debug, PartialEq)]
pub enum PartContent {
    /// Plain text.
    Text(String),
    /// Inline file bytes (base64 on the wire).
    Raw(Vec<u8>),
    /// A URL that points at the content.
    Url(String),
    /// Any JSON value.
    Data(Value),
}

/// One piece of a message or artifact.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    /// What the part holds.
    pub content: PartContent,
    /// Free-form metadata.
    pub metadata: Option<Metadata>,
    /// A file name for file-like content.
    pub filename: String,
    /// The media type of the content, e.g. `text/plain`.
    pub media_type: String,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(PartContent::Text(text.into()))
    }

    /// A structured-data part.
    pub fn data(value: Value) -> Self {
        Self::new(PartContent::Data(value))
    }

    /// A part with the given content and nothing else set.
    pub fn new(content: PartContent) -> Self {
        Self {
            content,
            metadata: None,
            filename: String::new(),
            media_type: String::new(),
        }
    }

    /// The text, if this is a text part.
    pub fn as_text(&self) -> Option<&str> {
        match &self.content {
            PartContent::Text(text) => Some(text),
            _ => None,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PartOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a Metadata>,
    #[serde(skip_serializing_if = "str::is_empty")]
    filename: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    media_type: &'a str,
}

impl Serialize for Part {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = PartOut {
            text: None,
            raw: None,
            url: None,
            data: None,
            metadata: self.metadata.as_ref(),
            filename: &self.filename,
            media_type: &self.media_type,
        };
        match &self.content {
            PartContent::Text(text) => out.text = Some(text),
            PartContent::Raw(bytes) => {
                out.raw = Some(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
            PartContent::Url(url) => out.url = Some(url),
            PartContent::Data(value) => out.data = Some(value),
        }
        out.serialize(serializer)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartIn {
    text: Option<String>,
    raw: Option<String>,
    url: Option<String>,
    #[serde(default, deserialize_with = "present_value")]
    data: Option<Value>,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default, deserialize_with = "null_as_default")]
    filename: String,
    #[serde(default, deserialize_with = "null_as_default")]
    #[serde(alias = "media_type")]
    media_type: String,
}

/// Decodes proto `bytes`: standard or URL-safe base64, padded or not.
pub(crate) fn decode_base64(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    STANDARD
        .decode(text)
        .or_else(|_| STANDARD_NO_PAD.decode(text))
        .or_else(|_| URL_SAFE.decode(text))
        .or_else(|_| URL_SAFE_NO_PAD.decode(text))
}

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let raw = PartIn::deserialize(deserializer)?;
        let mut found = Vec::with_capacity(1);
        if let Some(text) = raw.text {
            found.push(PartContent::Text(text));
        }
        if let Some(bytes) = raw.raw {
            let bytes = decode_base64(&bytes)
                .map_err(|e| D::Error::custom(format!("part.raw is not base64: {e}")))?;
            found.push(PartContent::Raw(bytes));
        }
        if let Some(url) = raw.url {
            found.push(PartContent::Url(url));
        }
        if let Some(data) = raw.data {
            found.push(PartContent::Data(data));
        }
        if found.len() > 1 {
            return Err(D::Error::custom(
                "a part has more than one of text, raw, url, data",
            ));
        }
        let content = found
            .pop()
            .ok_or_else(|| D::Error::custom("a part needs one of text, raw, url, data"))?;
        Ok(Part {
            content,
            metadata: raw.metadata,
            filename: raw.filename,
            media_type: raw.media_type,
        })
    }
}

proto_message! {
    /// One unit of communication between a client and an agent.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Message {
        /// Set by the message's author.
        #[serde(alias = "message_id")]
        pub message_id: MessageId,
        /// The conversation this message belongs to.
        #[serde(alias = "context_id")]
        pub context_id: Option<ContextId> as read("empty_as_none"),
        /// The task this message belongs to.
        #[serde(alias = "task_id")]
        pub task_id: Option<TaskId> as read("empty_as_none"),
        /// Who sent it.
        pub role: Role,
        /// The content: at most [`MAX_PARTS`] parts.
        pub parts: Vec<Part> as read("bounded_parts"),
        /// Free-form metadata.
        pub metadata: Option<Metadata>,
        /// URIs of the extensions present in this message.
        pub extensions: Vec<String>,
        /// Tasks this message refers to for context.
        #[serde(alias = "reference_task_ids")]
        pub reference_task_ids: Vec<TaskId>,
    }
}

impl Message {
    /// A message with a fresh id.
    pub fn new(role: Role, parts: Vec<Part>) -> Self {
        Self {
            message_id: MessageId::generate(),
            role,
            parts,
            ..Self::default()
        }
    }

    /// A user message with one text part.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self::new(Role::User, vec![Part::text(text)])
    }

    /// An agent message with one text part.
    pub fn agent_text(text: impl Into<String>) -> Self {
        Self::new(Role::Agent, vec![Part::text(text)])
    }

    /// All text parts joined by newlines.
    pub fn text(&self) -> String {
        join_text(&self.parts)
    }
}

/// Joins the text parts of a part list with newlines.
pub fn join_text(parts: &[Part]) -> String {
    let mut out = String::new();
    for text in parts.iter().filter_map(Part::as_text) {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(text);
    }
    out
}

proto_message! {
    /// An output of a task.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Artifact {
        /// Unique within its task.
        #[serde(alias = "artifact_id")]
        pub artifact_id: ArtifactId,
        /// A human-readable name.
        pub name: String,
        /// A human-readable description.
        pub description: String,
        /// The content.
        pub parts: Vec<Part>,
        /// Free-form metadata.
        pub metadata: Option<Metadata>,
        /// URIs of the extensions that contributed to this artifact.
        pub extensions: Vec<String>,
    }
}

impl Artifact {
    /// An artifact with a fresh id.
    pub fn new(name: impl Into<String>, parts: Vec<Part>) -> Self {
        Self {
            artifact_id: ArtifactId::generate(),
            name: name.into(),
            parts,
            ..Self::default()
        }
    }
}
