//! The README's guided path ("A first hour"), followed word for word: its shell blocks run in
//! an empty directory with the built `mew` as the installed one, the two `mew up` blocks as
//! the two nodes, and the answers and the tree are what the README says.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, ensure};
use mew_tests::example::{section, sh_blocks_of};
use mew_tests::node::mew_bin;
use mew_tests::process::{ChildProcess, command, workspace_root};

/// A port nothing listens on now.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// What a block runs with: the directory, `HOME`, `PATH` with the built `mew` first, and the
/// first node's port as `MEW_PORT` (where the README's first node listens by default).
struct Shell<'a> {
    dir: &'a Path,
    path: String,
    first: u16,
}

impl Shell<'_> {
    /// `sh -c block` here.
    fn command(&self, block: &str) -> tokio::process::Command {
        let mut sh = command("sh");
        sh.arg("-c")
            .arg(block)
            .current_dir(self.dir)
            .env_clear()
            .env("HOME", self.dir.join("home"))
            .env("PATH", &self.path)
            .env("MEW_PORT", self.first.to_string());
        sh
    }

    /// Runs `block` to its end: exit code, stdout, stderr.
    async fn run(&self, block: &str) -> anyhow::Result<(i32, String, String)> {
        let output = tokio::time::timeout(Duration::from_secs(120), self.command(block).output())
            .await
            .with_context(|| format!("{block} did not end"))??;
        Ok((
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ))
    }

    /// Starts the node `block` runs, until it listens; its log goes to `log` in the directory.
    async fn up(&self, block: &str, log: &str) -> anyhow::Result<ChildProcess> {
        let log = self.dir.join(log);
        let mut sh = self.command(&format!("exec {block}"));
        sh.stderr(Stdio::from(std::fs::File::create(&log)?));
        let started =
            ChildProcess::spawn_until("mew up", sh, "mew: listening on ", Duration::from_secs(120))
                .await;
        match started {
            Ok((node, _)) => Ok(node),
            Err(error) => {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                Err(error.context(format!("{block} did not start; its log:\n{log}")))
            }
        }
    }
}

#[tokio::test]
async fn the_readmes_guided_path_works_as_written() -> anyhow::Result<()> {
    let guided = section(
        &workspace_root().join("README.md"),
        "A first hour: two nodes delegating to each other",
    )?;
    let blocks = sh_blocks_of(&guided)?;
    let [install, setup, up_second, up_first, sends, tree] = blocks.as_slice() else {
        anyhow::bail!("the guided path has six shell blocks: {blocks:?}");
    };
    ensure!(install.trim() == "cargo install --path node", "{install}");
    ensure!(
        up_second.trim() == "mew up --project second --port 7778",
        "{up_second}"
    );
    ensure!(up_first.trim() == "mew up --project first", "{up_first}");

    // The README's ports, 7777 and 7778, are free ones here.
    let (first, second) = (free_port()?, free_port()?);
    let at_second = |block: &str| block.replace("7778", &second.to_string());
    let dir = tempfile::Builder::new().prefix("mew-guided-").tempdir()?;
    std::fs::create_dir(dir.path().join("home"))?;
    let bin = mew_bin()?;
    let shell = Shell {
        dir: dir.path(),
        path: format!(
            "{}:{}",
            bin.parent().context("the binary's directory")?.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
        first,
    };

    let (code, out, err) = shell.run(&at_second(setup)).await?;
    ensure!(code == 0, "the setup: exit {code}\n{out}{err}");
    let _second = shell.up(&at_second(up_second), "second.log").await?;
    let _first = shell.up(up_first, "first.log").await?;

    let (code, out, err) = shell.run(sends).await?;
    ensure!(code == 0, "the sends: exit {code}\n{out}{err}");
    for answer in [
        "Hello, world!",
        "Hello, from the first node!",
        "Hello, straight from the command line!",
    ] {
        ensure!(out.contains(answer), "no {answer:?} in\n{out}{err}");
    }
    let ids = mew_tests::node::printed_task_ids(&out);
    let [_, ask_second, _] = ids.as_slice() else {
        anyhow::bail!("three tasks printed: {out}");
    };

    let (code, out, err) = shell.run(&tree.replace("TASK_ID", ask_second)).await?;
    ensure!(code == 0, "the tree: exit {code}\n{out}{err}");
    ensure!(
        out.contains("ask-second") && out.contains("hello"),
        "the list shows the roles:\n{out}"
    );
    let child = format!("hello @ 127.0.0.1:{second}");
    ensure!(
        out.lines()
            .any(|line| line.starts_with(ask_second) && line.contains("ask-second"))
            && out.lines().any(|line| line.starts_with("└─ ")
                && line.contains(&child)
                && line.contains("completed")),
        "the tree shows ask-second and its child {child:?}, completed:\n{out}"
    );
    Ok(())
}
