//! `mew send <TARGET> <TEXT>...`: send a message to an agent and print the task it runs.

use std::io::Write;

use clap::Args;
use mew_cards::{
    ContextId, Message, SendMessageConfiguration, SendMessageRequest, SendMessageResponse, TaskId,
};
use mew_transport::{AgentTransport as _, CallContext};

use super::Context;
use super::bench::BindingArg;
use super::output::{follow, next_step, outcome, render_message, render_task, write_json};
use super::remote::{NodeUrlArgs, Target, connect, parse_target, remote_error};

/// `mew send`.
#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// Who to send to: a role of the node (`wc`), an agent's URL, or `-` for the node's front
    /// agent
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
    /// The binding to use [default: the card's first]
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
/// task ended failed, rejected or canceled.
pub(crate) async fn send(args: SendArgs, context: &Context) -> anyhow::Result<()> {
    let agent = connect(&args.target, &args.node, &context.config, args.binding).await?;
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
