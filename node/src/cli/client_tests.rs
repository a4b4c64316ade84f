//! Tests of the client subcommands (`card`, `agents`, `send`, `tasks`): parsing, targets,
//! state names, card checks, and the exact lines the printers print.

use clap::error::ErrorKind;
use futures_util::stream;
use mew_cards::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Artifact, Message, Part, PartContent,
    Role, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent, Timestamp,
};
use mew_transport::{Binding, EventStream};
use serde_json::json;
use tempfile::TempDir;

use super::card::{render_card, validate};
use super::output::{
    EventPrinter, follow, next_step, outcome, parse_state, part_text, render_message, render_task,
    state_name,
};
use super::remote::{NodeUrlArgs, Target, http_url, parse_target};
use super::tasks::{TasksCommand, render_table};
use super::*;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("mew").chain(args.iter().copied()))
}

/// A context for a project in `dir`, with no user layer.
fn context(dir: &TempDir, json: bool) -> Context {
    let cli = parse(&["agents"]).unwrap();
    let mut sources = cli
        .sources(HashMap::new(), Some(dir.path().join("home")))
        .unwrap();
    sources.project = dir.path().to_owned();
    let loaded = Config::load(&sources).unwrap();
    Context {
        config: loaded.resolve().unwrap(),
        loaded,
        json,
    }
}

fn at(seconds: i64) -> Option<Timestamp> {
    Some(Timestamp::from_unix(seconds, 0))
}

fn status(state: TaskState, text: Option<&str>) -> TaskStatus {
    TaskStatus {
        state,
        message: text.map(Message::agent_text),
        timestamp: at(1_700_000_000),
    }
}

fn task(state: TaskState, text: Option<&str>) -> Task {
    Task {
        id: "t1".into(),
        context_id: "c1".into(),
        status: status(state, text),
        ..Task::default()
    }
}

fn artifact(name: &str, parts: Vec<Part>) -> Artifact {
    Artifact {
        artifact_id: "a1".into(),
        ..Artifact::new(name, parts)
    }
}

fn chunk(text: &str, append: bool, last_chunk: bool) -> StreamResponse {
    StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
        task_id: "t1".into(),
        context_id: "c1".into(),
        artifact: artifact("out", vec![Part::text(text)]),
        append,
        last_chunk,
        metadata: None,
    })
}

fn update(state: TaskState, text: Option<&str>) -> StreamResponse {
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: "t1".into(),
        context_id: "c1".into(),
        status: status(state, text),
        metadata: None,
    })
}

fn events(items: Vec<StreamResponse>) -> EventStream {
    EventStream::new(stream::iter(items.into_iter().map(Ok)))
}

#[test]
fn send_parses_its_flags() {
    let cli = parse(&[
        "send",
        "wc",
        "hello",
        "world",
        "--stream",
        "--task",
        "T",
        "--context",
        "C",
        "--binding",
        "rest",
        "--node",
        "http://h:1/",
    ])
    .unwrap();
    let Command::Send(args) = &cli.command else {
        panic!("expected send, got {:?}", cli.command);
    };
    assert_eq!(args.target, Target::Role("wc".into()));
    assert_eq!(args.text, ["hello", "world"]);
    assert!(args.stream && !args.return_immediately);
    assert_eq!(args.binding.map(Binding::from), Some(Binding::HttpJson));
    assert_eq!(args.node.node.as_deref(), Some("http://h:1"));
    assert!(cli.command.node_args().is_none());

    let request = args.request();
    assert_eq!(request.message.text(), "hello world");
    assert_eq!(request.message.role, Role::User);
    assert_eq!(request.message.task_id, Some("T".into()));
    assert_eq!(request.message.context_id, Some("C".into()));
    assert_eq!(request.configuration, None);
}

#[test]
fn send_return_immediately_sets_the_configuration() {
    let cli = parse(&["send", "-", "hi", "--return-immediately"]).unwrap();
    let Command::Send(args) = &cli.command else {
        panic!("expected send");
    };
    assert_eq!(args.target, Target::Front);
    let request = args.request();
    assert!(request.return_immediately());
    assert_eq!(request.message.task_id, None);
}

#[test]
fn targets_are_urls_roles_or_the_front_agent() {
    for (text, target) in [
        ("-", Target::Front),
        (".", Target::Front),
        ("wc", Target::Role("wc".into())),
        ("general-purpose", Target::Role("general-purpose".into())),
        (
            "http://h:1/agents/wc/",
            Target::Url("http://h:1/agents/wc".into()),
        ),
        (
            "https://a.example/.well-known/agent-card.json",
            Target::Url("https://a.example/.well-known/agent-card.json".into()),
        ),
    ] {
        assert_eq!(parse_target(text), Ok(target.clone()), "{text}");
    }
    assert_eq!(
        parse_target("lab/upper"),
        Ok(Target::Peer {
            peer: "lab".into(),
            role: "upper".into()
        })
    );
    for bad in [
        "9lives",
        "a/",
        "/b",
        "a/b/c",
        "a b/c",
        "",
        "ftp://h",
        "http://",
        "http:///x",
    ] {
        assert!(parse_target(bad).is_err(), "{bad}");
    }
    let node = "http://127.0.0.1:7801";
    let dir = TempDir::new().unwrap();
    let config = context(&dir, false).config;
    assert_eq!(Target::Front.url(node, &config).unwrap(), node);
    assert_eq!(
        Target::Role("wc".into()).url(node, &config).unwrap(),
        "http://127.0.0.1:7801/agents/wc"
    );
    assert_eq!(
        Target::Url("https://x/y".into())
            .url(node, &config)
            .unwrap(),
        "https://x/y"
    );
    let unknown = Target::Peer {
        peer: "lab".into(),
        role: "wc".into(),
    };
    let error = unknown.url(node, &config).unwrap_err().to_string();
    assert!(error.contains("no peer named lab"), "{error}");
    assert_eq!(unknown.to_string(), "lab/wc");
    assert_eq!(Target::Front.to_string(), "-");
    assert_eq!(Target::Role("wc".into()).to_string(), "wc");
}

#[test]
fn the_node_url_is_the_flag_or_the_configured_public_url() {
    let dir = TempDir::new().unwrap();
    let context = context(&dir, false);
    let default = NodeUrlArgs::default();
    assert_eq!(default.url(&context.config), "http://127.0.0.1:7777");
    assert_eq!(default.flag(), "");
    let flag = NodeUrlArgs {
        node: Some("http://h:1".into()),
        ..NodeUrlArgs::default()
    };
    assert_eq!(flag.url(&context.config), "http://h:1");
    assert_eq!(flag.flag(), " --node http://h:1");
    assert_eq!(http_url("https://h/a//"), Ok("https://h/a".into()));
    assert!(http_url("localhost:7777").is_err());
}

#[test]
fn tasks_subcommands_parse() {
    let cli = parse(&[
        "tasks",
        "list",
        "--state",
        "input-required",
        "--limit",
        "5",
        "--all",
        "--context",
        "C",
        "--node",
        "http://h:1",
    ])
    .unwrap();
    let Command::Tasks(args) = &cli.command else {
        panic!("expected tasks");
    };
    assert_eq!(args.node.node.as_deref(), Some("http://h:1"));
    let TasksCommand::List(list) = &args.command else {
        panic!("expected list");
    };
    assert_eq!(list.state, Some(TaskState::InputRequired));
    assert_eq!(list.limit, Some(5));
    assert!(list.all);
    assert_eq!(list.context.as_deref(), Some("C"));

    let cli = parse(&[
        "tasks",
        "--node",
        "http://h:2",
        "get",
        "T",
        "--history",
        "3",
    ])
    .unwrap();
    let Command::Tasks(args) = &cli.command else {
        panic!("expected tasks");
    };
    assert_eq!(args.node.node.as_deref(), Some("http://h:2"));
    let TasksCommand::Get(get) = &args.command else {
        panic!("expected get");
    };
    assert_eq!((get.id.as_str(), get.history), ("T", Some(3)));

    for (word, id, name, binding) in [
        ("cancel", "A", "jsonrpc", Binding::JsonRpc),
        ("watch", "B", "grpc", Binding::Grpc),
    ] {
        let cli = parse(&["tasks", word, id, "--binding", name]).unwrap();
        let Command::Tasks(args) = &cli.command else {
            panic!("expected tasks");
        };
        assert_eq!(args.binding.map(Binding::from), Some(binding));
        match &args.command {
            TasksCommand::Cancel(ids) | TasksCommand::Watch(ids) => assert_eq!(ids.id, id),
            other => panic!("{word}: got {other:?}"),
        }
    }
}

#[test]
fn card_and_agents_parse() {
    let cli = parse(&["card"]).unwrap();
    let Command::Card(args) = &cli.command else {
        panic!("expected card");
    };
    assert_eq!(args.target, None);
    let cli = parse(&["card", "wc", "--json"]).unwrap();
    let Command::Card(args) = &cli.command else {
        panic!("expected card");
    };
    assert_eq!(args.target, Some(Target::Role("wc".into())));
    assert!(cli.global.json);
    assert!(matches!(
        parse(&["agents", "--json"]).unwrap().command,
        Command::Agents
    ));
}

#[test]
fn bad_client_command_lines_are_usage_errors() {
    for (args, kind) in [
        (&["send", "wc"][..], ErrorKind::MissingRequiredArgument),
        (&["send", "bad name", "hi"], ErrorKind::ValueValidation),
        (
            &["send", "wc", "hi", "--stream", "--return-immediately"],
            ErrorKind::ArgumentConflict,
        ),
        (
            &["send", "wc", "hi", "--binding", "soap"],
            ErrorKind::InvalidValue,
        ),
        (
            &["send", "wc", "hi", "--node", "h:1"],
            ErrorKind::ValueValidation,
        ),
        (
            &["tasks"],
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand,
        ),
        (
            &["tasks", "list", "--state", "done"],
            ErrorKind::ValueValidation,
        ),
        (
            &["tasks", "list", "--limit", "0"],
            ErrorKind::ValueValidation,
        ),
        (
            &["tasks", "list", "--limit", "101"],
            ErrorKind::ValueValidation,
        ),
        (&["tasks", "get"], ErrorKind::MissingRequiredArgument),
        (
            &["tasks", "get", "T", "--history", "-1"],
            ErrorKind::UnknownArgument,
        ),
        (&["agents", "extra"], ErrorKind::UnknownArgument),
    ] {
        let error = parse(args).unwrap_err();
        assert_eq!(error.kind(), kind, "{args:?}: {error}");
        assert_eq!(error.exit_code(), 2, "{args:?}");
    }
}

#[test]
fn state_names_map_to_task_states() {
    for (name, state) in [
        ("submitted", TaskState::Submitted),
        ("working", TaskState::Working),
        ("completed", TaskState::Completed),
        ("failed", TaskState::Failed),
        ("canceled", TaskState::Canceled),
        ("input-required", TaskState::InputRequired),
        ("rejected", TaskState::Rejected),
        ("auth-required", TaskState::AuthRequired),
    ] {
        assert_eq!(parse_state(name), Ok(state));
        assert_eq!(state_name(state), name);
        assert_eq!(parse_state(state.as_str()), Ok(state));
    }
    assert_eq!(parse_state("Input_Required"), Ok(TaskState::InputRequired));
    assert_eq!(
        parse_state("unspecified"),
        Err(
            "unknown task state \"unspecified\"; known: submitted, working, completed, failed, \
             canceled, input-required, rejected, auth-required"
                .to_owned()
        )
    );
}

#[test]
fn parts_print_as_text_json_or_file_summaries() {
    let mut file = Part::new(PartContent::Raw(vec![1, 2]));
    file.filename = "a.pdf".into();
    file.media_type = "application/pdf".into();
    assert_eq!(part_text(&file), "[file a.pdf (application/pdf)]");
    let link = Part::new(PartContent::Url("https://x/y.png".into()));
    assert_eq!(part_text(&link), "[file https://x/y.png]");
    assert_eq!(part_text(&Part::data(json!({"a": [1]}))), r#"{"a":[1]}"#);
    assert_eq!(
        render_message(&Message::agent_text("hi\nthere")),
        "hi\nthere\n"
    );
}

#[test]
fn a_task_prints_as_fields_history_and_artifacts() {
    let mut task = task(TaskState::InputRequired, Some("Which file?\nName one."));
    task.history = vec![
        Message::user_text("fix it"),
        Message::agent_text("Looking."),
    ];
    task.artifacts = vec![
        artifact(
            "notes",
            vec![Part::text("line 1\nline 2"), Part::data(json!(1))],
        ),
        artifact("", vec![Part::text("done\n")]),
    ];
    let expected = "task:     t1\n\
                    context:  c1\n\
                    state:    input-required\n\
                    updated:  2023-11-14T22:13:20Z\n\
                    message:  Which file?\n          \
                    Name one.\n\
                    history:\n  \
                    user:  fix it\n  \
                    agent: Looking.\n\
                    artifact: notes\n\
                    line 1\n\
                    line 2\n\
                    1\n\
                    artifact: a1\n\
                    done\n";
    assert_eq!(render_task(&task, true), expected);
    let without_history = expected.replace("history:\n  user:  fix it\n  agent: Looking.\n", "");
    assert_eq!(render_task(&task, false), without_history);
}

#[test]
fn stream_events_print_as_they_come() {
    let mut printer = EventPrinter::default();
    let mut snapshot = task(TaskState::Submitted, None);
    snapshot.history = vec![Message::user_text("go")];
    let lines: Vec<String> = [
        StreamResponse::Task(snapshot),
        update(TaskState::Working, None),
        update(TaskState::Working, Some("thinking")),
        chunk("Hel", false, false),
        chunk("lo", true, false),
        chunk(" world", true, true),
        chunk("second", false, false),
        update(TaskState::InputRequired, Some("Sure?")),
        StreamResponse::Message(Message::agent_text("bye")),
    ]
    .iter()
    .map(|event| printer.event(event))
    .collect();
    assert_eq!(
        lines,
        [
            "task t1 (context c1)\n[submitted]\n",
            "[working]\n",
            "[working] thinking\n",
            "Hel",
            "lo",
            " world\n",
            "second",
            "\n[input-required] Sure?\n",
            "bye\n",
        ]
    );
    assert_eq!(printer.finish(), "");
    assert_eq!(printer.event(&chunk("open", false, false)), "open");
    assert_eq!(printer.finish(), "\n");
}

#[tokio::test]
async fn follow_prints_and_folds_the_stream() {
    let items = vec![
        StreamResponse::Task(task(TaskState::Submitted, None)),
        chunk("4 words", false, true),
        update(TaskState::Completed, None),
    ];
    let mut out = Vec::new();
    let task = follow(events(items.clone()), false, &mut out)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "task t1 (context c1)\n[submitted]\n4 words\n[completed]\n"
    );
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(task.artifacts.len(), 1);

    let mut out = Vec::new();
    follow(events(items), true, &mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(
        lines[2]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    let message = vec![StreamResponse::Message(Message::agent_text("hi"))];
    let mut out = Vec::new();
    assert_eq!(
        follow(events(message), false, &mut out).await.unwrap(),
        None
    );
    assert_eq!(out, b"hi\n");
}

#[tokio::test]
async fn follow_fails_when_the_stream_ends_early() {
    let items = vec![
        update(TaskState::Working, None),
        chunk("part", false, false),
    ];
    let mut out = Vec::new();
    let error = follow(events(items), false, &mut out).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the stream ended while task t1 was still working"
    );
    assert_eq!(String::from_utf8(out).unwrap(), "[working]\npart\n");
    let error = follow(events(Vec::new()), false, &mut Vec::new())
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "the stream ended without any task event");
}

#[test]
fn outcomes_fail_for_failed_rejected_and_canceled_tasks() {
    for state in [
        TaskState::Completed,
        TaskState::InputRequired,
        TaskState::Working,
    ] {
        assert!(outcome(&task(state, Some("x")), true).is_ok(), "{state:?}");
    }
    let failed = task(TaskState::Failed, Some("disk full"));
    assert_eq!(
        outcome(&failed, true).unwrap_err().to_string(),
        "task t1 failed: disk full"
    );
    assert_eq!(
        outcome(&failed, false).unwrap_err().to_string(),
        "task t1 failed"
    );
    assert_eq!(
        outcome(&task(TaskState::Rejected, None), true)
            .unwrap_err()
            .to_string(),
        "task t1 was rejected"
    );
    assert_eq!(
        outcome(&task(TaskState::Canceled, None), true)
            .unwrap_err()
            .to_string(),
        "task t1 was canceled"
    );
}

#[test]
fn next_steps_say_how_to_answer_or_follow() {
    let flag = " --node http://h:1";
    assert_eq!(
        next_step(&task(TaskState::InputRequired, None), "mew send wc", flag).as_deref(),
        Some("reply with: mew send wc --task t1 \"<answer>\" --node http://h:1\n")
    );
    assert_eq!(
        next_step(&task(TaskState::Working, None), "mew send wc", "").as_deref(),
        Some("follow it with: mew tasks watch t1\n")
    );
    assert_eq!(
        next_step(&task(TaskState::Completed, None), "mew send wc", ""),
        None
    );
}

/// `task` run by `role`, as the node records it in `metadata.mew.role`.
fn with_role(mut task: Task, role: &str) -> Task {
    let mut metadata = mew_cards::Metadata::new();
    mew_cards::mew::MewMetadata::set_role(&mut metadata, role);
    task.metadata = Some(metadata);
    task
}

#[test]
fn the_task_table_has_one_row_per_task() {
    let mut first = with_role(task(TaskState::Working, None), "wc");
    first.history = vec![
        Message::agent_text("not this"),
        Message::user_text("count\nthe words of this rather long message, please"),
    ];
    // A task of an agent that records no role has an empty cell.
    let mut second = task(TaskState::InputRequired, Some("which file?"));
    second.id = "t2".into();
    second.status.timestamp = Some(Timestamp::from_unix(1_700_000_001, 5));
    assert_eq!(
        render_table(&[first, second]),
        "ID  ROLE  STATE           CONTEXT  UPDATED               MESSAGE\n\
         t1  wc    working         c1       2023-11-14T22:13:20Z  count the words of this rather long mes…\n\
         t2        input-required  c1       2023-11-14T22:13:21Z\n"
    );
    assert_eq!(render_table(&[]), "no tasks\n");
}

#[test]
fn the_task_table_says_why_a_task_failed_or_was_rejected() {
    let mut failed = with_role(
        task(
            TaskState::Failed,
            Some("the command `wc`\nexited with status 2: no such file or directory"),
        ),
        "word-count",
    );
    failed.history = vec![Message::user_text("count a.txt")];
    let mut rejected = with_role(task(TaskState::Rejected, Some("blocked by policy")), "wc");
    rejected.id = "t2".into();
    let mut done = with_role(task(TaskState::Completed, Some("3 words")), "wc");
    done.id = "t3".into();
    assert_eq!(
        render_table(&[failed, rejected, done]),
        "ID  ROLE        STATE      CONTEXT  UPDATED               MESSAGE      REASON\n\
         t1  word-count  failed     c1       2023-11-14T22:13:20Z  count a.txt  the command `wc` exited with status 2: …\n\
         t2  wc          rejected   c1       2023-11-14T22:13:20Z               blocked by policy\n\
         t3  wc          completed  c1       2023-11-14T22:13:20Z\n"
    );
}

fn good_card() -> AgentCard {
    AgentCard {
        name: "wc".into(),
        description: "Counts words".into(),
        version: "0.1.0".into(),
        supported_interfaces: vec![
            AgentInterface::new("http://h:1/agents/wc", "JSONRPC"),
            AgentInterface::new("http://h:1/agents/wc", "HTTP+JSON"),
        ],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            ..AgentCapabilities::default()
        },
        skills: vec![AgentSkill {
            id: "wc".into(),
            name: "wc".into(),
            description: "Counts lines, words and bytes".into(),
            tags: vec!["text".into(), "count".into()],
            ..AgentSkill::default()
        }],
        ..AgentCard::default()
    }
}

#[test]
fn a_good_card_has_no_problems_and_prints_a_summary() {
    let card = good_card();
    assert_eq!(validate(&card), Vec::<String>::new());
    assert_eq!(
        render_card(&card),
        "name:         wc\n\
         description:  Counts words\n\
         version:      0.1.0\n\
         capabilities: streaming\n\
         interfaces:\n  \
         JSONRPC    1.0  http://h:1/agents/wc\n  \
         HTTP+JSON  1.0  http://h:1/agents/wc\n\
         skills:\n  \
         wc  [text, count]\n    \
         Counts lines, words and bytes\n"
    );
}

#[test]
fn card_problems_are_each_reported() {
    let mut card = good_card();
    card.name = String::new();
    card.version = " ".into();
    card.supported_interfaces = vec![
        AgentInterface::new("/relative", "JSONRPC"),
        AgentInterface {
            protocol_version: "0.3".into(),
            ..AgentInterface::new("http://h:1", "SOAP")
        },
    ];
    card.skills.push(AgentSkill {
        id: "wc".into(),
        ..AgentSkill::default()
    });
    assert_eq!(
        validate(&card),
        [
            "the card has no name",
            "the card has no version",
            "supportedInterfaces[0]: url \"/relative\" is not an absolute http(s) URL",
            "supportedInterfaces[1]: unknown protocolBinding \"SOAP\" (known: JSONRPC, \
             HTTP+JSON, GRPC)",
            "skills[1] (wc): no name",
            "skills[1] (wc): no description",
            "skills[1] (wc): no tags",
            "skills[1] (wc): another skill has the same id",
        ]
    );
    card.supported_interfaces.clear();
    card.skills.clear();
    assert_eq!(
        validate(&card).last().map(String::as_str),
        Some("no supportedInterface has protocolVersion \"1.0\" and a known binding")
    );
    assert!(render_card(&card).contains("interfaces:   none\nskills:       none\n"));
}

#[tokio::test]
async fn agents_prints_the_catalog() {
    let dir = TempDir::new().unwrap();
    let agents_dir = dir.path().join(".mew/agents");
    std::fs::create_dir_all(&agents_dir).unwrap();
    std::fs::write(
        agents_dir.join("wc.md"),
        "---\nname: wc\ndescription: Counts\ncommand: wc\n---\n",
    )
    .unwrap();
    let mut out = Vec::new();
    agents::agents(&context(&dir, false), &mut out)
        .await
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("NAME "), "{text}");
    assert!(text.contains("\nwc  "), "{text}");

    let mut out = Vec::new();
    agents::agents(&context(&dir, true), &mut out)
        .await
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(value["roles"].as_array().map(Vec::len), Some(4));
}
