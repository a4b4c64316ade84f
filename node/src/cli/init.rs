//! `mew init`: write a commented `.mew/config.yaml` and an example role into the project.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::Args;

/// The configuration `mew init` writes: every setting commented out, so it changes nothing
/// until it is edited.
pub(crate) const CONFIG: &str = include_str!("init/config.yaml");

/// The example role `mew init` writes: a command role, which runs without a model.
pub(crate) const HELLO_ROLE: &str = include_str!("init/hello.md");

/// `mew init`.
#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Replace the files if they exist
    #[arg(long)]
    pub(crate) force: bool,
}

/// One file `mew init` writes.
#[derive(Debug)]
struct Template {
    /// Where, absolute.
    path: PathBuf,
    /// Its text.
    text: &'static str,
    /// What it is, for the report.
    what: &'static str,
}

/// The files `mew init` writes into `project`.
fn templates(project: &Path) -> [Template; 2] {
    let mew = project.join(".mew");
    [
        Template {
            path: mew.join("config.yaml"),
            text: CONFIG,
            what: "the node's settings, every one commented out",
        },
        Template {
            path: mew.join("agents").join("hello.md"),
            text: HELLO_ROLE,
            what: "an example role served by a shell command, no model needed",
        },
    ]
}

/// Writes the files into `project` (absolute) and prints what was written and what to do
/// next; `project_flag` is ` --project DIR` when the user gave one, for the suggested
/// commands. Without `--force`, fails before writing anything when one of the files exists.
pub(crate) fn init(
    args: &InitArgs,
    project: &Path,
    project_flag: &str,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let templates = templates(project);
    if !args.force {
        let existing: Vec<String> = templates
            .iter()
            .filter(|template| template.path.symlink_metadata().is_ok())
            .map(|template| template.path.display().to_string())
            .collect();
        if !existing.is_empty() {
            let (them, exist) = if existing.len() == 1 {
                ("it", "exists")
            } else {
                ("them", "exist")
            };
            bail!(
                "{} {exist} already; nothing was written: `mew init --force` replaces {them}",
                existing.join(" and ")
            );
        }
    }
    let mut written: Vec<&Template> = Vec::new();
    for template in &templates {
        if let Err(error) = write(template, args.force) {
            // No half-initialized project: take back the files this run created.
            if !args.force {
                for done in &written {
                    let _ = std::fs::remove_file(&done.path);
                }
            }
            return Err(error);
        }
        written.push(template);
    }
    if json {
        let paths: Vec<String> = templates
            .iter()
            .map(|template| template.path.display().to_string())
            .collect();
        let report = serde_json::json!({ "written": paths });
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    for template in &templates {
        writeln!(out, "wrote {}: {}", template.path.display(), template.what)?;
    }
    writeln!(
        out,
        "\nNext: start the node with `mew{project_flag} up`, then, in another terminal:\n  \
         mew{project_flag} send hello world"
    )?;
    Ok(())
}

/// Writes one file, creating its directory. Without `replace`, a file that exists (one made
/// since the check) is an error and stays as it is.
fn write(template: &Template, replace: bool) -> anyhow::Result<()> {
    let path = &template.path;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the directory {}", dir.display()))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .create_new(!replace)
        .truncate(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(template.text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// ` --project DIR` for the commands suggested to the user, quoted for a POSIX shell when
/// needed; empty when no directory was given.
pub(crate) fn project_flag(project: Option<&Path>) -> String {
    let Some(dir) = project else {
        return String::new();
    };
    let text = dir.display().to_string();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c));
    if plain {
        format!(" --project {text}")
    } else {
        format!(" --project '{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use mew_cards::{RoleSource, parse_role};
    use tempfile::TempDir;

    use super::*;
    use crate::config::{Config, Sources};

    /// The sources `mew config show` would load for `project`, with an empty home.
    fn sources(project: &Path, home: &Path) -> Sources {
        Sources {
            home: Some(home.to_owned()),
            project: project.to_owned(),
            config_file: None,
            env: HashMap::new(),
            flags: Default::default(),
            plugin_mcp: Vec::new(),
        }
    }

    /// `mew init` into a fresh project: its report and the project.
    fn run_init(dir: &TempDir, force: bool) -> anyhow::Result<String> {
        let mut out = Vec::new();
        init(
            &InitArgs { force },
            &dir.path().join("project"),
            "",
            false,
            &mut out,
        )?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn the_written_config_loads_and_resolves_and_changes_nothing() {
        let dir = TempDir::new().unwrap();
        let project = dir.path().join("project");
        let home = dir.path().join("home");
        run_init(&dir, false).unwrap();
        let written = std::fs::read_to_string(project.join(".mew/config.yaml")).unwrap();
        assert_eq!(written, CONFIG);

        let loaded = Config::load(&sources(&project, &home)).unwrap();
        let config = loaded.resolve().unwrap();
        let mut defaults = Config::load(&sources(&dir.path().join("empty"), &home))
            .unwrap()
            .resolve()
            .unwrap();
        // The default data directory is each project's own.
        assert_eq!(config.node.data_dir, project.join(".mew/data"));
        defaults.node.data_dir = config.node.data_dir.clone();
        assert_eq!(config.node, defaults.node);
        assert_eq!(config.providers, defaults.providers);
        assert!(config.peers.is_empty());
        assert!(!config.auth.is_enabled());
    }

    /// Every line that is a commented-out setting (`# key: ...`, `#   key: ...`, `#     - ...`)
    /// uncommented, the prose left as comments.
    fn uncommented(text: &str) -> String {
        text.lines()
            .map(|line| {
                let Some(rest) = line.strip_prefix("# ") else {
                    return line.to_owned();
                };
                let item = rest.trim_start();
                let key = item.split_once(':').is_some_and(|(key, _)| {
                    key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                });
                if (key && !item.starts_with(':')) || item.starts_with("- ") {
                    rest.to_owned()
                } else {
                    line.to_owned()
                }
            })
            .map(|line| line + "\n")
            .collect()
    }

    #[test]
    fn every_commented_setting_is_valid_when_uncommented() {
        let dir = TempDir::new().unwrap();
        let project = dir.path().join("project");
        let text = uncommented(CONFIG);
        std::fs::create_dir_all(project.join(".mew")).unwrap();
        std::fs::write(project.join(".mew/config.yaml"), &text).unwrap();

        let loaded = Config::load(&sources(&project, &dir.path().join("home")))
            .unwrap_or_else(|error| panic!("{error}\n{text}"));
        let config = loaded
            .resolve()
            .unwrap_or_else(|error| panic!("{error}\n{text}"));
        assert_eq!(config.node.host, "127.0.0.1");
        assert_eq!(config.node.port, 7777);
        assert_eq!(config.node.public_url, "http://my-machine.lan:7777");
        assert_eq!(config.node.default_role, "hello");
        assert_eq!(config.node.data_dir, project.join(".mew/data"));
        assert_eq!(config.agent.provider.as_deref(), Some("local"));
        let local = &config.providers["local"];
        assert_eq!(local.base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(local.models["sonnet"], "qwen3:32b");
        assert_eq!(config.peers["lab"].url, "http://10.0.0.7:7777");
        assert_eq!(config.auth.api_keys.len(), 1);
        assert_eq!(config.auth.api_keys[0].key_env, "MEW_KEY_ALICE");
    }

    #[test]
    fn the_example_role_is_a_command_role_that_parses_cleanly() {
        let parsed = parse_role(HELLO_ROLE, ".mew/agents/hello.md", RoleSource::Project).unwrap();
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let role = parsed.definition;
        assert_eq!(role.name, "hello");
        let command = role.command.expect("a command role");
        assert_eq!(command.program, "sh");
        assert_eq!(command.args[0], "-c");
        assert!(role.remote.is_none());
    }

    #[test]
    fn an_existing_file_stops_init_before_anything_is_written() {
        let dir = TempDir::new().unwrap();
        let project = dir.path().join("project");
        let role = project.join(".mew/agents/hello.md");
        std::fs::create_dir_all(role.parent().unwrap()).unwrap();
        std::fs::write(&role, "mine").unwrap();

        let error = run_init(&dir, false).unwrap_err().to_string();
        assert!(error.contains(&role.display().to_string()), "{error}");
        assert!(error.contains("--force"), "{error}");
        assert!(!project.join(".mew/config.yaml").exists());
        assert_eq!(std::fs::read_to_string(&role).unwrap(), "mine");

        let report = run_init(&dir, true).unwrap();
        assert!(report.contains("mew up"), "{report}");
        assert_eq!(std::fs::read_to_string(&role).unwrap(), HELLO_ROLE);
        assert_eq!(
            std::fs::read_to_string(project.join(".mew/config.yaml")).unwrap(),
            CONFIG
        );
    }

    #[test]
    fn both_existing_files_are_named() {
        let dir = TempDir::new().unwrap();
        run_init(&dir, false).unwrap();
        let error = run_init(&dir, false).unwrap_err().to_string();
        assert!(
            error.contains("config.yaml and ") && error.contains("hello.md exist already"),
            "{error}"
        );
    }

    #[test]
    fn the_suggested_project_flag_is_quoted_for_the_shell() {
        assert_eq!(project_flag(None), "");
        assert_eq!(project_flag(Some(Path::new("demo"))), " --project demo");
        assert_eq!(
            project_flag(Some(Path::new("my project's"))),
            r" --project 'my project'\''s'"
        );
    }
}
