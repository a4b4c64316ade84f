//! `mew plugins list|install|remove|verify`: Claude Code plugins, installed as a unit.
//!
//! Installed plugins live in an install root, `~/.mew/plugins` (`--scope user`, the default)
//! or the project's `.mew/plugins` (`--scope project`), whose `plugins-lock.json` records
//! where each came from and the SHA-256 of each of its files. A node loads only plugins whose
//! files are as installed; `verify` shows what changed.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::anyhow;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use super::{Context, Failure};
use crate::plugins::install::{self, InstallError, InstallOptions};
use crate::plugins::{Plugin, PluginScope, read_lock, standard_roots};

/// `mew plugins ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum PluginsCommand {
    /// List the installed plugins that load (name, scope, version, what they bring) and the
    /// problems of those that do not
    List,
    /// Install the plugin at SOURCE (a folder with .claude-plugin/plugin.json, or a git URL,
    /// optionally ending in #BRANCH-OR-TAG) into ~/.mew/plugins or, with --scope project, the
    /// project's .mew/plugins
    Install(InstallArgs),
    /// Remove an installed plugin: its folder and its lock entry
    Remove(RemoveArgs),
    /// Compare the installed plugins with their lock files; exit 1 if any changed
    Verify,
}

/// An install root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scope {
    /// ~/.mew/plugins: every project sees it
    User,
    /// The project's .mew/plugins: this project only (its hooks wait for `mew hooks trust`)
    Project,
}

/// `mew plugins install`.
#[derive(Debug, Args)]
pub(crate) struct InstallArgs {
    /// A folder, or a git URL (https://, ssh://, file://, git@host:path), #REF optional
    pub(crate) source: String,
    /// Install for the user (~/.mew/plugins) or for the project (.mew/plugins)
    #[arg(long, value_enum, default_value_t = Scope::User)]
    pub(crate) scope: Scope,
}

/// `mew plugins remove`.
#[derive(Debug, Args)]
pub(crate) struct RemoveArgs {
    /// The plugin's name
    pub(crate) name: String,
    /// Remove it from the user's install root or the project's
    #[arg(long, value_enum, default_value_t = Scope::User)]
    pub(crate) scope: Scope,
}

/// Runs a `mew plugins` subcommand, printing to `out`. A source that is neither a folder nor
/// a git URL is a usage error (exit 2); a failed install or removal, or a changed plugin, a
/// runtime one (exit 1).
pub(crate) async fn run(
    command: &PluginsCommand,
    context: &Context,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    match command {
        PluginsCommand::List => list(context, out, false).map_err(Failure::Runtime),
        PluginsCommand::Verify => list(context, out, true).map_err(Failure::Runtime),
        PluginsCommand::Install(args) => install(args, context, out).await,
        PluginsCommand::Remove(args) => remove(args, context, out),
    }
}

/// The install root of `scope`.
fn root_of(scope: Scope, context: &Context) -> anyhow::Result<PathBuf> {
    let config = &context.config;
    let wanted = match scope {
        Scope::User => PluginScope::User,
        Scope::Project => PluginScope::Project,
    };
    standard_roots(config.home_dir.as_deref(), &config.project_dir)
        .into_iter()
        .find(|(_, scope)| *scope == wanted)
        .map(|(root, _)| root)
        .ok_or_else(|| {
            anyhow!("no home directory is known for ~/.mew/plugins; use --scope project")
        })
}

fn plugin_json(plugin: &Plugin) -> Value {
    let relative = |paths: Vec<PathBuf>| -> Vec<String> {
        paths
            .iter()
            .map(|path| {
                path.strip_prefix(&plugin.root)
                    .unwrap_or(path)
                    .display()
                    .to_string()
            })
            .collect()
    };
    json!({
        "name": plugin.name,
        "scope": plugin.scope.as_str(),
        "version": plugin.manifest.version,
        "description": plugin.manifest.description,
        "dir": plugin.root.display().to_string(),
        "agents": relative(plugin.agent_paths()),
        "skills": relative(plugin.skill_paths()),
        "commands": relative(plugin.command_paths()),
        "hooks": plugin.hooks_file().map(|file| relative(vec![file])),
        "mcpServers": plugin.mcp_file().map(|file| relative(vec![file])),
    })
}

/// Lists the plugins that load and the problems of the others; with `strict`, a problem
/// fails the command (`verify`).
fn list(context: &Context, out: &mut dyn Write, strict: bool) -> anyhow::Result<()> {
    let loaded = crate::node::load_plugins(&context.config);
    let plugins: Vec<Value> = loaded.plugins.iter().map(plugin_json).collect();
    let problems: Vec<String> = loaded.problems.iter().map(ToString::to_string).collect();
    if context.json {
        serde_json::to_writer_pretty(
            &mut *out,
            &json!({"plugins": plugins, "problems": problems}),
        )?;
        writeln!(out)?;
    } else {
        if plugins.is_empty() {
            writeln!(
                out,
                "no plugins (install one: mew plugins install FOLDER-OR-GIT-URL)"
            )?;
        }
        for plugin in &loaded.plugins {
            let version = plugin.manifest.version.as_deref().unwrap_or("-");
            let parts: Vec<&str> = [
                (!plugin.agent_paths().is_empty()).then_some("agents"),
                (!plugin.skill_paths().is_empty()).then_some("skills"),
                (!plugin.command_paths().is_empty()).then_some("commands"),
                plugin.hooks_file().map(|_| "hooks"),
                plugin.mcp_file().map(|_| "mcp"),
            ]
            .into_iter()
            .flatten()
            .collect();
            writeln!(
                out,
                "{}  {}  {version}  {}",
                plugin.name,
                plugin.scope.as_str(),
                parts.join(",")
            )?;
        }
        if !problems.is_empty() {
            writeln!(out, "\nproblems:")?;
            for problem in &problems {
                writeln!(out, "  {problem}")?;
            }
        }
    }
    out.flush()?;
    if strict && !problems.is_empty() {
        return Err(anyhow!("{} plugin problem(s); see above", problems.len()));
    }
    Ok(())
}

async fn install(
    args: &InstallArgs,
    context: &Context,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let root = root_of(args.scope, context).map_err(Failure::Runtime)?;
    // The CLI's own environment, for `git` (its base variables only).
    let env: HashMap<String, String> = std::env::vars().collect();
    let installed =
        match install::install(&args.source, &root, &env, &InstallOptions::default()).await {
            Ok(installed) => installed,
            Err(error) => {
                let usage = matches!(error, InstallError::Source(_));
                let error = anyhow::Error::new(error).context(format!(
                    "cannot install {} into {}",
                    args.source,
                    root.display()
                ));
                return Err(if usage {
                    Failure::Usage(error)
                } else {
                    Failure::Runtime(error)
                });
            }
        };
    let printed = if context.json {
        serde_json::to_writer_pretty(
            &mut *out,
            &json!({
                "name": installed.name,
                "dir": installed.dir.display().to_string(),
                "replaced": installed.replaced,
                "commit": installed.entry.commit,
                "files": installed.entry.files.len(),
                "warnings": installed.warnings,
            }),
        )
        .map_err(anyhow::Error::from)
        .and_then(|()| writeln!(out).map_err(anyhow::Error::from))
    } else {
        let verb = if installed.replaced {
            "replaced"
        } else {
            "installed"
        };
        let mut text = format!(
            "{verb} plugin {} in {} ({} files",
            installed.name,
            installed.dir.display(),
            installed.entry.files.len()
        );
        if let Some(commit) = &installed.entry.commit {
            text.push_str(&format!(", commit {commit}"));
        }
        text.push_str(")\n");
        for warning in &installed.warnings {
            text.push_str(&format!("warning: {warning}\n"));
        }
        if args.scope == Scope::Project {
            text.push_str("its hooks run once trusted: mew hooks trust\n");
        }
        out.write_all(text.as_bytes()).map_err(anyhow::Error::from)
    };
    printed.map_err(Failure::Runtime)
}

fn remove(args: &RemoveArgs, context: &Context, out: &mut dyn Write) -> Result<(), Failure> {
    let root = root_of(args.scope, context).map_err(Failure::Runtime)?;
    if let Err(error) = read_lock(&root) {
        return Err(Failure::Runtime(error.into()));
    }
    match install::remove(&root, &args.name) {
        Ok(_) => writeln!(out, "removed plugin {}", args.name)
            .map_err(|error| Failure::Runtime(error.into())),
        Err(error @ InstallError::NotInstalled(_)) => Err(Failure::Usage(error.into())),
        Err(error) => Err(Failure::Runtime(error.into())),
    }
}
