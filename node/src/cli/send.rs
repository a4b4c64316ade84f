//! `mew send <TARGET> <TEXT>...`: send a message to an agent and print the task it runs.

use std::io::Write;

use anyhow::{Context as _, bail};

use clap::Args;
use mew_cards::{
    ContextId, Message, SendMessageConfiguration, SendMessageRequest, SendMessageResponse, TaskId,
};
use mew_transport::CallContext;

use super::Context;
use super::bench::BindingArg;
use super::output::{follow, next_step, outcome, render_message, render_task, write_json};
use super::remote::{NodeUrlArgs, Target, connect_any, parse_target, remote_error};
use crate::agent::callback::{CALLBACK_PATH, TOKEN_HEADER};

/// `mew send`.
#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// Who to send to: a role of the node (`wc`), a configured peer's role (`peer/role`), an
    /// agent's URL, or `-` for the node's front agent
    #[arg(value_parser = parse_target)]
    pub(crate) target: Target,
    /// The message; several words are joined with spaces
    #[arg(required = true, num_args = 1..)]
    pub(crate) text: Vec<String>,
    /// Print events as they arrive instead of waiting for the result
    #[arg(long)]
    pub(crate) stream: bool,
    /// Continue this task (one that asked for input)
    #[arg(long, value_name = "ID")]
    pub(crate) task: Option<String>,
    /// Send within this context (conversation)
    #[arg(long, value_name = "ID")]
    pub(crate) context: Option<String>,
    /// The binding to use [default: the card's first HTTP binding]
    #[arg(long, value_enum)]
    pub(crate) binding: Option<BindingArg>,
    /// Return as soon as the task exists, without waiting for it to finish
    #[arg(long, conflicts_with = "stream")]
    pub(crate) return_immediately: bool,
    #[command(flatten)]
    pub(crate) node: NodeUrlArgs,
}

impl SendArgs {
    /// The request this command line sends.
    pub(crate) fn request(&self) -> SendMessageRequest {
        let mut message = Message::user_text(self.text.join(" "));
        message.task_id = self.task.clone().map(TaskId::from);
        message.context_id = self.context.clone().map(ContextId::from);
        SendMessageRequest {
            configuration: self.return_immediately.then(|| SendMessageConfiguration {
                return_immediately: true,
                ..SendMessageConfiguration::default()
            }),
            ..SendMessageRequest::new(message)
        }
    }
}

/// Sends the message, prints the result (or the events, with `--stream`), and fails when the
/// task ended failed, rejected or canceled. Inside a command role's turn, a plain send goes
/// through the node, as a child of the turn's task ([`send_for_turn`]).
pub(crate) async fn send(args: SendArgs, context: &Context) -> anyhow::Result<()> {
    if let Some(turn) = TurnCallback::from_env(&args) {
        return send_for_turn(&args, &turn, context).await;
    }
    let agent = connect_any(&args.target, &args.node, &context.config, args.binding).await?;
    let request = args.request();
    let call = CallContext::anonymous();
    let mut out = std::io::stdout();
    let task = if args.stream {
        let stream = agent
            .send_streaming_message(&call, request)
            .await
            .map_err(remote_error)?;
        follow(stream, context.json, &mut out).await?
    } else {
        let response = agent
            .send_message(&call, request)
            .await
            .map_err(remote_error)?;
        if context.json {
            write_json(&mut out, &response)?;
        }
        match response {
            SendMessageResponse::Task(task) => {
                if !context.json {
                    out.write_all(render_task(&task, false).as_bytes())?;
                }
                Some(task)
            }
            SendMessageResponse::Message(message) => {
                if !context.json {
                    out.write_all(render_message(&message).as_bytes())?;
                }
                None
            }
        }
    };
    if let Some(task) = task {
        let reply = format!("mew send {}", args.target);
        if let Some(hint) = next_step(&task, &reply, &args.node.flag())
            && !context.json
        {
            out.write_all(hint.as_bytes())?;
        }
        outcome(&task, context.json)?;
    }
    Ok(())
}

/// The node's way back in for the program of a command role's turn: the node's URL
/// (`MEW_NODE_URL`) and the turn's token (`MEW_TASK_TOKEN`).
struct TurnCallback {
    /// The node's base URL.
    node: String,
    /// The turn's secret.
    token: String,
}

impl TurnCallback {
    /// The callback, when this runs inside a command role's turn and `args` is a plain send
    /// (no `--node`, `--task`, `--context`, `--stream` or `--return-immediately`, which keep
    /// their meaning and talk to the agent directly).
    fn from_env(args: &SendArgs) -> Option<Self> {
        if args.node.node.is_some()
            || args.task.is_some()
            || args.context.is_some()
            || args.stream
            || args.return_immediately
        {
            return None;
        }
        let var = |name| std::env::var(name).ok().filter(|value| !value.is_empty());
        Some(Self {
            node: var("MEW_NODE_URL")?.trim_end_matches('/').to_owned(),
            token: var("MEW_TASK_TOKEN")?,
        })
    }
}

/// What the node answers a turn's delegation.
#[derive(Debug, serde::Deserialize)]
struct TurnAnswer {
    /// The child's answer, or why it failed.
    answer: String,
    /// Whether the child failed.
    failed: bool,
}

/// Asks the node to send the message to the target as a child of the turn's task (so the
/// task tree shows it), waits for the child's answer and prints it; fails when the child did.
async fn send_for_turn(
    args: &SendArgs,
    turn: &TurnCallback,
    context: &Context,
) -> anyhow::Result<()> {
    let tls = context
        .config
        .tls
        .client_options()
        .map_err(anyhow::Error::msg)?;
    let client = tls
        .configure(
            reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(5))
                .redirect(reqwest::redirect::Policy::none()),
        )
        .and_then(reqwest::ClientBuilder::build)?;
    let url = format!("{}{CALLBACK_PATH}", turn.node);
    let response = client
        .post(&url)
        .header(TOKEN_HEADER, &turn.token)
        .json(&serde_json::json!({
            "target": args.target.to_string(),
            "text": args.text.join(" "),
        }))
        .send()
        .await
        .with_context(|| format!("cannot reach the node at {url}"))?;
    let status = response.status();
    let body = response.bytes().await?;
    if !status.is_success() {
        let reason = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        bail!("the node refused to delegate ({status}): {reason}");
    }
    let answer: TurnAnswer =
        serde_json::from_slice(&body).with_context(|| format!("{url} answered {body:?}"))?;
    let mut out = std::io::stdout();
    if context.json {
        write_json(
            &mut out,
            &serde_json::json!({ "answer": answer.answer, "failed": answer.failed }),
        )?;
    } else if !answer.failed {
        writeln!(out, "{}", answer.answer.trim_end())?;
    }
    out.flush()?;
    if answer.failed {
        bail!("{}: {}", args.target, answer.answer);
    }
    Ok(())
}
