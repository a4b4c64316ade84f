//! Mew's A2A extension: what Mew nodes tell each other about tasks beyond the spec, as one
//! typed model under the `mew` key of A2A metadata (`EXTENSION.md` beside this crate's
//! `Cargo.toml` is its specification).
//!
//! Every card a Mew node serves declares the extension ([`extension`]), so other agents know
//! what the key holds and may ignore it: nothing in it is required to speak A2A with a node.
//! Readers are lenient: a field that does not parse is left out, never an error, since the
//! metadata may come from any agent.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::card::AgentExtension;
use crate::ids::TaskId;
use crate::message::Metadata;
use crate::role::is_valid_role_name;

/// The extension's URI, as cards declare it in `capabilities.extensions`.
pub const EXTENSION_URI: &str = "urn:mew:a2a:delegation:v1";

/// The metadata key the extension's fields live under.
pub const METADATA_KEY: &str = "mew";

/// The extension as a card declares it: optional, described, without parameters.
pub fn extension() -> AgentExtension {
    AgentExtension {
        uri: EXTENSION_URI.to_owned(),
        description: "Mew delegation metadata under the `mew` key: a task's role, parent, \
                      depth, children and model usage, and progress notes of tools and children"
            .to_owned(),
        required: false,
        params: None,
    }
}

/// What one task, message or status update says under `metadata.mew`. Every field is
/// optional; which ones appear where is in `EXTENSION.md`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MewMetadata {
    /// On a delegated message and its task: the delegating task (on the delegating agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task: Option<TaskId>,
    /// On a delegated message and its task: how deep the task is in a delegation chain (a
    /// task a user started is 0, so a delegated one is at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// On a delegated message and its task: what the child was asked, in a few words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// On a delegated message and its task: the child is a fork of its parent's role.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fork: bool,
    /// On a task: the role of the node that runs it, by name (written by the node only; read
    /// only when it is a valid role name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// On a task: the W3C `traceparent` of the span the task started in (written by the node
    /// only, when it traces): its later turns, on any replica, join that trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// On a task: its delegations, in the order they were made (written by the node only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildLink>,
    /// On a task: the task's own model use (written by the node only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// On the status message of an INPUT_REQUIRED task: what kind of question it is
    /// ([`ASK_PERMISSION`]: a permission only the user may give).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<String>,
    /// On the status message of a permission question ([`ASK_PERMISSION`]): the tool call
    /// it asks about, in full, so that a user interface can show it before the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission: Option<PermissionAsk>,
    /// On a WORKING status update: a tool call of the task starting or ending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolNote>,
    /// On a WORKING status update: a status update of one of the task's children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<ChildNote>,
    /// On a WORKING status update: a hook that ran for the task, and what it came to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookNote>,
    /// On a WORKING status update: something the user should know about the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// On a task (written by the node only), and on the WORKING status update that reports a
    /// change of it: the task's plan, as its model last wrote it with `TodoWrite`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub todos: Option<Vec<TodoItem>>,
    /// On the status message of a task whose turn has not started (SUBMITTED, or WORKING for
    /// a continuation): it waits for a slot, and for which limit. A blocking send returns the
    /// task there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<WaitNote>,
}

/// The `ask` of a question only the user may answer: a permission.
pub const ASK_PERMISSION: &str = "permission";

/// The `ask` of a question an MCP server puts to the user during a tool call (elicitation):
/// the status message carries a data part with the server's `message` and `requestedSchema`
/// (or `url`); the reply is a JSON object of the fields (as text or a data part), the value
/// alone when one field is asked for, `decline` or `cancel`. Only the user may answer it.
pub const ASK_ELICITATION: &str = "elicitation";

/// The `ask` of a task in AUTH_REQUIRED because an MCP server asks for authorization: the
/// status message carries a data part with the `server` and the `url` to open; the node's
/// OAuth callback continues the task once the user signed in (a reply before that asks again
/// when the sign-in has not completed).
pub const ASK_AUTHORIZATION: &str = "authorization";

/// The fields of [`MewMetadata`] that only the node writes, never taken from a caller: forged
/// links would send a task's agent to agents of the caller's choosing.
pub const NODE_OWNED_FIELDS: &[&str] = &["role", "traceparent", "children", "usage", "todos"];

impl MewMetadata {
    /// What `metadata` holds under `mew`; fields that do not parse are left out.
    pub fn read(metadata: Option<&Metadata>) -> Self {
        let Some(Value::Object(mew)) = metadata.and_then(|m| m.get(METADATA_KEY)) else {
            return Self::default();
        };
        Self {
            parent_task: field(mew, "parentTask"),
            depth: field(mew, "depth"),
            description: field(mew, "description"),
            fork: field(mew, "fork").unwrap_or(false),
            // Only a role name: it is shown as one (a line of `mew tasks list`, say).
            role: field(mew, "role").filter(|role: &String| is_valid_role_name(role)),
            traceparent: field(mew, "traceparent"),
            children: Self::child_links_of(mew)
                .into_iter()
                .filter_map(Result::ok)
                .collect(),
            usage: field(mew, "usage"),
            ask: field(mew, "ask"),
            permission: field(mew, "permission"),
            tool: field(mew, "tool"),
            child: field(mew, "child"),
            hook: field(mew, "hook"),
            warning: field(mew, "warning"),
            todos: field(mew, "todos"),
            waiting: field(mew, "waiting"),
        }
    }

    /// The child links of `metadata`, each parsed on its own: a malformed one is an error
    /// naming it (what `mew tasks tree` shows).
    pub fn child_links(metadata: Option<&Metadata>) -> Vec<Result<ChildLink, String>> {
        match metadata.and_then(|m| m.get(METADATA_KEY)) {
            Some(Value::Object(mew)) => Self::child_links_of(mew),
            _ => Vec::new(),
        }
    }

    fn child_links_of(mew: &Map<String, Value>) -> Vec<Result<ChildLink, String>> {
        let Some(Value::Array(children)) = mew.get("children") else {
            return Vec::new();
        };
        children
            .iter()
            .map(|value| {
                ChildLink::deserialize(value)
                    .map_err(|e| format!("a malformed child link {value}: {e}"))
            })
            .collect()
    }

    /// These fields as a metadata object holding only `mew`.
    pub fn to_metadata(&self) -> Metadata {
        let mut metadata = Metadata::new();
        self.write(&mut metadata);
        metadata
    }

    /// Sets these fields as `metadata.mew`, replacing what was there.
    pub fn write(&self, metadata: &mut Metadata) {
        match serde_json::to_value(self) {
            Ok(value) => {
                metadata.insert(METADATA_KEY.to_owned(), value);
            }
            // A struct of strings, numbers and maps always serializes.
            Err(_) => {
                metadata.remove(METADATA_KEY);
            }
        }
    }

    /// Sets `metadata.mew.role` to `role`, leaving the rest of `mew` as it is.
    pub fn set_role(metadata: &mut Metadata, role: &str) {
        change_mew(metadata, |mew| {
            mew.insert("role".to_owned(), Value::String(role.to_owned()));
        });
    }

    /// Sets `metadata.mew.traceparent` (see [`MewMetadata::traceparent`]).
    pub fn set_traceparent(metadata: &mut Metadata, traceparent: &str) {
        change_mew(metadata, |mew| {
            mew.insert(
                "traceparent".to_owned(),
                Value::String(traceparent.to_owned()),
            );
        });
    }

    /// Sets `metadata.mew.usage` to `usage`, leaving the rest of `mew` (a caller's own fields,
    /// say) as it is.
    pub fn set_usage(metadata: &mut Metadata, usage: &Usage) {
        if let Ok(value) = serde_json::to_value(usage) {
            change_mew(metadata, |mew| {
                mew.insert("usage".to_owned(), value);
            });
        }
    }

    /// Sets `metadata.mew.todos` to `todos`, leaving the rest of `mew` as it is.
    pub fn set_todos(metadata: &mut Metadata, todos: &[TodoItem]) {
        if let Ok(value) = serde_json::to_value(todos) {
            change_mew(metadata, |mew| {
                mew.insert("todos".to_owned(), value);
            });
        }
    }

    /// Appends `link` to `metadata.mew.children` (a list that is not one is replaced), leaving
    /// the rest of `mew` as it is.
    pub fn push_child(metadata: &mut Metadata, link: &ChildLink) {
        let Ok(value) = serde_json::to_value(link) else {
            return;
        };
        change_mew(metadata, |mew| {
            match mew
                .entry("children")
                .or_insert_with(|| Value::Array(Vec::new()))
            {
                Value::Array(items) => items.push(value),
                other => *other = Value::Array(vec![value]),
            }
        });
    }

    /// Removes the fields only the node writes ([`NODE_OWNED_FIELDS`]) from `metadata.mew`,
    /// leaving everything else as the caller sent it.
    pub fn strip_node_owned(metadata: &mut Metadata) {
        if let Some(Value::Object(mew)) = metadata.get_mut(METADATA_KEY) {
            for field in NODE_OWNED_FIELDS {
                mew.remove(*field);
            }
        }
    }
}

/// Runs `change` on the `mew` object of `metadata` (an empty one if there is none or it is not
/// an object) and puts the result back.
fn change_mew(metadata: &mut Metadata, change: impl FnOnce(&mut Map<String, Value>)) {
    let mut mew = match metadata.remove(METADATA_KEY) {
        Some(Value::Object(mew)) => mew,
        _ => Map::new(),
    };
    change(&mut mew);
    metadata.insert(METADATA_KEY.to_owned(), Value::Object(mew));
}

/// One field of the `mew` object, if it is there and parses.
fn field<T: DeserializeOwned>(mew: &Map<String, Value>, key: &str) -> Option<T> {
    T::deserialize(mew.get(key)?).ok()
}

/// One delegated task, as its parent records it in `mew.children`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildLink {
    /// The child's task id, on the agent that runs it.
    pub task_id: String,
    /// Who runs it: a role of the parent's node by name, or the URL of a remote agent.
    pub agent: String,
    /// The name the delegating model gave it, for `SendMessage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the child was asked to do, in a few words.
    #[serde(default)]
    pub description: String,
    /// True when it ran (or moved) to the background.
    #[serde(default)]
    pub background: bool,
    /// The id of the parent's tool call that started it: a parent continued after its node
    /// was lost finds the child of a call that had no result yet, and follows it instead of
    /// starting it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

/// A task's own model use (`mew.usage`); a missing count is 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Usage {
    /// Input tokens (not counting cache reads).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from a prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to a prompt cache.
    pub cache_write_tokens: u64,
    /// Model calls.
    pub model_calls: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Model calls whose service reported no usage: the token counts leave them out.
    #[serde(skip_serializing_if = "is_zero")]
    pub unreported_model_calls: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Adds `other` to this, saturating.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.model_calls = self.model_calls.saturating_add(other.model_calls);
        self.tool_calls = self.tool_calls.saturating_add(other.tool_calls);
        self.unreported_model_calls = self
            .unreported_model_calls
            .saturating_add(other.unreported_model_calls);
    }
}

/// One step of a task's plan (`mew.todos`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TodoItem {
    /// What the step is, in the imperative (`Run the tests`).
    pub content: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: String,
    /// The step as it is being done (`Running the tests`), shown while it is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_form: Option<String>,
}

/// Why a task waits to start (`mew.waiting` of its status update).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitNote {
    /// `role`: its role runs as many tasks as it may; `node`: the node does.
    pub limit: String,
    /// Tasks running under that limit when it was said.
    pub running: u32,
    /// The limit.
    pub max: u32,
}

/// A hook that ran for a task (`mew.hook` of a progress note).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookNote {
    /// The event, as hook files name it (`PreToolUse`, `Stop`, ...).
    pub event: String,
    /// The hook's name.
    pub name: String,
    /// `ok`, `blocked` or `error`.
    pub outcome: String,
    /// Why it blocked, or how it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The tool call a permission question asks about (`mew.permission` of its status message).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionAsk {
    /// The tool's name.
    pub tool: String,
    /// The call's arguments, as the model gave them.
    #[serde(default)]
    pub input: Value,
    /// What asked: the permission rule, the mode's default, or the hook.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rule: String,
}

/// A tool call of a task starting or ending (`mew.tool` of a progress note).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolNote {
    /// `started` or `finished`.
    pub phase: String,
    /// The call's id.
    #[serde(default)]
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// `{"input": ...}` when it starts, `{"isError": bool}` when it ends.
    #[serde(default)]
    pub detail: Value,
}

/// A status update of one of the task's children (`mew.child` of a progress note).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildNote {
    /// The child's task id.
    pub task_id: String,
    /// Who runs it (as in its [`ChildLink`]).
    pub agent: String,
    /// What it was asked to do.
    #[serde(default)]
    pub description: String,
    /// Its state, by the A2A name.
    pub state: String,
    /// The text of its status message, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The child's own tool note, when its update carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolNote>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn metadata(value: Value) -> Metadata {
        match value {
            Value::Object(map) => map,
            _ => Metadata::new(),
        }
    }

    #[test]
    fn fields_read_back_and_bad_ones_are_left_out() {
        let m = metadata(json!({"mew": {
            "parentTask": "p1", "depth": 2, "fork": true, "description": "look", "role": "helper",
            "children": [{"taskId": "c1", "agent": "helper"}, {"taskId": 5}],
            "usage": {"inputTokens": 10, "modelCalls": 1},
            "ask": "permission", "warning": 7,
        }, "other": 1}));
        let mew = MewMetadata::read(Some(&m));
        assert_eq!(mew.parent_task.as_ref().map(TaskId::as_str), Some("p1"));
        assert_eq!(mew.depth, Some(2));
        assert!(mew.fork);
        assert_eq!(mew.role.as_deref(), Some("helper"));
        assert_eq!(mew.children.len(), 1, "the malformed link is left out");
        assert_eq!(mew.usage.map(|u| u.input_tokens), Some(10));
        assert_eq!(mew.ask.as_deref(), Some(ASK_PERMISSION));
        assert_eq!(mew.warning, None, "not a string");
        let bad_role = metadata(json!({"mew": {"role": "two\nlines"}}));
        assert_eq!(
            MewMetadata::read(Some(&bad_role)).role,
            None,
            "not a role name"
        );
        let links = MewMetadata::child_links(Some(&m));
        assert!(links[0].is_ok() && links[1].is_err());
        assert_eq!(MewMetadata::read(None), MewMetadata::default());
        assert_eq!(
            MewMetadata::read(Some(&metadata(json!({"mew": "x"})))),
            MewMetadata::default()
        );
    }

    #[test]
    fn writing_keeps_other_keys_and_leaves_unset_fields_out() {
        let mut m = metadata(json!({"other": 1}));
        MewMetadata {
            depth: Some(1),
            description: Some("d".into()),
            ..MewMetadata::default()
        }
        .write(&mut m);
        assert_eq!(
            Value::Object(m.clone()),
            json!({"other": 1, "mew": {"depth": 1, "description": "d"}})
        );
        let mut forged =
            metadata(json!({"mew": {"role": "admin", "children": [], "usage": {}, "depth": 1}}));
        MewMetadata::strip_node_owned(&mut forged);
        assert_eq!(Value::Object(forged), json!({"mew": {"depth": 1}}));
    }

    #[test]
    fn annotations_change_one_field_and_keep_the_rest_of_mew() {
        let mut m = metadata(json!({"mew": {"custom": true, "children": "not a list"}, "x": 1}));
        let link = ChildLink {
            task_id: "c1".into(),
            agent: "helper".into(),
            ..ChildLink::default()
        };
        MewMetadata::push_child(&mut m, &link);
        MewMetadata::push_child(&mut m, &link);
        MewMetadata::set_usage(
            &mut m,
            &Usage {
                input_tokens: 3,
                ..Usage::default()
            },
        );
        MewMetadata::set_role(&mut m, "helper");
        let plan = [TodoItem {
            content: "Run the tests".into(),
            status: "in_progress".into(),
            active_form: Some("Running the tests".into()),
        }];
        MewMetadata::set_todos(&mut m, &plan);
        assert_eq!(
            m["mew"]["todos"],
            json!([{"content": "Run the tests", "status": "in_progress", "activeForm": "Running the tests"}])
        );
        let mew = MewMetadata::read(Some(&m));
        assert_eq!(mew.todos.as_deref(), Some(&plan[..]));
        assert_eq!(mew.role.as_deref(), Some("helper"));
        assert_eq!(mew.children, vec![link.clone(), link]);
        assert_eq!(mew.usage.map(|u| u.input_tokens), Some(3));
        assert_eq!(m["mew"]["custom"], json!(true));
        assert_eq!(m["x"], json!(1));

        let mut not_an_object = metadata(json!({"mew": 5}));
        MewMetadata::set_usage(&mut not_an_object, &Usage::default());
        assert!(not_an_object["mew"].is_object());
        let mut not_an_object = metadata(json!({"mew": [1]}));
        MewMetadata::set_role(&mut not_an_object, "r");
        assert_eq!(Value::Object(not_an_object), json!({"mew": {"role": "r"}}));
    }
}
