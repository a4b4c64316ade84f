//! Integration tests for role-file parsing: frontmatter splitting, every field rule, errors and
//! warnings.

use std::time::Duration;

use mew_cards::{
    CommandInput, CommandSpec, DEFAULT_MAX_TURNS, FrontmatterError, ModelChoice, ParsedRole,
    PermissionMode, RemoteTarget, RoleError, RoleErrorKind, RoleSource, is_valid_role_name,
    parse_role, split_frontmatter,
};

const PATH: &str = "agents/foo.md";

fn parse(text: &str) -> ParsedRole {
    match parse_role(text, PATH, RoleSource::Project) {
        Ok(parsed) => parsed,
        Err(err) => panic!("expected a role, got: {err}"),
    }
}

fn error(text: &str) -> RoleError {
    match parse_role(text, PATH, RoleSource::Project) {
        Ok(parsed) => panic!("expected an error, got {parsed:?}"),
        Err(err) => err,
    }
}

/// A role file with a valid name and description, the extra frontmatter lines `fields`, and a body.
fn with_fields(fields: &str) -> String {
    format!("---\nname: foo\ndescription: Does foo.\n{fields}---\nBody.\n")
}

fn parse_fields(fields: &str) -> ParsedRole {
    parse(&with_fields(fields))
}

fn warnings(parsed: &ParsedRole) -> Vec<String> {
    parsed.warnings.iter().map(ToString::to_string).collect()
}

// --- Frontmatter splitting ---

#[test]
fn minimal_role_has_defaults() {
    let parsed = parse("---\nname: foo\ndescription: Does foo.\n---\nYou do foo.\n");
    let role = parsed.definition;
    assert!(parsed.warnings.is_empty());
    assert_eq!(role.name, "foo");
    assert_eq!(role.description, "Does foo.");
    assert_eq!(role.system_prompt, "You do foo.");
    assert!(role.tools.is_empty());
    assert!(role.disallowed_tools.is_empty());
    assert_eq!(role.model, ModelChoice::Inherit);
    assert_eq!(role.max_turns, 0);
    assert_eq!(role.effective_max_turns(), DEFAULT_MAX_TURNS);
    assert_eq!(role.permission_mode, PermissionMode::Default);
    assert!(!role.background);
    assert!(role.tags.is_empty());
    assert!(role.examples.is_empty());
    assert!(role.publish);
    assert!(role.command.is_none());
    assert!(!role.is_command());
    assert_eq!(role.source, RoleSource::Project);
    assert_eq!(role.path, PATH);
    assert!(role.extra.is_empty());
}

#[test]
fn bom_is_stripped() {
    let role = parse("\u{feff}---\nname: foo\ndescription: d\n---\nHi").definition;
    assert_eq!(role.name, "foo");
    assert_eq!(role.system_prompt, "Hi");
}

#[test]
fn crlf_line_endings_are_accepted() {
    let role =
        parse("---\r\nname: foo\r\ndescription: d\r\n---\r\nLine one.\r\nLine two.\r\n").definition;
    assert_eq!(role.name, "foo");
    assert_eq!(role.description, "d");
    assert_eq!(role.system_prompt, "Line one.\nLine two.");
}

#[test]
fn no_frontmatter_is_an_error() {
    let err = error("# Just markdown\n\nname: foo\n");
    assert_eq!(
        err.kind,
        RoleErrorKind::Frontmatter(FrontmatterError::Missing)
    );
    assert!(
        err.to_string()
            .starts_with("agents/foo.md: no YAML frontmatter")
    );
    assert_eq!(
        error("").kind,
        RoleErrorKind::Frontmatter(FrontmatterError::Missing)
    );
}

#[test]
fn unclosed_frontmatter_is_an_error() {
    let err = error("---\nname: foo\ndescription: d\nBody\n");
    assert_eq!(
        err.kind,
        RoleErrorKind::Frontmatter(FrontmatterError::Unclosed)
    );
    assert_eq!(
        err.to_string(),
        "agents/foo.md: frontmatter is not closed: no line `---` after the opening one"
    );
}

#[test]
fn closing_at_end_of_file_without_newline_gives_empty_body() {
    let parsed = parse("---\nname: foo\ndescription: d\n---");
    assert_eq!(parsed.definition.system_prompt, "");
    assert_eq!(split_frontmatter("---\na: 1\n---"), Ok(("a: 1\n", "")));
}

#[test]
fn leading_whitespace_before_opening_line_means_no_frontmatter() {
    assert_eq!(
        error(" ---\nname: foo\ndescription: d\n---\n").kind,
        RoleErrorKind::Frontmatter(FrontmatterError::Missing)
    );
    assert_eq!(
        error("\n---\nname: foo\ndescription: d\n---\n").kind,
        RoleErrorKind::Frontmatter(FrontmatterError::Missing)
    );
}

#[test]
fn indented_dashes_do_not_close_frontmatter() {
    assert_eq!(
        split_frontmatter("---\na: 1\n  ---\nb: 2\n---\nbody"),
        Ok(("a: 1\n  ---\nb: 2\n", "body"))
    );
}

#[test]
fn trailing_spaces_on_delimiters_are_allowed() {
    assert_eq!(
        split_frontmatter("--- \na: 1\n---\t\r\nbody"),
        Ok(("a: 1\n", "body"))
    );
}

#[test]
fn empty_body_gives_empty_system_prompt() {
    let role = parse("---\nname: foo\ndescription: d\n---\n\n  \n").definition;
    assert_eq!(role.system_prompt, "");
}

#[test]
fn dashes_in_body_after_frontmatter_stay_in_body() {
    let role = parse("---\nname: foo\ndescription: d\n---\nPart one.\n---\nPart two.\n").definition;
    assert_eq!(role.system_prompt, "Part one.\n---\nPart two.");
}

#[test]
fn split_frontmatter_returns_raw_parts() {
    assert_eq!(
        split_frontmatter("\u{feff}---\nname: x\n---\n\nBody\n"),
        Ok(("name: x\n", "\nBody\n"))
    );
    assert_eq!(split_frontmatter("---\n---\n"), Ok(("", "")));
    assert_eq!(split_frontmatter("---"), Err(FrontmatterError::Unclosed));
    assert_eq!(split_frontmatter("text"), Err(FrontmatterError::Missing));
}

#[test]
fn empty_frontmatter_reports_missing_name() {
    assert_eq!(
        error("---\n---\nBody\n").kind,
        RoleErrorKind::Missing("name")
    );
}

#[test]
fn frontmatter_that_is_not_a_mapping_is_an_error() {
    let err = error("---\n- a\n- b\n---\n");
    assert_eq!(err.kind, RoleErrorKind::NotAMapping("a list".to_owned()));
}

#[test]
fn invalid_yaml_reports_line_and_column_in_the_file() {
    let err = error("---\nname: foo\ndescription: d\ntools: [Read, Grep\n---\nBody\n");
    let RoleErrorKind::Yaml {
        message,
        line,
        column,
    } = &err.kind
    else {
        panic!("expected a YAML error, got {err:?}");
    };
    // The flow sequence opened on line 4 is never closed; the parser notices at the end.
    assert_eq!(*line, Some(5));
    assert!(column.is_some());
    assert!(message.contains("line 5"), "{message}");
    assert!(
        err.to_string()
            .starts_with("agents/foo.md: invalid YAML in frontmatter: ")
    );
}

#[test]
fn yaml_error_on_a_known_line() {
    let err = error("---\nname: foo\ndescription: d\n  bad: indent\n---\n");
    let RoleErrorKind::Yaml { line, column, .. } = err.kind else {
        panic!("expected a YAML error");
    };
    assert_eq!(line, Some(4));
    assert_eq!(column, Some(6));
}

#[test]
fn duplicate_keys_are_a_yaml_error() {
    let err = error("---\nname: foo\nname: bar\ndescription: d\n---\n");
    assert!(matches!(err.kind, RoleErrorKind::Yaml { .. }), "{err:?}");
}

// --- name and description ---

#[test]
fn name_boundaries() {
    let longest = format!("a{}", "b".repeat(127));
    let too_long = format!("a{}", "b".repeat(128));
    assert!(is_valid_role_name(&longest));
    assert!(!is_valid_role_name(&too_long));
    assert!(is_valid_role_name("a"));
    assert!(is_valid_role_name("a-b_C"));
    assert!(is_valid_role_name("Explore"));
    assert!(!is_valid_role_name(""));
    assert!(!is_valid_role_name("9x"));
    assert!(!is_valid_role_name("-x"));
    assert!(!is_valid_role_name("_x"));
    assert!(!is_valid_role_name("a b"));
    assert!(is_valid_role_name("a.b"));
    assert!(is_valid_role_name("api-documenter-v2.1"));
    assert!(!is_valid_role_name("a."));
    assert!(!is_valid_role_name(".a"));
    assert!(!is_valid_role_name("a/b"));
    assert!(!is_valid_role_name("café"));

    let text = format!("---\nname: {longest}\ndescription: d\n---\n");
    assert_eq!(parse(&text).definition.name, longest);
    let text = format!("---\nname: {too_long}\ndescription: d\n---\n");
    assert_eq!(error(&text).kind, RoleErrorKind::InvalidName(too_long));
}

#[test]
fn invalid_name_message() {
    let err = error("---\nname: 9x\ndescription: d\n---\n");
    assert_eq!(
        err.to_string(),
        "agents/foo.md: name \"9x\" is invalid: must start with a letter and contain only \
         letters, digits, '-', '_' or '.', not end with '.' (at most 128 characters)"
    );
}

#[test]
fn name_is_required_and_must_be_a_string() {
    assert_eq!(
        error("---\ndescription: d\n---\n").kind,
        RoleErrorKind::Missing("name")
    );
    assert_eq!(
        error("---\nname:\ndescription: d\n---\n").kind,
        RoleErrorKind::Missing("name")
    );
    let err = error("---\nname: [a]\ndescription: d\n---\n");
    assert_eq!(
        err.to_string(),
        "agents/foo.md: name must be a string, got a list"
    );
    let err = error("---\nname: 12\ndescription: d\n---\n");
    assert!(matches!(
        err.kind,
        RoleErrorKind::WrongType { field: "name", .. }
    ));
}

#[test]
fn description_is_required_non_empty_and_trimmed() {
    assert_eq!(
        error("---\nname: foo\n---\n").kind,
        RoleErrorKind::Missing("description")
    );
    let err = error("---\nname: foo\ndescription: \"   \"\n---\n");
    assert_eq!(err.to_string(), "agents/foo.md: description is required");
    let err = error("---\nname: foo\ndescription: {a: 1}\n---\n");
    assert!(matches!(
        err.kind,
        RoleErrorKind::WrongType {
            field: "description",
            ..
        }
    ));
    let role = parse("---\nname: foo\ndescription: |\n  Line one.\n  Line two.\n---\n").definition;
    assert_eq!(role.description, "Line one.\nLine two.");
}

// --- tools, disallowedTools, tags, examples ---

#[test]
fn tools_as_list() {
    let role = parse_fields("tools:\n  - Read\n  - ' Grep '\n  - ''\n  - Glob\n").definition;
    assert_eq!(role.tools, ["Read", "Grep", "Glob"]);
}

#[test]
fn tools_as_comma_string() {
    let role = parse_fields("tools: Read, Grep,, Glob ,\n").definition;
    assert_eq!(role.tools, ["Read", "Grep", "Glob"]);
}

#[test]
fn comma_string_keeps_commas_inside_parentheses() {
    let role = parse_fields("tools: \"Bash(git add:*, git commit:*), Read\"\n").definition;
    assert_eq!(role.tools, ["Bash(git add:*, git commit:*)", "Read"]);
}

#[test]
fn disallowed_tools_both_forms() {
    let role = parse_fields("disallowedTools: Write, Edit\n").definition;
    assert_eq!(role.disallowed_tools, ["Write", "Edit"]);
    let role = parse_fields("disallowedTools: [Bash]\n").definition;
    assert_eq!(role.disallowed_tools, ["Bash"]);
}

#[test]
fn tools_of_wrong_type_are_errors() {
    let err = error(&with_fields("tools: {Read: true}\n"));
    assert_eq!(
        err.to_string(),
        "agents/foo.md: tools must be a list of strings or a comma-separated string, got a mapping"
    );
    let err = error(&with_fields("disallowedTools: [Bash, 3]\n"));
    assert!(matches!(
        err.kind,
        RoleErrorKind::WrongType {
            field: "disallowedTools",
            ..
        }
    ));
}

#[test]
fn tags_and_examples() {
    let role =
        parse_fields("tags: review, rust\nexamples:\n  - Review my diff\n  - ' '\n").definition;
    assert_eq!(role.tags, ["review", "rust"]);
    assert_eq!(role.examples, ["Review my diff"]);
    let role = parse_fields("tags: [a, b]\nexamples: Check this, please\n").definition;
    assert_eq!(role.tags, ["a", "b"]);
    assert_eq!(role.examples, ["Check this, please"]);
    let err = error(&with_fields("examples: 3\n"));
    assert!(matches!(
        err.kind,
        RoleErrorKind::WrongType {
            field: "examples",
            ..
        }
    ));
}

// --- model ---

#[test]
fn model_aliases() {
    for (text, expected) in [
        ("model: \"\"\n", ModelChoice::Inherit),
        ("model: inherit\n", ModelChoice::Inherit),
        ("model: haiku\n", ModelChoice::Haiku),
        ("model: sonnet\n", ModelChoice::Sonnet),
        ("model: opus\n", ModelChoice::Opus),
        ("model: Opus\n", ModelChoice::Opus),
        ("model:\n", ModelChoice::Inherit),
    ] {
        let parsed = parse_fields(text);
        assert_eq!(parsed.definition.model, expected, "{text}");
        assert!(parsed.warnings.is_empty(), "{text}");
    }
}

#[test]
fn model_concrete_ids() {
    for id in ["claude-sonnet-4-5", "gpt-4o", "openai/gpt-4.1", "x"] {
        let parsed = parse_fields(&format!("model: {id}\n"));
        assert_eq!(parsed.definition.model, ModelChoice::Id(id.to_owned()));
        assert!(parsed.warnings.is_empty());
    }
    let long = "m".repeat(128);
    let parsed = parse_fields(&format!("model: {long}\n"));
    assert_eq!(parsed.definition.model, ModelChoice::Id(long));
}

#[test]
fn bad_model_warns_and_inherits() {
    let parsed = parse_fields("model: gpt 4\n");
    assert_eq!(parsed.definition.model, ModelChoice::Inherit);
    assert_eq!(
        warnings(&parsed),
        [
            "agents/foo.md: model \"gpt 4\" is invalid (contains whitespace or control \
          characters); using inherit"
        ]
    );

    let parsed = parse_fields(&format!("model: {}\n", "m".repeat(129)));
    assert_eq!(parsed.definition.model, ModelChoice::Inherit);
    assert_eq!(parsed.warnings.len(), 1);
    assert!(parsed.warnings[0].message.contains("longer than 128"));

    let parsed = parse_fields("model: \"a\\tb\"\n");
    assert_eq!(parsed.definition.model, ModelChoice::Inherit);
    assert_eq!(parsed.warnings.len(), 1);

    let parsed = parse_fields("model: [sonnet]\n");
    assert_eq!(parsed.definition.model, ModelChoice::Inherit);
    assert_eq!(
        parsed.warnings[0].message,
        "model must be a string, got a list; using inherit"
    );
}

// --- maxTurns ---

#[test]
fn max_turns_values() {
    let parsed = parse_fields("maxTurns: 10\n");
    assert_eq!(parsed.definition.max_turns, 10);
    assert_eq!(parsed.definition.effective_max_turns(), 10);
    assert!(parsed.warnings.is_empty());
    assert_eq!(parse_fields("maxTurns: 0\n").definition.max_turns, 0);
    assert_eq!(
        parse_fields("maxTurns: 99999999999\n").definition.max_turns,
        u32::MAX
    );
}

#[test]
fn negative_max_turns_becomes_zero() {
    let parsed = parse_fields("maxTurns: -5\n");
    assert_eq!(parsed.definition.max_turns, 0);
    assert_eq!(parsed.definition.effective_max_turns(), 25);
    assert_eq!(
        parsed.warnings[0].message,
        "maxTurns -5 is negative; using the default (25)"
    );
}

#[test]
fn non_integer_max_turns_warns_and_is_zero() {
    for text in [
        "maxTurns: ten\n",
        "maxTurns: 2.5\n",
        "maxTurns: [3]\n",
        "maxTurns: \"10\"\n",
    ] {
        let parsed = parse_fields(text);
        assert_eq!(parsed.definition.max_turns, 0, "{text}");
        assert_eq!(parsed.warnings.len(), 1, "{text}");
        assert!(
            parsed.warnings[0]
                .message
                .starts_with("maxTurns must be an integer"),
            "{text}"
        );
    }
}

// --- maxRunning ---

#[test]
fn max_running_is_a_count_of_tasks_with_zero_for_the_nodes_default() {
    let parsed = parse_fields("maxRunning: 4\n");
    assert_eq!(parsed.definition.max_running, 4);
    assert!(parsed.warnings.is_empty());
    assert!(!parsed.definition.extra.contains_key("maxRunning"));
    assert_eq!(parse_fields("").definition.max_running, 0);
    let negative = parse_fields("maxRunning: -1\n");
    assert_eq!(negative.definition.max_running, 0);
    assert_eq!(
        negative.warnings[0].message,
        "maxRunning -1 is negative; using the default"
    );
    let text = parse_fields("maxRunning: many\n");
    assert_eq!(text.definition.max_running, 0);
    assert_eq!(
        text.warnings[0].message,
        "maxRunning must be an integer, got \"many\"; using the default"
    );
}

// --- permissionMode ---

#[test]
fn permission_modes() {
    for (name, mode) in [
        ("default", PermissionMode::Default),
        ("acceptEdits", PermissionMode::AcceptEdits),
        ("plan", PermissionMode::Plan),
        ("bypassPermissions", PermissionMode::BypassPermissions),
        ("dontAsk", PermissionMode::DontAsk),
    ] {
        let parsed = parse_fields(&format!("permissionMode: {name}\n"));
        assert_eq!(parsed.definition.permission_mode, mode);
        assert!(parsed.warnings.is_empty());
        assert_eq!(mode.to_string(), name);
        assert_eq!(serde_json::to_value(mode).unwrap(), name);
    }
}

#[test]
fn bad_permission_mode_warns_and_defaults() {
    let parsed = parse_fields("permissionMode: yolo\n");
    assert_eq!(parsed.definition.permission_mode, PermissionMode::Default);
    assert_eq!(
        warnings(&parsed),
        [
            "agents/foo.md: permissionMode \"yolo\" is invalid (expected default, acceptEdits, \
          plan, bypassPermissions or dontAsk); using default"
        ]
    );
    let parsed = parse_fields("permissionMode: true\n");
    assert_eq!(parsed.definition.permission_mode, PermissionMode::Default);
    assert_eq!(parsed.warnings.len(), 1);
}

// --- elicitation ---

#[test]
fn elicitation_asks_by_default_and_decline_declines() {
    assert!(!parse_fields("").definition.declines_questions);
    let parsed = parse_fields("elicitation: ask\n");
    assert!(!parsed.definition.declines_questions);
    assert!(parsed.warnings.is_empty());
    let parsed = parse_fields("elicitation: decline\n");
    assert!(parsed.definition.declines_questions);
    assert!(parsed.warnings.is_empty());
    assert!(!parsed.definition.extra.contains_key("elicitation"));
    let parsed = parse_fields("elicitation: never\n");
    assert!(!parsed.definition.declines_questions);
    assert_eq!(
        warnings(&parsed),
        ["agents/foo.md: elicitation \"never\" is invalid (expected ask or decline); using ask"]
    );
}

// --- background and publish ---

#[test]
fn background_and_publish_flags() {
    let role = parse_fields("background: true\npublish: false\n").definition;
    assert!(role.background);
    assert!(!role.publish);
}

#[test]
fn bool_fields_of_wrong_type_are_errors() {
    let err = error(&with_fields("background: \"maybe\"\n"));
    assert_eq!(
        err.to_string(),
        "agents/foo.md: background must be true or false, got \"maybe\""
    );
    let err = error(&with_fields("publish: 1\n"));
    assert!(matches!(
        err.kind,
        RoleErrorKind::WrongType {
            field: "publish",
            ..
        }
    ));
}

// --- command ---

#[test]
fn command_as_string_with_quotes() {
    let role = parse_fields(
        "command: python3 'my script.py' --greeting \"hello world\" \"it's\" a''b \"\"\n",
    )
    .definition;
    assert!(role.is_command());
    assert_eq!(
        role.command,
        Some(CommandSpec {
            program: "python3".to_owned(),
            args: vec![
                "my script.py".to_owned(),
                "--greeting".to_owned(),
                "hello world".to_owned(),
                "it's".to_owned(),
                "ab".to_owned(),
                String::new(),
            ],
            cwd: None,
            env: Vec::new(),
            timeout: None,
            input: CommandInput::Text,
            resumable: false,
        })
    );
}

#[test]
fn resumable_is_a_command_key_and_a_boolean() {
    let role = parse_fields("command: ./run\nresumable: true\n").definition;
    assert!(role.command.as_ref().is_some_and(|c| c.resumable));
    let role = parse_fields("command: ./run\n").definition;
    assert!(role.command.as_ref().is_some_and(|c| !c.resumable));
    let error = error(&with_fields("command: ./run\nresumable: yes please\n")).to_string();
    assert!(error.contains("resumable"), "{error}");
}

#[test]
fn command_string_does_no_expansion() {
    let command = parse_fields("command: echo $HOME ~ *.rs a\\ b\n")
        .definition
        .command
        .unwrap();
    assert_eq!(command.program, "echo");
    assert_eq!(command.args, ["$HOME", "~", "*.rs", "a\\", "b"]);
}

#[test]
fn command_as_list_with_settings() {
    let command = parse_fields(
        "command: [sleep, 5, \"a b\"]\ncwd: tools/bin\nenv: [PATH, API_TOKEN]\ntimeout: 5m\n\
         input: message\n",
    )
    .definition
    .command
    .unwrap();
    assert_eq!(command.program, "sleep");
    assert_eq!(command.args, ["5", "a b"]);
    assert_eq!(command.cwd.as_deref(), Some("tools/bin"));
    assert_eq!(command.env, ["PATH", "API_TOKEN"]);
    assert_eq!(command.timeout, Some(Duration::from_secs(300)));
    assert_eq!(command.input, CommandInput::Message);
}

#[test]
fn timeout_forms() {
    for (value, expected) in [
        ("500ms", Duration::from_millis(500)),
        ("30s", Duration::from_secs(30)),
        ("5m", Duration::from_secs(300)),
        ("1h", Duration::from_secs(3600)),
        ("45", Duration::from_secs(45)),
        ("\"12\"", Duration::from_secs(12)),
    ] {
        let command = parse_fields(&format!("command: run\ntimeout: {value}\n"))
            .definition
            .command
            .unwrap();
        assert_eq!(command.timeout, Some(expected), "{value}");
    }
}

#[test]
fn bad_timeouts_are_errors() {
    for value in [
        "0",
        "0s",
        "-3",
        "1.5",
        "5 m",
        "5d",
        "m",
        "[1]",
        "99999999999999999999h",
    ] {
        let err = error(&with_fields(&format!("command: run\ntimeout: {value}\n")));
        assert!(
            matches!(
                err.kind,
                RoleErrorKind::WrongType {
                    field: "timeout",
                    ..
                }
            ),
            "{value}: {err}"
        );
    }
}

#[test]
fn bad_commands_are_errors() {
    let err = error(&with_fields("command: \"echo 'oops\"\n"));
    assert_eq!(
        err.to_string(),
        "agents/foo.md: command is invalid: unclosed ' quote in \"echo 'oops\""
    );
    let err = error(&with_fields("command: \"   \"\n"));
    assert_eq!(
        err.to_string(),
        "agents/foo.md: command is invalid: no program to run"
    );
    let err = error(&with_fields("command: []\n"));
    assert!(matches!(
        err.kind,
        RoleErrorKind::Invalid {
            field: "command",
            ..
        }
    ));
    let err = error(&with_fields("command: [run, {a: 1}]\n"));
    assert!(matches!(
        err.kind,
        RoleErrorKind::WrongType {
            field: "command",
            ..
        }
    ));
    let err = error(&with_fields("command: 7\n"));
    assert!(matches!(
        err.kind,
        RoleErrorKind::WrongType {
            field: "command",
            ..
        }
    ));
}

#[test]
fn bad_command_settings_are_errors() {
    let err = error(&with_fields("command: run\nenv: [FOO=bar]\n"));
    assert_eq!(
        err.to_string(),
        "agents/foo.md: env is invalid: \"FOO=bar\" is not an environment variable name"
    );
    let err = error(&with_fields("command: run\ninput: json\n"));
    assert_eq!(
        err.to_string(),
        "agents/foo.md: input must be \"text\" or \"message\", got \"json\""
    );
    let err = error(&with_fields("command: run\ncwd: [a]\n"));
    assert!(matches!(
        err.kind,
        RoleErrorKind::WrongType { field: "cwd", .. }
    ));
}

#[test]
fn command_settings_without_command_warn() {
    let parsed = parse_fields("cwd: /tmp\ntimeout: 5s\n");
    assert!(parsed.definition.command.is_none());
    assert_eq!(
        warnings(&parsed),
        [
            "agents/foo.md: cwd is ignored: the role has no command",
            "agents/foo.md: timeout is ignored: the role has no command",
        ]
    );
    assert!(parsed.definition.extra.is_empty());
}

// --- unknown keys ---

#[test]
fn unknown_keys_are_kept_in_extra() {
    let parsed = parse_fields(
        "color: blue\nskills: [pdf, xlsx]\nmcpServers:\n  github:\n    command: gh-mcp\n\
         memory: true\nhooks: {}\n",
    );
    // Claude Code's keys that would change what the agent does say what Mew does instead;
    // a cosmetic one (`color`) says nothing.
    let warnings: Vec<&str> = parsed
        .warnings
        .iter()
        .map(|warning| warning.message.as_str())
        .collect();
    assert_eq!(warnings.len(), 4, "{warnings:#?}");
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("skills is not honoured"))
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("mcpServers is not honoured"))
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("memory is not honoured"))
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("hooks is not honoured"))
    );
    let extra = parsed.definition.extra;
    assert_eq!(extra["color"], "blue");
    assert_eq!(extra["skills"], serde_json::json!(["pdf", "xlsx"]));
    assert_eq!(
        extra["mcpServers"],
        serde_json::json!({"github": {"command": "gh-mcp"}})
    );
    assert_eq!(extra["memory"], true);
    assert_eq!(extra["hooks"], serde_json::json!({}));
    assert!(!extra.contains_key("name"));
    assert!(!extra.contains_key("description"));
    // `command` inside `mcpServers` is not the role's command.
    assert!(parsed.definition.command.is_none());
}

#[test]
fn non_string_keys_are_ignored_with_a_warning() {
    let parsed = parse_fields("42: answer\n");
    assert!(parsed.definition.extra.is_empty());
    assert_eq!(
        parsed.warnings[0].message,
        "key 42 is ignored: keys must be strings"
    );
}

// --- a real Claude Code agent file ---

#[test]
fn claude_code_agent_file_reads_unchanged() {
    let text = include_str!("roles/code-reviewer.md");
    let parsed = parse_role(
        text,
        ".claude/agents/code-reviewer.md",
        RoleSource::ClaudeProject,
    )
    .unwrap();
    assert!(parsed.warnings.is_empty());
    let role = parsed.definition;
    assert_eq!(role.name, "code-reviewer");
    assert!(
        role.description
            .starts_with("Use this agent when the user has written or changed code")
    );
    assert!(
        role.description
            .contains("\n\nExamples:\n\n<example>\nContext:")
    );
    assert!(role.description.ends_with("</example>"));
    assert_eq!(role.tools, ["Read", "Grep", "Glob", "Bash"]);
    assert_eq!(role.model, ModelChoice::Sonnet);
    assert_eq!(role.extra["color"], "blue");
    assert_eq!(role.extra.len(), 1);
    assert_eq!(role.source, RoleSource::ClaudeProject);
    assert_eq!(role.source.to_string(), "claude-project");
    assert!(
        role.system_prompt
            .starts_with("You are a senior code reviewer.")
    );
    assert!(
        role.system_prompt
            .contains("3. Missing tests.\n\n---\n\nBe specific")
    );
    assert!(role.system_prompt.ends_with("propose a fix."));
}

#[test]
fn role_sources_display_as_lowercase_words() {
    let shown: Vec<String> = [
        RoleSource::Builtin,
        RoleSource::User,
        RoleSource::Project,
        RoleSource::ClaudeProject,
        RoleSource::ClaudeUser,
        RoleSource::Plugin,
        RoleSource::Peer,
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(
        shown,
        [
            "builtin",
            "user",
            "project",
            "claude-project",
            "claude-user",
            "plugin",
            "peer"
        ]
    );
}

// --- remote ---

#[test]
fn remote_peer_role() {
    let role = parse_fields("remote: bob/echo\n").definition;
    assert!(role.is_remote());
    assert!(!role.is_command());
    assert_eq!(
        role.remote,
        Some(RemoteTarget::PeerRole {
            peer: "bob".into(),
            role: "echo".into()
        })
    );
    assert_eq!(role.remote.unwrap().to_string(), "bob/echo");
    assert!(!parse_fields("").definition.is_remote());
}

#[test]
fn remote_url() {
    let role = parse_fields("remote: 'http://127.0.0.1:8080/agents/echo'\n").definition;
    assert_eq!(
        role.remote,
        Some(RemoteTarget::Url(
            "http://127.0.0.1:8080/agents/echo".into()
        ))
    );
}

#[test]
fn remote_rejects_what_is_neither_peer_role_nor_url() {
    for bad in [
        "remote: bob\n",
        "remote: bob/\n",
        "remote: /echo\n",
        "remote: 'b ob/echo'\n",
        "remote: 'http://'\n",
        "remote: 'ftp://host/x'\n",
        "remote: [bob/echo]\n",
    ] {
        let err = error(&with_fields(bad));
        assert_eq!(err.path, PATH, "{bad}");
        let text = err.to_string();
        assert!(text.contains("remote"), "{bad}: {text}");
    }
}

#[test]
fn command_and_remote_together_is_an_error_naming_the_file() {
    let err = error(&with_fields("command: ./run\nremote: bob/echo\n"));
    let text = err.to_string();
    assert!(text.starts_with(PATH), "{text}");
    assert!(
        text.contains("command") && text.contains("remote"),
        "{text}"
    );
}

#[test]
fn a_claude_code_description_with_colons_loads_as_plain_text() {
    let parsed = parse(
        "---\nname: code-reviewer\ndescription: Use this agent when: the user asks for a review. \
         Examples: <example>user: \"review it\"</example>\ntools: Read, Grep\n---\nYou review.\n",
    );
    assert_eq!(
        parsed.definition.description,
        "Use this agent when: the user asks for a review. Examples: <example>user: \"review \
         it\"</example>"
    );
    assert_eq!(parsed.definition.tools, ["Read", "Grep"]);
    assert_eq!(
        warnings(&parsed),
        [
            "agents/foo.md: description is not valid YAML as written (quote it); read as plain \
          text, as Claude Code does"
        ]
    );
    // Broken in another way, it is still the YAML error, at its line.
    let err = error("---\nname: x\ndescription: d\ntools: [Read\n---\n");
    assert!(matches!(err.kind, RoleErrorKind::Yaml { .. }), "{err:?}");
}
