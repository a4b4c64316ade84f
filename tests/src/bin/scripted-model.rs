//! `scripted-model`: serves a scripted model (see `mew_tests::model`) for end-to-end tests.
//!
//! Usage: `scripted-model --script FILE [--port N] [--key KEY] [--repeat]`
//!
//! `FILE` is a YAML list of steps (JSON if it ends in `.json`). Prints `READY <base_url>` on
//! stdout once listening (clients append `/v1/messages` or `/v1/chat/completions`), and each
//! failure on stderr as it happens. `GET <base_url>/_script/status` reports progress.
//!
//! `--repeat` is for load tests (`scripts/bench`): after the last step, every further request is
//! answered by the last step again, forever, counted but not recorded. Without it a request after
//! the last step is a failure, as in tests.
//!
//! Stops on SIGTERM, SIGINT, or when stdin is a pipe or socket and closes (a null or terminal
//! stdin is not watched). Exits with 0 if every step was used and nothing failed, else with 1
//! after listing the problems on stderr; 2 on bad arguments or a bad script.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;

use anyhow::{Context, bail};
use mew_tests::model::{Options, ScriptedModel, load_script};
use tokio::signal::unix::{SignalKind, signal};

/// The command line.
struct Args {
    script: PathBuf,
    port: u16,
    key: Option<String>,
    repeat: bool,
}

/// How to call this program.
const USAGE: &str = "usage: scripted-model --script FILE [--port N] [--key KEY] [--repeat]";

impl Args {
    /// Reads the arguments after the program name.
    fn parse(mut args: impl Iterator<Item = String>) -> anyhow::Result<Self> {
        let mut script = None;
        let mut port = 0;
        let mut key = None;
        let mut repeat = false;
        while let Some(arg) = args.next() {
            let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--script" => script = Some(PathBuf::from(value()?)),
                "--port" => {
                    let text = value()?;
                    port = text.parse().with_context(|| format!("bad port {text:?}"))?;
                }
                "--key" => key = Some(value()?),
                "--repeat" => repeat = true,
                "-h" | "--help" => bail!("{USAGE}"),
                other => bail!("unknown argument {other:?}\n{USAGE}"),
            }
        }
        Ok(Self {
            script: script.context(USAGE)?,
            port,
            key,
            repeat,
        })
    }
}

#[tokio::main]
async fn main() {
    let code = match run().await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("scripted-model: {e:#}");
            2
        }
    };
    std::process::exit(code);
}

/// Serves the script until told to stop; returns the exit code.
async fn run() -> anyhow::Result<i32> {
    let args = Args::parse(std::env::args().skip(1))?;
    let steps = load_script(&args.script)?;
    let model = ScriptedModel::start_with(
        steps,
        Options {
            key: args.key,
            port: args.port,
            log_failures: true,
            repeat: args.repeat,
        },
    )?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "READY {}", model.base_url())?;
    stdout.flush()?;

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let stdin_closed = stdin_closed()?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = stdin_closed => {}
    }

    let problems = model.problems();
    let status = model.status();
    eprintln!(
        "scripted-model: {} request(s), {} failure(s), {} step(s) left",
        status.requests,
        status.failures.len(),
        status.remaining
    );
    if problems.is_empty() {
        return Ok(0);
    }
    for problem in &problems {
        eprintln!("{problem}");
    }
    Ok(1)
}

/// Completes when stdin, if it is a pipe or a socket, reaches its end; never otherwise.
fn stdin_closed() -> anyhow::Result<impl Future<Output = ()>> {
    let stdin = std::io::stdin();
    let file = std::fs::File::from(stdin.as_fd().try_clone_to_owned()?);
    let kind = file.metadata()?.file_type();
    let watched = kind.is_fifo() || kind.is_socket();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    if watched {
        // A plain thread: a blocked read must not hold the runtime's shutdown.
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin();
            let mut buffer = [0u8; 4096];
            while matches!(stdin.read(&mut buffer), Ok(n) if n > 0) {}
            let _ = tx.send(());
        });
    }
    Ok(async move {
        if watched {
            let _ = rx.await;
        } else {
            std::future::pending::<()>().await;
        }
    })
}
