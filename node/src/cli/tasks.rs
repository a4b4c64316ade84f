//! `mew tasks list|get|cancel|watch|tree`: the tasks of a node (or of any A2A agent).

use std::io::Write;

use clap::{Args, Subcommand};
use mew_cards::mew::MewMetadata;
use mew_cards::{
    CancelTaskRequest, ContextId, GetTaskRequest, ListTasksRequest, ListTasksResponse, Role,
    SubscribeToTaskRequest, Task, TaskId, TaskState, Timestamp,
};
use mew_transport::{AgentTransport as _, CallContext, RemoteAgent};

use super::Context;
use super::bench::BindingArg;
use super::output::{
    follow, next_step, one_line, outcome, parse_state, parts_text, render_task, state_name,
    status_text, write_json,
};
use super::remote::{NodeUrlArgs, Target, connect, remote_error};
use super::tree::{TreeArgs, tree};

/// How many characters of a task's first message `mew tasks list` shows.
const MESSAGE_WIDTH: usize = 40;

/// `mew tasks`: talks to the node's front agent, which sees every task of the node.
#[derive(Debug, Args)]
pub(crate) struct TasksArgs {
    #[command(subcommand)]
    pub(crate) command: TasksCommand,
    #[command(flatten)]
    pub(crate) node: NodeUrlArgs,
    /// The binding to use [default: the card's first HTTP binding]
    #[arg(long, global = true, value_enum)]
    pub(crate) binding: Option<BindingArg>,
}

/// The `mew tasks` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TasksCommand {
    /// List tasks, newest first
    List(ListArgs),
    /// Show a task, with its history
    Get(GetArgs),
    /// Cancel a task
    Cancel(IdArgs),
    /// Print a task's events as they happen, until it ends or asks for input
    Watch(IdArgs),
    /// Show a task and the tasks it delegated to, on this node and others, with their usage
    /// rolled up from children to parents
    ///
    /// Exits 0 when the task was fetched, even if some of its children could not be: those are
    /// shown with the error, and the totals that leave them out say "partial". Exits 1 when the
    /// task itself cannot be fetched.
    Tree(TreeArgs),
}

/// `mew tasks list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only the tasks of this context
    #[arg(long, value_name = "ID")]
    pub(crate) context: Option<String>,
    /// Only the tasks in this state: submitted, working, completed, failed, canceled,
    /// input-required, rejected or auth-required
    #[arg(long, value_name = "STATE", value_parser = parse_state)]
    pub(crate) state: Option<TaskState>,
    /// Tasks per page, 1 to 100 [default: the agent's, 50 for Mew]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..=100))]
    pub(crate) limit: Option<i32>,
    /// Every page, not only the first
    #[arg(long)]
    pub(crate) all: bool,
}

/// `mew tasks get`.
#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    /// The task's id
    pub(crate) id: String,
    /// Show only the last N messages of the history
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    pub(crate) history: Option<i32>,
}

/// A subcommand that takes only a task id.
#[derive(Debug, Args)]
pub(crate) struct IdArgs {
    /// The task's id
    pub(crate) id: String,
}

/// Runs a `mew tasks` subcommand against the node (or `--node`).
pub(crate) async fn tasks(args: TasksArgs, context: &Context) -> anyhow::Result<()> {
    let agent = connect(&Target::Front, &args.node, &context.config, args.binding).await?;
    let mut out = std::io::stdout();
    let json = context.json;
    match &args.command {
        TasksCommand::List(list_args) => list(&agent, list_args, json, &mut out).await,
        TasksCommand::Tree(tree_args) => {
            let peers = context
                .config
                .peers
                .iter()
                .map(|(name, peer)| (name.clone(), peer.url.clone()))
                .collect();
            let node = args.node.url(&context.config);
            let options = super::remote::client_options(&args.node, &context.config, args.binding)?;
            let credentials = super::remote::peer_credentials(&context.config)?;
            tree(
                tree_args,
                agent,
                &node,
                options,
                (peers, credentials),
                json,
                &mut out,
            )
            .await
        }
        TasksCommand::Get(get) => {
            let request = GetTaskRequest {
                id: TaskId::from(get.id.as_str()),
                history_length: get.history,
                ..GetTaskRequest::default()
            };
            let task = agent
                .get_task(&CallContext::anonymous(), request)
                .await
                .map_err(remote_error)?;
            print_task(&task, true, json, &mut out)
        }
        TasksCommand::Cancel(cancel) => {
            let request = CancelTaskRequest {
                id: TaskId::from(cancel.id.as_str()),
                ..CancelTaskRequest::default()
            };
            let task = agent
                .cancel_task(&CallContext::anonymous(), request)
                .await
                .map_err(remote_error)?;
            print_task(&task, false, json, &mut out)
        }
        TasksCommand::Watch(watch) => {
            let request = SubscribeToTaskRequest {
                id: TaskId::from(watch.id.as_str()),
                ..SubscribeToTaskRequest::default()
            };
            let stream = agent
                .subscribe_to_task(&CallContext::anonymous(), request)
                .await
                .map_err(remote_error)?;
            let Some(task) = follow(stream, json, &mut out).await? else {
                return Ok(());
            };
            if let Some(hint) = next_step(&task, "mew send <target>", &args.node.flag())
                && !json
            {
                out.write_all(hint.as_bytes())?;
            }
            outcome(&task, json)
        }
    }
}

/// Prints a task (as JSON with `json`).
fn print_task(task: &Task, history: bool, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    if json {
        write_json(out, task)
    } else {
        out.write_all(render_task(task, history).as_bytes())?;
        Ok(())
    }
}

/// Lists one page, or every page with `--all`, and prints a table (or the JSON answer, the
/// pages' tasks together).
async fn list(
    agent: &RemoteAgent,
    args: &ListArgs,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut request = ListTasksRequest {
        context_id: args
            .context
            .clone()
            .map(ContextId::from)
            .unwrap_or_default(),
        status: args.state.unwrap_or_default(),
        page_size: args.limit,
        ..ListTasksRequest::default()
    };
    let mut all = ListTasksResponse::default();
    let mut seen_tokens = Vec::new();
    loop {
        let page = agent
            .list_tasks(&CallContext::anonymous(), request.clone())
            .await
            .map_err(remote_error)?;
        all.tasks.extend(page.tasks);
        all.page_size = page.page_size;
        all.total_size = page.total_size;
        all.next_page_token = page.next_page_token;
        let token = &all.next_page_token;
        // A token seen before would loop forever.
        if !args.all || token.is_empty() || seen_tokens.contains(token) {
            break;
        }
        seen_tokens.push(token.clone());
        request.page_token = token.clone();
    }
    if args.all {
        all.next_page_token.clear();
    }
    if json {
        return write_json(out, &all);
    }
    out.write_all(render_table(&all.tasks).as_bytes())?;
    if !all.next_page_token.is_empty() {
        eprintln!(
            "mew: {} of {} tasks shown; --all lists every one",
            all.tasks.len(),
            all.total_size
        );
    }
    Ok(())
}

/// The table of `mew tasks list`: id, role, state, context, status time (to the second), the
/// start of the first user message and, when a listed task failed or was rejected, a REASON
/// column with the start of its status message.
pub(crate) fn render_table(tasks: &[Task]) -> String {
    if tasks.is_empty() {
        return "no tasks\n".to_owned();
    }
    let reasons: Vec<String> = tasks.iter().map(reason).collect();
    let with_reasons = reasons.iter().any(|r| !r.is_empty());
    let mut header = vec!["ID", "ROLE", "STATE", "CONTEXT", "UPDATED", "MESSAGE"];
    if with_reasons {
        header.push("REASON");
    }
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .zip(reasons)
        .map(|(task, reason)| {
            let mut row = vec![
                task.id.to_string(),
                MewMetadata::read(task.metadata.as_ref())
                    .role
                    .unwrap_or_default(),
                state_name(task.status.state).to_owned(),
                task.context_id.to_string(),
                task.status
                    .timestamp
                    .as_ref()
                    .map(|time| Timestamp::from_unix(time.unix_seconds(), 0).to_string())
                    .unwrap_or_default(),
                first_message(task),
            ];
            if with_reasons {
                row.push(reason);
            }
            row
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let mut line = String::new();
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  "));
            }
        }
        line.truncate(line.trim_end().len());
        line.push('\n');
        line
    };
    let mut out = line(&header);
    for row in &rows {
        out.push_str(&line(&row.iter().map(String::as_str).collect::<Vec<_>>()));
    }
    out
}

/// The start of the task's first user message, on one line, at most [`MESSAGE_WIDTH`]
/// characters (the last one `…` when cut).
pub(crate) fn first_message(task: &Task) -> String {
    task.history
        .iter()
        .find(|m| m.role == Role::User)
        .map(|message| one_line(&parts_text(&message.parts), MESSAGE_WIDTH))
        .unwrap_or_default()
}

/// Why a failed or rejected task ended: the start of its status message, on one line, cut as
/// [`first_message`] is; empty for a task in any other state or without a message.
fn reason(task: &Task) -> String {
    match task.status.state {
        TaskState::Failed | TaskState::Rejected => status_text(task)
            .map(|text| one_line(&text, MESSAGE_WIDTH))
            .unwrap_or_default(),
        _ => String::new(),
    }
}
