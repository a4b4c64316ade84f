//! `ModelExecutor`: runs turns of model-driven roles with the agent loop, streaming its answer into the task.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use mew_cards::{
    Artifact, ArtifactId, Message, Part, PartContent, PermissionMode, Role, TaskState, Timestamp,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::children::Children;
use super::conversation::{Block, ChatMessage, Speaker};
use super::engine::{
    Agent, AgentError, AgentSettings, Observer, Outcome, PendingCall, Resume, Session,
};
use crate::config::AgentConfig;
use crate::permission::PermissionEngine;
use crate::provider::Providers;
use crate::tasks::executor::{EventSink, ExecError, Executor, Turn};
use crate::tools::registry::{ALL_AGENT_DISALLOWED_TOOLS, FilterLayers, ToolRegistry};
use crate::tools::{ToolContext, ToolOutput};

/// What a model role keeps between turns, in the task's private state.
#[derive(Debug, Default, Serialize, Deserialize)]
struct RunnerState {
    /// The conversation and its costs.
    session: Session,
    /// A tool call waiting for approval (the task is INPUT_REQUIRED).
    pending: Option<PendingCall>,
}

/// Runs model-driven roles.
pub(crate) struct ModelExecutor {
    pub(crate) providers: Arc<Providers>,
    pub(crate) tools: ToolRegistry,
    pub(crate) permissions: Arc<PermissionEngine>,
    pub(crate) env: Arc<HashMap<String, String>>,
    pub(crate) project_dir: PathBuf,
    /// The `agent:` configuration: default model, limits, delegation and compaction.
    pub(crate) agent: AgentConfig,
}

/// The `mew.ask` of a status message whose question only the user may answer.
pub(crate) const PERMISSION_ASK: &str = "permission";

/// A task's own usage as its metadata shows it (`metadata.mew.usage`); `mew tasks tree`
/// adds the children's to it.
fn usage_json(session: &Session) -> Value {
    json!({
        "inputTokens": session.usage.input,
        "outputTokens": session.usage.output,
        "cacheReadTokens": session.usage.cache_read,
        "cacheWriteTokens": session.usage.cache_write,
        "modelCalls": session.model_calls,
        "toolCalls": session.tool_calls,
    })
}

impl ModelExecutor {
    fn system_prompt(turn: &Turn) -> String {
        let role = &turn.role;
        let mut system = format!(
            "You are {}, an agent of a Mew node. {}\n",
            role.name, role.description
        );
        if !role.system_prompt.trim().is_empty() {
            system.push('\n');
            system.push_str(role.system_prompt.trim());
            system.push('\n');
        }
        system
    }

    fn environment(&self) -> String {
        let now = Timestamp::now().to_string();
        format!(
            "<env>\nWorking directory: {}\nPlatform: {}\nDate: {}\n</env>",
            self.project_dir.display(),
            std::env::consts::OS,
            now.get(..10).unwrap_or(&now)
        )
    }
}

/// Whether a reply to a permission question approves the call.
fn approves(message: &Message) -> bool {
    let data = message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(value) => value.get("approved").and_then(Value::as_bool),
        _ => None,
    });
    data.unwrap_or_else(|| {
        let text = message
            .text()
            .trim()
            .trim_end_matches(['.', '!'])
            .to_ascii_lowercase();
        matches!(
            text.as_str(),
            "y" | "yes" | "ok" | "allow" | "approve" | "approved"
        )
    })
}

/// The blocks a model sees for an A2A message: text, data as JSON, files by reference.
fn blocks_of(message: &Message) -> Vec<Block> {
    message
        .parts
        .iter()
        .map(|part| match &part.content {
            PartContent::Text(text) => Block::Text { text: text.clone() },
            PartContent::Data(value) => Block::Text {
                text: value.to_string(),
            },
            PartContent::Url(url) => Block::Text {
                text: format!("[file {} at {url}]", part.filename),
            },
            PartContent::Raw(bytes) if part.media_type.starts_with("image/") => {
                use base64::Engine as _;
                Block::Image {
                    media_type: part.media_type.clone(),
                    data: base64::engine::general_purpose::STANDARD.encode(bytes),
                }
            }
            PartContent::Raw(bytes) => Block::Text {
                text: format!(
                    "[file {} ({}, {} bytes) not shown]",
                    part.filename,
                    part.media_type,
                    bytes.len()
                ),
            },
        })
        .collect()
}

/// The conversation before this task, from the A2A history: user and agent
/// messages as text, consecutive ones of one side merged, starting with the user.
fn conversation_of(history: &[Message]) -> Vec<ChatMessage> {
    let mut messages: Vec<ChatMessage> = Vec::new();
    for message in history {
        let speaker = if message.role == Role::Agent {
            Speaker::Assistant
        } else {
            Speaker::User
        };
        let content = blocks_of(message);
        if content.is_empty() || (messages.is_empty() && speaker == Speaker::Assistant) {
            continue;
        }
        match messages.last_mut() {
            Some(last) if last.speaker == speaker => last.content.extend(content),
            _ => messages.push(ChatMessage { speaker, content }),
        }
    }
    messages
}

/// What the loop reports, queued for the task.
enum Report {
    Text(String),
    Tool {
        phase: &'static str,
        id: String,
        name: String,
        detail: Value,
    },
}

/// Forwards the loop's reports to the task: text as chunks of one `response`
/// artifact, tool calls as progress notes.
struct Reporter {
    queue: mpsc::UnboundedSender<Report>,
}

impl Observer for Reporter {
    fn text(&self, delta: &str) {
        let _ = self.queue.send(Report::Text(delta.to_owned()));
    }

    fn tool_started(&self, id: &str, name: &str, input: &Value) {
        let detail = json!({ "input": input });
        let _ = self.queue.send(Report::Tool {
            phase: "started",
            id: id.to_owned(),
            name: name.to_owned(),
            detail,
        });
    }

    fn tool_finished(&self, id: &str, name: &str, output: &ToolOutput) {
        let detail = json!({ "isError": output.is_error });
        let _ = self.queue.send(Report::Tool {
            phase: "finished",
            id: id.to_owned(),
            name: name.to_owned(),
            detail,
        });
    }
}

/// Drains reports into the sink, merging text that arrived together.
async fn forward(mut queue: mpsc::UnboundedReceiver<Report>, sink: Arc<dyn EventSink>) {
    let artifact_id = ArtifactId::generate();
    let mut started = false;
    while let Some(report) = queue.recv().await {
        let mut text = String::new();
        let mut notes = Vec::new();
        let mut next = Some(report);
        while let Some(report) = next {
            match report {
                Report::Text(delta) => text.push_str(&delta),
                Report::Tool { phase, id, name, detail } => {
                    notes.push(json!({ "mew": { "tool": { "phase": phase, "id": id, "name": name, "detail": detail } } }))
                }
            }
            next = queue.try_recv().ok();
        }
        if !text.is_empty() {
            let artifact = Artifact {
                artifact_id: artifact_id.clone(),
                name: "response".to_owned(),
                parts: vec![Part::text(text)],
                ..Artifact::default()
            };
            if sink.artifact(artifact, started, false).await.is_err() {
                return;
            }
            started = true;
        }
        for note in notes {
            if sink.progress(note).await.is_err() {
                return;
            }
        }
    }
}

#[async_trait]
impl Executor for ModelExecutor {
    async fn run(&self, turn: Turn, sink: Arc<dyn EventSink>) -> Result<(), ExecError> {
        let provider = self.providers.default().ok_or_else(|| {
            ExecError(format!(
                "role {:?} is driven by a model, and this node has no model provider configured: \
                 set ANTHROPIC_API_KEY or OPENAI_API_KEY, or add a `providers:` section to .mew/config.yaml",
                turn.role.name
            ))
        })?;
        let model = self
            .providers
            .resolve_model(&turn.role.model, &self.agent.model);
        let role = &turn.role;
        let tools = self.tools.filter(&FilterLayers {
            // Delegation chains end at the configured depth: deeper tasks get no Agent tool.
            withhold: if turn.depth < self.agent.max_depth {
                Vec::new()
            } else {
                ALL_AGENT_DISALLOWED_TOOLS
                    .iter()
                    .map(|t| (*t).to_owned())
                    .collect()
            },
            background: role.background,
            disallowed: role.disallowed_tools.clone(),
            allowed: role.tools.clone(),
        });
        let agent = Agent {
            provider,
            tools,
            permissions: self.permissions.clone(),
            settings: AgentSettings {
                system: Self::system_prompt(&turn),
                model,
                max_turns: role.effective_max_turns(),
                max_tokens: self.agent.max_tokens,
                context_window: self.agent.context_window,
                compact_at: self.agent.compact_at,
                // Children are held to a shorter leash than the main agent.
                unknown_tool_limit: if turn.depth == 0 { 3 } else { 2 },
                // A role's own mode wins; `default` defers to the configured mode.
                mode: match role.permission_mode {
                    PermissionMode::Default => self.permissions.default_mode(),
                    mode => mode,
                },
            },
            context: ToolContext {
                cwd: self.project_dir.clone(),
                env: self.env.clone(),
                cancel: turn.cancel.clone(),
                task_id: Some(turn.task_id.clone()),
                depth: turn.depth,
                children: Some(Arc::new(Children::new(
                    sink.clone(),
                    role.name.clone(),
                    self.agent.max_children,
                    self.agent.background_after,
                ))),
            },
        };

        let mut state: RunnerState =
            serde_json::from_value(turn.private.clone()).unwrap_or_default();
        let resume = match state.pending.take() {
            Some(pending) if turn.resumed => {
                let approved = approves(&turn.message);
                Resume::Approval {
                    pending,
                    approved,
                    reason: turn.message.text(),
                }
            }
            _ => {
                if state.session.messages.is_empty() {
                    state.session.messages = conversation_of(&turn.history);
                }
                // A fork's conversation may end with the user's turn: extend it.
                match state.session.messages.last_mut() {
                    Some(last) if last.speaker == Speaker::User => {
                        last.content.extend(blocks_of(&turn.message));
                    }
                    _ => state.session.messages.push(ChatMessage {
                        speaker: Speaker::User,
                        content: blocks_of(&turn.message),
                    }),
                }
                Resume::Fresh
            }
        };

        let (queue, reports) = mpsc::unbounded_channel();
        let forwarder = tokio::spawn(forward(reports, sink.clone()));
        let outcome = agent
            .run(
                &mut state.session,
                resume,
                &self.environment(),
                &Reporter { queue },
            )
            .await;
        // The reporter is gone: the forwarder drains what is left and ends.
        let _ = forwarder.await;

        let closed = |_| ExecError("the task ended while its answer was being recorded".to_owned());
        let _ = sink
            .annotate("usage", usage_json(&state.session), false)
            .await;
        match outcome {
            Ok(Outcome::Answered(text)) => {
                sink.save_private(serde_json::to_value(&state).unwrap_or(Value::Null))
                    .await
                    .map_err(closed)?;
                let answer = if text.is_empty() {
                    "(no answer)".to_owned()
                } else {
                    text
                };
                sink.status(TaskState::Completed, Some(Message::agent_text(answer)))
                    .await
                    .map_err(closed)
            }
            Ok(Outcome::NeedsApproval(pending)) => {
                // A delegated task's question already says how to answer it.
                let question = if pending.relay.is_some() {
                    pending.question.clone()
                } else {
                    format!(
                        "{}\nReply \"yes\" to allow it; anything else refuses it.",
                        pending.question
                    )
                };
                state.pending = Some(pending);
                sink.save_private(serde_json::to_value(&state).unwrap_or(Value::Null))
                    .await
                    .map_err(closed)?;
                let mut ask = Message::agent_text(question);
                // Marks a question only the user may answer: a delegating agent relays
                // it to its own user instead of answering it.
                ask.metadata = Some(serde_json::Map::from_iter([(
                    "mew".to_owned(),
                    json!({ "ask": PERMISSION_ASK }),
                )]));
                sink.status(TaskState::InputRequired, Some(ask))
                    .await
                    .map_err(closed)
            }
            Err(AgentError::Canceled) => Err(ExecError("canceled".to_owned())),
            Err(error) => {
                super::engine::close_dangling_calls(&mut state.session);
                let _ = sink
                    .save_private(serde_json::to_value(&state).unwrap_or(Value::Null))
                    .await;
                Err(ExecError(error.to_string()))
            }
        }
    }
}
