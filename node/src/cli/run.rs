//! `mew run [--role R] "prompt"`: run one task of a role, on the project's running node or else
//! in this process without HTTP, and print its answer as it streams.

use std::io::Write;

use anyhow::anyhow;
use clap::Args;
use mew_cards::{ContextId, Message};
use mew_transport::AgentTransport;

use super::Failure;
use super::local::{Ending, Printer, Terminal, converse, node_agent};
use super::output::outcome;
use crate::config::Config;
use crate::node::{Runtime, load_catalog};

/// `mew run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The role to run [default: node.default_role]
    #[arg(long, value_name = "ROLE")]
    pub(crate) role: Option<String>,
    /// Continue this context (the conversation of an earlier run or chat)
    #[arg(long, value_name = "ID")]
    pub(crate) context: Option<String>,
    /// The prompt; several words are joined with spaces
    #[arg(required = true, num_args = 1..)]
    pub(crate) prompt: Vec<String>,
    #[command(flatten)]
    pub(crate) data: super::DataDirArgs,
}

/// Runs the prompt as a task of the role and follows it to its end: the answer on
/// `terminal.out`, progress and questions on `terminal.err`. With `json`, the task's events are
/// `StreamResponse` JSON lines. When a node serves the project (`mew up`), the task runs there,
/// where `mew tasks` and other nodes see it; otherwise the node's runtime (roles, task store,
/// task manager; no HTTP) starts in this process for it.
///
/// Succeeds when the task completes (or the agent answers with a message); fails with
/// [`Failure::Runtime`] when it fails, is canceled or rejected, or waits for input nobody can
/// give, and with [`Failure::Interrupted`] after a Ctrl-C, which cancels it.
pub(crate) async fn run<O: Write, E: Write>(
    args: RunArgs,
    config: Config,
    json: bool,
    terminal: &mut Terminal<O, E>,
) -> Result<(), Failure> {
    let name = args
        .role
        .clone()
        .unwrap_or_else(|| config.node.default_role.clone());
    if let Some((url, agent)) = node_agent(&config, Some(&name))
        .await
        .map_err(Failure::Runtime)?
    {
        let asks_permission = load_catalog(&config)
            .get(&name)
            .is_none_or(|role| !role.is_command());
        if !json {
            terminal
                .note(
                    &mut Printer::new(json, true),
                    &format!("mew: on the node at {url}\n"),
                )
                .map_err(|error| Failure::Runtime(error.into()))?;
        }
        return follow(&agent, asks_permission, args, json, terminal).await;
    }
    let env = std::env::vars().collect();
    let runtime = Runtime::load(config, env).await.map_err(Failure::Runtime)?;
    let ended = match runtime.known_role(&name) {
        Ok(role) => {
            let agent = runtime.agent(&role);
            follow(agent.as_ref(), !role.is_command(), args, json, terminal).await
        }
        Err(error) => Err(Failure::Usage(error)),
    };
    runtime.shutdown().await;
    ended
}

/// Sends the prompt to `agent` and follows the task (see [`run`]); `asks_permission` when the
/// role's questions are permission asks (a model role's).
async fn follow<O: Write, E: Write>(
    agent: &dyn AgentTransport,
    asks_permission: bool,
    args: RunArgs,
    json: bool,
    terminal: &mut Terminal<O, E>,
) -> Result<(), Failure> {
    let mut message = Message::user_text(args.prompt.join(" "));
    message.context_id = args.context.map(ContextId::from);
    let mut printer = Printer::new(json, true);
    let ending = converse(agent, message, asks_permission, terminal, &mut printer)
        .await
        .map_err(Failure::Runtime)?;
    match ending {
        Ending::Message => Ok(()),
        Ending::Task(task) => match task.status.state {
            mew_cards::TaskState::InputRequired | mew_cards::TaskState::AuthRequired => Err(
                Failure::Runtime(anyhow!("task {} stopped and waits for input", task.id)),
            ),
            _ => outcome(&task, false).map_err(Failure::Runtime),
        },
        // How the task ended is printed already.
        Ending::Interrupted(_) => Err(Failure::Interrupted(anyhow!("interrupted"))),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;
    use mew_tests::model::{ErrorKind, ScriptedModel, Step};
    use serde_json::json;

    use super::*;
    use crate::cli::local::Interrupts;
    use crate::cli::local::testing::{Project, printed, role, terminal};
    use crate::cli::{Cli, Command};

    fn args(role: Option<&str>, prompt: &str) -> RunArgs {
        RunArgs {
            role: role.map(str::to_owned),
            context: None,
            prompt: vec![prompt.to_owned()],
            data: crate::cli::DataDirArgs::default(),
        }
    }

    #[test]
    fn run_takes_a_role_a_context_and_joins_the_prompt() {
        let cli = Cli::try_parse_from([
            "mew",
            "run",
            "--role",
            "writer",
            "--context",
            "c1",
            "write",
            "the",
            "file",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("expected run, got {:?}", cli.command);
        };
        assert_eq!(args.role.as_deref(), Some("writer"));
        assert_eq!(args.context.as_deref(), Some("c1"));
        assert_eq!(args.prompt.join(" "), "write the file");
        assert!(Cli::try_parse_from(["mew", "run"]).is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_prints_the_answer_as_it_streams_and_succeeds() {
        let model = ScriptedModel::start(vec![
            Step::text("Hello from the model.")
                .with_chunks(3)
                .expect_last_user("say hello"),
        ])
        .unwrap();
        let project = Project::new(Some(&model), &[]);
        let mut terminal = terminal("", true);

        let result = run(
            args(None, "say hello"),
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await;

        assert!(result.is_ok(), "{result:?}");
        let (out, err) = printed(&terminal);
        assert_eq!(out, "Hello from the model.\n");
        assert!(err.starts_with("[completed] task "), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        let requests = model.requests();
        assert_eq!(requests.len(), 1);
        // The default role ran: general-purpose.
        assert!(
            requests[0]
                .system_text()
                .contains("You are general-purpose"),
            "{}",
            requests[0].system_text()
        );
        model.assert_done();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_asks_before_bash_and_a_yes_runs_the_command() {
        let model = ScriptedModel::start(vec![
            Step::tool_call("call_1", "bash", json!({"command": "echo done > out.txt"})),
            Step::text("Wrote it.").expect_tool_results(["call_1"]),
        ])
        .unwrap();
        let project = Project::new(
            Some(&model),
            &[("writer.md", &role("writer", "tools: [bash]\n"))],
        );
        let mut terminal = terminal("y\n", true);

        let result = run(
            args(Some("writer"), "write the file"),
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await;

        assert!(result.is_ok(), "{result:?}");
        assert_eq!(
            std::fs::read_to_string(project.path("out.txt")).unwrap(),
            "done\n"
        );
        let (out, err) = printed(&terminal);
        assert_eq!(out, "Wrote it.\n");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines[0], "? bash wants to run: echo done > out.txt");
        assert_eq!(
            lines[1],
            "  Reply \"yes\" to allow it; anything else refuses it."
        );
        // A terminal echoes the answer and its newline; this input is not echoed.
        assert_eq!(lines[2], "allow? [y/N]   → bash: echo done > out.txt");
        assert_eq!(lines[3], "  ✓ bash");
        assert!(lines[4].starts_with("[completed] task "), "{err}");
        assert_eq!(lines.len(), 5, "{err}");
        let requests = model.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[1].tool_result_ids(), ["call_1"]);
        model.assert_done();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_puts_an_mcp_servers_question_and_sends_the_line_typed() {
        let model = ScriptedModel::start(vec![
            Step::tool_call("call_1", "mcp__hermetic__ask", json!({})),
            Step::text("Greeted Ada.")
                .expect_tool_results(["call_1"])
                .expect_last_user("hello Ada"),
        ])
        .unwrap();
        let extra = format!(
            "permissions:\n  allow: [mcp__hermetic__ask]\nmcp_servers:\n  hermetic:\n    command: {}\n",
            mew_tests::mcp::server_bin().unwrap().display()
        );
        let project = Project::with_config(
            Some(&model),
            &[("greeter.md", &role("greeter", "tools: [mcp__hermetic]\n"))],
            &extra,
        );
        let mut terminal = terminal("Ada\n", true);

        let result = run(
            args(Some("greeter"), "greet me"),
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await;

        assert!(result.is_ok(), "{result:?}");
        let (out, err) = printed(&terminal);
        assert_eq!(out, "Greeted Ada.\n");
        let lines: Vec<&str> = err.lines().collect();
        assert!(
            lines.contains(
                &"? The MCP server hermetic asks (for mcp__hermetic__ask): What is your name?"
            ),
            "{err}"
        );
        // Not a permission: the prompt takes words, not y/N.
        assert!(!err.contains("allow? [y/N]"), "{err}");
        model.assert_done();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_sends_a_no_to_the_model_as_a_refusal() {
        let model = ScriptedModel::start(vec![
            Step::tool_call("call_1", "bash", json!({"command": "rm -rf build"})),
            Step::text("Understood, I will not delete it.")
                .expect_tool_results(["call_1"])
                .expect_last_user("did not allow"),
        ])
        .unwrap();
        let project = Project::new(
            Some(&model),
            &[("cleaner.md", &role("cleaner", "tools: [bash]\n"))],
        );
        std::fs::create_dir(project.path("build")).unwrap();
        let mut terminal = terminal("n\n", true);

        let result = run(
            args(Some("cleaner"), "clean up"),
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await;

        assert!(result.is_ok(), "{result:?}");
        assert!(project.path("build").is_dir(), "the refused command ran");
        let (out, err) = printed(&terminal);
        assert_eq!(out, "Understood, I will not delete it.\n");
        assert!(err.contains("? bash wants to run: rm -rf build\n"), "{err}");
        assert!(err.contains("allow? [y/N] "), "{err}");
        assert!(!err.contains("→ bash"), "the tool started: {err}");
        model.assert_done();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_refuses_asks_when_the_input_is_not_a_terminal() {
        let model = ScriptedModel::start(vec![
            Step::tool_call("call_1", "bash", json!({"command": "touch made.txt"})),
            Step::text("Not allowed, so I stopped.").expect_last_user("did not allow"),
        ])
        .unwrap();
        let project = Project::new(
            Some(&model),
            &[("maker.md", &role("maker", "tools: [bash]\n"))],
        );
        // A "y" on a pipe is not an answer: nobody saw the question.
        let mut terminal = terminal("y\n", false);

        let result = run(
            args(Some("maker"), "make it"),
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await;

        assert!(result.is_ok(), "{result:?}");
        assert!(!project.path("made.txt").exists());
        let (out, err) = printed(&terminal);
        assert_eq!(out, "Not allowed, so I stopped.\n");
        assert!(
            err.contains("  refused: the input is not a terminal\n"),
            "{err}"
        );
        assert!(!err.contains("allow?"), "{err}");
        model.assert_done();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_fails_with_the_reason_when_the_task_fails() {
        let model = ScriptedModel::start(vec![Step::error(
            400,
            ErrorKind::InvalidRequestError,
            "the prompt is malformed",
        )])
        .unwrap();
        let project = Project::new(Some(&model), &[]);
        let mut terminal = terminal("", true);

        let result = run(
            args(None, "hello"),
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await;

        let failure = result.unwrap_err();
        assert_eq!(failure.exit_code(), 1);
        assert!(
            format!("{:#}", failure.error()).ends_with(" failed"),
            "{:#}",
            failure.error()
        );
        let (out, err) = printed(&terminal);
        assert_eq!(out, "");
        assert!(err.starts_with("[failed] task "), "{err}");
        assert!(err.contains("the prompt is malformed"), "{err}");
        model.assert_done();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ctrl_c_cancels_the_task_and_exits_130() {
        let sleeper = "---\nname: sleeper\ndescription: Sleeps.\ncommand: [sleep, \"30\"]\n---\n";
        let project = Project::new(None, &[("sleeper.md", sleeper)]);
        let (interrupt, interrupts) = Interrupts::channel();
        let mut terminal = crate::cli::local::Terminal::new(
            std::io::Cursor::new(String::new()),
            Vec::new(),
            Vec::new(),
            true,
            interrupts,
        );
        interrupt.send(()).unwrap();

        let result = run(
            args(Some("sleeper"), "wake me"),
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await;

        let failure = result.unwrap_err();
        assert_eq!(failure.exit_code(), 130);
        assert_eq!(failure.error().to_string(), "interrupted");
        let (out, err) = printed(&terminal);
        assert_eq!(out, "");
        assert!(err.starts_with("\n[canceled] task "), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unknown_role_is_a_usage_error() {
        let project = Project::new(None, &[]);
        let mut terminal = terminal("", true);
        let failure = run(
            args(Some("nope"), "hi"),
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await
        .unwrap_err();
        assert_eq!(failure.exit_code(), 2);
        assert_eq!(
            failure.error().to_string(),
            "there is no role \"nope\"; known roles: Explore, Plan, general-purpose"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_data_directory_in_use_is_refused() {
        let project = Project::new(None, &[]);
        let env = std::collections::HashMap::new();
        let node = Runtime::load(project.config.clone(), env).await.unwrap();
        let mut terminal = terminal("", true);

        let failure = run(
            args(None, "hi"),
            project.config.clone(),
            false,
            &mut terminal,
        )
        .await
        .unwrap_err();

        assert_eq!(failure.exit_code(), 1);
        assert!(
            failure
                .error()
                .to_string()
                .contains("is in use by another mew process"),
            "{:#}",
            failure.error()
        );
        node.shutdown().await;
        // Once the other one is gone, the directory is free again.
        let again = Runtime::load(project.config.clone(), std::collections::HashMap::new()).await;
        assert!(again.is_ok());
    }
}
