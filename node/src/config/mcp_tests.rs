//! Tests of the `mcp_servers:` section and `.mcp.json`: layers, whole-entry replacement,
//! checks and their messages, `${VAR}` expansion, masking.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use super::mcp::{McpProblem, McpServerConfig, McpTransport};
use super::mcp_entries::{expand, is_valid_server_name};
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

    fn project(&self) -> &Path {
        self.project.path()
    }

    fn sources(&self) -> Sources {
        Sources {
            home: Some(self.home.path().to_owned()),
            ..Sources::new(self.project())
        }
    }

    fn user_file(&self, text: &str) -> PathBuf {
        write(&self.home.path().join(".mew/config.yaml"), text)
    }

    fn project_file(&self, text: &str) -> PathBuf {
        write(&self.project().join(".mew/config.yaml"), text)
    }

    fn mcp_json(&self, text: &str) -> PathBuf {
        write(&self.project().join(".mcp.json"), text)
    }

    fn resolve(&self) -> Config {
        self.resolve_with(&[])
    }

    fn resolve_with(&self, vars: &[(&str, &str)]) -> Config {
        let mut sources = self.sources();
        sources.env = env(vars);
        Config::load(&sources).unwrap().resolve().unwrap()
    }
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    path.to_owned()
}

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

/// `path:line`.
fn at(path: &Path, line: usize) -> String {
    format!("{}:{line}", path.display())
}

/// The env of a stdio server.
fn env_of(server: &McpServerConfig) -> &BTreeMap<String, String> {
    match &server.transport {
        McpTransport::Stdio { env, .. } => env,
        other => panic!("expected a stdio server, got {other:?}"),
    }
}

/// The headers of an http server.
fn headers_of(server: &McpServerConfig) -> &BTreeMap<String, String> {
    match &server.transport {
        McpTransport::Http { headers, .. } => headers,
        other => panic!("expected an http server, got {other:?}"),
    }
}

/// The problems' messages, by server name.
fn problems(config: &Config) -> Vec<(String, String)> {
    config
        .mcp_problems
        .iter()
        .map(|problem| (problem.server.clone(), problem.message.clone()))
        .collect()
}

/// Why `server` was skipped, among `problems`; the test fails when it was not.
fn reason(problems: &[(String, String)], server: &str) -> String {
    problems
        .iter()
        .find(|(name, _)| name == server)
        .map(|(_, message)| message.clone())
        .unwrap_or_else(|| panic!("{server} was not skipped: {problems:?}"))
}

#[test]
fn no_servers_by_default() {
    let config = Dirs::new().resolve();
    assert!(config.mcp_servers.is_empty());
    assert!(config.mcp_problems.is_empty());
}

#[test]
fn entries_resolve_with_defaults_and_every_key() {
    let dirs = Dirs::new();
    let file = dirs.project_file(
        "mcp_servers:\n\
         \x20 github:\n\
         \x20   type: stdio\n\
         \x20   command: npx\n\
         \x20   args: [-y, \"@modelcontextprotocol/server-github\", 8080, true]\n\
         \x20   env: {GITHUB_TOKEN: \"${GH}\", DEBUG: 1}\n\
         \x20   cwd: tools/gh\n\
         \x20   connect_timeout: 5s\n\
         \x20   call_timeout: 90\n\
         \x20   allow_tools: [search, read]\n\
         \x20   deny_tools: [delete_repo]\n\
         \x20   max_restarts: 0\n\
         \x20   protocol: 2025-11-25\n\
         \x20   sampling: true\n\
         \x20   enabled: true\n\
         \x20 search:\n\
         \x20   type: http\n\
         \x20   url: https://mcp.example.com/mcp/\n\
         \x20   headers: {Authorization: \"Bearer ${TOKEN}\"}\n",
    );
    let config = dirs.resolve_with(&[("GH", "ghp_1"), ("TOKEN", "t0k")]);
    assert!(config.mcp_problems.is_empty(), "{:?}", config.mcp_problems);
    assert_eq!(
        config.mcp_servers["github"],
        McpServerConfig {
            transport: McpTransport::Stdio {
                command: "npx".into(),
                args: vec![
                    "-y".into(),
                    "@modelcontextprotocol/server-github".into(),
                    "8080".into(),
                    "true".into(),
                ],
                env: map(&[("GITHUB_TOKEN", "ghp_1"), ("DEBUG", "1")]),
                cwd: Some(dirs.project().join("tools/gh")),
            },
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(90),
            allow_tools: vec!["search".into(), "read".into()],
            deny_tools: vec!["delete_repo".into()],
            max_restarts: 0,
            protocol: mcp::McpProtocol::Initialize,
            sampling: mcp::McpSampling::Allow,
            elicitation: Default::default(),
            oauth: Default::default(),
            origin: at(&file, 2),
            undefined_vars: vec![],
            warnings: vec![],
            as_written: None,
        }
    );
    assert_eq!(
        config.mcp_servers["search"],
        McpServerConfig {
            transport: McpTransport::Http {
                url: "https://mcp.example.com/mcp/".into(),
                headers: map(&[("Authorization", "Bearer t0k")]),
            },
            connect_timeout: mcp::DEFAULT_CONNECT_TIMEOUT,
            call_timeout: mcp::DEFAULT_CALL_TIMEOUT,
            allow_tools: vec![],
            deny_tools: vec![],
            max_restarts: mcp::DEFAULT_MAX_RESTARTS,
            protocol: mcp::McpProtocol::Auto,
            sampling: mcp::McpSampling::Ask,
            elicitation: Default::default(),
            oauth: Default::default(),
            origin: at(&file, 16),
            undefined_vars: vec![],
            warnings: vec![],
            as_written: None,
        }
    );
}

#[test]
fn the_type_follows_from_command_or_url_when_left_out() {
    let dirs = Dirs::new();
    dirs.project_file(
        "mcp_servers:\n  local: {command: ./server, cwd: /abs}\n  remote: {url: 'http://h:1/mcp'}\n",
    );
    let config = dirs.resolve();
    assert!(config.mcp_problems.is_empty(), "{:?}", config.mcp_problems);
    assert_eq!(config.mcp_servers["local"].transport.kind(), "stdio");
    assert_eq!(
        config.mcp_servers["local"].transport,
        McpTransport::Stdio {
            command: "./server".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: Some("/abs".into()),
        }
    );
    assert_eq!(config.mcp_servers["remote"].transport.kind(), "http");
}

#[test]
fn each_check_skips_the_entry_with_its_message() {
    let dirs = Dirs::new();
    for (entry, message) in [
        (
            "x: {comand: npx}",
            "unknown key `comand` (did you mean `command`?)",
        ),
        (
            "x: {command: npx, transport_mode: fast}",
            "unknown key `transport_mode` (the keys are type, command, args, env, cwd, url, \
             headers, connect_timeout, call_timeout, allow_tools, deny_tools, max_restarts, \
             protocol, sampling, elicitation, oauth, enabled)",
        ),
        (
            "x: {command: npx, protocol: 2024-11-05}",
            "`protocol`: expected auto, 2025-11-25 (initialize) or 2026-07-28 (server/discover)",
        ),
        (
            "x: 5",
            "expected a mapping of settings (type, command, url, ...)",
        ),
        (
            "x:",
            "missing `type`: give a `command` (stdio) or a `url` (http)",
        ),
        (
            "x: {args: [a]}",
            "missing `type`: give a `command` (stdio) or a `url` (http)",
        ),
        (
            "x: {command: a, url: 'http://h'}",
            "both `command` and `url` are given: say which to use with `type: stdio` or \
             `type: http`",
        ),
        (
            "x: {type: sse, url: 'http://h/sse'}",
            "type `sse` (the legacy HTTP+SSE transport) is not supported: use `type: http` \
             (Streamable HTTP) if the server offers it",
        ),
        (
            "x: {type: websocket, url: 'ws://h'}",
            "unknown type `websocket`: expected stdio or http",
        ),
        ("x: {type: 1, command: a}", "`type`: expected text"),
        ("x: {type: stdio}", "a stdio server needs a `command`"),
        (
            "x: {type: stdio, command: ' '}",
            "a stdio server needs a `command`",
        ),
        ("x: {command: [npx]}", "`command`: expected text"),
        ("x: {type: http}", "an http server needs a `url`"),
        (
            "x: {type: http, url: 'ftp://h'}",
            "`url`: `ftp://h` is not an http:// or https:// URL with a host",
        ),
        (
            "x: {url: 'https:///mcp'}",
            "`url`: `https:///mcp` is not an http:// or https:// URL with a host",
        ),
        (
            "x: {type: stdio, command: a, url: 'http://h'}",
            "`url` does not apply to a stdio server",
        ),
        (
            "x: {command: a, headers: {A: b}}",
            "`headers` does not apply to a stdio server",
        ),
        (
            "x: {url: 'http://h', env: {A: b}}",
            "`env` does not apply to an http server",
        ),
        (
            "x: {type: http, url: 'http://h', cwd: here}",
            "`cwd` does not apply to an http server",
        ),
        (
            "x: {command: a, args: -v}",
            "`args`: expected a list of text",
        ),
        (
            "x: {command: a, args: [[-v]]}",
            "`args`: expected a list of text",
        ),
        (
            "x: {command: a, env: [A]}",
            "`env`: expected a mapping of names to values",
        ),
        (
            "x: {command: a, env: {A: [1]}}",
            "`env`: the value of `A` is not text",
        ),
        (
            "x: {command: a, env: {'A=B': c}}",
            "`env`: `A=B` is not a valid name",
        ),
        (
            "x: {url: 'http://h', headers: {'Bad Header': c}}",
            "`headers`: `Bad Header` is not a valid name",
        ),
        ("x: {command: a, cwd: [d]}", "`cwd`: expected text"),
        (
            "x: {command: a, connect_timeout: 0s}",
            "`connect_timeout`: must be longer than zero",
        ),
        (
            "x: {command: a, call_timeout: soon}",
            "`call_timeout`: invalid duration `soon`: expected a whole number with a unit \
             (500ms, 30s, 5m, 1h) or an integer of seconds",
        ),
        (
            "x: {command: a, call_timeout: -1}",
            "`call_timeout`: expected a duration such as 30s",
        ),
        (
            "x: {command: a, max_restarts: -1}",
            "`max_restarts`: expected a whole number, 0 or more",
        ),
        (
            "x: {command: a, allow_tools: search}",
            "`allow_tools`: expected a list of tool names",
        ),
        (
            "x: {command: a, deny_tools: ['']}",
            "`deny_tools`: expected a list of tool names",
        ),
        (
            "x: {command: a, enabled: 'no'}",
            "`enabled`: expected true or false",
        ),
    ] {
        let file = dirs.project_file(&format!("mcp_servers:\n  {entry}\n"));
        let config = dirs.resolve();
        assert!(config.mcp_servers.is_empty(), "{entry}");
        assert_eq!(
            config.mcp_problems,
            [McpProblem {
                server: "x".into(),
                origin: at(&file, 2),
                message: message.into(),
            }],
            "{entry}"
        );
    }
}

#[test]
fn server_names_follow_the_pattern() {
    for good in [
        "a",
        "github",
        "my-server",
        "my_server",
        "A1",
        "1",
        "_x",
        "x_",
    ] {
        assert!(is_valid_server_name(good), "{good}");
    }
    for bad in ["", "a__b", "__", "a b", "a.b", "a/b", "é", "a:b"] {
        assert!(!is_valid_server_name(bad), "{bad}");
    }

    let dirs = Dirs::new();
    let file = dirs.project_file(
        "mcp_servers:\n  a__b: {command: x}\n  a.b: {command: x}\n  ok: {command: x}\n",
    );
    let config = dirs.resolve();
    assert_eq!(config.mcp_servers.keys().collect::<Vec<_>>(), ["ok"]);
    let message = |name: &str| {
        format!(
            "`{name}` cannot name an MCP server: use letters, digits, `_` and `-`, without \
             `__` (tools are named mcp__SERVER__TOOL)"
        )
    };
    assert_eq!(
        config.mcp_problems,
        [
            McpProblem {
                server: "a.b".into(),
                origin: at(&file, 3),
                message: message("a.b"),
            },
            McpProblem {
                server: "a__b".into(),
                origin: at(&file, 2),
                message: message("a__b"),
            },
        ]
    );
}

#[test]
fn a_broken_entry_is_skipped_next_to_a_good_one() {
    let dirs = Dirs::new();
    let file = dirs.project_file(
        "node:\n  port: 1234\n\
         mcp_servers:\n\
         \x20 good:\n    command: server\n\
         \x20 broken:\n    type: http\n    comand: oops\n\
         \x20 unknown:\n    command: server\n    alow_tools: [x]\n",
    );
    let config = dirs.resolve();
    assert_eq!(config.node.port, 1234);
    assert_eq!(config.mcp_servers.keys().collect::<Vec<_>>(), ["good"]);
    assert_eq!(config.mcp_servers["good"].origin, at(&file, 4));
    assert_eq!(
        config.mcp_problems,
        [
            McpProblem {
                server: "broken".into(),
                origin: at(&file, 6),
                message: "unknown key `comand` (did you mean `command`?)".into(),
            },
            McpProblem {
                server: "unknown".into(),
                origin: at(&file, 9),
                message: "unknown key `alow_tools` (did you mean `allow_tools`?)".into(),
            },
        ]
    );
    assert_eq!(
        config.mcp_problems[0].to_string(),
        format!(
            "{}: MCP server `broken` skipped: unknown key `comand` (did you mean `command`?)",
            at(&file, 6)
        )
    );
}

#[test]
fn a_bad_section_is_still_an_error_for_the_file() {
    let dirs = Dirs::new();
    let file = dirs.project_file("mcp_servers: [github]\n");
    let error = Config::load(&dirs.sources()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}:1: bad value for mcp_servers: expected a mapping of settings",
            file.display()
        )
    );
    let file = dirs.project_file("mcp_server:\n  a: {command: x}\n");
    let error = Config::load(&dirs.sources()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}:1: unknown key mcp_server (did you mean mcp_servers?)",
            file.display()
        )
    );
}

#[test]
fn a_higher_layer_replaces_a_same_named_server_whole() {
    let dirs = Dirs::new();
    let user = dirs.user_file(
        "mcp_servers:\n\
         \x20 github:\n    command: npx\n    args: [gh]\n    env: {GITHUB_TOKEN: secret}\n\
         \x20   deny_tools: [delete_repo]\n    call_timeout: 5m\n\
         \x20 notes:\n    command: notes-server\n",
    );
    let project = dirs.project_file(
        "# the project's own github server\n\
         mcp_servers:\n  github:\n    command: ./gh-server\n",
    );
    let loaded = Config::load(&dirs.sources()).unwrap();
    let config = loaded.resolve().unwrap();
    let github = &config.mcp_servers["github"];
    assert_eq!(
        github.transport,
        McpTransport::Stdio {
            command: "./gh-server".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        }
    );
    assert!(github.deny_tools.is_empty());
    assert_eq!(github.call_timeout, mcp::DEFAULT_CALL_TIMEOUT);
    assert_eq!(github.origin, at(&project, 3));
    assert_eq!(config.mcp_servers["notes"].origin, at(&user, 8));

    // The origins follow: nothing of the user's github entry is left.
    assert_eq!(
        loaded.origin("mcp_servers.github.command"),
        Some(&Origin::File(project.clone()))
    );
    assert_eq!(loaded.origin("mcp_servers.github.env.GITHUB_TOKEN"), None);
    assert_eq!(loaded.origin("mcp_servers.github.deny_tools"), None);
    assert_eq!(
        loaded.origin("mcp_servers.notes.command"),
        Some(&Origin::File(user.clone()))
    );
    assert_eq!(loaded.origin("mcp_servers"), None);
    let entries = loaded.entries(&config).unwrap();
    let origin_of = |key: &str| {
        entries
            .iter()
            .find(|entry| entry.key == key)
            .map(|entry| entry.origin.clone())
    };
    assert_eq!(
        origin_of("mcp_servers.github.command"),
        Some(Origin::File(project))
    );
    assert_eq!(
        origin_of("mcp_servers.notes.command"),
        Some(Origin::File(user))
    );
    assert_eq!(
        origin_of("mcp_servers.github.call_timeout"),
        Some(Origin::Default)
    );
}

#[test]
fn enabled_false_switches_off_an_inherited_server() {
    let dirs = Dirs::new();
    dirs.user_file(
        "mcp_servers:\n  github: {command: npx}\n  notes: {command: notes}\n  \
         docs: {url: 'http://h'}\n",
    );
    dirs.project_file(
        "mcp_servers:\n  github: {enabled: false}\n  notes: {command: other, enabled: false}\n",
    );
    let config = dirs.resolve();
    assert_eq!(config.mcp_servers.keys().collect::<Vec<_>>(), ["docs"]);
    assert!(config.mcp_problems.is_empty(), "{:?}", config.mcp_problems);

    // Switched on again by a higher layer.
    let extra = write(
        &dirs.project().join("extra.yaml"),
        "mcp_servers:\n  github: {command: npx, enabled: true}\n",
    );
    let mut sources = dirs.sources();
    sources.config_file = Some(extra.clone());
    let config = Config::load(&sources).unwrap().resolve().unwrap();
    assert_eq!(
        config.mcp_servers.keys().collect::<Vec<_>>(),
        ["docs", "github"]
    );
    assert_eq!(config.mcp_servers["github"].origin, at(&extra, 2));
}

#[test]
fn mcp_json_is_a_layer_between_the_user_and_the_project() {
    let dirs = Dirs::new();
    let user = dirs.user_file(
        "mcp_servers:\n  a: {command: from-user}\n  b: {command: from-user}\n  \
         c: {command: from-user}\n",
    );
    let json = dirs.mcp_json(
        r#"{
  "mcpServers": {
    "b": {"command": "from-json", "args": ["-x"], "env": {"K": "${K:-d}"}},
    "c": {"command": "from-json"},
    "d": {"type": "http", "url": "https://h/mcp", "headers": {"H": "v"}},
    "e": {"type": "stdio", "command": "e-server"}
  }
}
"#,
    );
    let project = dirs.project_file("mcp_servers:\n  c: {command: from-project}\n");
    let loaded = Config::load(&dirs.sources()).unwrap();
    let config = loaded.resolve().unwrap();
    assert!(config.mcp_problems.is_empty(), "{:?}", config.mcp_problems);
    let command = |name: &str| match &config.mcp_servers[name].transport {
        McpTransport::Stdio { command, .. } => command.clone(),
        McpTransport::Http { url, .. } => url.clone(),
    };
    assert_eq!(command("a"), "from-user");
    assert_eq!(command("b"), "from-json");
    assert_eq!(command("c"), "from-project");
    assert_eq!(command("d"), "https://h/mcp");
    assert_eq!(command("e"), "e-server");
    assert_eq!(env_of(&config.mcp_servers["b"]), &map(&[("K", "d")]));
    assert_eq!(headers_of(&config.mcp_servers["d"]), &map(&[("H", "v")]));
    assert_eq!(config.mcp_servers["a"].origin, at(&user, 2));
    assert_eq!(config.mcp_servers["b"].origin, at(&json, 3));
    assert_eq!(config.mcp_servers["c"].origin, at(&project, 2));
    assert_eq!(config.mcp_servers["d"].origin, at(&json, 5));
    assert_eq!(
        loaded.origin("mcp_servers.b.args"),
        Some(&Origin::File(json.clone()))
    );
    assert_eq!(
        loaded.origin("mcp_servers.c.command"),
        Some(&Origin::File(project))
    );
}

#[test]
fn mcp_json_problems_are_reported_not_fatal() {
    let dirs = Dirs::new();
    dirs.project_file("mcp_servers:\n  mine: {command: mine}\n");

    // Invalid JSON: the file and the line, and the other layers still load.
    let json = dirs.mcp_json("{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}\n");
    let config = dirs.resolve();
    assert_eq!(config.mcp_servers.keys().collect::<Vec<_>>(), ["mine"]);
    assert_eq!(config.mcp_problems.len(), 1, "{:?}", config.mcp_problems);
    let problem = &config.mcp_problems[0];
    assert_eq!(problem.server, "");
    assert_eq!(problem.origin, at(&json, 3));
    assert!(
        problem.message.starts_with("invalid JSON: "),
        "{}",
        problem.message
    );
    assert!(
        problem
            .to_string()
            .starts_with(&format!("{}: invalid JSON: ", at(&json, 3))),
        "{problem}"
    );

    dirs.mcp_json("[1, 2]\n");
    assert_eq!(
        problems(&dirs.resolve()),
        [(
            String::new(),
            "expected an object at the top level".to_owned()
        )]
    );
    dirs.mcp_json("{\"mcpServers\": [1]}\n");
    assert_eq!(
        problems(&dirs.resolve()),
        [(String::new(), "`mcpServers` is not an object".to_owned())]
    );

    // No `mcpServers`: nothing to read; an sse server: that entry skipped.
    dirs.mcp_json("{\"other\": 1}\n");
    let config = dirs.resolve();
    assert!(config.mcp_problems.is_empty());
    let json = dirs.mcp_json(
        r#"{"mcpServers": {
  "legacy": {"type": "sse", "url": "https://h/sse"},
  "fine": {"command": "fine"}
}}"#,
    );
    let config = dirs.resolve();
    assert_eq!(
        config.mcp_servers.keys().collect::<Vec<_>>(),
        ["fine", "mine"]
    );
    assert_eq!(
        config.mcp_problems,
        [McpProblem {
            server: "legacy".into(),
            origin: at(&json, 2),
            message: "type `sse` (the legacy HTTP+SSE transport) is not supported: use \
                      `type: http` (Streamable HTTP) if the server offers it"
                .into(),
        }]
    );
}

#[test]
fn an_unknown_key_is_ignored_with_a_warning_in_mcp_json_and_skips_the_entry_in_mew_files() {
    let dirs = Dirs::new();
    dirs.mcp_json(
        r#"{"mcpServers": {
  "described": {"command": "x", "description": "Searches the docs", "comand": "typo"},
  "signed": {"type": "http", "url": "https://h/mcp", "oauth": {"clientId": "c"},
             "headersHelper": "get-token.sh"}
}}"#,
    );
    let config = dirs.resolve();
    assert!(config.mcp_problems.is_empty(), "{:?}", config.mcp_problems);
    assert_eq!(
        config.mcp_servers["described"].warnings,
        [
            "unknown key `comand` (did you mean `command`?); it is ignored",
            "unknown key `description` (the keys are type, command, args, env, cwd, url, \
             headers, connect_timeout, call_timeout, allow_tools, deny_tools, max_restarts, \
             protocol, sampling, elicitation, oauth, enabled); it is ignored",
        ]
    );
    assert_eq!(
        config.mcp_servers["signed"].warnings,
        [
            "`headersHelper` is not honoured: Mew does not run it; only the `headers` written \
             here are sent",
        ]
    );
    assert_eq!(
        config.mcp_servers["signed"].oauth.client_id.as_deref(),
        Some("c")
    );

    // The same entry in Mew's own file is skipped: there a key Mew does not know is a mistake.
    let file = dirs.project_file("mcp_servers:\n  described: {command: x, description: Docs}\n");
    let config = dirs.resolve();
    assert!(!config.mcp_servers.contains_key("described"));
    assert_eq!(
        config.mcp_problems,
        [McpProblem {
            server: "described".into(),
            origin: at(&file, 2),
            message: "unknown key `description` (the keys are type, command, args, env, cwd, \
                      url, headers, connect_timeout, call_timeout, allow_tools, deny_tools, \
                      max_restarts, protocol, sampling, elicitation, oauth, enabled)"
                .into(),
        }]
    );
}

#[test]
fn expansion_handles_defaults_undefined_and_leaves_the_rest() {
    let vars = env(&[("A", "alpha"), ("EMPTY", ""), ("NESTED", "${A}")]);
    let mut undefined = Vec::new();
    for (text, expanded) in [
        ("${A}", "alpha"),
        ("x-${A}-${A}-y", "x-alpha-alpha-y"),
        ("${A:-default}", "alpha"),
        ("${MISSING:-default}", "default"),
        ("${EMPTY:-default}", "default"),
        ("${EMPTY}", ""),
        ("${MISSING:-}", ""),
        ("${MISSING:-a b:c}", "a b:c"),
        ("${NESTED}", "${A}"),
        ("$A ${A", "$A ${A"),
        (
            "${1A} ${A-x} ${A:?x} ${} ${A B}",
            "${1A} ${A-x} ${A:?x} ${} ${A B}",
        ),
        ("$${A}", "$alpha"),
        ("no references", "no references"),
        ("ünïcode ${A} ü", "ünïcode alpha ü"),
    ] {
        assert_eq!(expand(text, &vars, &mut undefined), expanded, "{text}");
    }
    assert!(undefined.is_empty(), "{undefined:?}");

    assert_eq!(
        expand("${X}:${Y}:${X}:${A}:${Z:-z}", &vars, &mut undefined),
        ":::alpha:z"
    );
    assert_eq!(expand("${Y}${W}", &vars, &mut undefined), "");
    assert_eq!(undefined, ["X", "Y", "W"]);
}

#[test]
fn env_and_header_values_expand_and_undefined_variables_are_listed() {
    let dirs = Dirs::new();
    let file = dirs.project_file(
        "mcp_servers:\n\
         \x20 gh:\n    command: ${CMD}\n    args: ['${TOKEN}', $TOKEN]\n\
         \x20   env: {T: '${TOKEN}', U: '${NOPE}', V: '${NOPE}-${ALSO_NOPE}', W: '${NOPE:-w}'}\n\
         \x20 api:\n    url: https://h/mcp\n\
         \x20   headers: {Authorization: 'Bearer ${TOKEN}', X-Key: '${MISSING}'}\n\
         \x20 clean:\n    command: c\n",
    );
    let config = dirs.resolve_with(&[("TOKEN", "s3cret"), ("CMD", "evil")]);
    assert!(config.mcp_problems.is_empty(), "{:?}", config.mcp_problems);
    let gh = &config.mcp_servers["gh"];
    assert_eq!(
        gh.transport,
        McpTransport::Stdio {
            command: "${CMD}".into(),
            args: vec!["${TOKEN}".into(), "$TOKEN".into()],
            env: map(&[("T", "s3cret"), ("U", ""), ("V", "-"), ("W", "w")]),
            cwd: None,
        }
    );
    assert_eq!(gh.undefined_vars, ["NOPE", "ALSO_NOPE"]);
    // Mew's own file never expands a program or its arguments, and says so.
    assert_eq!(
        gh.warnings,
        [
            "`command` `${CMD}` is passed as written: Mew's configuration expands `${VAR}` only \
             in the values of env and headers (a `.mcp.json` expands it everywhere)",
            "`args` `${TOKEN}` is passed as written: Mew's configuration expands `${VAR}` only \
             in the values of env and headers (a `.mcp.json` expands it everywhere)",
        ]
    );
    let api = &config.mcp_servers["api"];
    assert_eq!(
        headers_of(api),
        &map(&[("Authorization", "Bearer s3cret"), ("X-Key", "")])
    );
    assert_eq!(api.undefined_vars, ["MISSING"]);
    assert!(config.mcp_servers["clean"].undefined_vars.is_empty());

    assert_eq!(
        gh.undefined_vars_warning("gh").unwrap(),
        format!(
            "{}: MCP server `gh` refers to variables ${{NOPE}}, ${{ALSO_NOPE}}, which are not \
             set: expanded to empty text",
            at(&file, 2)
        )
    );
    assert_eq!(
        api.undefined_vars_warning("api").unwrap(),
        format!(
            "{}: MCP server `api` refers to variable ${{MISSING}}, which is not set: expanded \
             to empty text",
            at(&file, 6)
        )
    );
    assert_eq!(
        config.mcp_servers["clean"].undefined_vars_warning("clean"),
        None
    );
}

#[test]
fn urls_are_not_expanded_in_mew_files_and_headers_cannot_gain_line_breaks() {
    let dirs = Dirs::new();
    dirs.project_file(
        "mcp_servers:\n  a: {url: 'https://${HOST}/mcp'}\n  \
         b: {url: 'https://h', headers: {X: '${MULTI}'}}\n",
    );
    let config = dirs.resolve_with(&[("HOST", "h"), ("MULTI", "a\r\nInjected: yes")]);
    assert!(config.mcp_servers.is_empty());
    assert_eq!(
        problems(&config),
        [
            (
                "a".to_owned(),
                "`url`: `https://${HOST}/mcp` contains `${`, which is not expanded in a url \
                 in Mew's configuration (only in the values of env and headers; a `.mcp.json` \
                 expands it)"
                    .to_owned()
            ),
            (
                "b".to_owned(),
                "`headers`: the value of `X` contains a line break once expanded".to_owned()
            ),
        ]
    );
}

/// The `.mcp.json` of Claude Code's documentation, with a stdio server beside it.
const CLAUDE_CODE_MCP_JSON: &str = r#"{
  "mcpServers": {
    "api-server": {
      "type": "http",
      "url": "${API_BASE_URL:-https://api.example.com}/mcp",
      "headers": {"Authorization": "Bearer ${API_KEY}"}
    },
    "local": {
      "command": "${TOOLS}/server",
      "args": ["--token", "${TOKEN}", "--mode=${MODE:-fast}", "$TOKEN"],
      "env": {"K": "${K:-d}"}
    },
    "needs-key": {"url": "https://h/mcp", "headers": {"X-Key": "${MISSING}"}},
    "needs-base": {"url": "${NO_BASE}/mcp"},
    "needs-args": {"command": "x", "args": ["${A1}-${A2}"]},
    "needs-program": {"command": "${NO_PROGRAM}"}
  }
}
"#;

#[test]
fn mcp_json_expands_command_args_url_env_and_headers_as_claude_code_does() {
    let dirs = Dirs::new();
    let json = dirs.mcp_json(CLAUDE_CODE_MCP_JSON);
    let config = dirs.resolve_with(&[
        ("API_KEY", "k3y"),
        ("TOOLS", "/opt/tools"),
        ("TOKEN", "s3cret"),
    ]);
    let api = &config.mcp_servers["api-server"];
    assert_eq!(
        api.transport,
        McpTransport::Http {
            url: "https://api.example.com/mcp".into(),
            headers: map(&[("Authorization", "Bearer k3y")]),
        }
    );
    assert!(api.undefined_vars.is_empty() && api.warnings.is_empty());
    assert_eq!(
        config.mcp_servers["local"].transport,
        McpTransport::Stdio {
            command: "/opt/tools/server".into(),
            args: vec![
                "--token".into(),
                "s3cret".into(),
                "--mode=fast".into(),
                "$TOKEN".into()
            ],
            env: map(&[("K", "d")]),
            cwd: None,
        }
    );
    // A variable that is not set and has no default: Claude Code does not start the server.
    let unset = |what: &str, names: &str, count: usize| {
        format!(
            "{what} refers to {} {names}, which {} not set and {} no default (write \
             `${{VAR:-default}}` for a value that may be missing)",
            if count == 1 { "variable" } else { "variables" },
            if count == 1 { "is" } else { "are" },
            if count == 1 { "has" } else { "have" },
        )
    };
    assert_eq!(
        config.mcp_problems,
        [
            McpProblem {
                server: "needs-args".into(),
                origin: at(&json, 15),
                message: unset("`args`", "${A1}, ${A2}", 2),
            },
            McpProblem {
                server: "needs-base".into(),
                origin: at(&json, 14),
                message: unset("`url`", "${NO_BASE}", 1),
            },
            McpProblem {
                server: "needs-key".into(),
                origin: at(&json, 13),
                message: unset("`headers`: the value of `X-Key`", "${MISSING}", 1),
            },
            McpProblem {
                server: "needs-program".into(),
                origin: at(&json, 16),
                message: unset("`command`", "${NO_PROGRAM}", 1),
            },
        ]
    );

    // The default gives way to a value; an empty value takes the default, as in Claude Code.
    let config = dirs.resolve_with(&[
        ("API_BASE_URL", "http://127.0.0.1:9"),
        ("API_KEY", ""),
        ("TOOLS", "/opt/tools"),
        ("TOKEN", "s3cret"),
        ("MODE", ""),
    ]);
    assert_eq!(
        config.mcp_servers["api-server"].transport,
        McpTransport::Http {
            url: "http://127.0.0.1:9/mcp".into(),
            headers: map(&[("Authorization", "Bearer ")]),
        }
    );
    match &config.mcp_servers["local"].transport {
        McpTransport::Stdio { args, .. } => assert_eq!(args[2], "--mode=fast"),
        other => panic!("{other:?}"),
    }

    // An expanded url that is no url is a problem that shows what was written.
    dirs.mcp_json(r#"{"mcpServers": {"odd": {"url": "${BASE}/mcp"}}}"#);
    let config = dirs.resolve_with(&[("BASE", "ftp://secret@h")]);
    assert_eq!(
        problems(&config),
        [(
            "odd".to_owned(),
            "`url`: `${BASE}/mcp` is not an http:// or https:// URL with a host once expanded"
                .to_owned()
        )]
    );
}

#[test]
fn an_entry_is_read_by_the_rules_of_the_file_it_comes_from() {
    let dirs = Dirs::new();
    dirs.mcp_json(CLAUDE_CODE_MCP_JSON);
    // The project's file replaces `local` whole, and its rules apply: nothing expanded in the
    // program or its arguments; an unset variable in env is empty text, with a warning.
    dirs.project_file(
        "mcp_servers:\n  local:\n    command: ${TOOLS}/server\n    args: ['${TOKEN}']\n\
         \x20   env: {K: '${K}'}\n",
    );
    let config = dirs.resolve_with(&[("TOOLS", "/opt/tools"), ("TOKEN", "s3cret")]);
    let local = &config.mcp_servers["local"];
    assert_eq!(
        local.transport,
        McpTransport::Stdio {
            command: "${TOOLS}/server".into(),
            args: vec!["${TOKEN}".into()],
            env: map(&[("K", "")]),
            cwd: None,
        }
    );
    assert_eq!(local.undefined_vars, ["K"]);
    assert_eq!(local.warnings.len(), 2, "{:?}", local.warnings);
    assert!(local.as_written.is_none());
}

#[test]
fn values_expanded_in_mcp_json_are_shown_as_written() {
    let dirs = Dirs::new();
    dirs.mcp_json(CLAUDE_CODE_MCP_JSON);
    let mut sources = dirs.sources();
    sources.env = env(&[
        ("API_BASE_URL", "https://internal.example.com"),
        ("API_KEY", "k3y"),
        ("TOOLS", "/opt/tools"),
        ("TOKEN", "s3cret"),
    ]);
    let loaded = Config::load(&sources).unwrap();
    let config = loaded.resolve().unwrap();
    let yaml = serde_yaml_ng::to_string(&config).unwrap();
    let debug = format!("{config:?}");
    for (what, text) in [("yaml", &yaml), ("debug", &debug)] {
        for secret in ["s3cret", "k3y", "internal.example.com", "/opt/tools"] {
            assert!(!text.contains(secret), "{what} shows {secret}: {text}");
        }
    }
    assert!(
        yaml.contains("    command: ${TOOLS}/server\n")
            && yaml.contains("    - ${TOKEN}\n")
            && yaml.contains("    url: ${API_BASE_URL:-https://api.example.com}/mcp\n"),
        "{yaml}"
    );
}

#[test]
fn cwd_is_relative_to_the_project_and_may_start_with_tilde() {
    let dirs = Dirs::new();
    dirs.project_file("mcp_servers:\n  a: {command: x, cwd: ~/tools}\n  b: {command: x, cwd: .}\n");
    let config = dirs.resolve();
    let cwd = |name: &str| match &config.mcp_servers[name].transport {
        McpTransport::Stdio { cwd, .. } => cwd.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(cwd("a"), Some(dirs.home.path().join("tools")));
    assert_eq!(cwd("b"), Some(dirs.project().join(".")));

    // Without a home directory, `~` is a problem of that entry only.
    let mut sources = Sources::new(dirs.project());
    sources.flags.data_dir = Some(dirs.project().join("data"));
    let config = Config::load(&sources).unwrap().resolve().unwrap();
    assert_eq!(config.mcp_servers.keys().collect::<Vec<_>>(), ["b"]);
    assert_eq!(
        problems(&config),
        [(
            "a".to_owned(),
            "`cwd`: `~/tools` starts with ~ but no home directory is known".to_owned()
        )]
    );
}

#[test]
fn secrets_are_masked_in_the_shown_configuration_and_debug_output() {
    let dirs = Dirs::new();
    dirs.project_file(
        "mcp_servers:\n\
         \x20 gh:\n    command: npx\n    env: {GITHUB_TOKEN: '${GH}', LITERAL: ghp_literal, \
         EMPTY: ''}\n\
         \x20 api:\n    url: https://h/mcp\n    headers: {Authorization: 'Bearer ${TOKEN}'}\n",
    );
    let mut sources = dirs.sources();
    sources.env = env(&[("GH", "ghp_expanded"), ("TOKEN", "tok_expanded")]);
    let loaded = Config::load(&sources).unwrap();
    let config = loaded.resolve().unwrap();
    assert_eq!(
        env_of(&config.mcp_servers["gh"])["GITHUB_TOKEN"],
        "ghp_expanded"
    );

    let yaml = serde_yaml_ng::to_string(&config).unwrap();
    let json = serde_json::to_string(&config).unwrap();
    let debug = format!("{config:?}");
    let entries = format!("{:?}", loaded.entries(&config).unwrap());
    for (what, text) in [
        ("yaml", &yaml),
        ("json", &json),
        ("debug", &debug),
        ("entries", &entries),
    ] {
        for secret in ["ghp_expanded", "tok_expanded", "ghp_literal"] {
            assert!(!text.contains(secret), "{what} shows {secret}: {text}");
        }
    }
    // The merged files hold the values as written, never an expanded one, and the
    // environment is shown by names only.
    let loaded_debug = format!("{loaded:?} {sources:?}");
    for secret in ["ghp_expanded", "tok_expanded"] {
        assert!(!loaded_debug.contains(secret), "{loaded_debug}");
    }
    assert!(
        loaded_debug.contains(r#"env: {"GH", "TOKEN"}"#),
        "{loaded_debug}"
    );
    assert!(yaml.contains("      GITHUB_TOKEN: '***'\n"), "{yaml}");
    assert!(yaml.contains("      LITERAL: '***'\n"), "{yaml}");
    assert!(yaml.contains("      EMPTY: ''\n"), "{yaml}");
    assert!(yaml.contains("      Authorization: '***'\n"), "{yaml}");
    assert!(yaml.contains("    type: stdio\n"), "{yaml}");
    assert!(yaml.contains("    connect_timeout: 30s\n"), "{yaml}");

    // What `mew config show` prints is a valid configuration, secrets aside.
    dirs.project_file(&yaml);
    let reread = dirs.resolve();
    assert!(reread.mcp_problems.is_empty(), "{:?}", reread.mcp_problems);
    let gh = &reread.mcp_servers["gh"];
    assert_eq!(env_of(gh)["GITHUB_TOKEN"], "***");
    assert_eq!(gh.transport.kind(), "stdio");
    assert_eq!(gh.connect_timeout, config.mcp_servers["gh"].connect_timeout);
    assert_eq!(
        reread.mcp_servers["api"].transport.kind(),
        config.mcp_servers["api"].transport.kind()
    );
}

#[test]
fn oauth_settings_are_read_in_both_dialects_and_the_secret_is_masked() {
    let dirs = Dirs::new();
    dirs.project_file(
        "mcp_servers:\n\
         \x20 linear:\n\
         \x20   url: https://mcp.linear.app/mcp\n\
         \x20   oauth:\n\
         \x20     client_id: mew-at-acme\n\
         \x20     client_secret: ${LINEAR_SECRET}\n\
         \x20     scopes: [read, write]\n\
         \x20     callback_port: 8765\n\
         \x20     per_caller: true\n\
         \x20 machine:\n\
         \x20   url: https://mcp.example.com/mcp\n\
         \x20   oauth: {client_id: bot, client_secret: x, grant: client_credentials}\n",
    );
    dirs.mcp_json(
        r#"{"mcpServers": {"notion": {"type": "http", "url": "https://mcp.notion.com/mcp",
            "oauth": {"clientId": "abc", "callbackPort": 9000, "authServerMetadataUrl": "x"}}}}"#,
    );
    let config = dirs.resolve_with(&[("LINEAR_SECRET", "s3cret")]);
    assert!(config.mcp_problems.is_empty(), "{:?}", config.mcp_problems);
    let linear = &config.mcp_servers["linear"].oauth;
    assert_eq!(
        *linear,
        mcp::McpOAuth {
            client_id: Some("mew-at-acme".into()),
            client_secret: Some("s3cret".into()),
            client_metadata_url: None,
            scopes: vec!["read".into(), "write".into()],
            callback_port: Some(8765),
            grant: mcp::McpOAuthGrant::AuthorizationCode,
            per_caller: true,
            ..Default::default()
        }
    );
    assert_eq!(
        config.mcp_servers["machine"].oauth.grant,
        mcp::McpOAuthGrant::ClientCredentials
    );
    let shown = serde_json::to_string(&config.mcp_servers["linear"]).unwrap();
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains(r#""client_secret":"***""#), "{shown}");
    assert!(!format!("{:?}", config.mcp_servers["linear"]).contains("s3cret"));
    let notion = &config.mcp_servers["notion"];
    assert_eq!(notion.oauth.client_id.as_deref(), Some("abc"));
    assert_eq!(notion.oauth.callback_port, Some(9000));
    assert!(
        notion
            .warnings
            .iter()
            .any(|warning| warning.contains("oauth.authServerMetadataUrl")),
        "{:?}",
        notion.warnings
    );
}

#[test]
fn bad_oauth_settings_skip_the_entry_with_a_reason() {
    let dirs = Dirs::new();
    dirs.project_file(
        "mcp_servers:\n\
         \x20 a: {url: 'https://a/mcp', oauth: {client_secret: x}}\n\
         \x20 b: {url: 'https://b/mcp', oauth: {callback_port: 70000}}\n\
         \x20 c: {url: 'https://c/mcp', oauth: {client_metadata_url: 'http://c/meta.json'}}\n\
         \x20 d: {url: 'https://d/mcp', oauth: {clientId: x}}\n\
         \x20 e: {command: ./server, oauth: {client_id: x}}\n\
         \x20 f: {url: 'https://f/mcp', oauth: {scopes: 'read write'}}\n\
         \x20 g: {url: 'https://g/mcp', oauth: {client_id: x, grant: client_credentials}}\n\
         \x20 h: {url: 'https://h/mcp', oauth: {grant: password}}\n\
         \x20 i: {url: 'https://i/mcp', oauth: {client_id: x, client_secret: y, grant: client_credentials, per_caller: true}}\n",
    );
    let problems = problems(&dirs.resolve());
    let reason = |server: &str| reason(&problems, server);
    assert!(
        reason("a").contains("needs the `client_id`"),
        "{}",
        reason("a")
    );
    assert!(reason("b").contains("a port number"), "{}", reason("b"));
    assert!(
        reason("g").contains("needs the client's `client_id` and either its `client_secret`"),
        "{}",
        reason("g")
    );
    assert!(
        reason("h").contains("authorization_code, client_credentials, jwt_bearer or enterprise"),
        "{}",
        reason("h")
    );
    assert!(
        reason("i").contains("`oauth.per_caller` is for users who sign in"),
        "{}",
        reason("i")
    );
    assert!(reason("c").contains("https://"), "{}", reason("c"));
    assert!(
        reason("d").contains("`oauth.clientId` is not a setting"),
        "{}",
        reason("d")
    );
    assert!(
        reason("e").contains("does not apply to a stdio server"),
        "{}",
        reason("e")
    );
    assert!(
        reason("f").contains("a list of scope names"),
        "{}",
        reason("f")
    );
}

#[test]
fn unattended_grants_read_their_keys_tokens_and_identity_provider() {
    let dirs = Dirs::new();
    let token_file = dirs.project().join("workload.jwt");
    std::fs::write(&token_file, "eyJ.workload.token\n").unwrap();
    dirs.project_file(
        "mcp_servers:\n\
         \x20 signed:\n\
         \x20   url: https://a.example/mcp\n\
         \x20   oauth: {client_id: bot, private_key: '${BOT_KEY}', signing_algorithm: ES384, grant: client_credentials}\n\
         \x20 workload:\n\
         \x20   url: https://b.example/mcp\n\
         \x20   oauth: {assertion_file: workload.jwt, grant: jwt_bearer, dpop: true}\n\
         \x20 sso:\n\
         \x20   url: https://c.example/mcp\n\
         \x20   oauth:\n\
         \x20     client_id: mew\n\
         \x20     client_secret: s\n\
         \x20     grant: enterprise\n\
         \x20     idp: {issuer: 'https://idp.example', token_endpoint: 'https://idp.example/token', client_id: mew-idp, id_token: '${ID_TOKEN}'}\n",
    );
    let key = "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n";
    let config = dirs.resolve_with(&[("BOT_KEY", key), ("ID_TOKEN", "eyJ.id.token")]);
    assert!(config.mcp_problems.is_empty(), "{:?}", config.mcp_problems);
    let signed = &config.mcp_servers["signed"].oauth;
    assert_eq!(signed.private_key.as_deref(), Some(key));
    assert_eq!(signed.signing_algorithm.as_deref(), Some("ES384"));
    let workload = &config.mcp_servers["workload"].oauth;
    assert_eq!(workload.grant, mcp::McpOAuthGrant::JwtBearer);
    assert!(workload.dpop);
    let assertion = workload.assertion.as_ref().unwrap();
    assert_eq!(assertion, &mcp::McpSecretSource::File(token_file.clone()));
    assert_eq!(
        assertion.read().unwrap(),
        "eyJ.workload.token",
        "read and trimmed"
    );
    let sso = &config.mcp_servers["sso"].oauth;
    let idp = sso.idp.as_ref().unwrap();
    assert_eq!(idp.token_endpoint, "https://idp.example/token");
    assert_eq!(idp.client_id, "mew-idp");
    assert_eq!(idp.id_token.read().unwrap(), "eyJ.id.token");
    // Keys and tokens are never shown.
    for name in ["signed", "sso"] {
        let shown = serde_json::to_string(&config.mcp_servers[name]).unwrap();
        let debug = format!("{:?}", config.mcp_servers[name]);
        for secret in ["MIGH", "eyJ.id.token"] {
            assert!(!shown.contains(secret), "{shown}");
            assert!(!debug.contains(secret), "{debug}");
        }
    }
    assert!(
        serde_json::to_string(workload)
            .unwrap()
            .contains("workload.jwt"),
        "a file is shown by its path"
    );
}

#[test]
fn bad_unattended_grant_settings_skip_the_entry_with_a_reason() {
    let dirs = Dirs::new();
    dirs.project_file(
        "mcp_servers:\n\
         \x20 a: {url: 'https://a/mcp', oauth: {client_id: x, private_key: 'not pem', grant: client_credentials}}\n\
         \x20 b: {url: 'https://b/mcp', oauth: {client_id: x, client_secret: y, private_key: '-----BEGIN PRIVATE KEY-----', grant: client_credentials}}\n\
         \x20 c: {url: 'https://c/mcp', oauth: {grant: jwt_bearer}}\n\
         \x20 d: {url: 'https://d/mcp', oauth: {client_id: x, grant: enterprise}}\n\
         \x20 e: {url: 'https://e/mcp', oauth: {client_id: x, grant: enterprise, idp: {issuer: i, token_endpoint: 'http://idp.example/token', client_id: c, id_token: t}}}\n\
         \x20 f: {url: 'https://f/mcp', oauth: {client_id: x, grant: enterprise, idp: {issuer: i, token_endpoint: 'https://idp/token', client_id: c}}}\n\
         \x20 g: {url: 'https://g/mcp', oauth: {client_id: x, private_key: '-----BEGIN PRIVATE KEY-----', signing_algorithm: HS256, grant: client_credentials}}\n\
         \x20 h: {url: 'https://h/mcp', oauth: {assertion: t, assertion_file: f, grant: jwt_bearer}}\n\
         \x20 i: {url: 'https://i/mcp', oauth: {assertion: t, grant: jwt_bearer, per_caller: true}}\n",
    );
    let problems = problems(&dirs.resolve());
    let reason = |server: &str| reason(&problems, server);
    for (server, expected) in [
        ("a", "expected a PEM private key"),
        ("b", "either its `client_secret` or its `private_key`"),
        ("c", "needs the workload's token"),
        ("d", "needs `idp`"),
        ("e", "expected an https URL"),
        ("f", "needs `id_token` or `id_token_file`"),
        ("g", "expected one of ES256"),
        ("h", "not both"),
        ("i", "this `grant` has no user"),
    ] {
        assert!(
            reason(server).contains(expected),
            "{server}: {}",
            reason(server)
        );
    }
}
