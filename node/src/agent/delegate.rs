//! The `Agent` tool: hands work to a role on this node or on another one, through `AgentTransport`.
//!
//! Local roles and remote ones take the same path: the tool resolves the name
//! to an `Arc<dyn AgentTransport>` (the in-process role agent, or a
//! `RemoteAgent`), sends a streaming message whose metadata names the parent
//! task and the delegation depth, and folds the child's events into its
//! answer. Cancelling the parent cancels the child, wherever it runs.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use futures_util::StreamExt;
use mew_cards::{CancelTaskRequest, Message, SendMessageRequest, StreamResponse, Task, TaskState};
use mew_transport::{AgentTransport, CallContext, RemoteAgent};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::peers::Peers;
use crate::tools::{Category, Tool, ToolContext, ToolOutput};

/// A role of this node, as the `Agent` tool reaches it.
pub(crate) struct LocalRole {
    /// What it does, for the model.
    pub(crate) description: String,
    /// Its in-process agent.
    pub(crate) agent: Arc<dyn AgentTransport>,
}

/// The roles a delegating agent can reach by name.
pub(crate) struct Directory {
    /// This node's roles, by name; set once the task manager exists (the
    /// manager's runners hold this directory).
    local: OnceLock<HashMap<String, LocalRole>>,
    /// The configured peers' roles, as `peer/role`.
    peers: Arc<Peers>,
}

impl Directory {
    /// A directory of `peers`, and of this node's roles once they are set.
    pub(crate) fn new(peers: Arc<Peers>) -> Self {
        Self {
            local: OnceLock::new(),
            peers,
        }
    }

    /// Sets this node's roles; later calls change nothing.
    pub(crate) fn set_local(&self, roles: HashMap<String, LocalRole>) {
        let _ = self.local.set(roles);
    }

    fn local(&self, name: &str) -> Option<Arc<dyn AgentTransport>> {
        self.local.get()?.get(name).map(|role| role.agent.clone())
    }

    fn describe(&self) -> String {
        let mut lines: Vec<String> = self
            .local
            .get()
            .map(|roles| {
                roles
                    .iter()
                    .map(|(name, role)| format!("- {name}: {}", role.description))
                    .collect()
            })
            .unwrap_or_default();
        lines.sort();
        let remote = self.peers.describe_for_model();
        if !remote.is_empty() {
            lines.push(String::new());
            lines.push("Roles of peer nodes:".to_owned());
            lines.extend(remote.lines().map(|line| format!("- {line}")));
        }
        lines.join("\n")
    }

    /// The agent a `subagent_type` names: a local role, or an agent's URL.
    async fn resolve(&self, target: &str) -> Result<Arc<dyn AgentTransport>, String> {
        if let Some(agent) = self.local(target) {
            return Ok(agent);
        }
        if target.starts_with("http://") || target.starts_with("https://") {
            return RemoteAgent::resolve(target)
                .await
                .map(|agent| Arc::new(agent) as Arc<dyn AgentTransport>)
                .map_err(|e| format!("cannot reach the agent at {target}: {e}"));
        }
        if target.contains('/') {
            return self.peers.resolve(target).await.map_err(|e| e.to_string());
        }
        let known: Vec<&str> = self
            .local
            .get()
            .map(|r| r.keys().map(String::as_str).collect())
            .unwrap_or_default();
        Err(format!(
            "there is no agent {target:?}; the roles of this node are: {}",
            known.join(", ")
        ))
    }
}

/// The `Agent` tool.
pub(crate) struct AgentTool {
    pub(crate) directory: Arc<Directory>,
    /// The deepest a delegation chain may go.
    pub(crate) max_depth: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    prompt: String,
    description: String,
    subagent_type: String,
}

/// What the child ended with, for the parent model.
fn answer_of(task: &Task, target: &str) -> ToolOutput {
    let said = task
        .status
        .message
        .as_ref()
        .map(Message::text)
        .unwrap_or_default();
    let artifacts: String = task
        .artifacts
        .iter()
        .flat_map(|a| a.parts.iter().filter_map(|p| p.as_text()))
        .collect();
    let text = if said.is_empty() { artifacts } else { said };
    match task.status.state {
        TaskState::Completed => ToolOutput::text(text),
        TaskState::InputRequired | TaskState::AuthRequired => ToolOutput::text(format!(
            "{target} (task {}) stopped to ask: {text}",
            task.id
        )),
        state => ToolOutput::error(format!("{target} (task {}) ended {state}: {text}", task.id)),
    }
}

#[async_trait]
impl Tool for AgentTool {
    fn name(&self) -> &str {
        "Agent"
    }

    fn description(&self) -> String {
        format!(
            "Hands a task to another agent and returns its answer. The agent works on its own, \
             with its own tools and an empty conversation: give it everything it needs in the \
             prompt. subagent_type is one of the roles below (`peer/role` for a role of a \
             peer node), or the URL of any A2A agent.\n\n\
             Roles of this node:\n{}",
            self.directory.describe()
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "description": "The task, complete and self-contained."},
                "description": {"type": "string", "description": "A short (3-5 words) description of the task."},
                "subagent_type": {"type": "string", "description": "A role of this node, or an agent's URL."}
            },
            "required": ["prompt", "description", "subagent_type"],
            "additionalProperties": false
        })
    }

    fn category(&self) -> Category {
        Category::Delegate
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput {
        let input: Input = match serde_json::from_value(input) {
            Ok(input) => input,
            Err(e) => return ToolOutput::error(format!("invalid input for Agent: {e}")),
        };
        let depth = ctx.depth + 1;
        if depth > self.max_depth {
            return ToolOutput::error(format!(
                "delegation is limited to {} levels; do this task yourself",
                self.max_depth
            ));
        }
        let agent = match self.directory.resolve(&input.subagent_type).await {
            Ok(agent) => agent,
            Err(e) => return ToolOutput::error(e),
        };
        let mut request = SendMessageRequest::new(Message::user_text(input.prompt));
        let mut link = json!({ "depth": depth, "description": input.description });
        if let Some(parent) = &ctx.task_id {
            link["parentTask"] = json!(parent.as_str());
        }
        request.metadata = Some(serde_json::Map::from_iter([("mew".to_owned(), link)]));
        let call = CallContext::default();
        let mut stream = match agent.send_streaming_message(&call, request).await {
            Ok(stream) => stream,
            Err(e) => {
                return ToolOutput::error(format!("{} refused the task: {e}", input.subagent_type));
            }
        };
        let mut child: Option<Task> = None;
        loop {
            tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(StreamResponse::Task(task))) => child = Some(task),
                    Some(Ok(StreamResponse::Message(message))) => return ToolOutput::text(message.text()),
                    Some(Ok(event)) => {
                        if let Some(task) = child.as_mut() {
                            task.apply(&event);
                        }
                    }
                    Some(Err(e)) => return ToolOutput::error(format!("{} failed: {e}", input.subagent_type)),
                    None => break,
                },
                () = ctx.cancel.cancelled() => {
                    if let Some(task) = &child {
                        let cancel = CancelTaskRequest { id: task.id.clone(), ..CancelTaskRequest::default() };
                        let _ = agent.cancel_task(&call, cancel).await;
                    }
                    return ToolOutput::error("canceled");
                }
            }
        }
        match child {
            Some(task) => answer_of(&task, &input.subagent_type),
            None => ToolOutput::error(format!("{} ended without a task", input.subagent_type)),
        }
    }
}
