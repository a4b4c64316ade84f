//! `mew chat [--role R]`: a conversation with a role in the terminal, on the project's running
//! node or else in this process without HTTP: each line is a task in one context, so the role
//! sees what was said before.
//!
//! A context is a hook session (its id the session id, the project the cwd). `SessionStart` is
//! dispatched by the runner for a task that starts a new context; the chat dispatches
//! `SessionEnd` for the context it leaves (reason `clear` at `/clear`, `resume` when `/resume`
//! switches to another one, `exit` when the chat ends, `other` when it fails) and then forgets
//! which `only_once` rules ran in it, and `SessionResume` once `/resume ID` switched the context.
//! None of them blocks; the additional context and messages of `SessionResume` are shown as
//! notes.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use anyhow::anyhow;
use clap::Args;
use mew_cards::{
    ContextId, GetTaskRequest, ListTasksRequest, Message, Role, RoleDefinition, Task, TaskId,
};
use mew_transport::{AgentTransport, CallContext, RemoteAgent};

use super::Failure;
use super::local::{Ending, Printer, Terminal, Typed, agent_at, converse, node_agent, one_line};
use super::output::state_name;
use super::remote::remote_error;
use crate::config::Config;
use crate::hooks::{HookContext, HookOutcome, Payload};
use crate::node::{Runtime, load_catalog};
use crate::roles::catalog::{RoleCatalog, render_agents};
use crate::skills::catalog::SkillCatalog;

/// How many characters of a task's prompt a listing shows.
const PROMPT_CHARS: usize = 60;
/// How many conversations `/resume` lists.
const RECENT_CONTEXTS: usize = 10;
/// How many tasks a listing reads at most.
const LIST_PAGE: i32 = 100;

/// What `/help` prints.
const HELP: &str = "\
Type a message to send it to the role; each one continues the conversation.
  /clear          start a new conversation
  /agents         list the roles
  /role NAME      talk to another role; the conversation goes on
  /tasks          the tasks of this chat
  /resume [ID]    continue the conversation of an earlier task (without ID: list recent ones)
  /help           this help
  /SKILL ARGS     use a skill (see the system prompt's list) with ARGS
  /quit           leave (so does the end of the input, Ctrl-D)
Ctrl-C cancels the running task; at the prompt, it leaves.
A line that starts with // is sent with one / removed.
";

/// `mew chat`.
#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    /// The role to talk to [default: node.default_role]
    #[arg(long, value_name = "ROLE")]
    pub(crate) role: Option<String>,
    #[command(flatten)]
    pub(crate) data: super::DataDirArgs,
}

/// A line typed in a chat.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A message for the role.
    Say(String),
    /// `/clear`: start a new context.
    Clear,
    /// `/agents`: list the roles.
    Agents,
    /// `/tasks`: list this chat's tasks.
    Tasks,
    /// `/resume [ID]`: continue the context of a task (or a context), or list recent ones.
    Resume(Option<String>),
    /// `/role [NAME]`: switch to a role, or show the current one.
    Role(Option<String>),
    /// `/help`.
    Help,
    /// `/quit` or `/exit`.
    Quit,
    /// An empty line.
    Nothing,
    /// A command this chat does not know, without its slash.
    Unknown(String),
}

/// What `line` asks for. Commands start with `/`; `//` escapes a message that starts with `/`.
pub(crate) fn parse_line(line: &str) -> Line {
    let line = line.trim();
    if line.is_empty() {
        return Line::Nothing;
    }
    if let Some(rest) = line.strip_prefix("//") {
        return Line::Say(format!("/{rest}"));
    }
    let Some(command) = line.strip_prefix('/') else {
        return Line::Say(line.to_owned());
    };
    let (name, rest) = command
        .split_once(char::is_whitespace)
        .unwrap_or((command, ""));
    let argument = Some(rest.trim())
        .filter(|rest| !rest.is_empty())
        .map(str::to_owned);
    match name {
        "clear" | "new" => Line::Clear,
        "agents" => Line::Agents,
        "tasks" => Line::Tasks,
        "resume" => Line::Resume(argument),
        "role" => Line::Role(argument),
        "help" | "?" => Line::Help,
        "quit" | "exit" => Line::Quit,
        _ => Line::Unknown(name.to_owned()),
    }
}

/// The state of a chat.
struct Chat {
    /// The role lines go to.
    role: Arc<RoleDefinition>,
    /// The conversation lines continue; `None` before the first and after `/clear`.
    context: Option<ContextId>,
    /// Every context of this chat, in the order it entered them.
    contexts: Vec<ContextId>,
}

impl Chat {
    /// Continues in `context` from now on.
    fn enter(&mut self, context: ContextId) {
        if !self.contexts.contains(&context) {
            self.contexts.push(context.clone());
        }
        self.context = Some(context);
    }
}

/// Talks with a role: each line read from `terminal` is sent as a message in the chat's
/// context and the answer printed as it streams; lines that start with `/` are commands
/// (`/help`). The tasks run on the project's node when one runs (`mew up`), else on the node's
/// runtime started in this process (no HTTP). Ends at `/quit` or the end of the input, or with
/// [`Failure::Interrupted`] at a Ctrl-C while no task runs.
pub(crate) async fn chat<O: Write, E: Write>(
    args: ChatArgs,
    config: Config,
    json: bool,
    terminal: &mut Terminal<O, E>,
) -> Result<(), Failure> {
    let name = args
        .role
        .clone()
        .unwrap_or_else(|| config.node.default_role.clone());
    if let Some((url, front)) = node_agent(&config, None).await.map_err(Failure::Runtime)? {
        if !json {
            terminal
                .note(
                    &mut Printer::new(json, false),
                    &format!("mew: on the node at {url}\n"),
                )
                .map_err(|error| Failure::Runtime(error.into()))?;
        }
        let mut backend = Backend::Node(Box::new(NodeBackend::new(url, front, &config)));
        return chat_in(&mut backend, &name, json, terminal).await;
    }
    let env = std::env::vars().collect();
    let runtime = Runtime::load(config, env).await.map_err(Failure::Runtime)?;
    let ended = chat_in(&mut Backend::Local(&runtime), &name, json, terminal).await;
    runtime.shutdown().await;
    ended
}

/// Where a chat's tasks run.
enum Backend<'r> {
    /// The node's runtime, in this process.
    Local(&'r Runtime),
    /// The project's running node.
    Node(Box<NodeBackend>),
}

/// The project's running node, reached over A2A, and the project's role and skill files
/// (the node serves what they define: it watches them).
struct NodeBackend {
    /// The node's base URL.
    url: String,
    /// The configuration the client options come from.
    config: Config,
    /// The node's front agent, which sees every task of the node.
    front: Arc<dyn AgentTransport>,
    /// The roles, from the project's files.
    catalog: Arc<RoleCatalog>,
    /// The skills, from the project's files.
    skills: SkillCatalog,
    /// The role agents reached so far, by role.
    agents: HashMap<String, Arc<dyn AgentTransport>>,
}

impl NodeBackend {
    /// The node at `url`, whose front agent is `front`, for the project of `config`.
    fn new(url: String, front: RemoteAgent, config: &Config) -> Self {
        Self {
            url,
            config: config.clone(),
            front: Arc::new(front),
            catalog: Arc::new(load_catalog(config)),
            skills: SkillCatalog::load(crate::node::skill_roots(
                config,
                &crate::node::load_plugins(config),
            )),
            agents: HashMap::new(),
        }
    }
}

impl Backend<'_> {
    /// The role `name`; the error lists the known roles.
    fn known_role(&self, name: &str) -> anyhow::Result<Arc<RoleDefinition>> {
        match self {
            Backend::Local(runtime) => runtime.known_role(name),
            Backend::Node(node) => node.catalog.get(name).ok_or_else(|| {
                let known: Vec<&str> = node.catalog.roles().map(|r| r.name.as_str()).collect();
                anyhow!(
                    "there is no role {name:?}; known roles: {}",
                    known.join(", ")
                )
            }),
        }
    }

    /// The roles, for `/agents`.
    fn catalog(&self) -> Arc<RoleCatalog> {
        match self {
            Backend::Local(runtime) => runtime.catalog(),
            Backend::Node(node) => node.catalog.clone(),
        }
    }

    /// Whether `name` is a skill (so `/name args` goes to the role).
    fn has_skill(&self, name: &str) -> bool {
        match self {
            Backend::Local(runtime) => runtime.skills.get(name).is_some(),
            Backend::Node(node) => node.skills.get(name).is_some(),
        }
    }

    /// The front agent, which sees every task.
    fn front(&self) -> Arc<dyn AgentTransport> {
        match self {
            Backend::Local(runtime) => Arc::new(runtime.front_agent()),
            Backend::Node(node) => node.front.clone(),
        }
    }

    /// The agent of `role`.
    async fn agent(
        &mut self,
        role: &Arc<RoleDefinition>,
    ) -> anyhow::Result<Arc<dyn AgentTransport>> {
        match self {
            Backend::Local(runtime) => Ok(runtime.agent(role)),
            Backend::Node(node) => {
                if let Some(agent) = node.agents.get(&role.name) {
                    return Ok(agent.clone());
                }
                let agent: Arc<dyn AgentTransport> = Arc::new(
                    agent_at(&node.config, &node.url, Some(&role.name))
                        .await
                        .map_err(remote_error)?,
                );
                node.agents.insert(role.name.clone(), agent.clone());
                Ok(agent)
            }
        }
    }
}

/// [`chat`] with the role `name`, on `backend`.
async fn chat_in<O: Write, E: Write>(
    backend: &mut Backend<'_>,
    name: &str,
    json: bool,
    terminal: &mut Terminal<O, E>,
) -> Result<(), Failure> {
    let role = backend.known_role(name).map_err(Failure::Usage)?;
    let mut chat = Chat {
        role,
        context: None,
        contexts: Vec::new(),
    };
    let mut printer = Printer::new(json, false);
    let ended = chat_lines(backend, &mut chat, json, terminal, &mut printer).await;
    if let Some(context) = chat.context.take() {
        let reason = match &ended {
            Ok(()) | Err(Failure::Interrupted(_)) => "exit",
            Err(_) => "other",
        };
        end_session(backend, &context, reason).await;
    }
    ended
}

/// Dispatches `payload` in the hook session of `context`: the context id is the session id,
/// the project the cwd. Nothing here blocks, so the outcome only carries notes. On a running
/// node the chat's session hooks do not run: hooks are the node's, and it runs the turns'.
async fn session_hook(backend: &Backend<'_>, context: &ContextId, payload: Payload) -> HookOutcome {
    let Backend::Local(runtime) = backend else {
        return HookOutcome::default();
    };
    match HookContext::new(context.as_str(), runtime.config.project_dir.clone()) {
        Ok(ctx) => runtime.hooks.dispatch(payload, &ctx).await,
        Err(_) => HookOutcome::default(),
    }
}

/// Ends the hook session of `context` (`SessionEnd` with `reason`); its `only_once` rules may
/// run again should it be resumed.
async fn end_session(backend: &Backend<'_>, context: &ContextId, reason: &str) {
    let _ = session_hook(backend, context, Payload::session_end(reason)).await;
    if let Backend::Local(runtime) = backend {
        runtime.hooks.reset_session(context.as_str());
    }
}

/// The lines of a chat, until `/quit`, the end of the input or a Ctrl-C at the prompt.
async fn chat_lines<O: Write, E: Write>(
    backend: &mut Backend<'_>,
    chat: &mut Chat,
    json: bool,
    terminal: &mut Terminal<O, E>,
    printer: &mut Printer,
) -> Result<(), Failure> {
    let front = backend.front();
    let io = |error: std::io::Error| Failure::Runtime(error.into());
    if terminal.interactive {
        terminal
            .note(
                printer,
                &format!(
                    "mew chat with {}: /help lists the commands, /quit leaves\n",
                    chat.role.name
                ),
            )
            .map_err(io)?;
    }
    loop {
        if terminal.interactive {
            terminal
                .note(printer, &format!("{}> ", chat.role.name))
                .map_err(io)?;
        }
        let line = match terminal.typed().await.map_err(Failure::Runtime)? {
            Typed::Line(line) => line,
            Typed::End => {
                if terminal.interactive {
                    terminal.note(printer, "\n").map_err(io)?;
                }
                return Ok(());
            }
            Typed::Interrupted => {
                terminal.note(printer, "\n").map_err(io)?;
                return Err(Failure::Interrupted(anyhow!("interrupted")));
            }
        };
        let parsed = match parse_line(&line) {
            // `/name args` naming a skill goes to the role, which runs the skill.
            Line::Unknown(name) if backend.has_skill(&name) => Line::Say(line.trim().to_owned()),
            parsed => parsed,
        };
        match parsed {
            Line::Nothing => {}
            Line::Quit => return Ok(()),
            Line::Help => terminal.out.write_all(HELP.as_bytes()).map_err(io)?,
            Line::Agents => terminal
                .out
                .write_all(render_agents(&backend.catalog(), json).as_bytes())
                .map_err(io)?,
            Line::Clear => {
                if let Some(context) = chat.context.take() {
                    end_session(backend, &context, "clear").await;
                }
                terminal
                    .note(printer, "(a new conversation)\n")
                    .map_err(io)?;
            }
            Line::Role(None) => terminal
                .note(
                    printer,
                    &format!("talking to {}; /agents lists the roles\n", chat.role.name),
                )
                .map_err(io)?,
            Line::Role(Some(name)) => {
                let note = match backend.known_role(&name) {
                    Ok(role) => {
                        chat.role = role;
                        format!("talking to {} now\n", chat.role.name)
                    }
                    Err(error) => format!("{error:#}\n"),
                };
                terminal.note(printer, &note).map_err(io)?;
            }
            Line::Tasks => {
                let listing = list_chat_tasks(front.as_ref(), chat).await;
                print_listing(terminal, printer, listing)?;
            }
            Line::Resume(None) => {
                let listing = list_recent(front.as_ref()).await;
                print_listing(terminal, printer, listing)?;
            }
            Line::Resume(Some(id)) => match find_context(front.as_ref(), &id).await {
                Ok(context) => {
                    terminal
                        .note(printer, &format!("(continuing context {context})\n"))
                        .map_err(io)?;
                    if chat.context.as_ref() != Some(&context) {
                        if let Some(left) = chat.context.take() {
                            end_session(backend, &left, "resume").await;
                        }
                        chat.enter(context.clone());
                        let outcome =
                            session_hook(backend, &context, Payload::session_resume()).await;
                        for text in outcome
                            .system_messages
                            .iter()
                            .chain(&outcome.additional_context)
                        {
                            terminal
                                .note(printer, &format!("{}\n", text.trim_end()))
                                .map_err(io)?;
                        }
                    }
                }
                Err(error) => terminal
                    .note(printer, &format!("{error:#}\n"))
                    .map_err(io)?,
            },
            Line::Unknown(name) => terminal
                .note(
                    printer,
                    &format!("unknown command /{name}; /help lists the commands\n"),
                )
                .map_err(io)?,
            Line::Say(text) => {
                let agent = match backend.agent(&chat.role).await {
                    Ok(agent) => agent,
                    Err(error) => {
                        terminal
                            .note(printer, &format!("mew: {error:#}\n"))
                            .map_err(io)?;
                        continue;
                    }
                };
                let mut message = Message::user_text(text);
                message.context_id = chat.context.clone();
                let permission_asks = !chat.role.is_command();
                match converse(agent.as_ref(), message, permission_asks, terminal, printer).await {
                    Ok(Ending::Task(task) | Ending::Interrupted(Some(task))) => {
                        chat.enter(task.context_id);
                    }
                    Ok(Ending::Message | Ending::Interrupted(None)) => {}
                    Err(error) if super::is_broken_pipe(&error) => {
                        return Err(Failure::Runtime(error));
                    }
                    Err(error) => terminal
                        .note(printer, &format!("mew: {error:#}\n"))
                        .map_err(io)?,
                }
            }
        }
        terminal.out.flush().map_err(io)?;
    }
}

/// Writes a listing to `out`, or its error as a note.
fn print_listing<O: Write, E: Write>(
    terminal: &mut Terminal<O, E>,
    printer: &mut Printer,
    listing: anyhow::Result<String>,
) -> Result<(), Failure> {
    let written = match listing {
        Ok(text) => printer
            .close(&mut terminal.out)
            .and_then(|()| terminal.out.write_all(text.as_bytes())),
        Err(error) => terminal.note(printer, &format!("mew: {error:#}\n")),
    };
    written.map_err(|error| Failure::Runtime(error.into()))
}

/// The tasks of `context`, oldest first.
async fn context_tasks(
    agent: &dyn AgentTransport,
    context: &ContextId,
) -> anyhow::Result<Vec<Task>> {
    let request = ListTasksRequest {
        context_id: context.clone(),
        page_size: Some(LIST_PAGE),
        ..ListTasksRequest::default()
    };
    let mut tasks = agent
        .list_tasks(&CallContext::anonymous(), request)
        .await
        .map_err(remote_error)?
        .tasks;
    tasks.reverse();
    Ok(tasks)
}

/// `/tasks`: the tasks of each context of the chat, the current one marked.
async fn list_chat_tasks(agent: &dyn AgentTransport, chat: &Chat) -> anyhow::Result<String> {
    if chat.contexts.is_empty() {
        return Ok("no tasks in this chat yet\n".to_owned());
    }
    let mut out = String::new();
    for context in &chat.contexts {
        let current = if chat.context.as_ref() == Some(context) {
            " (current)"
        } else {
            ""
        };
        out.push_str(&format!("context {context}{current}\n"));
        for task in context_tasks(agent, context).await? {
            out.push_str(&task_line(&task, false));
        }
    }
    Ok(out)
}

/// `/resume` without an id: the latest task of each recent conversation on the node.
async fn list_recent(agent: &dyn AgentTransport) -> anyhow::Result<String> {
    let request = ListTasksRequest {
        page_size: Some(LIST_PAGE),
        ..ListTasksRequest::default()
    };
    let tasks = agent
        .list_tasks(&CallContext::anonymous(), request)
        .await
        .map_err(remote_error)?
        .tasks;
    let mut seen: Vec<&ContextId> = Vec::new();
    let mut out = String::new();
    for task in &tasks {
        if seen.len() == RECENT_CONTEXTS || seen.contains(&&task.context_id) {
            continue;
        }
        seen.push(&task.context_id);
        out.push_str(&task_line(task, true));
    }
    if out.is_empty() {
        return Ok("no conversations yet\n".to_owned());
    }
    Ok(format!(
        "recent conversations, latest task first; continue one with /resume TASK_ID:\n{out}"
    ))
}

/// One task in a listing: id, (when,) state and the start of its prompt.
fn task_line(task: &Task, when: bool) -> String {
    let prompt = task
        .history
        .iter()
        .find(|message| message.role == Role::User)
        .map(|message| one_line(&message.text(), PROMPT_CHARS))
        .unwrap_or_default();
    let time = match (&task.status.timestamp, when) {
        (Some(timestamp), true) => format!("  {timestamp}"),
        _ => String::new(),
    };
    format!(
        "  {}{time}  {:<14}  {prompt}\n",
        task.id,
        state_name(task.status.state)
    )
}

/// The context `id` names: that of the task `id`, or the context `id` itself if it has tasks.
async fn find_context(agent: &dyn AgentTransport, id: &str) -> anyhow::Result<ContextId> {
    let request = GetTaskRequest {
        id: TaskId::from(id.to_owned()),
        ..GetTaskRequest::default()
    };
    if let Ok(task) = agent.get_task(&CallContext::anonymous(), request).await {
        return Ok(task.context_id);
    }
    let context = ContextId::from(id.to_owned());
    if context_tasks(agent, &context).await?.is_empty() {
        anyhow::bail!("there is no task or context {id}; /resume lists recent ones");
    }
    Ok(context)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use mew_tests::model::{ScriptedModel, Step};

    use super::*;
    use crate::cli::local::Interrupts;
    use crate::cli::local::testing::{Project, printed, terminal};

    /// The conversation a model request carries, as JSON text.
    fn conversation(request: &mew_tests::model::Recorded) -> String {
        request.body["messages"].to_string()
    }

    #[test]
    fn lines_are_messages_or_commands() {
        let cases = [
            ("hello there", Line::Say("hello there".to_owned())),
            ("  padded  ", Line::Say("padded".to_owned())),
            ("", Line::Nothing),
            ("   ", Line::Nothing),
            ("/clear", Line::Clear),
            ("/new", Line::Clear),
            ("/agents", Line::Agents),
            ("/tasks", Line::Tasks),
            ("/resume", Line::Resume(None)),
            (
                "/resume  0190-abc ",
                Line::Resume(Some("0190-abc".to_owned())),
            ),
            ("/role", Line::Role(None)),
            ("/role Plan", Line::Role(Some("Plan".to_owned()))),
            ("/help", Line::Help),
            ("/?", Line::Help),
            ("/quit", Line::Quit),
            ("/exit", Line::Quit),
            ("/frobnicate now", Line::Unknown("frobnicate".to_owned())),
            (
                "//etc/passwd is a file",
                Line::Say("/etc/passwd is a file".to_owned()),
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(parse_line(line), expected, "{line:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lines_continue_one_conversation_until_clear() {
        let model = ScriptedModel::start(vec![
            Step::text("Nice to meet you, Ada.").expect_last_user("my name is Ada"),
            Step::text("Your name is Ada.").expect_last_user("what is my name?"),
            Step::text("I do not know your name.").expect_last_user("what is my name?"),
        ])
        .unwrap();
        let project = Project::new(Some(&model), &[]);
        let mut terminal = terminal(
            "my name is Ada\nwhat is my name?\n/clear\nwhat is my name?\n/quit\nnot read\n",
            false,
        );

        let result = chat(
            ChatArgs {
                role: None,
                data: crate::cli::DataDirArgs::default(),
            },
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await;

        assert!(result.is_ok(), "{result:?}");
        let (out, err) = printed(&terminal);
        assert_eq!(
            out,
            "Nice to meet you, Ada.\nYour name is Ada.\nI do not know your name.\n"
        );
        assert_eq!(err, "(a new conversation)\n");
        let requests = model.requests();
        assert_eq!(requests.len(), 3);
        let first = conversation(&requests[0]);
        assert!(!first.contains("Nice to meet you"), "{first}");
        let second = conversation(&requests[1]);
        assert!(second.contains("my name is Ada"), "{second}");
        assert!(second.contains("Nice to meet you, Ada."), "{second}");
        let third = conversation(&requests[2]);
        assert!(!third.contains("Ada"), "{third}");
        model.assert_done();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slash_line_naming_a_skill_runs_it_with_its_arguments() {
        let model = ScriptedModel::start(vec![
            Step::text("HELLO THERE").expect_last_user("Answer in capitals: hello there"),
        ])
        .unwrap();
        let project = Project::new(Some(&model), &[]);
        let skill = project.config.project_dir.join(".mew/skills/shout");
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(
            skill.join("SKILL.md"),
            "---\nname: shout\ndescription: Answers in capitals.\n---\nAnswer in capitals: $ARGUMENTS\n",
        )
        .unwrap();
        let mut terminal = terminal("/shout hello there\n/frobnicate\n/quit\n", false);

        let result = chat(
            ChatArgs {
                role: None,
                data: crate::cli::DataDirArgs::default(),
            },
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await;

        assert!(result.is_ok(), "{result:?}");
        let (out, err) = printed(&terminal);
        assert_eq!(out, "HELLO THERE\n");
        assert_eq!(
            err,
            "unknown command /frobnicate; /help lists the commands\n"
        );
        model.assert_done();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn roles_switch_and_tasks_list_this_chats_contexts() {
        let upper = "---\nname: upper\ndescription: Upper case.\ncommand: [tr, a-z, A-Z]\n---\n";
        let lower = "---\nname: lower\ndescription: Lower case.\ncommand: [tr, A-Z, a-z]\n---\n";
        let project = Project::new(None, &[("upper.md", upper), ("lower.md", lower)]);
        let mut terminal = terminal(
            "Hello\n/role nope\n/role lower\nHello\n/clear\nAgain\n/tasks\n/bogus\n",
            false,
        );

        let result = chat(
            ChatArgs {
                role: Some("upper".to_owned()),
                data: crate::cli::DataDirArgs::default(),
            },
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await;

        assert!(result.is_ok(), "{result:?}");
        let (out, err) = printed(&terminal);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[..3], ["HELLO", "hello", "again"]);
        // Two contexts: the first with two tasks (one per role), then the one after /clear.
        assert!(lines[3].starts_with("context "), "{out}");
        assert!(!lines[3].ends_with("(current)"), "{out}");
        assert!(lines[4].ends_with("  completed       Hello"), "{out}");
        assert!(lines[5].ends_with("  completed       Hello"), "{out}");
        assert!(
            lines[6].starts_with("context ") && lines[6].ends_with(" (current)"),
            "{out}"
        );
        assert!(lines[7].ends_with("  completed       Again"), "{out}");
        assert_eq!(lines.len(), 8, "{out}");
        assert_eq!(
            err,
            "there is no role \"nope\"; known roles: Explore, Plan, general-purpose, lower, upper\n\
             talking to lower now\n\
             (a new conversation)\n\
             unknown command /bogus; /help lists the commands\n"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn resume_continues_the_context_of_an_earlier_task() {
        let model = ScriptedModel::start(vec![
            Step::text("Hi Ada.").expect_last_user("my name is Ada"),
            Step::text("Your name is Ada.").expect_last_user("what is my name?"),
        ])
        .unwrap();
        let project = Project::new(Some(&model), &[]);
        let mut first = terminal("my name is Ada\n", false);
        chat(
            ChatArgs {
                role: None,
                data: crate::cli::DataDirArgs::default(),
            },
            project.config.clone(),
            false,
            &mut first,
        )
        .await
        .unwrap();
        let runtime = Runtime::load(project.config.clone(), HashMap::new())
            .await
            .unwrap();
        let tasks = runtime
            .front_agent()
            .list_tasks(&CallContext::anonymous(), ListTasksRequest::default())
            .await
            .unwrap()
            .tasks;
        runtime.shutdown().await;
        assert_eq!(tasks.len(), 1);
        let earlier = &tasks[0];

        let mut second = terminal(
            &format!(
                "/resume\n/resume bogus\n/resume {}\nwhat is my name?\n",
                earlier.id
            ),
            false,
        );
        chat(
            ChatArgs {
                role: None,
                data: crate::cli::DataDirArgs::default(),
            },
            project.config.clone(),
            false,
            &mut second,
        )
        .await
        .unwrap();

        let (out, err) = printed(&second);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "recent conversations, latest task first; continue one with /resume TASK_ID:"
        );
        assert!(
            lines[1].starts_with(&format!("  {}  ", earlier.id)),
            "{out}"
        );
        assert!(
            lines[1].ends_with("  completed       my name is Ada"),
            "{out}"
        );
        assert_eq!(lines[2], "Your name is Ada.");
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(
            err,
            format!(
                "there is no task or context bogus; /resume lists recent ones\n\
                 (continuing context {})\n",
                earlier.context_id
            )
        );
        let requests = model.requests();
        assert_eq!(requests.len(), 2);
        let resumed = conversation(&requests[1]);
        assert!(
            resumed.contains("my name is Ada") && resumed.contains("Hi Ada."),
            "{resumed}"
        );
        model.assert_done();
    }

    /// The hook events logged to `log` (one JSON payload after another), as
    /// (event, `reason` or `source`, session id).
    fn logged_sessions(log: &std::path::Path) -> Vec<(String, String, String)> {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<serde_json::Value>()
            .map(|payload| {
                let payload = payload.unwrap();
                let field = |key: &str| payload[key].as_str().unwrap_or_default().to_owned();
                let why = if payload["reason"].is_string() {
                    field("reason")
                } else {
                    field("source")
                };
                (field("hook_event_name"), why, field("session_id"))
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clear_resume_and_quit_end_and_resume_hook_sessions() {
        let model = ScriptedModel::start(vec![
            Step::text("Hi Ada.").expect_last_user("my name is Ada"),
            Step::text("Hello.").expect_last_user("hello"),
            Step::text("Your name is Ada.").expect_last_user("what is my name?"),
        ])
        .unwrap();
        let project = Project::new(Some(&model), &[]);
        let home = project.config.home_dir.clone().unwrap();
        let log = home.join("sessions.log");
        // A user-level file: it needs no trust. The resume hook runs once per session, which
        // starts again when the session ends.
        let hooks = format!(
            "hooks:\n\
             \x20 - name: started\n\
             \x20   event: SessionStart\n\
             \x20   action: {{type: shell, command: \"cat >> '{log}'\"}}\n\
             \x20 - name: ended\n\
             \x20   event: SessionEnd\n\
             \x20   action: {{type: shell, command: \"cat >> '{log}'\"}}\n\
             \x20 - name: resumed\n\
             \x20   event: SessionResume\n\
             \x20   only_once: true\n\
             \x20   action: {{type: shell, command: \"cat >> '{log}'; echo welcome back\"}}\n",
            log = log.display()
        );
        std::fs::create_dir_all(home.join(".mew")).unwrap();
        std::fs::write(home.join(".mew/hooks.yaml"), hooks).unwrap();

        // A first chat that ends with its input.
        let mut first = terminal("my name is Ada\n", false);
        chat(
            ChatArgs {
                role: None,
                data: crate::cli::DataDirArgs::default(),
            },
            project.config.clone(),
            false,
            &mut first,
        )
        .await
        .unwrap();
        let logged = logged_sessions(&log);
        assert_eq!(logged.len(), 2, "{logged:?}");
        let ada = logged[0].2.clone();
        assert_eq!(
            logged,
            [
                ("SessionStart".to_owned(), "startup".to_owned(), ada.clone()),
                ("SessionEnd".to_owned(), "exit".to_owned(), ada.clone()),
            ]
        );
        let runtime = Runtime::load(project.config.clone(), HashMap::new())
            .await
            .unwrap();
        let tasks = runtime
            .front_agent()
            .list_tasks(&CallContext::anonymous(), ListTasksRequest::default())
            .await
            .unwrap()
            .tasks;
        runtime.shutdown().await;
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].context_id.as_str(), ada);
        let earlier = &tasks[0].id;

        // A second chat: a new context, left for the first one, which is cleared, resumed
        // again and left with /quit.
        let mut second = terminal(
            &format!(
                "hello\n/resume {earlier}\nwhat is my name?\n/clear\n/resume {earlier}\n/quit\n"
            ),
            false,
        );
        chat(
            ChatArgs {
                role: None,
                data: crate::cli::DataDirArgs::default(),
            },
            project.config.clone(),
            false,
            &mut second,
        )
        .await
        .unwrap();

        let logged = logged_sessions(&log);
        assert_eq!(logged.len(), 8, "{logged:?}");
        let other = logged[2].2.clone();
        assert_ne!(other, ada);
        let event = |name: &str, why: &str, session: &str| {
            (name.to_owned(), why.to_owned(), session.to_owned())
        };
        assert_eq!(
            logged[2..],
            [
                event("SessionStart", "startup", &other),
                event("SessionEnd", "resume", &other),
                event("SessionResume", "resume", &ada),
                event("SessionEnd", "clear", &ada),
                event("SessionResume", "resume", &ada),
                event("SessionEnd", "exit", &ada),
            ]
        );
        let (out, err) = printed(&second);
        assert_eq!(out, "Hello.\nYour name is Ada.\n");
        let continuing = format!("(continuing context {ada})\nwelcome back\n");
        assert_eq!(
            err,
            format!("{continuing}(a new conversation)\n{continuing}")
        );
        let requests = model.requests();
        assert_eq!(requests.len(), 3);
        let resumed = conversation(&requests[2]);
        assert!(
            resumed.contains("Hi Ada.") && !resumed.contains("Hello."),
            "{resumed}"
        );
        model.assert_done();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ctrl_c_at_the_prompt_leaves_with_130() {
        let project = Project::new(None, &[]);
        let (interrupt, interrupts) = Interrupts::channel();
        let mut terminal = Terminal::new(
            std::io::Cursor::new("never sent\n".to_owned()),
            Vec::new(),
            Vec::new(),
            true,
            interrupts,
        );
        interrupt.send(()).unwrap();

        let failure = chat(
            ChatArgs {
                role: None,
                data: crate::cli::DataDirArgs::default(),
            },
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await
        .unwrap_err();

        assert_eq!(failure.exit_code(), 130);
        let (out, err) = printed(&terminal);
        assert_eq!(out, "");
        assert_eq!(
            err,
            "mew chat with general-purpose: /help lists the commands, /quit leaves\n\
             general-purpose> \n"
        );
    }
}
