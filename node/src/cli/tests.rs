//! Tests of the command line: parsing with `Cli::try_parse_from`, sources, and `mew config show`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap::error::ErrorKind;
use tempfile::TempDir;

use super::config::{ConfigCommand, ShowArgs};
use super::*;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("mew").chain(args.iter().copied()))
}

#[test]
fn the_command_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn up_takes_node_flags() {
    let cli = parse(&[
        "up",
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
        "--data-dir",
        "/srv/mew",
    ])
    .unwrap();
    let Command::Up(args) = &cli.command else {
        panic!("expected up, got {:?}", cli.command);
    };
    assert_eq!(args.node.host.as_deref(), Some("0.0.0.0"));
    assert_eq!(args.node.port, Some(8080));
    assert_eq!(args.node.data_dir.as_deref(), Some(Path::new("/srv/mew")));
    assert_eq!(
        cli.flag_overrides(),
        FlagOverrides {
            host: Some("0.0.0.0".into()),
            port: Some(8080),
            data_dir: Some("/srv/mew".into()),
            log_level: None,
            log_format: None,
        }
    );
}

#[test]
fn global_flags_go_before_or_after_the_subcommand() {
    for args in [
        &[
            "--config",
            "c.yaml",
            "--project",
            "p",
            "--log-level",
            "debug",
            "--log-format",
            "json",
            "--json",
            "up",
        ][..],
        &[
            "up",
            "--config",
            "c.yaml",
            "--project",
            "p",
            "--log-level",
            "debug",
            "--log-format",
            "json",
            "--json",
        ],
        &[
            "config",
            "--json",
            "show",
            "--config",
            "c.yaml",
            "--project",
            "p",
            "--log-level",
            "debug",
            "--log-format",
            "json",
        ],
    ] {
        let cli = parse(args).unwrap();
        assert_eq!(
            cli.global.config.as_deref(),
            Some(Path::new("c.yaml")),
            "{args:?}"
        );
        assert_eq!(
            cli.global.project.as_deref(),
            Some(Path::new("p")),
            "{args:?}"
        );
        assert_eq!(cli.global.log_level.as_deref(), Some("debug"), "{args:?}");
        assert_eq!(cli.global.log_format, Some(LogFormat::Json), "{args:?}");
        assert!(cli.global.json, "{args:?}");
        let flags = cli.flag_overrides();
        assert_eq!(flags.log_level.as_deref(), Some("debug"));
        assert_eq!(flags.log_format, Some(LogFormat::Json));
    }
}

#[test]
fn run_and_chat_take_a_data_directory() {
    for args in [
        &["run", "--data-dir", "/srv/mew", "hello"][..],
        &["chat", "--data-dir", "/srv/mew"],
    ] {
        let cli = parse(args).unwrap();
        assert_eq!(
            cli.flag_overrides().data_dir,
            Some(std::path::PathBuf::from("/srv/mew")),
            "{args:?}"
        );
    }
    assert_eq!(
        parse(&["run", "hello"]).unwrap().flag_overrides().data_dir,
        None
    );
}

#[test]
fn config_show_takes_origins_and_node_flags() {
    let cli = parse(&["config", "show", "--origins", "--port", "9000"]).unwrap();
    let Command::Config(ConfigCommand::Show(args)) = &cli.command else {
        panic!("expected config show, got {:?}", cli.command);
    };
    assert!(args.origins);
    assert_eq!(cli.flag_overrides().port, Some(9000));

    let cli = parse(&["config", "show"]).unwrap();
    assert!(!cli.global.json);
    assert_eq!(cli.flag_overrides(), FlagOverrides::default());
}

#[test]
fn bad_command_lines_are_usage_errors() {
    for (args, kind) in [
        (&[][..], ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand),
        (
            &["config"],
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand,
        ),
        (&["frobnicate"], ErrorKind::InvalidSubcommand),
        (&["up", "--port", "seventy"], ErrorKind::ValueValidation),
        (&["up", "--port", "70000"], ErrorKind::ValueValidation),
        (&["up", "--log-format", "xml"], ErrorKind::ValueValidation),
        (&["up", "--origins"], ErrorKind::UnknownArgument),
        (&["up", "extra"], ErrorKind::UnknownArgument),
        (
            &["bench", "http://a", "-d", "0s"],
            ErrorKind::ValueValidation,
        ),
        (
            &["bench", "http://a", "-c", "0"],
            ErrorKind::ValueValidation,
        ),
        (
            &["bench", "http://a", "-n", "0"],
            ErrorKind::ValueValidation,
        ),
    ] {
        let error = parse(args).unwrap_err();
        assert_eq!(error.kind(), kind, "{args:?}: {error}");
        assert_eq!(error.exit_code(), 2, "{args:?}");
    }
    let help = parse(&["--help"]).unwrap_err();
    assert_eq!(help.kind(), ErrorKind::DisplayHelp);
    assert_eq!(help.exit_code(), 0);
}

#[test]
fn failures_map_to_exit_codes() {
    assert_eq!(Failure::Usage(anyhow::anyhow!("bad")).exit_code(), 2);
    assert_eq!(Failure::Runtime(anyhow::anyhow!("bad")).exit_code(), 1);
}

#[test]
fn sources_make_paths_absolute_and_carry_the_flags() {
    let cli = parse(&["--config", "c.yaml", "up", "--port", "1"]).unwrap();
    let env = HashMap::from([("MEW_HOST".to_owned(), "::".to_owned())]);
    let sources = cli.sources(env.clone(), Some("/home/u".into())).unwrap();
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(sources.project, cwd);
    assert_eq!(sources.config_file, Some(cwd.join("c.yaml")));
    assert_eq!(sources.home, Some(PathBuf::from("/home/u")));
    assert_eq!(sources.env, env);
    assert_eq!(sources.flags.port, Some(1));

    let project = TempDir::new().unwrap();
    let cli = parse(&["--project", project.path().to_str().unwrap(), "up"]).unwrap();
    let sources = cli.sources(HashMap::new(), None).unwrap();
    assert_eq!(sources.project, project.path());
    assert_eq!(sources.config_file, None);

    // A project that is not there is an error, not a new project.
    let missing = project.path().join("missing");
    let cli = parse(&["--project", missing.to_str().unwrap(), "up"]).unwrap();
    let error = cli.sources(HashMap::new(), None).unwrap_err().to_string();
    assert!(error.contains("does not exist"), "{error}");
    assert!(!missing.exists(), "nothing was made");
    let file = project.path().join("file");
    std::fs::write(&file, "").unwrap();
    let cli = parse(&["--project", file.to_str().unwrap(), "up"]).unwrap();
    let error = cli.sources(HashMap::new(), None).unwrap_err().to_string();
    assert!(error.contains("is not a directory"), "{error}");
}

/// Runs `mew <args>` (a `config` subcommand) against `project` and returns what it prints.
fn config_output(project: &TempDir, args: &[&str], env: &[(&str, &str)]) -> String {
    let cli = parse(args).unwrap();
    let env = env
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    let mut sources = cli.sources(env, Some(project.path().join("home"))).unwrap();
    sources.project = project.path().to_owned();
    let loaded = Config::load(&sources).unwrap();
    let context = Context {
        config: loaded.resolve().unwrap(),
        loaded,
        json: cli.global.json,
    };
    let Command::Config(command) = &cli.command else {
        panic!("not a config command: {args:?}");
    };
    let mut out = Vec::new();
    config::run(command, &context, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn config_show_prints_yaml_or_json() {
    let project = TempDir::new().unwrap();
    let yaml = config_output(&project, &["config", "show"], &[]);
    assert!(
        yaml.starts_with("node:\n  host: 127.0.0.1\n  port: 7777\n"),
        "{yaml}"
    );
    assert!(
        yaml.contains("\nlimits:\n  max_running_tasks: 16\n"),
        "{yaml}"
    );

    let json = config_output(
        &project,
        &["--json", "config", "show", "--port", "1234"],
        &[],
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["node"]["port"], 1234);
    assert_eq!(json["node"]["public_url"], "http://127.0.0.1:1234");
    assert_eq!(json["limits"]["task_timeout"], "30m");
}

#[test]
fn config_show_origins_prints_one_line_per_key() {
    let project = TempDir::new().unwrap();
    std::fs::create_dir(project.path().join(".mew")).unwrap();
    let file = project.path().join(".mew/config.yaml");
    std::fs::write(&file, "node:\n  name: team\nroles:\n  dirs: [a]\n").unwrap();
    let text = config_output(
        &project,
        &["config", "show", "--origins", "--port", "7778"],
        &[("MEW_LOG_LEVEL", "debug")],
    );
    let lines: Vec<&str> = text.lines().collect();
    let sources = crate::config::Sources {
        home: Some(project.path().to_owned()),
        ..crate::config::Sources::new(project.path())
    };
    let defaults = crate::config::Config::load(&sources).unwrap();
    let keys = defaults
        .entries(&defaults.resolve().unwrap())
        .unwrap()
        .len();
    assert_eq!(lines.len(), keys, "{text}");
    assert_eq!(lines[0], "node.host = 127.0.0.1  (default)");
    assert!(lines.contains(&"node.port = 7778  (flag --port)"), "{text}");
    assert!(lines.contains(&format!("node.name = team  (file {})", file.display()).as_str()));
    assert!(
        lines.contains(&"log.level = debug  (env MEW_LOG_LEVEL)"),
        "{text}"
    );
    let dirs = format!(
        "roles.dirs = [{}]  (file {})",
        serde_json::to_string(&project.path().join("a")).unwrap(),
        file.display()
    );
    assert!(lines.contains(&dirs.as_str()), "{text}");

    let json = config_output(&project, &["config", "show", "--origins", "--json"], &[]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        json[1],
        serde_json::json!({"key": "node.port", "value": 7777, "origin": {"kind": "default"}})
    );
}

#[test]
fn show_args_default_to_plain_yaml() {
    let cli = parse(&["config", "show"]).unwrap();
    let Command::Config(ConfigCommand::Show(ShowArgs { origins, node })) = cli.command else {
        panic!("expected config show");
    };
    assert!(!origins);
    assert!(node.host.is_none() && node.port.is_none() && node.data_dir.is_none());
}

#[test]
fn completions_take_a_shell_and_cover_the_subcommands() {
    let cli = parse(&["completions", "fish"]).unwrap();
    assert!(matches!(
        cli.command,
        Command::Completions {
            shell: clap_complete::Shell::Fish
        }
    ));
    assert_eq!(
        parse(&["completions", "tcsh"]).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    let mut script = Vec::new();
    clap_complete::generate(
        clap_complete::Shell::Bash,
        &mut Cli::command(),
        "mew",
        &mut script,
    );
    let script = String::from_utf8(script).unwrap();
    for subcommand in ["up", "send", "tasks", "completions"] {
        assert!(
            script.contains(&format!("mew,{subcommand})")),
            "{subcommand}"
        );
    }
}
