//! `ModelExecutor`: runs turns of model-driven roles with the agent loop, streaming its answer into the task.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use mew_cards::mew;
use mew_cards::{ArtifactId, Message, PartContent, PermissionMode, Role, TaskState, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::children::Children;
use super::delegate::Directory;
use super::model_loop::{Agent, Observer, Outcome, PendingCall, Resume};
use super::session::{AgentError, AgentSettings, Session};
use super::skill_tools::{SkillFork, SkillState, run_skill};
use crate::config::AgentConfig;
use crate::conversation::{Block, ChatMessage, Speaker};
use crate::permission::PermissionPolicy;
use crate::provider::Providers;
use crate::skills::catalog::SkillCatalog;
use crate::skills::render::{ActiveSkills, parse_slash, render_disclosure};
use crate::tasks::executor::{Annotation, EventSink, ExecError, Executor, Turn};
use crate::tools::registry::{ALL_AGENT_DISALLOWED_TOOLS, FilterLayers, ToolRegistry};
use crate::tools::{ToolContext, ToolOutput};

/// What a model role keeps between turns, in the task's private state.
#[derive(Debug, Default, Serialize, Deserialize)]
struct RunnerState {
    /// The conversation and its costs.
    session: Session,
    /// A tool call waiting for approval (the task is INPUT_REQUIRED).
    pending: Option<PendingCall>,
    /// The skills active in this task (carried on to later tasks of the context).
    #[serde(default)]
    active_skills: ActiveSkills,
    /// Set when this task runs a fork skill: its tool filter and model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    skill_fork: Option<SkillFork>,
    /// The message (its id) of the turn whose progress `session` holds, when it was saved by
    /// a checkpoint: a turn started over after its node was lost continues from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checkpoint_of: Option<String>,
}

/// [`RunnerState`] as a checkpoint writes it, borrowing the session (the fields and their
/// names are `RunnerState`'s; a test reads one back as the other).
#[derive(Serialize)]
struct CheckpointState<'a> {
    session: &'a Session,
    pending: Option<&'a PendingCall>,
    active_skills: ActiveSkills,
    #[serde(skip_serializing_if = "Option::is_none")]
    skill_fork: Option<&'a SkillFork>,
    checkpoint_of: &'a str,
}

/// Saves a run's checkpoints into its task.
struct Checkpoints {
    sink: Arc<dyn EventSink>,
    skills: Option<Arc<SkillState>>,
    skill_fork: Option<SkillFork>,
    /// The id of the message the turn answers.
    turn: String,
}

impl Checkpoints {
    async fn save(&self, session: &Session) {
        let state = CheckpointState {
            session,
            pending: None,
            active_skills: self
                .skills
                .as_ref()
                .map(|skills| skills.active())
                .unwrap_or_default(),
            skill_fork: self.skill_fork.as_ref(),
            checkpoint_of: &self.turn,
        };
        match serde_json::to_value(&state) {
            // A closed sink means the task is over: the loop learns it from its token.
            Ok(value) => drop(self.sink.checkpoint(value).await),
            Err(e) => tracing::warn!(error = %e, "cannot encode a checkpoint"),
        }
    }
}

/// The active skills a new task of a context starts with: those of the newest earlier task.
fn inherited_skills(earlier_private: &Value) -> ActiveSkills {
    earlier_private
        .get("active_skills")
        .cloned()
        .and_then(|value| serde_json::from_value(value).ok())
        .unwrap_or_default()
}

/// Runs model-driven roles.
pub(crate) struct ModelExecutor {
    pub(crate) providers: Arc<Providers>,
    pub(crate) tools: ToolRegistry,
    /// The MCP servers, whose current tools join the built-in ones at every turn.
    pub(crate) mcp: Option<Arc<crate::mcp::McpManager>>,
    pub(crate) permissions: Arc<PermissionPolicy>,
    pub(crate) env: Arc<HashMap<String, String>>,
    pub(crate) project_dir: PathBuf,
    /// The `agent:` configuration: default model, limits, delegation and compaction.
    pub(crate) agent: AgentConfig,
    /// The skills roles may activate (`None`: skills are off).
    pub(crate) skills: Option<Arc<SkillCatalog>>,
    /// Runs skills and delegations: the node's roles and peers.
    pub(crate) directory: Option<Arc<Directory>>,
    /// The node's hooks (`None`: hooks are off).
    pub(crate) hooks: Option<Arc<crate::hooks::HookDispatcher>>,
    /// The children of tasks that asked for input while background children still ran:
    /// the task's next turn takes them back, with the notices they left meanwhile.
    pub(crate) waiting: WaitingChildren,
}

/// The children of tasks waiting for input, by task; at most [`MAX_WAITING`] tasks.
#[derive(Debug, Default)]
pub(crate) struct WaitingChildren(std::sync::Mutex<HashMap<mew_cards::TaskId, Arc<Children>>>);

/// The most tasks whose waiting children are kept (a task left waiting forever keeps its
/// entry until it is answered; beyond this the oldest entries are not known, any is dropped).
const MAX_WAITING: usize = 1024;

impl WaitingChildren {
    fn take(&self, task: &mew_cards::TaskId) -> Option<Arc<Children>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(task)
    }

    fn keep(&self, task: mew_cards::TaskId, children: Arc<Children>) {
        let mut waiting = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if waiting.len() >= MAX_WAITING
            && let Some(any) = waiting.keys().next().cloned()
        {
            waiting.remove(&any);
        }
        waiting.insert(task, children);
    }
}

/// A task's own usage as its metadata shows it (`metadata.mew.usage`); `mew tasks tree`
/// adds the children's to it.
fn task_usage(session: &Session) -> mew::Usage {
    mew::Usage {
        input_tokens: session.usage.input,
        output_tokens: session.usage.output,
        cache_read_tokens: session.usage.cache_read,
        cache_write_tokens: session.usage.cache_write,
        model_calls: session.model_calls,
        tool_calls: session.tool_calls,
        // Calls whose service reported no usage: the token counts leave them out.
        unreported_model_calls: session.unreported_calls,
    }
}

impl ModelExecutor {
    fn system_prompt(&self, turn: &Turn) -> String {
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
        // Names and descriptions only, in a stable order: the bodies come with LoadSkill. The
        // skills of MCP servers are listed with the local ones, unread.
        let disclosure = self.skills.as_ref().and_then(|catalog| {
            let listed = SkillState::new(
                catalog.clone(),
                ActiveSkills::default(),
                self.mcp.clone().map(|mcp| (mcp, turn.owner.clone())),
            )
            .mcp_skills();
            let snapshot = catalog.snapshot();
            render_disclosure(snapshot.skills().map(Arc::as_ref).chain(listed.iter()))
        });
        if let Some(disclosure) = disclosure {
            system.push('\n');
            system.push_str(disclosure.trim());
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

/// A reply as the question's asker reads it: its text, or, when it has none, its first data
/// part as JSON (a form filled in).
fn reply_text(message: &Message) -> String {
    let text = message.text();
    if !text.trim().is_empty() {
        return text;
    }
    message
        .parts
        .iter()
        .find_map(|p| match &p.content {
            PartContent::Data(value) => Some(value.to_string()),
            _ => None,
        })
        .unwrap_or(text)
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
    Warning(String),
    Hook(mew::HookNote),
    /// The task's plan, as `TodoWrite` just wrote it.
    Todos(Vec<mew::TodoItem>),
    Tool {
        phase: &'static str,
        id: String,
        name: String,
        detail: Value,
    },
}

/// Forwards the loop's reports to the task: text as chunks of one `response`
/// artifact, tool calls and plans as progress notes.
struct Reporter {
    queue: mpsc::UnboundedSender<Report>,
    checkpoints: Checkpoints,
}

impl Observer for Reporter {
    fn text(&self, delta: &str) {
        let _ = self.queue.send(Report::Text(delta.to_owned()));
    }

    fn warning(&self, text: &str) {
        let _ = self.queue.send(Report::Warning(text.to_owned()));
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
        let detail = json!({
            "isError": output.is_error,
            "output": crate::tools::cut_chars(&output.text_content(), NOTE_OUTPUT_CHARS),
        });
        let _ = self.queue.send(Report::Tool {
            phase: "finished",
            id: id.to_owned(),
            name: name.to_owned(),
            detail,
        });
    }

    fn checkpoint<'a>(&'a self, session: &'a Session) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(self.checkpoints.save(session))
    }
}

/// The most characters of a tool's result a progress note carries.
const NOTE_OUTPUT_CHARS: usize = 2000;

/// The last piece of a run's answer text, held back for the write that ends the turn.
struct LastPiece {
    artifact_id: ArtifactId,
    text: String,
    /// Whether earlier pieces were sent (this one is appended to them).
    started: bool,
}

impl LastPiece {
    /// Sends it on its own, saying it is the last.
    async fn send(self, sink: &dyn EventSink) {
        let _ = sink
            .text(
                self.artifact_id,
                "response",
                self.text,
                (self.started, true),
            )
            .await;
    }
}

/// Drains reports into the sink, merging text that arrived together. The text goes out as
/// chunks of one `response` artifact, each sent when the next report arrives; the last one
/// (an empty one when the run ended with notes after its text) is returned for the runner to
/// send, saying `lastChunk`, with the status that ends the turn. `None` when there was no
/// text, or the sink closed.
async fn forward(
    mut queue: mpsc::UnboundedReceiver<Report>,
    sink: Arc<dyn EventSink>,
) -> Option<LastPiece> {
    let artifact_id = ArtifactId::generate();
    let mut started = false;
    let mut held: Option<String> = None;
    let send = |text: String, started: bool, last: bool| {
        let (sink, artifact_id) = (sink.clone(), artifact_id.clone());
        async move {
            sink.text(artifact_id, "response", text, (started, last))
                .await
                .is_ok()
        }
    };
    while let Some(report) = queue.recv().await {
        let mut text = String::new();
        let mut notes = Vec::new();
        let mut next = Some(report);
        while let Some(report) = next {
            match report {
                Report::Text(delta) => text.push_str(&delta),
                Report::Warning(warning) => notes.push(mew::MewMetadata {
                    warning: Some(warning),
                    ..mew::MewMetadata::default()
                }),
                Report::Hook(hook) => notes.push(mew::MewMetadata {
                    hook: Some(hook),
                    ..mew::MewMetadata::default()
                }),
                Report::Todos(todos) => {
                    // The task keeps the newest plan; the note shows the change. Both are
                    // written with the note.
                    if sink
                        .annotate(Annotation::Todos(todos.clone()))
                        .await
                        .is_err()
                    {
                        return None;
                    }
                    notes.push(mew::MewMetadata {
                        todos: Some(todos),
                        ..mew::MewMetadata::default()
                    });
                }
                Report::Tool {
                    phase,
                    id,
                    name,
                    detail,
                } => notes.push(mew::MewMetadata {
                    tool: Some(mew::ToolNote {
                        phase: phase.to_owned(),
                        id,
                        name,
                        detail,
                    }),
                    ..mew::MewMetadata::default()
                }),
            }
            next = queue.try_recv().ok();
        }
        // Text held back goes out before what came after it; the newest is held in turn.
        if let Some(previous) = held.take() {
            if !send(previous, started, false).await {
                return None;
            }
            started = true;
        }
        if !text.is_empty() {
            held = Some(text);
        }
        if !notes.is_empty()
            && let Some(previous) = held.take()
        {
            if !send(previous, started, false).await {
                return None;
            }
            started = true;
        }
        for note in notes {
            if sink.progress(note).await.is_err() {
                return None;
            }
        }
    }
    // The run is over: its last chunk says so.
    match held {
        Some(text) => Some(LastPiece {
            artifact_id,
            text,
            started,
        }),
        None if started => Some(LastPiece {
            artifact_id,
            text: String::new(),
            started: true,
        }),
        None => None,
    }
}

/// The most model calls the MCP servers of one turn may ask for (sampling).
const MAX_SAMPLES_PER_TURN: u64 = 10;

/// The model calls a turn's MCP servers asked for, to count into the task's usage.
#[derive(Default)]
struct Sampled {
    calls: u64,
    unreported: u64,
    usage: crate::conversation::Usage,
}

/// Answers a turn's MCP sampling requests with its provider: the first of the server's model
/// hints that the provider's alias table knows, else the turn's `model`; at most `max_tokens`
/// (the role's limit) and [`MAX_SAMPLES_PER_TURN`] calls; no tools.
fn sampler(
    provider: Arc<dyn crate::provider::Provider>,
    model: String,
    max_tokens: u32,
    sampled: Arc<std::sync::Mutex<Sampled>>,
) -> crate::tools::Sampler {
    Arc::new(move |request: crate::tools::SampleRequest| {
        let (provider, sampled) = (provider.clone(), sampled.clone());
        let model = request
            .model_hints
            .iter()
            .map(|hint| (hint, provider.resolve_model(hint)))
            .find(|(hint, id)| *hint != id)
            .map_or_else(|| model.clone(), |(_, id)| id);
        Box::pin(async move {
            {
                let mut sampled = sampled
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if sampled.calls >= MAX_SAMPLES_PER_TURN {
                    return Err(format!(
                        "the task's MCP servers already asked its model {MAX_SAMPLES_PER_TURN} \
                         times in this turn, the most one turn allows"
                    ));
                }
                sampled.calls += 1;
            }
            let request = crate::conversation::ModelRequest {
                model,
                system: request.system.unwrap_or_default(),
                messages: request.messages,
                tools: Vec::new(),
                max_tokens: request.max_tokens.clamp(1, max_tokens.max(1)),
            };
            let response = crate::provider::complete(provider.as_ref(), &request, &|_| {})
                .await
                .map_err(|error| format!("the task's model failed: {error}"))?;
            {
                let mut sampled = sampled
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match response.usage {
                    Some(usage) => sampled.usage += usage,
                    None => sampled.unreported += 1,
                }
            }
            let text = ChatMessage {
                speaker: Speaker::Assistant,
                content: response.content,
            }
            .text();
            Ok(crate::tools::SampleAnswer {
                text,
                model: response.model.unwrap_or(request.model),
                hit_max_tokens: response.stop == crate::conversation::StopReason::MaxTokens,
            })
        })
    })
}

/// A role's tools: the node's built-in tools and the MCP servers' current ones (as the task's
/// principal sees them), filtered by
/// `layers` and then by a fork skill's `fork_allowed` (when it names any); `LoadSkill` stays
/// whatever the filters say when the node has skills.
fn role_tools(
    builtin: &ToolRegistry,
    mcp: Option<(&crate::mcp::McpManager, Option<&str>)>,
    layers: &FilterLayers,
    fork_allowed: &[String],
    with_skills: bool,
) -> ToolRegistry {
    let mut all_tools = builtin.clone();
    if let Some((mcp, principal)) = mcp {
        for tool in mcp.tools_for(principal) {
            all_tools.register(tool);
        }
    }
    let mut tools = all_tools.filter(layers);
    if !fork_allowed.is_empty() {
        tools = tools.filter(&FilterLayers {
            allowed: fork_allowed.to_vec(),
            ..FilterLayers::default()
        });
    }
    // LoadSkill is exempt from every allowlist: no filter may lock skills out.
    if let Some(load) = all_tools.get("LoadSkill")
        && with_skills
    {
        tools.register(load.clone());
    }
    tools
}

#[async_trait]
impl Executor for ModelExecutor {
    /// A model role continues from its last checkpoint.
    fn resumable(&self, _role: &mew_cards::RoleDefinition) -> bool {
        true
    }

    async fn run(&self, turn: Turn, sink: Arc<dyn EventSink>) -> Result<(), ExecError> {
        let provider = self.providers.default().ok_or_else(|| {
            ExecError(format!(
                "role {:?} is driven by a model, and this node has no model provider configured: \
                 set ANTHROPIC_API_KEY or OPENAI_API_KEY, or add a `providers:` section to .mew/config.yaml",
                turn.role.name
            ))
        })?;
        let mut state: RunnerState =
            serde_json::from_value(turn.private.clone()).unwrap_or_default();
        if turn.private.is_null() {
            state.active_skills = inherited_skills(&turn.earlier_private);
        }
        let fork = state.skill_fork.clone();
        let role_model = fork
            .as_ref()
            .and_then(|f| f.model.as_deref())
            .map(mew_cards::ModelChoice::named)
            .unwrap_or_else(|| turn.role.model.clone());
        let model = self.providers.resolve_model(&role_model, &self.agent.model);
        let role = &turn.role;
        let layers = FilterLayers {
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
            read_only: crate::tools::registry::is_read_only(
                role.permission_mode,
                &role.disallowed_tools,
            ),
        };
        // A fork skill's allowed-tools is a hard filter.
        let fork_allowed = fork
            .as_ref()
            .map(|f| f.allowed_tools.clone())
            .unwrap_or_default();
        let build_tools = {
            let builtin = self.tools.clone();
            let mcp = self.mcp.clone();
            let owner = turn.owner.clone();
            let with_skills = self.skills.is_some();
            move || {
                role_tools(
                    &builtin,
                    mcp.as_deref().map(|mcp| (mcp, owner.as_deref())),
                    &layers,
                    &fork_allowed,
                    with_skills,
                )
            }
        };
        // Subscribed before the first build: a change after it is seen at the next model call.
        let tool_changes = self.mcp.as_ref().map(|mcp| mcp.subscribe());
        let tools = build_tools();
        let skills = self.skills.as_ref().map(|catalog| {
            Arc::new(SkillState::new(
                catalog.clone(),
                state.active_skills.clone(),
                self.mcp.clone().map(|mcp| (mcp, turn.owner.clone())),
            ))
        });
        // The children of a task resumed after a question are those of its turn that asked.
        let children = match self.waiting.take(&turn.task_id) {
            Some(children) => {
                children.resume(sink.clone());
                children
            }
            None => Arc::new(Children::new(
                sink.clone(),
                (role.name.clone(), turn.owner.clone()),
                self.agent.max_children,
                self.agent.background_after,
            )),
        };
        // A role's own mode wins; `default` defers to the configured mode.
        let mode = match role.permission_mode {
            PermissionMode::Default => self.permissions.default_mode(),
            mode => mode,
        };
        // The loop's reports, and those of its hooks (through a weak handle: the forwarder
        // ends when the loop's reporter is gone, whatever holds the hooks).
        let (queue, reports) = mpsc::unbounded_channel();
        let hook_reports = queue.downgrade();
        let plan_reports = queue.downgrade();
        let news_reports = queue.downgrade();
        let report_hook: crate::hooks::ReportHookRun = Arc::new(move |run| {
            if let Some(queue) = hook_reports.upgrade() {
                let _ = queue.send(Report::Hook(mew::HookNote {
                    event: run.event.to_owned(),
                    name: run.hook.clone(),
                    outcome: run.outcome.to_owned(),
                    reason: run.reason.clone(),
                }));
            }
        });
        // What the task's MCP servers ask its model (sampling), counted into the task's usage
        // when the run returns.
        let sampled = Arc::new(std::sync::Mutex::new(Sampled::default()));
        let sampler = sampler(
            provider.clone(),
            model.clone(),
            self.agent.max_tokens,
            sampled.clone(),
        );
        let mut agent = Agent {
            provider,
            tools,
            tool_source: tool_changes.map(|changes| super::model_loop::ToolSource {
                changes,
                build: Box::new(build_tools),
            }),
            permissions: self.permissions.clone(),
            settings: AgentSettings {
                system: self.system_prompt(&turn),
                model,
                max_turns: role.effective_max_turns(),
                max_tokens: self.agent.max_tokens,
                context_window: self.agent.context_window,
                compact_at: self.agent.compact_at,
                // Children are held to a shorter leash than the main agent.
                unknown_tool_limit: if turn.depth == 0 { 3 } else { 2 },
                mode,
            },
            context: ToolContext {
                cwd: self.project_dir.clone(),
                env: self.env.clone(),
                cancel: turn.cancel.clone(),
                task_id: Some(turn.task_id.clone()),
                depth: turn.depth,
                scope: super::scope::RunScope {
                    children: Some(children.clone()),
                    skills: skills.clone(),
                    plan: Some(super::todo_tool::PlanReport(Arc::new(move |todos| {
                        if let Some(queue) = plan_reports.upgrade() {
                            let _ = queue.send(Report::Todos(todos));
                        }
                    }))),
                    hooks: self.hooks.as_ref().and_then(|dispatcher| {
                        let ctx = crate::hooks::HookContext::new(
                            turn.context_id.as_str(),
                            self.project_dir.clone(),
                        )
                        .ok()?
                        .with_mode(mode.as_str())
                        .with_cancel(turn.cancel.clone());
                        Some(Arc::new(crate::hooks::RunHooks {
                            dispatcher: dispatcher.clone(),
                            ctx,
                            report: Some(report_hook.clone()),
                        }))
                    }),
                }
                .into_context(),
                call_id: None,
                sampler: Some(sampler),
                // A role may decline MCP servers' questions instead of asking its caller.
                can_ask_user: !role.declines_questions,
                principal: turn.owner.clone(),
                news: Some(Arc::new(move |news: crate::tools::ToolNews| {
                    if let Some(queue) = news_reports.upgrade() {
                        let _ = queue.send(Report::Tool {
                            phase: news.phase,
                            id: news.call_id.unwrap_or_default(),
                            name: news.tool,
                            detail: news.detail,
                        });
                    }
                })),
            },
        };

        // `/name args` naming a skill: an inline skill is activated and its instructions are
        // the message; a fork skill runs and its answer is the task's.
        let mut message_blocks = blocks_of(&turn.message);
        let hooks = super::scope::hooks(&agent.context).cloned();
        let approval = turn.resumed && state.pending.is_some();
        // A turn started over after its node was lost, with a checkpoint of its own: the run
        // continues from it, and what ran before the checkpoint (hooks, a skill) does not
        // run again.
        let recovering = turn.recovered
            && state.pending.is_none()
            && !state.session.messages.is_empty()
            && state.checkpoint_of.as_deref() == Some(turn.message.message_id.as_str());
        // Context the SessionStart and UserPromptSubmit hooks add to the user's message.
        let mut hook_context = Vec::new();
        if let Some(hooks) = hooks.as_ref().filter(|_| !approval && !recovering) {
            if !turn.resumed && turn.history.is_empty() && state.session.messages.is_empty() {
                let outcome = hooks
                    .dispatch(crate::hooks::Payload::session_start("startup"))
                    .await;
                hook_context.extend(outcome.additional_context);
            }
            let outcome = hooks
                .dispatch(crate::hooks::Payload::user_prompt_submit(
                    &turn.message.text(),
                ))
                .await;
            let refused = match (outcome.refusal(), &outcome.stop) {
                (Some((hook, reason)), _) => Some(format!("blocked by hook {hook}: {reason}")),
                (None, Some(reason)) => Some(format!("stopped by a hook: {reason}")),
                (None, None) => None,
            };
            if let Some(error) = refused {
                // The task fails without a model call.
                let _ = hooks
                    .dispatch(crate::hooks::Payload::task_completed(
                        turn.task_id.as_str(),
                        &turn.role.name,
                        TaskState::Failed.as_str(),
                    ))
                    .await;
                return Err(ExecError(error));
            }
            hook_context.extend(outcome.additional_context);
        }
        if !turn.resumed
            && !recovering
            && state.pending.is_none()
            && let (Some(directory), Some(skill_state)) = (&self.directory, &skills)
            && let Some((name, args)) = parse_slash(&turn.message.text())
            && let Some(skill) = skill_state.get(&name)
        {
            if state.session.messages.is_empty() {
                state.session.messages = conversation_of(&turn.history);
            }
            if let Some(children) = super::scope::children(&agent.context) {
                children.set_fork_source(state.session.messages.clone());
            }
            let output = run_skill(directory, &agent.context, &name, &args).await;
            if output.is_error {
                return Err(ExecError(output.text_content()));
            }
            if skill.meta.mode == crate::skills::parse::SkillMode::Fork {
                state.active_skills = skill_state.active();
                let _ = sink
                    .save_private(serde_json::to_value(&state).unwrap_or(Value::Null))
                    .await;
                return sink
                    .status(
                        TaskState::Completed,
                        Some(Message::agent_text(output.text_content())),
                    )
                    .await
                    .map_err(|_| {
                        ExecError("the task ended while its answer was being recorded".to_owned())
                    });
            }
            let body = skill_state
                .active()
                .entries()
                .iter()
                .find(|e| e.name.eq_ignore_ascii_case(skill.name()))
                .map(|e| e.body.clone())
                .unwrap_or_default();
            message_blocks = vec![Block::Text {
                text: format!("/{} {args}\n\n{body}", skill.name())
                    .trim()
                    .to_owned(),
            }];
        }
        let checkpoints = Checkpoints {
            sink: sink.clone(),
            skills: skills.clone(),
            skill_fork: state.skill_fork.clone(),
            turn: turn.message.message_id.as_str().to_owned(),
        };
        if recovering && let Some(directory) = &self.directory {
            super::delegate::follow_background_again(directory, &agent.context, &state.session)
                .await;
        }
        let resume = match state.pending.take() {
            _ if recovering => Resume::Recovered,
            Some(pending) if turn.resumed => {
                let approved = approves(&turn.message);
                // The answer is taken: a turn started over from here does not run the call
                // again unless it is read-only.
                checkpoints.save(&state.session).await;
                Resume::Approval {
                    pending: Box::new(pending),
                    approved,
                    reason: reply_text(&turn.message),
                }
            }
            _ => {
                if state.session.messages.is_empty() {
                    state.session.messages = conversation_of(&turn.history);
                }
                message_blocks.extend(
                    hook_context
                        .into_iter()
                        .filter(|text| !text.trim().is_empty())
                        .map(|text| Block::Text { text }),
                );
                // A fork's conversation may end with the user's turn: extend it.
                match state.session.messages.last_mut() {
                    Some(last) if last.speaker == Speaker::User => {
                        last.content.extend(message_blocks);
                    }
                    _ => state.session.messages.push(ChatMessage {
                        speaker: Speaker::User,
                        content: message_blocks,
                    }),
                }
                Resume::Fresh
            }
        };

        let forwarder = tokio::spawn(forward(reports, sink.clone()));
        let outcome = agent
            .run(
                &mut state.session,
                resume,
                &self.environment(),
                &Reporter { queue, checkpoints },
            )
            .await;
        {
            let sampled = std::mem::take(
                &mut *sampled
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            state.session.usage += sampled.usage;
            state.session.model_calls += sampled.calls;
            state.session.unreported_calls += sampled.unreported;
        }
        // The reporter is gone: the forwarder drains what is left and ends.
        let mut last = forwarder.await.ok().flatten();
        if !matches!(outcome, Ok(Outcome::Answered(_)))
            && let Some(piece) = last.take()
        {
            piece.send(sink.as_ref()).await;
        }

        if let Some(skills) = &skills {
            state.active_skills = skills.active();
        }
        let closed = |_| ExecError("the task ended while its answer was being recorded".to_owned());
        let _ = sink
            .annotate(Annotation::Usage(task_usage(&state.session)))
            .await;
        let final_state = match &outcome {
            Ok(Outcome::Answered(_)) => Some(TaskState::Completed),
            Ok(Outcome::NeedsApproval(_)) => None,
            Err(AgentError::Canceled) => Some(TaskState::Canceled),
            Err(_) => Some(TaskState::Failed),
        };
        let result = match outcome {
            Ok(Outcome::Answered(text)) => {
                sink.save_private(serde_json::to_value(&state).unwrap_or(Value::Null))
                    .await
                    .map_err(closed)?;
                let answer = if text.is_empty() {
                    "(no answer)".to_owned()
                } else {
                    text
                };
                let answer = Some(Message::agent_text(answer));
                // The answer's last piece and the status are stored in one write.
                match last.take() {
                    Some(piece) => sink.text_then_status(
                        (piece.artifact_id, "response"),
                        (piece.text, piece.started),
                        TaskState::Completed,
                        answer,
                    ),
                    None => sink.status(TaskState::Completed, answer),
                }
                .await
                .map_err(closed)
            }
            Ok(Outcome::NeedsApproval(pending)) => {
                if children.outstanding() {
                    self.waiting.keep(turn.task_id.clone(), children.clone());
                }
                // A sign-in an MCP server asks for: AUTH_REQUIRED, every other question
                // INPUT_REQUIRED.
                let waits_for = match &pending.ask {
                    Some(own) if own.kind == mew::ASK_AUTHORIZATION => TaskState::AuthRequired,
                    _ => TaskState::InputRequired,
                };
                let ask = match pending.ask.clone() {
                    // A tool's own question (an MCP server's elicitation): the message says
                    // it, a data part carries what to fill in, `mew.ask` says its kind.
                    Some(own) => {
                        let mut ask = Message::agent_text(pending.question.clone());
                        let own = *own;
                        ask.parts.push(mew_cards::Part::data(own.data));
                        ask.metadata = Some(
                            mew::MewMetadata {
                                ask: Some(own.kind),
                                ..mew::MewMetadata::default()
                            }
                            .to_metadata(),
                        );
                        ask
                    }
                    None => {
                        // A delegated task's question already says how to answer it.
                        let question = if pending.relay.is_some() {
                            pending.question.clone()
                        } else {
                            format!(
                                "{}\nReply \"yes\" to allow it; anything else refuses it.",
                                pending.question
                            )
                        };
                        let mut ask = Message::agent_text(question);
                        // Marks a question only the user may answer: a delegating agent
                        // relays it to its own user instead of answering it.
                        ask.metadata = Some(
                            mew::MewMetadata {
                                ask: Some(mew::ASK_PERMISSION.to_owned()),
                                permission: Some(mew::PermissionAsk {
                                    tool: pending.name.clone(),
                                    input: pending.input.clone(),
                                    rule: pending.why.clone(),
                                }),
                                ..mew::MewMetadata::default()
                            }
                            .to_metadata(),
                        );
                        ask
                    }
                };
                state.pending = Some(pending);
                sink.save_private(serde_json::to_value(&state).unwrap_or(Value::Null))
                    .await
                    .map_err(closed)?;
                sink.status(waits_for, Some(ask)).await.map_err(closed)
            }
            Err(AgentError::Canceled) => Err(ExecError("canceled".to_owned())),
            Err(error) => {
                super::session::close_dangling_calls(&mut state.session);
                let _ = sink
                    .save_private(serde_json::to_value(&state).unwrap_or(Value::Null))
                    .await;
                Err(ExecError(error.to_string()))
            }
        };
        // TaskCompleted once the task's final status is recorded (or its failure returned).
        if let (Some(hooks), Some(final_state)) = (&hooks, final_state) {
            let final_state = if result.is_ok() {
                final_state
            } else if final_state == TaskState::Canceled {
                TaskState::Canceled
            } else {
                TaskState::Failed
            };
            let _ = hooks
                .dispatch(crate::hooks::Payload::task_completed(
                    turn.task_id.as_str(),
                    &turn.role.name,
                    final_state.as_str(),
                ))
                .await;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_reads_back_as_the_runner_state() {
        let session = Session {
            messages: vec![ChatMessage::user("go")],
            model_calls: 2,
            ..Session::default()
        };
        let fork = SkillFork {
            name: "deploy".into(),
            allowed_tools: vec!["Read".into()],
            model: None,
        };
        let written = serde_json::to_value(CheckpointState {
            session: &session,
            pending: None,
            active_skills: ActiveSkills::default(),
            skill_fork: Some(&fork),
            checkpoint_of: "m-1",
        })
        .unwrap();
        let read: RunnerState = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(read.session, session);
        assert_eq!(read.pending, None);
        assert_eq!(read.checkpoint_of.as_deref(), Some("m-1"));
        assert_eq!(
            read.skill_fork.as_ref().map(|f| f.name.as_str()),
            Some("deploy")
        );
        // And back: nothing a checkpoint writes is lost when the runner saves its state.
        assert_eq!(serde_json::to_value(&read).unwrap(), written);
    }
}
