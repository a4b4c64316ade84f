//! `mew hooks list|trust|untrust`: the hook rules of the user's and the project's files, and
//! the trust that lets a project's hooks run.
//!
//! A project's hook files (`.mew/hooks.yaml`, `.claude/settings.json`,
//! `.claude/settings.local.json`) run only once the user trusted their current content with
//! `mew hooks trust`, which records their SHA-256 in `~/.mew/trusted-hooks.json`; an edited
//! file is skipped until it is trusted again. The node reads hooks when it starts.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::Subcommand;
use serde_json::{Value, json};

use super::{Context, Failure};
use crate::hooks::rules::{Format, Scope, SourceStatus};
use crate::hooks::trust::FileTrust;
use crate::hooks::{TrustStore, default_trust_file, load, trust_project, untrust_project};

/// `mew hooks ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum HooksCommand {
    /// List every hook rule (name, event, file, scope, whether it runs) and the problems of
    /// the hook files; project files that are not trusted are listed too
    List,
    /// Trust the current content of the project's hook files, so that the node runs them
    Trust,
    /// Stop trusting the project's hook files
    Untrust,
}

/// Runs a `mew hooks` subcommand, printing to `out`. A missing home directory or an
/// unreadable trust file fails with exit status 1, as does a hook file `trust` cannot read.
pub(crate) fn run(
    command: &HooksCommand,
    context: &Context,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    match command {
        HooksCommand::List => list(context, out),
        HooksCommand::Trust => trust(context, out),
        HooksCommand::Untrust => untrust(context, out),
    }
    .map_err(Failure::Runtime)
}

/// The user's trust file.
fn trust_file(context: &Context) -> anyhow::Result<PathBuf> {
    context
        .config
        .home_dir
        .as_deref()
        .map(default_trust_file)
        .ok_or_else(|| anyhow!("no home directory is known for ~/.mew/trusted-hooks.json"))
}

/// Writes `value` as pretty JSON and a newline.
fn write_json(out: &mut dyn Write, value: &Value) -> anyhow::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::User => "user",
        Scope::Project => "project",
    }
}

fn format_name(format: Format) -> &'static str {
    match format {
        Format::Mew => "hooks.yaml",
        Format::ClaudeSettings => "claude-settings",
    }
}

// ---- list ----

/// Loads the hook files twice: as the node would (with the user's trust) to learn which files
/// run, and trusting every file to show the rules of the untrusted ones too.
fn list(context: &Context, out: &mut dyn Write) -> anyhow::Result<()> {
    let listing = listing(context);
    if context.json {
        write_json(out, &listing)?;
    } else {
        out.write_all(render_list(&listing).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// The JSON form of `mew hooks list`: `{rules, files, problems}`.
fn listing(context: &Context) -> Value {
    let config = &context.config;
    let files = crate::node::hook_files(config, &crate::node::load_plugins(config));
    let mut problems: Vec<Value> = Vec::new();
    let trust = match trust_file(context) {
        Ok(file) => TrustStore::load(&file).unwrap_or_else(|error| {
            problems.push(json!({
                "path": file.display().to_string(),
                "rule": null,
                "message": format!("{error}; no project hooks are trusted"),
            }));
            TrustStore::default()
        }),
        Err(_) => TrustStore::default(),
    };
    let actual = load(&files, &trust);
    // Every file trusted, to list the rules an untrusted file would add.
    let mut everything = trust.clone();
    for report in &actual.sources {
        if report.status == SourceStatus::Untrusted {
            everything.insert(&report.source.path, &report.source.hash);
        }
    }
    let all = load(&files, &everything);
    let untrusted = |path: &Path| {
        actual
            .sources
            .iter()
            .any(|report| report.source.path == path && report.status == SourceStatus::Untrusted)
    };
    let rules: Vec<Value> = all
        .rules
        .iter()
        .map(|rule| {
            json!({
                "name": rule.name,
                "event": rule.event.as_str(),
                "file": rule.source.path.display().to_string(),
                "scope": scope_name(rule.source.scope),
                "format": format_name(rule.source.format),
                "trusted": !untrusted(&rule.source.path),
            })
        })
        .collect();
    let sources: Vec<Value> = actual
        .sources
        .iter()
        .map(|report| {
            let (status, rules) = match report.status {
                SourceStatus::Loaded { rules } => ("loaded", Some(rules)),
                SourceStatus::Untrusted => ("untrusted", None),
                SourceStatus::Broken => ("broken", None),
            };
            json!({
                "path": report.source.path.display().to_string(),
                "scope": scope_name(report.source.scope),
                "format": format_name(report.source.format),
                "status": status,
                "rules": rules,
                "sha256": report.source.hash,
            })
        })
        .collect();
    // The problems of every file's rules, trusted or not; an untrusted file's own problem
    // ("skipped until trusted") comes from the real load.
    let mut seen = std::collections::HashSet::new();
    for problem in actual.problems.iter().chain(&all.problems) {
        if seen.insert(problem.to_string()) {
            problems.push(json!({
                "path": problem.path,
                "rule": problem.rule,
                "message": problem.message,
            }));
        }
    }
    json!({ "rules": rules, "files": sources, "problems": problems })
}

/// The text of `mew hooks list` from its JSON form: a table of the rules, the untrusted
/// project files, then the problems.
fn render_list(listing: &Value) -> String {
    const HEADER: [&str; 5] = ["NAME", "EVENT", "SCOPE", "TRUSTED", "FILE"];
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let empty = Vec::new();
    let rules = listing["rules"].as_array().unwrap_or(&empty);
    let files = listing["files"].as_array().unwrap_or(&empty);
    let problems = listing["problems"].as_array().unwrap_or(&empty);
    let mut output = String::new();
    if rules.is_empty() {
        output.push_str("no hooks\n");
    } else {
        let rows: Vec<[String; 5]> = rules
            .iter()
            .map(|rule| {
                let trusted = if rule["trusted"].as_bool().unwrap_or(false) {
                    "yes"
                } else {
                    "no"
                };
                [
                    text(&rule["name"]),
                    text(&rule["event"]),
                    text(&rule["scope"]),
                    trusted.to_owned(),
                    text(&rule["file"]),
                ]
            })
            .collect();
        let mut widths = HEADER.map(str::len);
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: [&str; 5]| {
            let mut line = String::new();
            for (cell, width) in cells.iter().zip(widths) {
                line.push_str(&format!("{cell:<width$}  "));
            }
            format!("{}\n", line.trim_end())
        };
        output.push_str(&line(HEADER));
        for row in &rows {
            output.push_str(&line(row.each_ref().map(String::as_str)));
        }
    }
    let untrusted: Vec<&Value> = files
        .iter()
        .filter(|file| file["status"] == "untrusted")
        .collect();
    if !untrusted.is_empty() {
        output.push_str("\nuntrusted project hook files (their hooks do not run):\n");
        for file in untrusted {
            output.push_str(&format!(
                "  {}: new or changed since trusted; run `mew hooks trust`\n",
                text(&file["path"])
            ));
        }
    }
    // An untrusted file's own problem is the section above.
    let problems: Vec<&Value> = problems
        .iter()
        .filter(|problem| {
            !(problem["rule"].is_null()
                && files
                    .iter()
                    .any(|file| file["status"] == "untrusted" && file["path"] == problem["path"]))
        })
        .collect();
    if !problems.is_empty() {
        output.push_str("\nproblems:\n");
        for problem in problems {
            let path = text(&problem["path"]);
            let message = text(&problem["message"]);
            match problem["rule"].as_str() {
                Some(rule) => {
                    output.push_str(&format!("  {path}: hook `{rule}` skipped: {message}\n"));
                }
                None => output.push_str(&format!("  {path}: {message}\n")),
            }
        }
    }
    output
}

// ---- trust / untrust ----

/// Trusts the project's hook files as they are now. A file that cannot be read or parsed is
/// reported and fails the command (the others are trusted all the same).
fn trust(context: &Context, out: &mut dyn Write) -> anyhow::Result<()> {
    let trust_file = trust_file(context)?;
    let project = &context.config.project_dir;
    let plugins = crate::node::plugin_hook_files(
        &crate::node::load_plugins(&context.config),
        Some(crate::plugins::PluginScope::Project),
    );
    let report = trust_project(&trust_file, project, &plugins)?;
    let mut broken = Vec::new();
    let files: Vec<Value> = report
        .iter()
        .map(|(path, outcome)| match outcome {
            FileTrust::Trusted { hash } => {
                json!({"path": path.display().to_string(), "status": "trusted", "sha256": hash})
            }
            FileTrust::NoHooks => json!({"path": path.display().to_string(), "status": "none"}),
            FileTrust::Broken { message } => {
                broken.push(format!("{}: {message}", path.display()));
                json!({
                    "path": path.display().to_string(),
                    "status": "broken",
                    "message": message,
                })
            }
        })
        .collect();
    if context.json {
        write_json(
            out,
            &json!({
                "project": project.display().to_string(),
                "trustFile": trust_file.display().to_string(),
                "files": files,
            }),
        )?;
    } else {
        let trusted: Vec<&(PathBuf, FileTrust)> = report
            .iter()
            .filter(|(_, outcome)| matches!(outcome, FileTrust::Trusted { .. }))
            .collect();
        if trusted.is_empty() && broken.is_empty() {
            writeln!(out, "no hook files in {}", project.display())?;
        }
        for (path, _) in &trusted {
            writeln!(out, "trusted {}", path.display())?;
        }
        if !trusted.is_empty() {
            writeln!(
                out,
                "a running node reads its hooks when it starts: restart it"
            )?;
        }
    }
    out.flush()?;
    if broken.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(
            "not trusted, fix and run again: {}",
            broken.join("; ")
        ))
    }
}

/// Forgets the trust of the project's hook files.
fn untrust(context: &Context, out: &mut dyn Write) -> anyhow::Result<()> {
    let trust_file = trust_file(context)?;
    let project = &context.config.project_dir;
    let plugins = crate::node::plugin_hook_files(
        &crate::node::load_plugins(&context.config),
        Some(crate::plugins::PluginScope::Project),
    );
    let removed = untrust_project(&trust_file, project, &plugins)?;
    if context.json {
        let removed: Vec<String> = removed.iter().map(|p| p.display().to_string()).collect();
        write_json(
            out,
            &json!({"project": project.display().to_string(), "untrusted": removed}),
        )?;
    } else if removed.is_empty() {
        writeln!(out, "no trusted hook files in {}", project.display())?;
    } else {
        for path in &removed {
            writeln!(out, "untrusted {}", path.display())?;
        }
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::fs;

    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};
    use crate::config::{Config, Sources};

    const USER_RULE: &str = "hooks:\n  - name: greet\n    event: SessionStart\n    \
                             action: {type: prompt, text: hi}\n";
    const PROJECT_RULE: &str = "hooks:\n  - name: gate\n    event: TaskReceived\n    \
                                action: {type: shell, command: 'exit 0'}\n  \
                                - name: bad\n    event: NoSuchEvent\n    \
                                action: {type: prompt, text: x}\n";

    fn hooks_command(args: &[&str]) -> HooksCommand {
        let cli = Cli::try_parse_from(std::iter::once("mew").chain(args.iter().copied())).unwrap();
        match cli.command {
            Command::Hooks(command) => command,
            other => panic!("expected hooks, got {other:?}"),
        }
    }

    /// A context for a home and a project in `dir`.
    fn context(dir: &Path, json: bool) -> Context {
        let project = dir.join("project");
        fs::create_dir_all(project.join(".mew")).unwrap();
        let sources = Sources {
            home: Some(dir.join("home")),
            ..Sources::new(&project)
        };
        let loaded = Config::load(&sources).unwrap();
        let config = loaded.resolve().unwrap();
        Context {
            config,
            loaded,
            json,
        }
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn output(command: &HooksCommand, context: &Context) -> (Result<(), Failure>, String) {
        let mut out = Vec::new();
        let result = run(command, context, &mut out);
        (result, String::from_utf8(out).unwrap())
    }

    #[test]
    fn parses_the_subcommands() {
        assert!(matches!(
            hooks_command(&["hooks", "list"]),
            HooksCommand::List
        ));
        assert!(matches!(
            hooks_command(&["hooks", "list", "--json"]),
            HooksCommand::List
        ));
        assert!(matches!(
            hooks_command(&["hooks", "trust"]),
            HooksCommand::Trust
        ));
        assert!(matches!(
            hooks_command(&["hooks", "untrust"]),
            HooksCommand::Untrust
        ));
        assert!(Cli::try_parse_from(["mew", "hooks"]).is_err());
    }

    #[test]
    fn lists_user_and_project_rules_and_trust_lets_the_project_ones_run() {
        let dir = tempfile::tempdir().unwrap();
        let context = context(dir.path(), false);
        write(&dir.path().join("home/.mew/hooks.yaml"), USER_RULE);
        write(
            &context.config.project_dir.join(".mew/hooks.yaml"),
            PROJECT_RULE,
        );

        let (result, text) = output(&HooksCommand::List, &context);
        assert!(result.is_ok());
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAME") && lines[0].contains("TRUSTED"));
        assert!(
            lines[1].starts_with("greet") && lines[1].contains("user") && lines[1].contains("yes")
        );
        assert!(
            lines[2].starts_with("gate")
                && lines[2].contains("project")
                && lines[2].contains(" no ")
        );
        assert!(text.contains("run `mew hooks trust`"), "{text}");
        // The rule problems of an untrusted file are shown too; its own problem is the
        // untrusted section.
        assert!(text.contains("hook `bad` skipped"), "{text}");
        assert!(!text.contains("trusted again"), "{text}");

        let (result, text) = output(&HooksCommand::Trust, &context);
        assert!(result.is_ok());
        assert!(
            text.starts_with("trusted ") && text.contains("hooks.yaml"),
            "{text}"
        );
        let json_context = Context {
            json: true,
            ..context
        };
        let (result, text) = output(&HooksCommand::List, &json_context);
        assert!(result.is_ok());
        let listing: Value = serde_json::from_str(&text).unwrap();
        let gate = listing["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|rule| rule["name"] == "gate")
            .unwrap();
        assert_eq!(gate["trusted"], true);
        assert_eq!(gate["event"], "TaskReceived");
        assert_eq!(gate["scope"], "project");
        assert_eq!(listing["files"][1]["status"], "loaded");

        let (result, text) = output(&HooksCommand::Untrust, &json_context);
        assert!(result.is_ok());
        let untrusted: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(untrusted["untrusted"].as_array().unwrap().len(), 1);
        let (_, text) = output(&HooksCommand::Untrust, &json_context);
        let untrusted: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(untrusted["untrusted"], json!([]));
    }

    #[test]
    fn trust_fails_on_a_broken_file_and_says_so_without_hooks() {
        let dir = tempfile::tempdir().unwrap();
        let context = context(dir.path(), false);
        let (result, text) = output(&HooksCommand::Trust, &context);
        assert!(result.is_ok());
        assert!(text.starts_with("no hook files in "), "{text}");
        write(
            &context.config.project_dir.join(".claude/settings.json"),
            "{",
        );
        let (result, _) = output(&HooksCommand::Trust, &context);
        let Err(Failure::Runtime(error)) = result else {
            panic!("expected a runtime failure");
        };
        assert!(error.to_string().contains("settings.json"), "{error}");
    }

    #[test]
    fn without_a_home_trust_fails_and_list_works() {
        let dir = tempfile::tempdir().unwrap();
        let mut context = context(dir.path(), false);
        context.config.home_dir = None;
        let (result, text) = output(&HooksCommand::List, &context);
        assert!(result.is_ok());
        assert_eq!(text, "no hooks\n");
        assert!(matches!(
            output(&HooksCommand::Trust, &context).0,
            Err(Failure::Runtime(_))
        ));
    }
}
