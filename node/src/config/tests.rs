//! Tests of loading and resolving the configuration: layers, origins, errors, paths.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use super::*;

/// A home and a project directory, each in its own temporary directory.
struct Dirs {
    home: TempDir,
    project: TempDir,
}

impl Dirs {
    fn new() -> Self {
        Self {
            home: TempDir::new().unwrap(),
            project: TempDir::new().unwrap(),
        }
    }

    fn home(&self) -> &Path {
        self.home.path()
    }

    fn project(&self) -> &Path {
        self.project.path()
    }

    fn sources(&self) -> Sources {
        Sources {
            home: Some(self.home().to_owned()),
            ..Sources::new(self.project())
        }
    }

    fn user_file(&self, text: &str) -> PathBuf {
        write(&self.home().join(".mew/config.yaml"), text)
    }

    fn project_file(&self, text: &str) -> PathBuf {
        write(&self.project().join(".mew/config.yaml"), text)
    }

    fn extra_file(&self, text: &str) -> PathBuf {
        write(&self.project().join("extra.yaml"), text)
    }
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    path.to_owned()
}

fn env(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

/// How many keys the built-in defaults have (each section adds its own).
fn default_leaves() -> usize {
    let defaults = serde_yaml_ng::to_value(schema::Settings::default()).unwrap();
    merge::leaves(&defaults).len()
}

fn resolve(sources: &Sources) -> Config {
    Config::load(sources).unwrap().resolve().unwrap()
}

#[test]
fn defaults_without_any_file() {
    let dirs = Dirs::new();
    let loaded = Config::load(&dirs.sources()).unwrap();
    let config = loaded.resolve().unwrap();
    assert_eq!(config.node.host, "127.0.0.1");
    assert_eq!(config.node.port, 7777);
    assert_eq!(config.node.name, "mew");
    assert_eq!(config.node.public_url, "http://127.0.0.1:7777");
    assert!(config.node.public_url_is_default);
    assert_eq!(config.node.default_role, "general-purpose");
    assert_eq!(config.node.data_dir, dirs.project().join(".mew/data"));
    assert_eq!(config.node.shutdown_grace, Duration::from_secs(10));
    assert_eq!(config.log.level, "info");
    assert_eq!(config.log.format, LogFormat::Text);
    assert_eq!(config.limits.max_running_tasks, 16);
    assert_eq!(config.limits.max_running_per_role, 12);
    assert_eq!(config.limits.max_queued_tasks, 1024);
    assert_eq!(config.limits.queue_notice, Some(Duration::from_secs(10)));
    assert_eq!(config.limits.task_timeout, Some(Duration::from_secs(1800)));
    assert_eq!(config.limits.event_buffer, 64);
    assert_eq!(config.limits.max_body_bytes, 10_485_760);
    assert!(config.roles.dirs.is_empty());
    assert_eq!(config.project_dir, dirs.project());
    assert_eq!(config.home_dir.as_deref(), Some(dirs.home()));
    assert_eq!(loaded.origins().len(), default_leaves());
    assert!(
        loaded
            .origins()
            .values()
            .all(|origin| *origin == Origin::Default)
    );
}

#[test]
fn each_layer_overrides_the_ones_below() {
    let dirs = Dirs::new();
    let user = dirs.user_file("node:\n  port: 1001\n  name: from-user\n");
    let project = dirs.project_file("node:\n  port: 1002\nlog:\n  format: json\n");
    let extra = dirs.extra_file("node:\n  port: 1003\n  default_role: from-extra\n");
    let mut sources = dirs.sources();
    sources.config_file = Some(extra.clone());
    sources.env = env(&[("MEW_PORT", "1004"), ("MEW_HOST", "0.0.0.0")]);
    sources.flags.port = Some(1005);

    // Every layer, then peel them off from the top.
    let port_and_origin = |sources: &Sources| {
        let loaded = Config::load(sources).unwrap();
        let port = loaded.resolve().unwrap().node.port;
        (port, loaded.origin("node.port").cloned().unwrap())
    };
    assert_eq!(
        port_and_origin(&sources),
        (1005, Origin::Flag("--port".into()))
    );
    sources.flags.port = None;
    assert_eq!(
        port_and_origin(&sources),
        (1004, Origin::Env("MEW_PORT".into()))
    );
    sources.env.remove("MEW_PORT");
    assert_eq!(
        port_and_origin(&sources),
        (1003, Origin::File(extra.clone()))
    );
    sources.config_file = None;
    assert_eq!(
        port_and_origin(&sources),
        (1002, Origin::File(project.clone()))
    );
    std::fs::remove_file(&project).unwrap();
    assert_eq!(
        port_and_origin(&sources),
        (1001, Origin::File(user.clone()))
    );
    std::fs::remove_file(&user).unwrap();
    assert_eq!(port_and_origin(&sources), (7777, Origin::Default));
}

#[test]
fn layers_merge_key_by_key_and_remember_origins() {
    let dirs = Dirs::new();
    let user = dirs.user_file("node:\n  name: from-user\n");
    let project = dirs.project_file("log:\n  format: json\n");
    let extra = dirs.extra_file("node:\n  default_role: from-extra\n");
    let mut sources = dirs.sources();
    sources.config_file = Some(extra.clone());
    sources.env = env(&[("MEW_HOST", "0.0.0.0"), ("MEW_LOG_LEVEL", "debug")]);
    sources.flags = FlagOverrides {
        port: Some(1005),
        data_dir: Some("state".into()),
        log_format: Some(LogFormat::Text),
        ..FlagOverrides::default()
    };
    let loaded = Config::load(&sources).unwrap();
    let config = loaded.resolve().unwrap();
    assert_eq!(config.node.name, "from-user");
    assert_eq!(config.node.default_role, "from-extra");
    assert_eq!(config.node.host, "0.0.0.0");
    assert_eq!(config.node.port, 1005);
    assert_eq!(config.node.data_dir, dirs.project().join("state"));
    assert_eq!(config.node.public_url, "http://0.0.0.0:1005");
    assert_eq!(config.log.level, "debug");
    assert_eq!(config.log.format, LogFormat::Text);

    let origin = |key: &str| loaded.origin(key).cloned().unwrap();
    assert_eq!(origin("node.name"), Origin::File(user));
    assert_eq!(origin("log.format"), Origin::Flag("--log-format".into()));
    assert_eq!(origin("node.default_role"), Origin::File(extra));
    assert_eq!(origin("node.host"), Origin::Env("MEW_HOST".into()));
    assert_eq!(origin("log.level"), Origin::Env("MEW_LOG_LEVEL".into()));
    assert_eq!(origin("node.port"), Origin::Flag("--port".into()));
    assert_eq!(origin("node.data_dir"), Origin::Flag("--data-dir".into()));
    assert_eq!(origin("limits.event_buffer"), Origin::Default);
    let _ = project;

    let entries = loaded.entries(&config).unwrap();
    let port = entries
        .iter()
        .find(|entry| entry.key == "node.port")
        .unwrap();
    assert_eq!(port.value, serde_yaml_ng::Value::from(1005));
    assert_eq!(port.origin, Origin::Flag("--port".into()));
    assert_eq!(entries.len(), default_leaves());
    assert_eq!(entries[0].key, "node.host");
}

#[test]
fn an_unknown_key_names_the_file_the_line_and_a_suggestion() {
    let dirs = Dirs::new();
    let file = dirs.project_file("node:\n  port: 1\nlimits:\n  max_runing_tasks: 3\n");
    let error = Config::load(&dirs.sources()).unwrap_err();
    match &error {
        ConfigError::UnknownKey {
            origin,
            line,
            key,
            suggestion,
        } => {
            assert_eq!(origin, &Origin::File(file.clone()));
            assert_eq!(*line, Some(4));
            assert_eq!(key, "limits.max_runing_tasks");
            assert_eq!(suggestion.as_deref(), Some("max_running_tasks"));
        }
        other => panic!("expected an unknown key, got {other:?}"),
    }
    assert_eq!(
        error.to_string(),
        format!(
            "{}:4: unknown key limits.max_runing_tasks (did you mean max_running_tasks?)",
            file.display()
        )
    );
}

#[test]
fn unknown_keys_suggest_a_key_of_another_section_or_nothing() {
    let dirs = Dirs::new();
    let file = dirs.user_file("port: 1\n");
    let error = Config::load(&dirs.sources()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}:1: unknown key port (did you mean node.port?)",
            file.display()
        )
    );

    dirs.user_file("# nothing\nlimit:\n  x: 1\n");
    let error = Config::load(&dirs.sources()).unwrap_err().to_string();
    assert!(
        error.ends_with(":2: unknown key limit (did you mean limits?)"),
        "{error}"
    );

    dirs.user_file("gadgets: on\n");
    let error = Config::load(&dirs.sources()).unwrap_err().to_string();
    assert!(error.ends_with(":1: unknown key gadgets"), "{error}");
}

#[test]
fn a_bad_duration_names_the_file_line_and_key() {
    let dirs = Dirs::new();
    let file = dirs.project_file("node:\n  name: x\n  shutdown_grace: 10 seconds\n");
    let error = Config::load(&dirs.sources()).unwrap_err();
    assert!(matches!(
        &error,
        ConfigError::BadValue { key, line: Some(3), .. } if key == "node.shutdown_grace"
    ));
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "{}:3: bad value for node.shutdown_grace: invalid duration `10 seconds`",
            file.display()
        )),
        "{message}"
    );
}

#[test]
fn durations_are_strings_or_integers_of_seconds() {
    let dirs = Dirs::new();
    dirs.project_file("node:\n  shutdown_grace: 500ms\nlimits:\n  task_timeout: 90\n");
    let config = resolve(&dirs.sources());
    assert_eq!(config.node.shutdown_grace, Duration::from_millis(500));
    assert_eq!(config.limits.task_timeout, Some(Duration::from_secs(90)));

    dirs.project_file("limits:\n  task_timeout: 0\n");
    assert_eq!(resolve(&dirs.sources()).limits.task_timeout, None);

    dirs.project_file("limits:\n  task_timeout: -5\n");
    let error = Config::load(&dirs.sources()).unwrap_err().to_string();
    assert!(
        error.contains("bad value for limits.task_timeout"),
        "{error}"
    );
}

#[test]
fn a_roles_share_of_the_nodes_slots_is_three_quarters_unless_set_and_never_more_than_all() {
    let dirs = Dirs::new();
    for (text, per_role) in [
        ("limits:\n  max_running_tasks: 1\n", 1),
        ("limits:\n  max_running_tasks: 2\n", 2),
        ("limits:\n  max_running_tasks: 40\n", 30),
        (
            "limits:\n  max_running_tasks: 8\n  max_running_per_role: 3\n",
            3,
        ),
        (
            "limits:\n  max_running_tasks: 8\n  max_running_per_role: 50\n",
            8,
        ),
    ] {
        dirs.project_file(text);
        let limits = resolve(&dirs.sources()).limits;
        assert_eq!(limits.max_running_per_role, per_role, "{text}");
    }
    dirs.project_file("limits:\n  queue_notice: 0\n");
    assert_eq!(resolve(&dirs.sources()).limits.queue_notice, None);
}

#[test]
fn a_bad_port_names_the_file_and_key() {
    let dirs = Dirs::new();
    for (text, expected) in [
        ("node:\n  port: 70000\n", "invalid value: integer `70000`"),
        ("node:\n  port: seven\n", "invalid type: string \"seven\""),
    ] {
        let file = dirs.project_file(text);
        let error = Config::load(&dirs.sources()).unwrap_err().to_string();
        let prefix = format!("{}:2: bad value for node.port: ", file.display());
        assert!(error.starts_with(&prefix), "{error}");
        assert!(error.contains(expected), "{error}");
    }
}

#[test]
fn other_bad_values_are_rejected() {
    let dirs = Dirs::new();
    for (text, key) in [
        (
            "limits:\n  max_running_tasks: 0\n",
            "limits.max_running_tasks",
        ),
        ("limits:\n  event_buffer: 0\n", "limits.event_buffer"),
        ("log:\n  format: xml\n", "log.format"),
        ("log:\n  level: mew=loud\n", "log.level"),
        ("node:\n  public_url: ftp://x\n", "node.public_url"),
        ("node:\n  name: ''\n", "node.name"),
        ("roles:\n  dirs: roles\n", "roles.dirs"),
        ("node: 5\n", "node"),
    ] {
        dirs.project_file(text);
        match Config::load(&dirs.sources()) {
            Err(ConfigError::BadValue { key: bad, .. }) => assert_eq!(bad, key, "{text}"),
            other => panic!("{text}: expected a bad value, got {other:?}"),
        }
    }
}

#[test]
fn an_env_var_with_a_bad_value_is_named() {
    let dirs = Dirs::new();
    for (name, value, key) in [
        ("MEW_PORT", "abc", "node.port"),
        ("MEW_PORT", "99999", "node.port"),
        ("MEW_LOG_FORMAT", "xml", "log.format"),
        ("MEW_LOG_LEVEL", "=", "log.level"),
    ] {
        let mut sources = dirs.sources();
        sources.env = env(&[(name, value)]);
        let error = Config::load(&sources).unwrap_err();
        assert!(
            matches!(&error, ConfigError::BadValue { origin: Origin::Env(var), key: bad, .. }
                if var == name && bad == key),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("env {name}: bad value for {key}: ")),
            "{message}"
        );
    }
}

#[test]
fn empty_env_vars_and_other_variables_are_ignored() {
    let dirs = Dirs::new();
    let mut sources = dirs.sources();
    sources.env = env(&[("MEW_PORT", ""), ("MEW_SOMETHING_ELSE", "x"), ("PORT", "1")]);
    let loaded = Config::load(&sources).unwrap();
    assert_eq!(loaded.resolve().unwrap().node.port, 7777);
    assert_eq!(loaded.origin("node.port"), Some(&Origin::Default));
}

#[test]
fn a_bad_flag_value_is_named() {
    let dirs = Dirs::new();
    let mut sources = dirs.sources();
    sources.flags.log_level = Some("mew=loud".into());
    let error = Config::load(&sources).unwrap_err().to_string();
    assert!(
        error.starts_with("flag --log-level: bad value for log.level: "),
        "{error}"
    );
}

#[test]
fn missing_user_and_project_files_are_fine_but_an_explicit_one_is_not() {
    let sources = Sources::new("/nonexistent/project");
    let loaded = Config::load(&sources).unwrap();
    assert!(
        loaded
            .origins()
            .values()
            .all(|origin| *origin == Origin::Default)
    );

    let mut sources = Sources {
        home: Some("/nonexistent/home".into()),
        ..sources
    };
    assert_eq!(
        resolve(&sources).node.data_dir,
        Path::new("/nonexistent/project/.mew/data")
    );
    sources.config_file = Some("/nonexistent/mew.yaml".into());
    let error = Config::load(&sources).unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .starts_with("reading /nonexistent/mew.yaml: "),
        "{error}"
    );
}

#[test]
fn empty_files_and_empty_sections_are_fine() {
    let dirs = Dirs::new();
    dirs.user_file("");
    dirs.project_file("# all commented out\nnode:\nlimits:\n");
    let loaded = Config::load(&dirs.sources()).unwrap();
    assert!(
        loaded
            .origins()
            .values()
            .all(|origin| *origin == Origin::Default)
    );
}

#[test]
fn malformed_yaml_and_a_non_mapping_name_the_file() {
    let dirs = Dirs::new();
    let file = dirs.project_file("node:\n  port: 1\n port: 2\n");
    let error = Config::load(&dirs.sources()).unwrap_err();
    assert!(
        matches!(&error, ConfigError::Syntax { path, line: Some(_), .. } if *path == file),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with(&format!("{}: invalid YAML: ", file.display()))
    );

    dirs.project_file("- node\n");
    let error = Config::load(&dirs.sources()).unwrap_err();
    assert!(
        matches!(error, ConfigError::NotAMapping { .. }),
        "{error:?}"
    );
}

#[test]
fn tilde_expands_to_home_and_relative_paths_join_the_project() {
    let dirs = Dirs::new();
    dirs.project_file(
        "node:\n  data_dir: ~/state\nroles:\n  dirs: [~/roles, team/roles, /abs/roles, '~']\n",
    );
    let config = resolve(&dirs.sources());
    assert_eq!(config.node.data_dir, dirs.home().join("state"));
    assert_eq!(
        config.roles.dirs,
        [
            dirs.home().join("roles"),
            dirs.project().join("team/roles"),
            PathBuf::from("/abs/roles"),
            dirs.home().to_owned(),
        ]
    );

    let mut sources = dirs.sources();
    sources.env = env(&[("MEW_DATA_DIR", "~user/state")]);
    assert_eq!(
        resolve(&sources).node.data_dir,
        dirs.project().join("~user/state")
    );
}

#[test]
fn without_a_home_the_default_data_dir_is_the_projects_and_a_tilde_is_an_error() {
    let dirs = Dirs::new();
    let sources = Sources::new(dirs.project());
    let config = Config::load(&sources).unwrap().resolve().unwrap();
    assert_eq!(config.node.data_dir, dirs.project().join(".mew/data"));

    let mut sources = sources;
    sources.env = env(&[("MEW_DATA_DIR", "~/state")]);
    let error = Config::load(&sources).unwrap().resolve().unwrap_err();
    assert_eq!(
        error.to_string(),
        "node.data_dir (from env MEW_DATA_DIR): `~/state` starts with ~ but no home directory is known"
    );
}

#[test]
fn public_url_is_kept_without_a_trailing_slash_or_computed() {
    let dirs = Dirs::new();
    dirs.project_file("node:\n  public_url: https://mew.example/a/\n");
    let mut config = resolve(&dirs.sources());
    assert_eq!(config.node.public_url, "https://mew.example/a");
    assert!(!config.node.public_url_is_default);
    config.node.bound_to("127.0.0.1:4000".parse().unwrap());
    assert_eq!(config.node.public_url, "https://mew.example/a");
    assert_eq!(config.node.port, 4000);

    dirs.project_file("node:\n  host: '::1'\n  port: 0\n");
    let mut config = resolve(&dirs.sources());
    assert_eq!(config.node.public_url, "http://[::1]:0");
    assert_eq!(config.node.listen_address(), "[::1]:0");
    config.node.bound_to("[::1]:4001".parse().unwrap());
    assert_eq!(config.node.public_url, "http://[::1]:4001");
}

#[test]
fn the_resolved_config_serializes_with_the_file_keys() {
    let dirs = Dirs::new();
    let config = resolve(&dirs.sources());
    let yaml = serde_yaml_ng::to_string(&config).unwrap();
    assert!(yaml.contains("  shutdown_grace: 10s\n"), "{yaml}");
    assert!(yaml.contains("  task_timeout: 30m\n"), "{yaml}");
    // What `mew config show` prints is a valid configuration file.
    dirs.project_file(&yaml);
    let reread = resolve(&dirs.sources());
    assert!(!reread.node.public_url_is_default);
    assert_eq!(
        reread,
        Config {
            node: NodeConfig {
                public_url_is_default: false,
                ..config.node.clone()
            },
            ..config
        }
    );
}

#[test]
fn a_replica_id_comes_from_the_environment_and_a_bad_one_is_named() {
    let dirs = Dirs::new();
    let mut sources = dirs.sources();
    assert_eq!(resolve(&sources).store.replica_id, None);
    sources.env = env(&[("MEW_REPLICA_ID", "mew-7d9f-x2")]);
    assert_eq!(
        resolve(&sources).store.replica_id.as_deref(),
        Some("mew-7d9f-x2")
    );
    sources.env = env(&[("MEW_REPLICA_ID", "pod/1")]);
    let error = Config::load(&sources).unwrap().resolve().unwrap_err();
    assert!(
        error.to_string().starts_with(
            "store.replica_id (from env MEW_REPLICA_ID): \"pod/1\" is not a replica id"
        ),
        "{error}"
    );
}
