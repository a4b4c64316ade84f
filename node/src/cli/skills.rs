//! `mew skills list|install|remove|verify`: the skills of every root, and the skills Mew
//! installed from GitHub.
//!
//! Installed skills live in an install root, `~/.mew/skills` (`--scope user`, the default) or
//! the project's `.mew/skills` (`--scope project`), whose `skills-lock.json` records where each
//! came from and the SHA-256 of each of its files; `verify` compares the files with it. (The
//! flag is `--scope` because `--project DIR` is the global flag naming the project.)

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use super::{Context, Failure};
use crate::peers::one_line;
use crate::skills::catalog::Snapshot;
use crate::skills::install::{self, InstallError, InstallScope, Installed, Removed};
use crate::skills::lock::{self, LockEntry, LockFile, VerifyReport};

/// The longest description `mew skills list` shows on its line, in characters.
const DESCRIPTION_WIDTH: usize = 80;

/// `mew skills ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum SkillsCommand {
    /// List the skills of every root, and the Claude Code commands of ~/.claude/commands and
    /// the project's .claude/commands: name, source (user, project or configured; "command"
    /// for a command), mode, whether Mew installed it (locked), description, and the problems
    /// of broken skills and commands
    List,
    /// Install the skill at URL from GitHub (a github.com tree URL, a raw.githubusercontent.com
    /// SKILL.md URL or a skills.sh URL) into ~/.mew/skills or, with --scope project, the
    /// project's .mew/skills
    Install(InstallArgs),
    /// Remove an installed skill: its directory and its lock entry
    Remove(RemoveArgs),
    /// Compare the installed skills with their lock files (changed, missing and extra files);
    /// exit 1 if any drifted
    Verify(VerifyArgs),
}

/// An install root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scope {
    /// ~/.mew/skills: every project sees it
    User,
    /// The project's .mew/skills: this project only
    Project,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project => "project",
        }
    }

    fn other(self) -> Self {
        match self {
            Scope::User => Scope::Project,
            Scope::Project => Scope::User,
        }
    }
}

/// `mew skills install`.
#[derive(Debug, Args)]
pub(crate) struct InstallArgs {
    /// Where the skill is: https://github.com/OWNER/REPO/tree/REF/PATH,
    /// https://raw.githubusercontent.com/OWNER/REPO/REF/PATH/SKILL.md or
    /// https://skills.sh/ORG/NAME
    pub(crate) url: String,
    /// Install for the user (~/.mew/skills) or for the project (.mew/skills)
    #[arg(long, value_enum, default_value_t = Scope::User)]
    pub(crate) scope: Scope,
}

/// `mew skills remove`.
#[derive(Debug, Args)]
pub(crate) struct RemoveArgs {
    /// The skill's name
    pub(crate) name: String,
    /// Remove it from the user's install root (~/.mew/skills) or the project's (.mew/skills)
    #[arg(long, value_enum, default_value_t = Scope::User)]
    pub(crate) scope: Scope,
}

/// `mew skills verify`.
#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// Check only this install root [default: both the user's and the project's]
    #[arg(long, value_enum)]
    pub(crate) scope: Option<Scope>,
}

/// Runs a `mew skills` subcommand, printing to `out`. A bad URL or name is a usage error
/// (exit 2); a failed install or removal, or drift, a runtime one (exit 1).
pub(crate) async fn run(
    command: &SkillsCommand,
    context: &Context,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    match command {
        SkillsCommand::List => list(context, out).map_err(Failure::Runtime),
        SkillsCommand::Install(args) => install(args, context, out).await,
        SkillsCommand::Remove(args) => remove(args, context, out),
        SkillsCommand::Verify(args) => verify(args, context, out).map_err(Failure::Runtime),
    }
}

/// The install root of `scope`.
fn root_of(scope: Scope, context: &Context) -> anyhow::Result<PathBuf> {
    let config = &context.config;
    let install_scope = match scope {
        Scope::User => InstallScope::User,
        Scope::Project => InstallScope::Project,
    };
    install::install_root(
        install_scope,
        config.home_dir.as_deref(),
        &config.project_dir,
    )
    .ok_or_else(|| anyhow!("no home directory is known for ~/.mew/skills; use --scope project"))
}

/// Writes `value` as pretty JSON and a newline.
fn write_json(out: &mut dyn Write, value: &Value) -> anyhow::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

// ---- list ----

/// One lock file of an install root, for `list`.
struct Lock {
    scope: Scope,
    root: PathBuf,
    file: LockFile,
}

impl Lock {
    /// The lock entry of the skill in `dir`, if `dir` is a skill directory of this root that
    /// the lock file knows.
    fn entry(&self, dir: &Path) -> Option<&LockEntry> {
        if dir.parent() != Some(self.root.as_path()) {
            return None;
        }
        let name = dir.file_name()?.to_str()?;
        self.file.skills.get(name)
    }
}

/// Loads the catalog of every root and the lock files of both install roots, and prints
/// them. Broken skills and lock files are listed as problems; they do not fail the command.
fn list(context: &Context, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = &context.config;
    let roots = crate::node::skill_roots(config, &crate::node::load_plugins(config));
    let snapshot = Snapshot::load(&roots);
    let mut problems: Vec<Value> = snapshot
        .problems()
        .iter()
        .map(|problem| json!(problem))
        .collect();
    let mut locks = Vec::new();
    for scope in [Scope::User, Scope::Project] {
        let Ok(root) = root_of(scope, context) else {
            continue;
        };
        match lock::read_lock(&root) {
            Ok(file) => locks.push(Lock { scope, root, file }),
            Err(error) => problems.push(json!({
                "path": lock::lock_path(&root).display().to_string(),
                "severity": "error",
                "message": error.to_string(),
            })),
        }
    }
    let skills: Vec<Value> = snapshot
        .skills()
        .map(|skill| {
            let installed = locks.iter().find_map(|lock| {
                lock.entry(&skill.dir).map(|entry| {
                    json!({
                        "scope": lock.scope.as_str(),
                        "source": entry.source,
                        "resolvedRef": entry.resolved_ref,
                        "installedAt": entry.installed_at,
                    })
                })
            });
            let shadows: Vec<Value> = snapshot
                .shadowed(skill.name())
                .iter()
                .map(|(source, dir)| json!({"source": source, "dir": dir}))
                .collect();
            json!({
                "name": skill.name(),
                "kind": skill.kind,
                "source": skill.source,
                "mode": skill.meta.mode,
                "description": skill.meta.description,
                "argumentHint": skill.meta.argument_hint,
                "modelInvocable": !skill.meta.disable_model_invocation,
                "dir": skill.dir,
                "path": skill.path(),
                "locked": installed.is_some(),
                "installed": installed,
                "shadows": shadows,
            })
        })
        .collect();
    let listing = json!({ "skills": skills, "problems": problems });
    if context.json {
        write_json(out, &listing)?;
    } else {
        out.write_all(render_list(&listing).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// The text of `mew skills list` from its JSON form: a table (name, source, mode, locked,
/// description on one line), each skill's shadowed ones under it, then the problems.
fn render_list(listing: &Value) -> String {
    const HEADER: [&str; 5] = ["NAME", "SOURCE", "MODE", "LOCKED", "DESCRIPTION"];
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let empty = Vec::new();
    let skills = listing["skills"].as_array().unwrap_or(&empty);
    let problems = listing["problems"].as_array().unwrap_or(&empty);
    let rows: Vec<[String; 5]> = skills
        .iter()
        .map(|skill| {
            let locked = match skill["installed"]["scope"].as_str() {
                Some(scope) => format!("yes ({scope})"),
                None => "no".to_owned(),
            };
            let source = match skill["kind"].as_str() {
                Some("command") => format!("{} command", text(&skill["source"])),
                _ => text(&skill["source"]),
            };
            [
                text(&skill["name"]),
                source,
                text(&skill["mode"]),
                locked,
                shorten(&one_line(&text(&skill["description"])), DESCRIPTION_WIDTH),
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
    let mut out = String::new();
    if rows.is_empty() {
        out.push_str(
            "no skills (put one in .mew/skills/NAME/SKILL.md, or install one: mew skills \
             install URL)\n",
        );
    } else {
        out.push_str(&line(HEADER));
        for (row, skill) in rows.iter().zip(skills) {
            out.push_str(&line(row.each_ref().map(String::as_str)));
            for shadowed in skill["shadows"].as_array().unwrap_or(&empty) {
                out.push_str(&format!(
                    "  shadows {} {}\n",
                    text(&shadowed["source"]),
                    text(&shadowed["dir"])
                ));
            }
        }
    }
    if !problems.is_empty() {
        out.push_str("\nproblems:\n");
        for problem in problems {
            out.push_str(&format!(
                "  {}: {}: {}\n",
                text(&problem["severity"]),
                text(&problem["path"]),
                one_line(&text(&problem["message"]))
            ));
        }
    }
    out
}

/// `text` cut to `width` characters, ending in `…` when cut.
fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(width.saturating_sub(1)).collect();
    short.push('…');
    short
}

// ---- install ----

async fn install(
    args: &InstallArgs,
    context: &Context,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let root = root_of(args.scope, context).map_err(Failure::Runtime)?;
    let options = context
        .config
        .skills
        .install_options(|name| std::env::var(name).ok());
    let installed = match install::install(&args.url, &root, &options).await {
        Ok(installed) => installed,
        Err(error) => {
            let usage = matches!(error, InstallError::UnsupportedUrl { .. });
            let error = anyhow::Error::new(error).context(format!(
                "cannot install {} into {}",
                args.url.trim(),
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
        write_json(out, &installed_json(&installed, args.scope))
    } else {
        out.write_all(render_installed(&installed, args.scope).as_bytes())
            .map_err(Into::into)
    };
    printed
        .and_then(|()| out.flush().map_err(Into::into))
        .map_err(Failure::Runtime)
}

fn installed_json(installed: &Installed, scope: Scope) -> Value {
    let entry = &installed.entry;
    let files: Vec<Value> = entry
        .files
        .iter()
        .map(|(path, file)| json!({"path": path, "sha256": file.sha256, "size": file.size}))
        .collect();
    json!({
        "name": installed.name,
        "scope": scope.as_str(),
        "dir": installed.dir,
        "replaced": installed.replaced,
        "source": entry.source,
        "repository": entry.repository,
        "path": entry.path,
        "ref": entry.git_ref,
        "resolvedRef": entry.resolved_ref,
        "installedAt": entry.installed_at,
        "files": files,
        "totalBytes": installed.total_bytes(),
        "warnings": installed.warnings,
    })
}

/// What `mew skills install` prints: the name and directory, where it came from (the ref
/// and the commit it resolved to), every file, and the warnings.
fn render_installed(installed: &Installed, scope: Scope) -> String {
    let entry = &installed.entry;
    let mut out = format!(
        "installed {} ({} scope) into {}\n",
        installed.name,
        scope.as_str(),
        installed.dir.display()
    );
    if installed.replaced {
        out.push_str("  replaced: the version installed before\n");
    }
    out.push_str(&format!("  source:   {}\n", entry.source));
    let git_ref = entry.git_ref.as_deref().unwrap_or("the default branch");
    if entry.git_ref.as_deref() == Some(entry.resolved_ref.as_str()) {
        out.push_str(&format!("  ref:      {git_ref} (no commit resolved)\n"));
    } else {
        out.push_str(&format!(
            "  ref:      {git_ref} at {}\n",
            entry.resolved_ref
        ));
    }
    out.push_str(&format!(
        "  files:    {} ({} bytes)\n",
        installed.file_count(),
        installed.total_bytes()
    ));
    for (path, file) in &entry.files {
        out.push_str(&format!("    {path}  ({} bytes)\n", file.size));
    }
    for warning in &installed.warnings {
        out.push_str(&format!("  warning:  {}\n", one_line(warning)));
    }
    out
}

// ---- remove ----

fn remove(args: &RemoveArgs, context: &Context, out: &mut dyn Write) -> Result<(), Failure> {
    let root = root_of(args.scope, context).map_err(Failure::Runtime)?;
    let removed = match install::remove(&root, &args.name) {
        Ok(removed) => removed,
        Err(error @ InstallError::InvalidName(_)) => return Err(Failure::Usage(error.into())),
        Err(error @ InstallError::NotInstalled { .. }) => {
            let other = args.scope.other();
            let elsewhere = root_of(other, context).is_ok_and(|other_root| {
                other_root != root && is_installed(&other_root, &args.name)
            });
            return Err(Failure::Runtime(if elsewhere {
                anyhow!(
                    "{error}; it is installed in the {} scope: mew skills remove {} --scope {}",
                    other.as_str(),
                    args.name.trim(),
                    other.as_str()
                )
            } else {
                error.into()
            }));
        }
        Err(error) => {
            return Err(Failure::Runtime(
                anyhow::Error::new(error).context(format!("cannot remove {}", args.name.trim())),
            ));
        }
    };
    let printed = if context.json {
        write_json(
            out,
            &json!({
                "name": removed.name,
                "scope": args.scope.as_str(),
                "root": root,
                "dirRemoved": removed.dir_removed,
                "wasLocked": removed.was_locked,
                "warning": removed.warning,
            }),
        )
    } else {
        out.write_all(render_removed(&removed, args.scope, &root).as_bytes())
            .map_err(Into::into)
    };
    printed
        .and_then(|()| out.flush().map_err(Into::into))
        .map_err(Failure::Runtime)
}

/// True when `root` has a directory or a lock entry for `name`.
fn is_installed(root: &Path, name: &str) -> bool {
    let name = name.trim().to_lowercase();
    root.join(&name).is_dir()
        || lock::read_lock(root).is_ok_and(|lock| lock.skills.contains_key(&name))
}

fn render_removed(removed: &Removed, scope: Scope, root: &Path) -> String {
    let mut out = format!(
        "removed {} ({} scope) from {}\n",
        removed.name,
        scope.as_str(),
        root.display()
    );
    if !removed.was_locked {
        out.push_str("  note:     it was not in the lock file (not installed by mew)\n");
    }
    if !removed.dir_removed {
        out.push_str("  note:     its directory was already gone; the lock entry is removed\n");
    }
    if let Some(warning) = &removed.warning {
        out.push_str(&format!("  warning:  {}\n", one_line(warning)));
    }
    out
}

// ---- verify ----

/// What `verify` found in one install root.
struct RootReport {
    scope: Scope,
    root: PathBuf,
    report: Result<VerifyReport, String>,
}

/// Verifies the install roots of `args` and prints what drifted; fails (after printing) when
/// a skill drifted or a lock file cannot be read.
fn verify(args: &VerifyArgs, context: &Context, out: &mut dyn Write) -> anyhow::Result<()> {
    let scopes = match args.scope {
        Some(scope) => vec![scope],
        None => vec![Scope::User, Scope::Project],
    };
    let mut reports: Vec<RootReport> = Vec::new();
    for scope in scopes {
        let root = match root_of(scope, context) {
            Ok(root) => root,
            // Without a home, both roots means the project's.
            Err(_) if args.scope.is_none() => continue,
            Err(error) => return Err(error),
        };
        if reports.iter().any(|report| report.root == root) {
            continue; // The project is the home directory: one root.
        }
        let report = lock::verify(&root).map_err(|error| error.to_string());
        reports.push(RootReport {
            scope,
            root,
            report,
        });
    }
    if context.json {
        write_json(out, &verify_json(&reports))?;
    } else {
        out.write_all(render_verify(&reports).as_bytes())?;
    }
    out.flush()?;

    let mut drifted: Vec<String> = Vec::new();
    let mut unreadable: Vec<String> = Vec::new();
    let mut checked = 0;
    for report in &reports {
        match &report.report {
            Ok(found) => {
                checked += found.skills.len();
                drifted.extend(
                    found
                        .drifted()
                        .map(|drift| format!("{} ({})", drift.name, report.scope.as_str())),
                );
            }
            Err(error) => unreadable.push(format!(
                "cannot verify the {} install root: {error}",
                report.scope.as_str()
            )),
        }
    }
    let mut failures = unreadable;
    if !drifted.is_empty() {
        failures.insert(
            0,
            format!(
                "drift in {} of {checked} installed skills: {}",
                drifted.len(),
                drifted.join(", ")
            ),
        );
    }
    if !failures.is_empty() {
        anyhow::bail!("{}", failures.join("; "));
    }
    Ok(())
}

fn verify_json(reports: &[RootReport]) -> Value {
    let roots: Vec<Value> = reports
        .iter()
        .map(|report| {
            let (skills, untracked, error) = match &report.report {
                Ok(found) => {
                    let skills: Vec<Value> = found
                        .skills
                        .iter()
                        .map(|drift| {
                            let unreadable: Vec<Value> = drift
                                .unreadable
                                .iter()
                                .map(|(path, error)| json!({"path": path, "error": error}))
                                .collect();
                            json!({
                                "name": drift.name,
                                "clean": drift.is_clean(),
                                "missingDir": drift.missing_dir,
                                "changed": drift.changed,
                                "missing": drift.missing,
                                "extra": drift.extra,
                                "unreadable": unreadable,
                            })
                        })
                        .collect();
                    (skills, found.untracked.clone(), None)
                }
                Err(error) => (Vec::new(), Vec::new(), Some(error.clone())),
            };
            json!({
                "scope": report.scope.as_str(),
                "root": report.root,
                "error": error,
                "skills": skills,
                "untracked": untracked,
            })
        })
        .collect();
    let clean = reports
        .iter()
        .all(|report| report.report.as_ref().is_ok_and(VerifyReport::is_clean));
    json!({ "clean": clean, "roots": roots })
}

/// Each install root with each installed skill, `ok` or `drifted` and then its changed,
/// missing, extra and unreadable files; then the untracked skill directories.
fn render_verify(reports: &[RootReport]) -> String {
    let mut out = String::new();
    for report in reports {
        out.push_str(&format!(
            "{}: {}\n",
            report.scope.as_str(),
            report.root.display()
        ));
        let found = match &report.report {
            Ok(found) => found,
            Err(error) => {
                out.push_str(&format!("  error: {}\n", one_line(error)));
                continue;
            }
        };
        if found.skills.is_empty() {
            out.push_str("  no skills installed by mew\n");
        }
        let width = found
            .skills
            .iter()
            .map(|drift| drift.name.chars().count())
            .max()
            .unwrap_or(0);
        for drift in &found.skills {
            let state = if drift.is_clean() { "ok" } else { "drifted" };
            out.push_str(&format!("  {:<width$}  {state}\n", drift.name));
            if drift.missing_dir {
                out.push_str("    missing:    the whole directory\n");
                continue;
            }
            for (label, paths) in [
                ("changed:", &drift.changed),
                ("missing:", &drift.missing),
                ("extra:", &drift.extra),
            ] {
                if !paths.is_empty() {
                    out.push_str(&format!("    {label:<10}  {}\n", paths.join(", ")));
                }
            }
            for (path, error) in &drift.unreadable {
                out.push_str(&format!("    unreadable: {path} ({})\n", one_line(error)));
            }
        }
        if !found.untracked.is_empty() {
            out.push_str(&format!(
                "  not installed by mew (not checked): {}\n",
                found.untracked.join(", ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::fs;

    use clap::Parser;
    use tempfile::TempDir;

    use super::*;
    use crate::cli::{Cli, Command};
    use crate::config::{Config, Sources};
    use crate::skills::lock::{FileHash, write_lock};

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("mew").chain(args.iter().copied()))
    }

    fn skills_command(args: &[&str]) -> SkillsCommand {
        match parse(args).unwrap().command {
            Command::Skills(command) => command,
            other => panic!("expected skills, got {other:?}"),
        }
    }

    #[test]
    fn parses_the_subcommands_and_the_scope() {
        let SkillsCommand::Install(args) = skills_command(&[
            "--project",
            "p",
            "skills",
            "install",
            "https://x",
            "--scope",
            "project",
        ]) else {
            panic!("expected install");
        };
        assert_eq!(
            (args.url.as_str(), args.scope),
            ("https://x", Scope::Project)
        );
        let SkillsCommand::Remove(args) = skills_command(&["skills", "remove", "pdf"]) else {
            panic!("expected remove");
        };
        assert_eq!((args.name.as_str(), args.scope), ("pdf", Scope::User));
        let SkillsCommand::Verify(args) = skills_command(&["skills", "verify", "--json"]) else {
            panic!("expected verify");
        };
        assert_eq!(args.scope, None);
        assert!(matches!(
            skills_command(&["skills", "list"]),
            SkillsCommand::List
        ));
        // `--project` stays the global flag naming the project directory.
        let cli = parse(&["skills", "list", "--project", "/srv/p"]).unwrap();
        assert_eq!(cli.global.project.as_deref(), Some(Path::new("/srv/p")));
        assert!(parse(&["skills", "install"]).is_err());
        assert!(parse(&["skills", "install", "u", "--scope", "team"]).is_err());
    }

    /// A context for a home and a project in `dir`, with `config` as the project's file.
    fn context(dir: &Path, config: &str, json: bool) -> Context {
        let project = dir.join("project");
        fs::create_dir_all(project.join(".mew")).unwrap();
        fs::write(project.join(".mew/config.yaml"), config).unwrap();
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

    fn skill_md(name: &str, description: &str) -> String {
        format!("---\nname: {name}\ndescription: {description}\n---\nDo {name} things.\n")
    }

    /// Records the files of `root/name` in `root`'s lock file, as an install would.
    fn lock_skill(root: &Path, name: &str) {
        let mut lock = lock::read_lock(root).unwrap();
        let dir = root.join(name);
        let mut files = std::collections::BTreeMap::new();
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let data = fs::read(entry.path()).unwrap();
            files.insert(
                entry.file_name().into_string().unwrap(),
                FileHash::of(&data),
            );
        }
        lock.skills.insert(
            name.to_owned(),
            LockEntry {
                source: format!("https://github.com/o/r/tree/main/{name}"),
                repository: "o/r".to_owned(),
                path: name.to_owned(),
                git_ref: Some("main".to_owned()),
                resolved_ref: "0123456789abcdef0123456789abcdef01234567".to_owned(),
                installed_at: mew_cards::Timestamp::from_unix(1_769_860_800, 0),
                files,
            },
        );
        write_lock(root, &lock, |from, to| fs::rename(from, to)).unwrap();
    }

    fn output(run: impl FnOnce(&mut Vec<u8>) -> anyhow::Result<()>) -> (bool, String) {
        let mut out = Vec::new();
        let ok = run(&mut out).is_ok();
        (ok, String::from_utf8(out).unwrap())
    }

    #[test]
    fn list_shows_every_root_what_is_locked_and_the_problems() {
        let dir = TempDir::new().unwrap();
        let context = context(dir.path(), "skills:\n  roots: [team]\n", false);
        let project = &context.config.project_dir;
        let home = dir.path().join("home");
        write(
            &project.join(".mew/skills/pdf/SKILL.md"),
            &skill_md("pdf", "Fills PDF\n  forms."),
        );
        lock_skill(&project.join(".mew/skills"), "pdf");
        write(
            &home.join(".mew/skills/pdf/SKILL.md"),
            &skill_md("pdf", "Old."),
        );
        write(
            &home.join(".claude/skills/notes/SKILL.md"),
            &skill_md("notes", &"n".repeat(100)),
        );
        write(
            &project.join("team/review/SKILL.md"),
            "---\nname: review\ndescription: Reviews.\ncontext: fork\n---\nReview.\n",
        );
        write(
            &project.join(".agents/skills/broken/SKILL.md"),
            "---\nname: [\n---\n",
        );

        let (ok, text) = output(|out| list(&context, out));
        assert!(ok);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "NAME    SOURCE      MODE    LOCKED         DESCRIPTION"
        );
        assert_eq!(
            lines[1],
            format!(
                "notes   user        inline  no             {}…",
                "n".repeat(79)
            )
        );
        assert_eq!(
            lines[2],
            "pdf     project     inline  yes (project)  Fills PDF forms."
        );
        assert_eq!(
            lines[3],
            format!("  shadows user {}", home.join(".mew/skills/pdf").display())
        );
        assert_eq!(
            lines[4],
            "review  configured  fork    no             Reviews."
        );
        assert_eq!(lines[6], "problems:");
        assert!(
            lines[7].starts_with("  error: ") && lines[7].contains("broken"),
            "{text}"
        );

        let context = Context {
            json: true,
            ..context
        };
        let (ok, text) = output(|out| list(&context, out));
        assert!(ok);
        let value: Value = serde_json::from_str(&text).unwrap();
        let pdf = &value["skills"][1];
        assert_eq!(pdf["name"], "pdf");
        assert_eq!(pdf["locked"], true);
        assert_eq!(pdf["installed"]["scope"], "project");
        assert_eq!(
            pdf["installed"]["source"],
            "https://github.com/o/r/tree/main/pdf"
        );
        assert_eq!(value["skills"][0]["locked"], false);
        assert_eq!(value["skills"][0]["installed"], Value::Null);
        assert_eq!(value["problems"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn list_shows_claude_code_commands_as_commands() {
        let dir = TempDir::new().unwrap();
        let context = context(dir.path(), "", false);
        let commands = context.config.project_dir.join(".claude/commands");
        let file = commands.join("git/commit.md");
        write(
            &file,
            "---\ndescription: Commits.\nargument-hint: \"[message]\"\n\
             disable-model-invocation: true\n---\nCommit $ARGUMENTS.\n",
        );
        let (ok, text) = output(|out| list(&context, out));
        assert!(ok);
        assert!(
            text.contains("git:commit  project command  inline  no      Commits."),
            "{text}"
        );
        let context = Context {
            json: true,
            ..context
        };
        let (_, text) = output(|out| list(&context, out));
        let value: Value = serde_json::from_str(&text).unwrap();
        let command = &value["skills"][0];
        assert_eq!(command["kind"], "command");
        assert_eq!(command["argumentHint"], "[message]");
        assert_eq!(command["modelInvocable"], false);
        assert_eq!(command["path"], json!(file));
    }

    #[test]
    fn a_corrupt_lock_file_is_a_problem_of_list() {
        let dir = TempDir::new().unwrap();
        let context = context(dir.path(), "", false);
        let root = context.config.project_dir.join(".mew/skills");
        write(&root.join("pdf/SKILL.md"), &skill_md("pdf", "PDF."));
        write(&root.join(lock::LOCK_FILE), "{oops");
        let (ok, text) = output(|out| list(&context, out));
        assert!(ok);
        assert!(text.contains("pdf   project  inline  no"), "{text}");
        assert!(text.contains("is not a valid skills lock file"), "{text}");
        assert!(render_list(&json!({"skills": [], "problems": []})).starts_with("no skills"));
    }

    #[test]
    fn verify_reports_drift_per_skill_and_fails() {
        let dir = TempDir::new().unwrap();
        let context = context(dir.path(), "", false);
        let root = context.config.project_dir.join(".mew/skills");
        write(&root.join("pdf/SKILL.md"), &skill_md("pdf", "PDF."));
        write(&root.join("pdf/fill.py"), "print()\n");
        lock_skill(&root, "pdf");
        write(&root.join("docx/SKILL.md"), &skill_md("docx", "Word."));
        lock_skill(&root, "docx");
        write(
            &root.join("mine/SKILL.md"),
            &skill_md("mine", "Hand-written."),
        );

        let args = VerifyArgs { scope: None };
        let (ok, text) = output(|out| verify(&args, &context, out));
        assert!(ok, "{text}");
        let home = dir.path().join("home/.mew/skills");
        assert_eq!(
            text,
            format!(
                "user: {}\n  no skills installed by mew\nproject: {}\n  docx  ok\n  pdf   ok\n\
                 \x20 not installed by mew (not checked): mine\n",
                home.display(),
                root.display()
            )
        );

        write(&root.join("pdf/SKILL.md"), &skill_md("pdf", "Changed."));
        fs::remove_file(root.join("pdf/fill.py")).unwrap();
        write(&root.join("pdf/extra.txt"), "x");
        fs::remove_dir_all(root.join("docx")).unwrap();
        let args = VerifyArgs {
            scope: Some(Scope::Project),
        };
        let mut out = Vec::new();
        let error = verify(&args, &context, &mut out).unwrap_err();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "project: {}\n  docx  drifted\n    missing:    the whole directory\n\
                 \x20 pdf   drifted\n    changed:    SKILL.md\n    missing:    fill.py\n\
                 \x20   extra:      extra.txt\n  not installed by mew (not checked): mine\n",
                root.display()
            )
        );
        assert_eq!(
            error.to_string(),
            "drift in 2 of 2 installed skills: docx (project), pdf (project)"
        );

        let context = Context {
            json: true,
            ..context
        };
        let mut out = Vec::new();
        assert!(verify(&args, &context, &mut out).is_err());
        let value: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["clean"], false);
        let pdf = &value["roots"][0]["skills"][1];
        assert_eq!(pdf["name"], "pdf");
        assert_eq!(pdf["changed"], json!(["SKILL.md"]));
        assert_eq!(pdf["missing"], json!(["fill.py"]));
        assert_eq!(pdf["extra"], json!(["extra.txt"]));
        assert_eq!(value["roots"][0]["skills"][0]["missingDir"], true);
    }

    #[test]
    fn verify_fails_on_a_corrupt_lock_file() {
        let dir = TempDir::new().unwrap();
        let context = context(dir.path(), "", false);
        let root = context.config.project_dir.join(".mew/skills");
        write(&root.join(lock::LOCK_FILE), "[]");
        let args = VerifyArgs {
            scope: Some(Scope::Project),
        };
        let mut out = Vec::new();
        let error = verify(&args, &context, &mut out).unwrap_err();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("  error: ") && text.contains("not a valid skills lock file"),
            "{text}"
        );
        let message = error.to_string();
        assert!(
            message.starts_with("cannot verify the project install root: ")
                && message.contains("is not a valid skills lock file"),
            "{message}"
        );
    }

    #[test]
    fn remove_deletes_the_skill_and_points_to_the_other_scope() {
        let dir = TempDir::new().unwrap();
        let context = context(dir.path(), "", false);
        let root = context.config.project_dir.join(".mew/skills");
        write(&root.join("pdf/SKILL.md"), &skill_md("pdf", "PDF."));
        lock_skill(&root, "pdf");

        let args = RemoveArgs {
            name: "pdf".to_owned(),
            scope: Scope::User,
        };
        let Err(Failure::Runtime(error)) = remove(&args, &context, &mut Vec::new()) else {
            panic!("expected a runtime failure");
        };
        let message = format!("{error:#}");
        assert_eq!(
            message,
            format!(
                "no skill \"pdf\" is installed in {}; it is installed in the project scope: \
                 mew skills remove pdf --scope project",
                dir.path().join("home/.mew/skills").display()
            )
        );

        let args = RemoveArgs {
            name: "pdf".to_owned(),
            scope: Scope::Project,
        };
        let mut out = Vec::new();
        assert!(remove(&args, &context, &mut out).is_ok());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("removed pdf (project scope) from {}\n", root.display())
        );
        assert!(!root.join("pdf").exists());
        assert!(lock::read_lock(&root).unwrap().skills.is_empty());

        let args = RemoveArgs {
            name: "../etc".to_owned(),
            scope: Scope::Project,
        };
        assert!(matches!(
            remove(&args, &context, &mut Vec::new()),
            Err(Failure::Usage(_))
        ));
    }

    #[test]
    fn install_output_names_the_ref_the_commit_and_every_file() {
        let mut files = std::collections::BTreeMap::new();
        files.insert("SKILL.md".to_owned(), FileHash::of(b"12345"));
        files.insert("scripts/run.sh".to_owned(), FileHash::of(b"12"));
        let installed = Installed {
            name: "pdf".to_owned(),
            dir: PathBuf::from("/p/.mew/skills/pdf"),
            replaced: true,
            entry: LockEntry {
                source: "https://github.com/o/r/tree/main/pdf".to_owned(),
                repository: "o/r".to_owned(),
                path: "pdf".to_owned(),
                git_ref: Some("main".to_owned()),
                resolved_ref: "abc1230000000000000000000000000000000000".to_owned(),
                installed_at: mew_cards::Timestamp::from_unix(1_769_860_800, 0),
                files,
            },
            warnings: vec!["link is a symlink and was not installed".to_owned()],
        };
        assert_eq!(
            render_installed(&installed, Scope::Project),
            "installed pdf (project scope) into /p/.mew/skills/pdf\n\
             \x20 replaced: the version installed before\n\
             \x20 source:   https://github.com/o/r/tree/main/pdf\n\
             \x20 ref:      main at abc1230000000000000000000000000000000000\n\
             \x20 files:    2 (7 bytes)\n\
             \x20   SKILL.md  (5 bytes)\n\
             \x20   scripts/run.sh  (2 bytes)\n\
             \x20 warning:  link is a symlink and was not installed\n"
        );
        let value = installed_json(&installed, Scope::User);
        assert_eq!(value["scope"], "user");
        assert_eq!(
            value["resolvedRef"],
            "abc1230000000000000000000000000000000000"
        );
        assert_eq!(value["files"][1]["path"], "scripts/run.sh");
        assert_eq!(value["totalBytes"], 7);
    }
}
