//! The `mew` command line: global flags, one enum of subcommands, one dispatch.
//!
//! Adding a subcommand: a module here with its `Args` and a `run` function, a variant of
//! `Command`, and an arm in `run`. Every subcommand gets a `Context` with the resolved
//! configuration (except `init`, which runs before the configuration is loaded, so that it can
//! replace one that does not load); subcommands that take the `node:` override flags say so in
//! `Command::node_args`.

mod agents;
mod bench;
mod card;
mod chat;
mod config;
mod healthcheck;
mod hooks;
mod init;
mod local;
mod logging;
mod mcp;
mod output;
mod peers;
mod plugins;
mod remote;
mod run;
mod send;
mod skills;
mod status;
mod tasks;
mod tree;
mod up;

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};

use crate::config::{Config, FlagOverrides, LoadedConfig, LogFormat, Sources};

pub use logging::init_logging;

/// Runs the `mew` command line with the process's arguments and environment, and returns its
/// exit status: 0 on success, 1 for a runtime error, 2 for a usage or configuration error.
/// Errors are printed to stderr as `mew: <message>: <cause>: ...`.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version go to stdout with status 0, usage errors to stderr with 2.
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
    };
    match execute(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) if is_broken_pipe(failure.error()) => {
            // The reader went away (`mew tasks list | head`): not an error of ours.
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("mew: {:#}", failure.error());
            ExitCode::from(failure.exit_code())
        }
    }
}

/// True when `error` comes from writing to a closed pipe.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `mew`: a multi-agent node that publishes roles as A2A agents.
#[derive(Debug, Parser)]
#[command(name = "mew", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Flags every subcommand takes.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Global options")]
pub(crate) struct GlobalArgs {
    /// Read this configuration file too, above the user's and the project's
    #[arg(long, global = true, value_name = "FILE", env = "MEW_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// The project directory, whose .mew/ holds configuration and roles [default: the current
    /// directory]
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) project: Option<PathBuf>,
    /// Log filter directive, such as `debug` or `info,mew_node=trace` [config: log.level, env:
    /// MEW_LOG_LEVEL]
    #[arg(long, global = true, value_name = "DIRECTIVE")]
    pub(crate) log_level: Option<String>,
    /// Log format, `text` or `json` [config: log.format, env: MEW_LOG_FORMAT]
    #[arg(long, global = true, value_name = "FORMAT")]
    pub(crate) log_format: Option<LogFormat>,
    /// Print data as JSON, for programs
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

/// Flags that override the `node:` settings, for the subcommands that use them.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct NodeArgs {
    /// Address to listen on [config: node.host, env: MEW_HOST]
    #[arg(long, value_name = "HOST")]
    pub(crate) host: Option<String>,
    /// Port to listen on, 0 for any free one [config: node.port, env: MEW_PORT]
    #[arg(long, value_name = "PORT")]
    pub(crate) port: Option<u16>,
    /// Directory for the node's state [config: node.data_dir, env: MEW_DATA_DIR]
    #[arg(long, value_name = "DIR")]
    pub(crate) data_dir: Option<PathBuf>,
}

/// `--data-dir` alone, for the subcommands that run the node's runtime without serving it
/// (`mew run`, `mew chat`).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct DataDirArgs {
    /// Directory for the node's state [config: node.data_dir, env: MEW_DATA_DIR]
    #[arg(long, value_name = "DIR")]
    pub(crate) data_dir: Option<PathBuf>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Write a commented .mew/config.yaml and an example role into the project, to start from
    Init(init::InitArgs),
    /// Run the node: serve every known role as an A2A agent
    Up(up::UpArgs),
    /// Inspect the configuration
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Load an A2A agent and report requests per second and latency
    Bench(bench::BenchArgs),
    /// Fetch an agent card, check it, and summarize it
    Card(card::CardArgs),
    /// List the roles the node serves, where each is defined, and problems in role files
    Agents,
    /// Send a message to an agent: a role of the node, a URL, or - for the front agent
    Send(send::SendArgs),
    /// List, show, cancel or watch the tasks of a node, or show the tree of a task's delegations
    Tasks(tasks::TasksArgs),
    /// Show what a running node says of itself: its roles and problems, and the replicas that
    /// share its task store with their last heartbeat and running tasks
    Status(status::StatusArgs),
    /// Run one task of a role, on the project's running node or in this process, and print its
    /// answer as it streams
    Run(run::RunArgs),
    /// Talk with a role in the terminal, on the project's running node or in this process: each
    /// line continues the conversation
    Chat(chat::ChatArgs),
    /// Fetch every configured peer now and list its state and roles; exit 1 if one is
    /// unreachable
    Peers,
    /// Connect to the configured MCP servers and list them or their tools
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// List skills; install them from GitHub, remove them, verify them against the lock file
    #[command(subcommand)]
    Skills(skills::SkillsCommand),
    /// List Claude Code plugins; install them from a folder or a git URL, remove them, verify
    /// them against the lock file
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
    /// List the hook rules; trust or untrust the project's hook files
    #[command(subcommand)]
    Hooks(hooks::HooksCommand),
    /// Exit 0 when the node is ready (its /readyz answers 200), for health checks
    Healthcheck(healthcheck::HealthcheckArgs),
    /// Print a completion script for a shell, e.g. `mew completions bash > ~/.local/share/bash-completion/completions/mew`
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell
        shell: clap_complete::Shell,
    },
}

impl Command {
    /// Whether this subcommand connects to the configured MCP servers.
    fn uses_mcp(&self) -> bool {
        matches!(
            self,
            Command::Up(_) | Command::Run(_) | Command::Chat(_) | Command::Mcp(_)
        )
    }

    /// The `node:` override flags this subcommand takes, if any.
    fn node_args(&self) -> Option<&NodeArgs> {
        match self {
            Command::Up(args) => Some(&args.node),
            Command::Config(config::ConfigCommand::Show(args)) => Some(&args.node),
            Command::Init(_)
            | Command::Bench(_)
            | Command::Card(_)
            | Command::Agents
            | Command::Send(_)
            | Command::Tasks(_)
            | Command::Status(_)
            | Command::Run(_)
            | Command::Chat(_)
            | Command::Peers
            | Command::Mcp(_)
            | Command::Skills(_)
            | Command::Plugins(_)
            | Command::Hooks(_)
            | Command::Healthcheck(_)
            | Command::Completions { .. } => None,
        }
    }
}

/// What every subcommand runs with.
#[derive(Debug)]
pub(crate) struct Context {
    /// The resolved configuration.
    pub(crate) config: Config,
    /// The merged layers behind it, with the origin of every key.
    pub(crate) loaded: LoadedConfig,
    /// `--json`: print data as JSON.
    pub(crate) json: bool,
}

/// Why a command failed, which decides the exit status.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A bad command line or configuration: exit status 2.
    Usage(anyhow::Error),
    /// The command ran and failed: exit status 1.
    Runtime(anyhow::Error),
    /// The user interrupted the command (Ctrl-C): exit status 130.
    Interrupted(anyhow::Error),
}

impl Failure {
    fn error(&self) -> &anyhow::Error {
        match self {
            Failure::Usage(error) | Failure::Runtime(error) | Failure::Interrupted(error) => error,
        }
    }

    fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Runtime(_) => 1,
            Failure::Interrupted(_) => 130,
        }
    }
}

impl Cli {
    /// The configuration sources for this command line: `--project` (default: the current
    /// directory) and `--config` made absolute, the given environment and home, the flags.
    fn sources(
        &self,
        env: HashMap<String, String>,
        home: Option<PathBuf>,
    ) -> anyhow::Result<Sources> {
        let project = self.project_dir()?;
        // A mistyped --project would otherwise become a new, empty project (its task store
        // made there); only `mew init` makes one.
        if self.global.project.is_some() && !project.is_dir() {
            if project.exists() {
                anyhow::bail!("the project {} is not a directory", project.display());
            }
            anyhow::bail!(
                "the project directory {} does not exist (`mew init --project {}` makes one)",
                project.display(),
                project.display()
            );
        }
        let config_file = match &self.global.config {
            Some(file) => Some(
                std::path::absolute(file)
                    .with_context(|| format!("resolving the config file {}", file.display()))?,
            ),
            None => None,
        };
        // The MCP servers of the installed plugins (those whose files are as installed).
        let plugins =
            crate::plugins::load(&crate::plugins::standard_roots(home.as_deref(), &project));
        let plugin_mcp = plugins
            .plugins
            .iter()
            .filter_map(|plugin| Some((plugin.mcp_file()?, plugin.root.clone())))
            .collect();
        Ok(Sources {
            home,
            project,
            config_file,
            env,
            flags: self.flag_overrides(),
            plugin_mcp,
        })
    }

    /// The project directory, absolute: `--project`, or the current directory.
    fn project_dir(&self) -> anyhow::Result<PathBuf> {
        let project = self.global.project.as_deref().unwrap_or(Path::new("."));
        std::path::absolute(project)
            .with_context(|| format!("resolving the project directory {}", project.display()))
    }

    fn flag_overrides(&self) -> FlagOverrides {
        let node = self.command.node_args().cloned().unwrap_or_default();
        let data_dir = match &self.command {
            Command::Run(args) => args.data.data_dir.clone(),
            Command::Chat(args) => args.data.data_dir.clone(),
            _ => None,
        };
        FlagOverrides {
            host: node.host,
            port: node.port,
            data_dir: node.data_dir.or(data_dir),
            log_level: self.global.log_level.clone(),
            log_format: self.global.log_format,
        }
    }
}

/// Loads the configuration, starts logging and the tokio runtime, and runs the subcommand.
fn execute(cli: Cli) -> Result<(), Failure> {
    if let Command::Init(args) = &cli.command {
        // Before loading: `mew init --force` replaces a configuration that does not load.
        let project = cli.project_dir().map_err(Failure::Usage)?;
        let flag = init::project_flag(cli.global.project.as_deref());
        return init::init(
            args,
            &project,
            &flag,
            cli.global.json,
            &mut std::io::stdout().lock(),
        )
        .map_err(Failure::Runtime);
    }
    let sources = cli
        .sources(process_env(), std::env::home_dir())
        .map_err(Failure::Usage)?;
    let loaded = Config::load(&sources).map_err(|error| Failure::Usage(error.into()))?;
    let config = loaded
        .resolve()
        .map_err(|error| Failure::Usage(error.into()))?;
    // Only the node logs its progress by default: the other commands print what they were
    // asked for, and their log says only what went wrong, unless a level is set somewhere.
    let level_set = !matches!(
        loaded.origin("log.level"),
        None | Some(crate::config::Origin::Default)
    );
    let level = if level_set || matches!(cli.command, Command::Up(_)) {
        config.log.level.as_str()
    } else {
        "warn"
    };
    // The node's JSON log is its output (stdout); a client's output is what it was asked for.
    let node = matches!(cli.command, Command::Up(_));
    let traces = node.then_some((&config.telemetry, config.node.name.as_str()));
    init_logging(level, config.log.format, node, traces).map_err(Failure::Runtime)?;
    if cli.command.uses_mcp() {
        config.log_mcp_warnings();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")
        .map_err(Failure::Runtime)?;
    let context = Context {
        config,
        loaded,
        json: cli.global.json,
    };
    runtime.block_on(run(cli.command, context))
}

/// Runs one subcommand.
async fn run(command: Command, context: Context) -> Result<(), Failure> {
    match command {
        Command::Init(args) => init::init(
            &args,
            &context.config.project_dir,
            "",
            context.json,
            &mut std::io::stdout().lock(),
        )
        .map_err(Failure::Runtime),
        Command::Up(_) => up::up(context.config).await.map_err(Failure::Runtime),
        Command::Config(command) => {
            config::run(&command, &context, &mut std::io::stdout().lock()).map_err(Failure::Runtime)
        }
        Command::Bench(args) => bench::bench(args, &context).await.map_err(Failure::Runtime),
        Command::Card(args) => card::card(args, &context).await.map_err(Failure::Runtime),
        Command::Healthcheck(args) => healthcheck::healthcheck(&args, &context.config)
            .await
            .map_err(Failure::Runtime),
        Command::Agents => agents::agents(&context, &mut std::io::stdout().lock())
            .await
            .map_err(Failure::Runtime),
        Command::Send(args) => send::send(args, &context).await.map_err(Failure::Runtime),
        Command::Tasks(args) => tasks::tasks(args, &context).await.map_err(Failure::Runtime),
        Command::Status(args) => status::status(&args, &context, &mut std::io::stdout().lock())
            .await
            .map_err(Failure::Runtime),
        Command::Run(args) => {
            let mut terminal = local::Terminal::stdio();
            run::run(args, context.config, context.json, &mut terminal).await
        }
        Command::Chat(args) => {
            let mut terminal = local::Terminal::stdio();
            chat::chat(args, context.config, context.json, &mut terminal).await
        }
        Command::Peers => peers::peers(&context, &mut std::io::stdout().lock())
            .await
            .map_err(Failure::Runtime),
        Command::Mcp(command) => mcp::run(&command, &context, &mut std::io::stdout().lock())
            .await
            .map_err(Failure::Runtime),
        Command::Skills(command) => {
            skills::run(&command, &context, &mut std::io::stdout().lock()).await
        }
        Command::Plugins(command) => {
            plugins::run(&command, &context, &mut std::io::stdout().lock()).await
        }
        Command::Hooks(command) => hooks::run(&command, &context, &mut std::io::stdout().lock()),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            // Into memory first: clap_complete panics when its writer fails (`| head`).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "mew", &mut script);
            std::io::Write::write_all(&mut std::io::stdout().lock(), &script)
                .map_err(|e| Failure::Runtime(e.into()))
        }
    }
}

/// The process's environment, as text: the configuration reads its `MEW_*` variables and
/// expands `${VAR}` in MCP server `env` and `headers` values from it (and nothing else; its
/// values never appear in debug output).
fn process_env() -> HashMap<String, String> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect()
}
