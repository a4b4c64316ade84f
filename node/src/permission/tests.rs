//! Tests of the permission policy: mode defaults, rule order, questions, and the `permissions:` configuration with `.claude/settings.json`.

use std::path::{Path, PathBuf};

use mew_cards::PermissionMode;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::rules::RuleError;
use super::*;
use crate::config::{Config, ConfigError, Origin, Sources};

const MODES: [PermissionMode; 5] = [
    PermissionMode::Default,
    PermissionMode::AcceptEdits,
    PermissionMode::Plan,
    PermissionMode::BypassPermissions,
    PermissionMode::DontAsk,
];

fn policy(allow: &[&str], deny: &[&str], ask: &[&str]) -> PermissionPolicy {
    let config = PermissionsConfig {
        mode: PermissionMode::Default,
        allow: rules(allow),
        deny: rules(deny),
        ask: rules(ask),
    };
    PermissionPolicy::new(
        &config,
        Path::new("/srv/project"),
        Some(Path::new("/home/me")),
    )
    .unwrap()
}

fn allow() -> Decision {
    Decision::Allow
}

fn deny(reason: &str) -> Decision {
    Decision::Deny {
        reason: reason.to_owned(),
    }
}

fn ask(question: &str) -> Decision {
    Decision::Ask {
        question: question.to_owned(),
    }
}

fn run(command: &str) -> Value {
    json!({ "command": command })
}

fn file(path: &str) -> Value {
    json!({ "file_path": path })
}

#[test]
fn every_mode_and_category_has_its_default() {
    let policy = policy(&[], &[], &[]);
    let read = |mode| policy.check(mode, "read_file", Category::Read, &file("src/lib.rs"));
    let edit = |mode| policy.check(mode, "edit_file", Category::Edit, &file("src/lib.rs"));
    let exec = |mode| policy.check(mode, "bash", Category::Exec, &run("make"));
    let asked_edit = ask("edit_file wants to change src/lib.rs");
    let asked_exec = ask("bash wants to run: make");
    let expected = [
        (
            PermissionMode::Default,
            allow(),
            asked_edit.clone(),
            asked_exec.clone(),
        ),
        (PermissionMode::AcceptEdits, allow(), allow(), asked_exec),
        (
            PermissionMode::Plan,
            allow(),
            deny("plan mode: no edits"),
            deny("plan mode: no commands"),
        ),
        (PermissionMode::BypassPermissions, allow(), allow(), allow()),
        (PermissionMode::DontAsk, allow(), allow(), allow()),
    ];
    for (mode, read_decision, edit_decision, exec_decision) in expected {
        assert_eq!(read(mode), read_decision, "{mode} read");
        assert_eq!(edit(mode), edit_decision, "{mode} edit");
        assert_eq!(exec(mode), exec_decision, "{mode} exec");
    }
    // MCP tools without a read-only hint are Exec.
    assert_eq!(
        policy.check(
            PermissionMode::Default,
            "mcp__github__create_issue",
            category_for("mcp__github__create_issue", false),
            &json!({"title": "x"}),
        ),
        ask(r#"mcp__github__create_issue wants to run with {"title":"x"}"#)
    );
}

#[test]
fn deny_beats_allow_beats_the_mode() {
    let policy = policy(
        &["bash(git *)", "edit_file(src/**)"],
        &["bash(git push *)"],
        &[],
    );
    let mode = PermissionMode::Default;
    assert_eq!(
        policy.check(mode, "bash", Category::Exec, &run("git push origin main")),
        deny("denied by permission rule `bash(git push *)`")
    );
    assert_eq!(
        policy.check(mode, "bash", Category::Exec, &run("git status")),
        allow()
    );
    assert_eq!(
        policy.check(mode, "bash", Category::Exec, &run("cargo build")),
        ask("bash wants to run: cargo build")
    );
    assert_eq!(
        policy.check(mode, "edit_file", Category::Edit, &file("src/a.rs")),
        allow()
    );
    assert_eq!(
        policy.check(mode, "edit_file", Category::Edit, &file("Cargo.toml")),
        ask("edit_file wants to change Cargo.toml")
    );
    // A deny rule also turns down what the mode would allow.
    let policy = self::policy(&[], &["Read(**/.env)"], &[]);
    assert_eq!(
        policy.check(mode, "read_file", Category::Read, &file("config/.env")),
        deny("denied by permission rule `Read(**/.env)`")
    );
}

#[test]
fn deny_rules_hold_in_every_mode_even_bypass() {
    let policy = policy(&["bash"], &["bash(rm *)", "mcp__prod"], &[]);
    for mode in MODES {
        assert_eq!(
            policy.check(mode, "bash", Category::Exec, &run("ls && rm -rf /")),
            deny("denied by permission rule `bash(rm *)`"),
            "{mode}"
        );
        assert_eq!(
            policy.check(mode, "mcp__prod__drop_table", Category::Exec, &json!({})),
            deny("denied by permission rule `mcp__prod`"),
            "{mode}"
        );
    }
    assert_eq!(
        policy.check(
            PermissionMode::BypassPermissions,
            "bash",
            Category::Exec,
            &run("ls")
        ),
        allow()
    );
}

#[test]
fn ask_rules_beat_allow_rules_except_in_bypass_and_dont_ask() {
    let policy = policy(&["bash"], &[], &["Bash(git push:*)"]);
    let push = run("git push origin main");
    let expected = [
        (
            PermissionMode::Default,
            ask("bash wants to run: git push origin main"),
        ),
        (
            PermissionMode::AcceptEdits,
            ask("bash wants to run: git push origin main"),
        ),
        (
            PermissionMode::Plan,
            ask("bash wants to run: git push origin main"),
        ),
        (PermissionMode::BypassPermissions, allow()),
        (PermissionMode::DontAsk, allow()),
    ];
    for (mode, decision) in expected {
        assert_eq!(
            policy.check(mode, "bash", Category::Exec, &push),
            decision,
            "{mode}"
        );
    }
    assert_eq!(
        policy.check(
            PermissionMode::Default,
            "bash",
            Category::Exec,
            &run("git status")
        ),
        allow()
    );
}

#[test]
fn dont_ask_approves_everything_no_deny_rule_refuses() {
    let policy = policy(&[], &["write_file(/etc/**)"], &["edit_file"]);
    let mode = PermissionMode::DontAsk;
    assert_eq!(
        policy.check(mode, "bash", Category::Exec, &run("rm -rf target")),
        allow()
    );
    assert_eq!(
        policy.check(mode, "edit_file", Category::Edit, &file("a.rs")),
        allow()
    );
    assert_eq!(
        policy.check(mode, "mcp__x__y", Category::Exec, &json!({"a": 1})),
        allow()
    );
    assert_eq!(
        policy.check(mode, "write_file", Category::Edit, &file("/etc/hosts")),
        deny("denied by permission rule `write_file(/etc/**)`")
    );
}

#[test]
fn plan_mode_refuses_edits_whatever_the_rules_but_allow_rules_open_commands() {
    let policy = policy(&["edit_file", "bash(git log:*)"], &[], &["write_file"]);
    let mode = PermissionMode::Plan;
    assert_eq!(
        policy.check(mode, "edit_file", Category::Edit, &file("a.rs")),
        deny("plan mode: no edits")
    );
    assert_eq!(
        policy.check(mode, "write_file", Category::Edit, &file("a.rs")),
        deny("plan mode: no edits")
    );
    assert_eq!(
        policy.check(mode, "bash", Category::Exec, &run("git log -5")),
        allow()
    );
    assert_eq!(
        policy.check(mode, "bash", Category::Exec, &run("git commit")),
        deny("plan mode: no commands")
    );
}

#[test]
fn allow_rules_approve_a_compound_command_only_piece_by_piece() {
    let policy = policy(&["bash(git *)", "Bash(cargo test:*)"], &[], &[]);
    let mode = PermissionMode::Default;
    let check = |command: &str| policy.check(mode, "bash", Category::Exec, &run(command));
    assert_eq!(check("git status && cargo test -p x"), allow());
    assert_eq!(
        check("git fetch; git rebase origin/main | cat"),
        ask("bash wants to run: git fetch; git rebase origin/main | cat")
    );
    assert_eq!(
        check("git status && rm -rf /"),
        ask("bash wants to run: git status && rm -rf /")
    );
    assert_eq!(
        check("git log $(rm -rf /)"),
        ask("bash wants to run: git log $(rm -rf /)")
    );
    assert_eq!(check("git commit -m 'a; b && c'"), allow());
    assert_eq!(check(""), ask("bash wants to run: "));
    // A tool-wide rule approves any command.
    let policy = self::policy(&["Bash"], &[], &[]);
    assert_eq!(
        policy.check(mode, "bash", Category::Exec, &run("echo $(id) && make")),
        allow()
    );
}

#[test]
fn claude_code_domain_rules_approve_web_fetches_per_host() {
    let policy = policy(
        &["WebFetch(domain:docs.rs)"],
        &["WebFetch(domain:*.internal)"],
        &[],
    );
    let fetch = |mode, url: &str| {
        policy.check(
            mode,
            "web_fetch",
            Category::Exec,
            &json!({"url": url, "prompt": "p"}),
        )
    };
    assert_eq!(
        fetch(PermissionMode::Default, "https://docs.rs/tokio"),
        allow()
    );
    // Research stays open in plan mode where a rule allows it.
    assert_eq!(
        fetch(PermissionMode::Plan, "https://docs.rs/tokio"),
        allow()
    );
    assert_eq!(
        fetch(PermissionMode::Default, "https://crates.io/"),
        ask("web_fetch wants to fetch https://crates.io/")
    );
    assert_eq!(
        fetch(PermissionMode::BypassPermissions, "http://wiki.internal/x"),
        deny("denied by permission rule `WebFetch(domain:*.internal)`")
    );
}

#[test]
fn questions_say_what_the_tool_wants_to_do() {
    let policy = policy(&[], &[], &[]);
    let mode = PermissionMode::Default;
    let question = |tool: &str, category, input: Value| policy.check(mode, tool, category, &input);
    assert_eq!(
        question("bash", Category::Exec, run("  git push origin main\n")),
        ask("bash wants to run: git push origin main")
    );
    assert_eq!(
        question("edit_file", Category::Edit, file("/srv/project/src/lib.rs")),
        ask("edit_file wants to change src/lib.rs")
    );
    assert_eq!(
        question("write_file", Category::Edit, file("/tmp/out.txt")),
        ask("write_file wants to write /tmp/out.txt")
    );
    assert_eq!(
        question("read_file", Category::Exec, file("../x")),
        ask("read_file wants to read /srv/x")
    );
    assert_eq!(
        question("grep", Category::Exec, json!({"pattern": "TODO"})),
        ask("grep wants to search . for `TODO`")
    );
    assert_eq!(
        question(
            "glob",
            Category::Exec,
            json!({"pattern": "**/*.rs", "path": "src"})
        ),
        ask("glob wants to list files matching `**/*.rs` in src")
    );
    assert_eq!(
        question(
            "MultiEdit",
            Category::Edit,
            json!({"file_path": "a.rs", "edits": []})
        ),
        ask("multi_edit wants to change a.rs")
    );
    assert_eq!(
        question("LS", Category::Exec, json!({"path": "/srv/project/src"})),
        ask("ls wants to list src")
    );
    assert_eq!(
        question(
            "WebFetch",
            Category::Exec,
            json!({"url": " https://docs.rs/x ", "prompt": "p"})
        ),
        ask("web_fetch wants to fetch https://docs.rs/x")
    );
    assert_eq!(
        question("web_search", Category::Exec, json!({"query": "tokio"})),
        ask("web_search wants to search the web for `tokio`")
    );
    let long = "é".repeat(300);
    let Decision::Ask { question } = question("mcp__x__y", Category::Exec, json!({ "text": long }))
    else {
        panic!("expected a question");
    };
    assert!(question.starts_with(r#"mcp__x__y wants to run with {"text":"éé"#));
    assert!(question.ends_with('…'));
    assert_eq!(
        question.chars().count(),
        "mcp__x__y wants to run with ".len() + 201
    );
    // Claude Code's tool names are accepted in calls too.
    assert_eq!(
        policy.check(mode, "Bash", Category::Exec, &run("ls")),
        ask("bash wants to run: ls")
    );
}

#[test]
fn categories_follow_the_read_only_hint_and_the_edit_tools() {
    assert_eq!(category_for("mcp__github__list_prs", true), Category::Read);
    assert_eq!(
        category_for("mcp__github__create_pr", false),
        Category::Exec
    );
    assert_eq!(category_for("edit_file", false), Category::Edit);
    assert_eq!(category_for("write_file", true), Category::Edit);
    assert_eq!(category_for("Write", false), Category::Edit);
    assert_eq!(category_for("bash", false), Category::Exec);
    assert_eq!(category_for("read_file", true), Category::Read);
}

#[test]
fn bad_rules_are_errors_that_name_the_rule() {
    // A rule is compiled when it is read, so a bad one never reaches the policy.
    assert_eq!(Rule::parse("bash(").unwrap_err(), RuleError::Parentheses);
    let error = serde_yaml_ng::from_str::<Vec<Rule>>("['bash(']").unwrap_err();
    assert!(
        error.to_string().starts_with(
            "bad rule `bash(`: the argument pattern must be in parentheses at the end: \
             `tool(pattern)`"
        ),
        "{error}"
    );
    // A rule reads and writes as its text.
    let read: Vec<Rule> = serde_yaml_ng::from_str("['Bash(git log:*)', mcp__github]").unwrap();
    assert_eq!(read, rules(&["Bash(git log:*)", "mcp__github"]));
    assert_eq!(
        serde_json::to_value(&read).unwrap(),
        json!(["Bash(git log:*)", "mcp__github"])
    );
    let config = PermissionsConfig {
        ask: rules(&["Read(~/.ssh/**)"]),
        ..PermissionsConfig::default()
    };
    let error = PermissionPolicy::new(&config, Path::new("/p"), None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "permissions.ask: rule `Read(~/.ssh/**)` starts with ~ but no home directory is known"
    );
}

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

    fn sources(&self) -> Sources {
        Sources {
            home: Some(self.home.path().to_owned()),
            ..Sources::new(self.project.path())
        }
    }

    fn user_file(&self, text: &str) -> PathBuf {
        write(&self.home.path().join(".mew/config.yaml"), text)
    }

    fn project_file(&self, text: &str) -> PathBuf {
        write(&self.project.path().join(".mew/config.yaml"), text)
    }

    fn claude_file(&self, text: &str) -> PathBuf {
        write(&self.project.path().join(".claude/settings.json"), text)
    }

    fn config(&self) -> Result<Config, ConfigError> {
        Config::load(&self.sources())?.resolve()
    }
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    path.to_owned()
}

fn rules(items: &[&str]) -> Vec<Rule> {
    items
        .iter()
        .map(|item| Rule::parse(item).unwrap())
        .collect()
}

#[test]
fn permission_config_defaults_to_no_rules_and_default_mode() {
    let dirs = Dirs::new();
    let config = dirs.config().unwrap();
    assert_eq!(config.permissions, PermissionsConfig::default());
    assert_eq!(config.permissions.mode, PermissionMode::Default);
    let yaml = serde_yaml_ng::to_string(&config).unwrap();
    assert!(
        yaml.contains("permissions:\n  mode: default\n  allow: []\n  deny: []\n  ask: []\n"),
        "{yaml}"
    );
}

#[test]
fn user_claude_and_project_rules_all_apply_and_the_highest_mode_wins() {
    let dirs = Dirs::new();
    let user = dirs.user_file(
        "permissions:\n  mode: acceptEdits\n  allow: [read_file, 'bash(git *)']\n  \
         deny: ['Read(~/.ssh/**)']\n",
    );
    let claude = dirs.claude_file(
        r#"{
  "model": "opus",
  "permissions": {
    "allow": ["Bash(npm run test:*)", "Edit(/src/**)", "Read(//etc/hosts)", "bash(git *)"],
    "ask": ["Bash(git push:*)"],
    "defaultMode": "plan",
    "additionalDirectories": ["../other"]
  },
  "hooks": {}
}"#,
    );
    let project = dirs.project_file("permissions:\n  mode: default\n  deny: ['bash(rm *)']\n");
    let loaded = Config::load(&dirs.sources()).unwrap();
    let config = loaded.resolve().unwrap();
    assert_eq!(config.permissions.mode, PermissionMode::Default);
    assert_eq!(
        config.permissions.allow,
        rules(&[
            "read_file",
            "bash(git *)",
            "Bash(npm run test:*)",
            "Edit(src/**)",
            "Read(//etc/hosts)",
        ])
    );
    assert_eq!(
        config.permissions.deny,
        rules(&["Read(~/.ssh/**)", "bash(rm *)"])
    );
    assert_eq!(config.permissions.ask, rules(&["Bash(git push:*)"]));
    assert_eq!(
        loaded.origin("permissions.mode"),
        Some(&Origin::File(project.clone()))
    );
    assert_eq!(
        loaded.origin("permissions.allow"),
        Some(&Origin::File(claude))
    );
    assert_eq!(
        loaded.origin("permissions.deny"),
        Some(&Origin::File(project))
    );
    let _ = user;

    let policy = PermissionPolicy::new(
        &config.permissions,
        &config.project_dir,
        config.home_dir.as_deref(),
    )
    .unwrap();
    assert_eq!(policy.default_mode(), PermissionMode::Default);
    let mode = policy.default_mode();
    let ssh = dirs.home.path().join(".ssh/id_ed25519");
    assert_eq!(
        policy.check(
            mode,
            "read_file",
            Category::Read,
            &file(&ssh.to_string_lossy())
        ),
        deny("denied by permission rule `Read(~/.ssh/**)`")
    );
    assert_eq!(
        policy.check(mode, "edit_file", Category::Edit, &file("src/main.rs")),
        allow()
    );
    assert_eq!(
        policy.check(mode, "bash", Category::Exec, &run("npm run test -- -u")),
        allow()
    );
    assert_eq!(
        policy.check(mode, "bash", Category::Exec, &run("git push")),
        ask("bash wants to run: git push")
    );
    assert_eq!(
        policy.check(mode, "bash", Category::Exec, &run("git clean && rm -rf .")),
        deny("denied by permission rule `bash(rm *)`")
    );
}

#[test]
fn claude_settings_without_permissions_or_without_the_file_change_nothing() {
    let dirs = Dirs::new();
    dirs.claude_file(r#"{"model": "opus", "env": {"A": "1"}}"#);
    assert_eq!(
        dirs.config().unwrap().permissions,
        PermissionsConfig::default()
    );
    dirs.claude_file(r#"{"permissions": {"additionalDirectories": ["x"]}}"#);
    assert_eq!(
        dirs.config().unwrap().permissions,
        PermissionsConfig::default()
    );
}

#[test]
fn a_bad_rule_names_the_file_the_line_and_the_rule() {
    let dirs = Dirs::new();
    let project = dirs.project_file("node:\n  port: 1\npermissions:\n  allow:\n    - 'bash(git'\n");
    let error = dirs.config().unwrap_err();
    match &error {
        ConfigError::BadValue {
            origin,
            line,
            key,
            message,
        } => {
            assert_eq!(origin, &Origin::File(project.clone()));
            assert_eq!(*line, Some(4));
            assert_eq!(key, "permissions.allow");
            assert!(message.contains("bad rule `bash(git`"), "{message}");
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert!(
        error.to_string().starts_with(&format!(
            "{}:4: bad value for permissions.allow: ",
            project.display()
        )),
        "{error}"
    );

    let dirs = Dirs::new();
    let claude =
        dirs.claude_file("{\n  \"permissions\": {\n    \"deny\": [\"Bash(re:(x)\"]\n  }\n}\n");
    let error = dirs.config().unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "{}:3: bad value for permissions.deny: ",
            claude.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("bad rule `Bash(re:(x)`: bad regex `(x`"),
        "{text}"
    );
}

#[test]
fn bad_modes_and_bad_settings_files_are_errors_that_name_the_file() {
    let dirs = Dirs::new();
    let project = dirs.project_file("permissions:\n  mode: yolo\n");
    let text = dirs.config().unwrap_err().to_string();
    assert!(
        text.starts_with(&format!(
            "{}:2: bad value for permissions.mode: ",
            project.display()
        )),
        "{text}"
    );
    assert!(text.contains("yolo"), "{text}");

    let dirs = Dirs::new();
    let project = dirs.project_file("permissions:\n  allowed: [bash]\n");
    let error = dirs.config().unwrap_err();
    assert!(
        matches!(&error, ConfigError::UnknownKey { key, origin, .. }
            if key == "permissions.allowed" && origin == &Origin::File(project.clone())),
        "{error:?}"
    );

    let dirs = Dirs::new();
    let claude = dirs.claude_file("{\"permissions\": {\"defaultMode\": \"dontAsk\"}}");
    let error = dirs.config().unwrap_err();
    match &error {
        ConfigError::BadValue {
            origin,
            key,
            message,
            ..
        } => {
            assert_eq!(origin, &Origin::File(claude.clone()));
            assert_eq!(key, "permissions.defaultMode");
            assert!(
                message.starts_with("`dontAsk` refuses unapproved tools"),
                "{message}"
            );
        }
        other => panic!("unexpected error {other:?}"),
    }

    let dirs = Dirs::new();
    let claude = dirs.claude_file("{\"permissions\": {\"defaultMode\": \"auto\"}}");
    let error = dirs.config().unwrap_err();
    assert!(
        matches!(&error, ConfigError::BadValue { key, origin, .. }
            if key == "permissions.defaultMode" && origin == &Origin::File(claude.clone())),
        "{error:?}"
    );

    let dirs = Dirs::new();
    let claude = dirs.claude_file("{\"permissions\": {\"allow\": [\"Bash\",]}}");
    let error = dirs.config().unwrap_err();
    assert!(
        matches!(&error, ConfigError::Json { path, line: Some(1), .. } if path == &claude),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with(&format!("{}: invalid JSON: ", claude.display()))
    );

    let dirs = Dirs::new();
    let claude = dirs.claude_file("{\"permissions\": [\"Bash\"]}");
    let error = dirs.config().unwrap_err();
    assert!(
        matches!(&error, ConfigError::BadValue { key, origin, .. }
            if key == "permissions" && origin == &Origin::File(claude.clone())),
        "{error:?}"
    );

    let dirs = Dirs::new();
    dirs.claude_file("[1]");
    assert!(matches!(
        dirs.config().unwrap_err(),
        ConfigError::Json { line: None, .. }
    ));
}
