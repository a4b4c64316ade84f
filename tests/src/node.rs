//! `MewNode`: the real `mew` binary, run in a temporary home, project and data directory.
//!
//! The binary is never built here: it is `MEW_BIN`, or `mew` in the target
//! directory of the test executable (`cargo build --workspace` puts it there).

use std::fs::{self, OpenOptions};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail, ensure};
use mew_cards::{Message, SendMessageRequest, SendMessageResponse, Task};
use mew_transport::{AgentTransport, Binding, CallContext, ClientOptions, RemoteAgent};
use rustix::process::Signal;
use tempfile::TempDir;

use crate::model::ScriptedModel;
use crate::process::{ChildProcess, command, workspace_root};
use crate::python::python;

/// What `mew up` prints once it accepts connections, before its URL.
const LISTENING: &str = "mew: listening on ";

/// How long a node may take to start listening (a loaded 2-core machine starts many at once).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a node may take to stop after SIGTERM (its shutdown grace is 10 s by default).
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The project configuration that makes the echo role (see [`echo_role`]) the default role.
pub const ECHO_CONFIG: &str = "node:\n  default_role: echo\n";

/// The `mew` binary: `MEW_BIN`, else `target/<profile>/mew` beside this test executable.
pub fn mew_bin() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("MEW_BIN") {
        let path = PathBuf::from(path);
        ensure!(
            path.is_file(),
            "MEW_BIN is {}, which is not a file",
            path.display()
        );
        return Ok(path);
    }
    let exe = std::env::current_exe().context("cannot find the test executable")?;
    // target/<profile>/deps/all-<hash>, or target/<profile>/<name> for a binary.
    let mut dir = exe
        .parent()
        .context("the test executable has no directory")?;
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir = dir.parent().context("deps/ has no parent")?;
    }
    let bin = dir.join("mew");
    ensure!(
        bin.is_file(),
        "there is no mew binary at {} (or set MEW_BIN): build it first: cargo build -p mew-node",
        bin.display()
    );
    warn_if_stale(&bin);
    Ok(bin)
}

/// Says so (once, on stderr, which a failing test shows) when a source file of the node is
/// newer than `bin`: `cargo test -p mew-tests` does not rebuild the binary.
fn warn_if_stale(bin: &Path) {
    static CHECKED: OnceLock<()> = OnceLock::new();
    CHECKED.get_or_init(|| {
        let Ok(built) = fs::metadata(bin).and_then(|m| m.modified()) else {
            return;
        };
        let root = workspace_root();
        let newer = ["node", "cards", "transport"]
            .iter()
            .flat_map(|krate| newer_files(&root.join(krate), built))
            .next();
        if let Some(file) = newer {
            eprintln!(
                "warning: {} is older than {}: these tests run the old binary; \
                 cargo build --workspace first",
                bin.display(),
                file.display()
            );
        }
    });
}

/// Files under `dir` (`src/` and `Cargo.toml`) modified after `time`.
fn newer_files(dir: &Path, time: SystemTime) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.join("src"), dir.join("Cargo.toml")];
    while let Some(path) = pending.pop() {
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = fs::read_dir(&path) {
                pending.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
            }
        } else if meta.modified().is_ok_and(|modified| modified > time) {
            found.push(path);
        }
    }
    found
}

/// The text of a role file named `name` that runs `tests/peers/echo_role.py` with the test
/// Python, with `input: message`.
pub fn echo_role(name: &str) -> anyhow::Result<String> {
    let python = python()?;
    let script = workspace_root().join("tests/peers/echo_role.py");
    Ok(format!(
        "---\n\
         name: {name}\n\
         description: The echo agent's scripts (echo, stream, ask, wait, fail, message, history) as a command role.\n\
         command: \"'{python}' '{script}'\"\n\
         input: message\n\
         tags: [test, echo]\n\
         examples: [echo hi, stream 3, ask]\n\
         ---\n\
         Runs tests/peers/echo_role.py once per turn.\n",
        python = python.display(),
        script = script.display(),
    ))
}

/// A role file for `name` that runs `command` (one line; YAML-quoted here) on the message text.
pub fn command_role(name: &str, command: &str) -> String {
    let quoted = serde_json::to_string(command).unwrap_or_default();
    format!(
        "---\nname: {name}\ndescription: Runs {name} for the tests.\ncommand: {quoted}\n---\n\
         A command role of the end-to-end tests.\n"
    )
}

/// The `agent:` and `providers:` sections that run model roles on `model` over the
/// OpenAI-compatible API (model alias `sonnet`, no retries).
pub fn scripted_model_config(model: &ScriptedModel) -> String {
    format!(
        "agent:\n  provider: scripted\n  model: sonnet\n\
         providers:\n  scripted:\n    kind: openai\n    base_url: {}/v1\n    max_retries: 0\n",
        model.base_url()
    )
}

/// Sends `message` to role `role` of `node` over JSON-RPC and waits for its task.
pub async fn send(node: &MewNode, role: &str, message: Message) -> anyhow::Result<Task> {
    let agent = node
        .agent(&format!("/agents/{role}"), Binding::JsonRpc)
        .await?;
    match agent
        .send_message(&CallContext::default(), SendMessageRequest::new(message))
        .await?
    {
        SendMessageResponse::Task(task) => Ok(task),
        other => bail!("expected a task, got {other:?}"),
    }
}

/// [`send`] of a user message with `text`.
pub async fn send_text(node: &MewNode, role: &str, text: &str) -> anyhow::Result<Task> {
    send(node, role, Message::user_text(text)).await
}

/// The text of a task's status message; empty when it has none.
pub fn status_text(task: &Task) -> String {
    task.status
        .message
        .as_ref()
        .map(Message::text)
        .unwrap_or_default()
}

/// The ids of the tasks `mew send` printed (its `task: ID` lines), in order.
pub fn printed_task_ids(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|line| line.strip_prefix("task:"))
        .map(|id| id.trim().to_owned())
        .collect()
}

/// Polls `check` every 50 ms until it gives a value, for at most `timeout`.
///
/// This is synchronisation with a deadline, for states a test cannot be told about.
pub async fn poll_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{what}: not so after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A `mew up` process with its own temporary `home/`, `project/` and `data/`.
///
/// The directory outlives restarts and goes when this is dropped; the node
/// (its whole process group) is killed then.
#[derive(Debug)]
pub struct MewNode {
    // Declared first so the process is killed before its directory goes.
    process: Option<ChildProcess>,
    dir: TempDir,
    url: String,
    /// Environment variables given to the node besides HOME and PATH.
    env: Vec<(String, String)>,
    /// The port to listen on; 0 picks a free one.
    port: u16,
    /// The open-file limit (soft and hard) the node runs under, if set.
    file_limit: Option<u64>,
    /// A configuration layer given with `--config`, above the project's, if set.
    config_file: Option<PathBuf>,
    /// The `HOME` of the node and its clients, when not its own `home/`.
    home: Option<PathBuf>,
    /// Whether the node runs without `--data-dir`, in its default data directory.
    default_data_dir: bool,
}

impl MewNode {
    /// The directories of a node, with no process yet: write roles and config, then
    /// [`MewNode::launch`].
    pub fn new() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("mew-node-")
            .tempdir()
            .context("cannot create the node's temporary directory")?;
        for sub in ["home", "project/.mew/agents", "data"] {
            fs::create_dir_all(dir.path().join(sub))
                .with_context(|| format!("cannot create {sub}"))?;
        }
        Ok(Self {
            process: None,
            dir,
            url: String::new(),
            env: Vec::new(),
            port: 0,
            file_limit: None,
            config_file: None,
            home: None,
            default_data_dir: false,
        })
    }

    /// Starts a node serving `roles`, given as (file name in `.mew/agents/`, file text).
    pub async fn start(roles: &[(&str, &str)]) -> anyhow::Result<Self> {
        Self::start_with_config("", roles).await
    }

    /// Starts a node with `config` as its project's `.mew/config.yaml` (none if empty).
    pub async fn start_with_config(config: &str, roles: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut node = Self::new()?;
        if !config.is_empty() {
            node.write_config(config)?;
        }
        for (file, text) in roles {
            node.write_role(file, text)?;
        }
        node.launch().await?;
        Ok(node)
    }

    /// Starts a node whose default role is the echo role (`echo.md`), plus `roles`;
    /// `config` is added to [`ECHO_CONFIG`] (other top-level sections, such as `limits:`).
    pub async fn start_echo(config: &str, roles: &[(&str, &str)]) -> anyhow::Result<Self> {
        let echo = echo_role("echo")?;
        let mut all = vec![("echo.md", echo.as_str())];
        all.extend_from_slice(roles);
        Self::start_with_config(&format!("{ECHO_CONFIG}{config}"), &all).await
    }

    /// The directories of a node whose default role is the echo role, with no process yet
    /// ([`MewNode::start_echo`] without the launch).
    pub fn new_echo(config: &str) -> anyhow::Result<Self> {
        let node = Self::new()?;
        node.write_config(&format!("{ECHO_CONFIG}{config}"))?;
        node.write_role("echo.md", &echo_role("echo")?)?;
        Ok(node)
    }

    /// Gives the node an environment variable (from its next launch on).
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.env.push((name.to_owned(), value.to_owned()));
    }

    /// Runs the node under an open-file limit of `files` (soft and hard, as `ulimit -n` sets
    /// it), from its next launch on.
    pub fn set_file_limit(&mut self, files: u64) {
        self.file_limit = Some(files);
    }

    /// Gives the node and its client commands `--config FILE` (from the next launch on).
    pub fn set_config_file(&mut self, file: impl Into<PathBuf>) {
        self.config_file = Some(file.into());
    }

    /// Gives the node and its clients `home` as `HOME` instead of their own (from the next
    /// launch on): nodes of several projects of one user.
    pub fn set_home(&mut self, home: impl Into<PathBuf>) {
        self.home = Some(home.into());
    }

    /// Runs the node without `--data-dir` (from the next launch on), in the data directory it
    /// chooses by default: the project's `.mew/data`.
    pub fn use_default_data_dir(&mut self) {
        self.default_data_dir = true;
    }

    /// Makes the node listen on `port` (from its next launch on) instead of a free one.
    pub fn set_port(&mut self, port: u16) {
        self.port = port;
    }

    /// Writes a role file into the project's `.mew/agents/`.
    pub fn write_role(&self, file: &str, text: &str) -> anyhow::Result<()> {
        let path = self.roles_dir().join(file);
        fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Writes the project's `.mew/config.yaml`.
    pub fn write_config(&self, yaml: &str) -> anyhow::Result<()> {
        let path = self.project_dir().join(".mew/config.yaml");
        fs::write(&path, yaml).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Runs `mew up` on this node's directories and waits until it listens.
    pub async fn launch(&mut self) -> anyhow::Result<()> {
        ensure!(self.process.is_none(), "the node is running already");
        let bin = mew_bin()?;
        // Every launch appends to one log, so a restart keeps what came before.
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .context("cannot open the node's log")?;
        // Under a file limit, a shell sets it and becomes the node (`exec`: the same process).
        let mut cmd = match self.file_limit {
            Some(files) => {
                let mut cmd = command("sh");
                cmd.arg("-c")
                    .arg(format!("ulimit -n {files} && exec \"$0\" \"$@\""))
                    .arg(&bin);
                cmd
            }
            None => command(&bin),
        };
        cmd.env_clear()
            .env("HOME", self.home_dir())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(self.dir.path())
            .arg("--project")
            .arg(self.project_dir())
            .args(self.config_args())
            .arg("up")
            .args(["--port", &self.port.to_string(), "--host", "127.0.0.1"])
            .stderr(Stdio::from(log));
        if !self.default_data_dir {
            cmd.arg("--data-dir").arg(self.data_dir());
        }
        match ChildProcess::spawn_until("mew", cmd, LISTENING, START_TIMEOUT).await {
            Ok((process, url)) => {
                self.process = Some(process);
                self.url = url;
                Ok(())
            }
            Err(e) => Err(e.context(format!("the node did not start; its log:\n{}", self.log()))),
        }
    }

    /// The node's base URL: the front agent's card is at `{url}/.well-known/agent-card.json`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The base URL of role `role`'s agent.
    pub fn role_url(&self, role: &str) -> String {
        format!("{}/agents/{role}", self.url)
    }

    /// A client for the agent at `path` under the node's URL (`""` for the front agent,
    /// `/agents/R` for role R), forced to `binding`.
    pub async fn agent(&self, path: &str, binding: Binding) -> anyhow::Result<RemoteAgent> {
        self.agent_with_headers(path, binding, reqwest::header::HeaderMap::new())
            .await
    }

    /// [`MewNode::agent`] that sends `headers` (credentials, say) with every request.
    pub async fn agent_with_headers(
        &self,
        path: &str,
        binding: Binding,
        headers: reqwest::header::HeaderMap,
    ) -> anyhow::Result<RemoteAgent> {
        let url = format!("{}{path}", self.url);
        let options = ClientOptions {
            binding: Some(binding),
            headers,
            ..ClientOptions::default()
        };
        let agent = RemoteAgent::resolve_with(&url, options)
            .await
            .with_context(|| format!("cannot resolve the agent at {url}"))?;
        ensure!(
            agent.binding() == binding,
            "the client picked {:?}",
            agent.binding()
        );
        Ok(agent)
    }

    /// `GET {url}{path}`: the status code and the body as JSON.
    pub async fn get_json(&self, path: &str) -> anyhow::Result<(u16, serde_json::Value)> {
        let url = format!("{}{path}", self.url);
        let response = reqwest::Client::new()
            .get(&url)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = response.status().as_u16();
        let body = response
            .json()
            .await
            .with_context(|| format!("GET {url}: the body is not JSON"))?;
        Ok((status, body))
    }

    /// The node's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(ChildProcess::id)
    }

    /// Sends the node a signal (SIGSTOP and SIGCONT pause it and let it go on).
    pub fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        self.process
            .as_ref()
            .context("the node is not running")?
            .signal(signal)
    }

    /// Kills the node with SIGKILL (it gets no chance to clean up) and reaps it.
    pub async fn kill_hard(&mut self) -> anyhow::Result<()> {
        let mut process = self.process.take().context("the node is not running")?;
        process.signal(Signal::KILL)?;
        process.wait(STOP_TIMEOUT).await?;
        Ok(())
    }

    /// Stops the node with SIGTERM and waits for it to exit.
    pub async fn stop(&mut self) -> anyhow::Result<ExitStatus> {
        let mut process = self.process.take().context("the node is not running")?;
        process.signal(Signal::TERM)?;
        process.wait(STOP_TIMEOUT).await
    }

    /// Starts the node again on the same directories (stopping it first if it runs).
    /// It listens on a new port: clients must resolve [`MewNode::url`] again.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if self.process.is_some() {
            self.stop().await?;
        }
        self.launch().await
    }

    /// What the node printed on stdout (this run only) and on stderr (every run).
    pub fn output(&self) -> String {
        let stdout = self
            .process
            .as_ref()
            .map(ChildProcess::stdout_lines)
            .unwrap_or_default();
        format!("{}\n{}", stdout.join("\n"), self.log())
    }

    /// What the node wrote on stderr (its log), over every run.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The temporary directory holding `home/`, `project/` and `data/`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs the `mew` client with `args` in this node's home and project and with the
    /// variables given to the node (a minimal environment, as a user's shell beside the node
    /// would have), for at most a minute: its exit code, stdout and stderr.
    pub async fn client(&self, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
        self.client_with_input(args, "").await
    }

    /// [`MewNode::client`] with `input` on its stdin (then closed).
    pub async fn client_with_input(
        &self,
        args: &[&str],
        input: &str,
    ) -> anyhow::Result<(i32, String, String)> {
        use tokio::io::AsyncWriteExt as _;
        let mut cmd = command(mew_bin()?);
        cmd.env_clear()
            .env("HOME", self.home_dir())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .arg("--project")
            .arg(self.project_dir())
            .args(self.config_args())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("cannot run mew")?;
        let mut stdin = child.stdin.take().context("no stdin")?;
        let input = input.to_owned();
        // Written beside the wait, so that a client that does not read cannot block the test.
        let writer = tokio::spawn(async move {
            let _ = stdin.write_all(input.as_bytes()).await;
        });
        let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .with_context(|| format!("mew {} did not end within a minute", args.join(" ")))?
            .context("cannot run mew")?;
        writer.abort();
        Ok((
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ))
    }

    /// `--config FILE` when a layer is set, else nothing.
    fn config_args(&self) -> Vec<std::ffi::OsString> {
        match &self.config_file {
            Some(file) => vec!["--config".into(), file.clone().into_os_string()],
            None => Vec::new(),
        }
    }

    /// The node's `HOME`.
    pub fn home_dir(&self) -> PathBuf {
        self.home
            .clone()
            .unwrap_or_else(|| self.dir.path().join("home"))
    }

    /// The project directory (`--project`).
    pub fn project_dir(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// The project's `.mew/agents/`.
    pub fn roles_dir(&self) -> PathBuf {
        self.project_dir().join(".mew/agents")
    }

    /// The data directory (`--data-dir`, or the project's `.mew/data` by default).
    pub fn data_dir(&self) -> PathBuf {
        if self.default_data_dir {
            self.project_dir().join(".mew/data")
        } else {
            self.dir.path().join("data")
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("node.log")
    }
}
