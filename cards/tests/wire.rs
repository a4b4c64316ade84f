//! Targeted tests of the ProtoJSON wire rules: enums, oneofs, unknown fields, omitted defaults,
//! bytes, Struct values, lenient integers and timestamps, plus the task state machine and
//! `Task::apply`.

use std::fmt::Debug;

use mew_cards::{
    AgentCard, Artifact, ArtifactId, ContextId, GetTaskRequest, ListTasksRequest, Message,
    MessageId, Part, PartContent, Role, SendMessageRequest, SendMessageResponse, StreamResponse,
    Task, TaskArtifactUpdateEvent, TaskId, TaskState, TaskStatus, TaskStatusUpdateEvent, Timestamp,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn parse<T: DeserializeOwned>(value: Value) -> T {
    match serde_json::from_value(value.clone()) {
        Ok(parsed) => parsed,
        Err(err) => panic!("{value} should parse: {err}"),
    }
}

/// The error message of a value that must not parse as `T`.
fn reject<T: DeserializeOwned + Debug>(value: Value) -> String {
    match serde_json::from_value::<T>(value.clone()) {
        Ok(parsed) => panic!("{value} should be rejected, parsed as {parsed:?}"),
        Err(err) => err.to_string(),
    }
}

fn to_json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| panic!("does not serialize: {e}"))
}

fn ts(text: &str) -> Timestamp {
    text.parse()
        .unwrap_or_else(|e| panic!("bad test timestamp: {e}"))
}

// --- Enums ---

#[test]
fn enums_accept_names_and_numbers() {
    let by_name: TaskStatus = parse(json!({"state": "TASK_STATE_INPUT_REQUIRED"}));
    let by_number: TaskStatus = parse(json!({"state": 6}));
    assert_eq!(by_name.state, TaskState::InputRequired);
    assert_eq!(by_number.state, TaskState::InputRequired);

    let message: Message = parse(json!({"messageId": "m", "role": 2, "parts": [{"text": "x"}]}));
    assert_eq!(message.role, Role::Agent);
    let message: Message = parse(json!({"messageId": "m", "role": "ROLE_USER"}));
    assert_eq!(message.role, Role::User);

    let list: ListTasksRequest = parse(json!({"status": 3}));
    assert_eq!(list.status, TaskState::Completed);
}

#[test]
fn enums_serialize_as_names() {
    let status = TaskStatus {
        state: TaskState::AuthRequired,
        message: None,
        timestamp: None,
    };
    assert_eq!(
        to_json(&status),
        json!({"state": "TASK_STATE_AUTH_REQUIRED"})
    );
    assert_eq!(to_json(&Role::Agent), json!("ROLE_AGENT"));
    for state in TaskState::ALL {
        assert_eq!(TaskState::from_name(state.as_str()), Some(*state));
        assert_eq!(
            TaskState::from_number(i64::from(state.number())),
            Some(*state)
        );
    }
}

#[test]
fn enums_reject_unknown_names_and_numbers_clearly() {
    let err = reject::<TaskStatus>(json!({"state": "working"}));
    assert!(err.contains(r#"unknown task state "working""#), "{err}");
    let err = reject::<TaskStatus>(json!({"state": 99}));
    assert!(err.contains("unknown task state number 99"), "{err}");
    // The 0.3 spelling of a role is not a 1.0 role.
    let err = reject::<Message>(json!({"messageId": "m", "role": "user"}));
    assert!(err.contains(r#"unknown role "user""#), "{err}");
    let err = reject::<Message>(json!({"messageId": "m", "role": -1}));
    assert!(err.contains("unknown role number -1"), "{err}");
}

// --- Oneofs ---

#[test]
fn part_with_text_and_url_is_rejected() {
    let err = reject::<Part>(json!({"text": "hi", "url": "https://example.com/x"}));
    assert!(
        err.contains("a part has more than one of text, raw, url, data"),
        "{err}"
    );
    let err = reject::<Part>(json!({"mediaType": "text/plain"}));
    assert!(
        err.contains("a part needs one of text, raw, url, data"),
        "{err}"
    );
}

#[test]
fn stream_response_with_task_and_message_is_rejected() {
    let err = reject::<StreamResponse>(json!({
        "task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}},
        "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]},
    }));
    assert!(
        err.contains("a stream response sets more than one member"),
        "{err}"
    );
    let err = reject::<StreamResponse>(json!({}));
    assert!(err.contains("a stream response sets no member"), "{err}");
    let err = reject::<SendMessageResponse>(json!({
        "task": {"id": "t"},
        "message": {"messageId": "m"},
    }));
    assert!(
        err.contains("a send message response sets more than one member"),
        "{err}"
    );
}

#[test]
fn oneofs_serialize_under_their_member_name() {
    let update = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: TaskId::from("t"),
        context_id: ContextId::from("c"),
        status: TaskStatus {
            state: TaskState::Working,
            message: None,
            timestamp: None,
        },
        metadata: None,
    });
    assert_eq!(
        to_json(&update),
        json!({"statusUpdate": {
            "taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}
        }})
    );
    let card: AgentCard = parse(json!({
        "securitySchemes": {"key": {"apiKeySecurityScheme": {"location": "header", "name": "K"}}}
    }));
    assert_eq!(
        to_json(&card)["securitySchemes"],
        json!({"key": {"apiKeySecurityScheme": {"location": "header", "name": "K"}}})
    );
}

// --- Unknown fields ---

#[test]
fn unknown_fields_are_ignored_in_tasks_and_messages() {
    let task: Task = parse(json!({
        "id": "t", "contextId": "c", "kind": "task", "futureField": {"x": 1},
        "status": {"state": "TASK_STATE_COMPLETED", "extra": true},
        "artifacts": [{"artifactId": "a", "parts": [{"text": "hi", "kind": "text"}], "x": 1}],
    }));
    assert_eq!(task.id, TaskId::from("t"));
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(task.artifacts[0].parts[0].as_text(), Some("hi"));
    assert_eq!(
        to_json(&task),
        json!({
            "id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"artifactId": "a", "parts": [{"text": "hi"}]}],
        })
    );

    let message: Message = parse(json!({
        "messageId": "m", "role": "ROLE_USER", "kind": "message", "parts": [{"text": "q"}],
        "unknownList": [1, 2],
    }));
    assert_eq!(message.message_id, MessageId::from("m"));
    assert_eq!(message.text(), "q");
}

#[test]
fn unknown_fields_are_ignored_in_cards() {
    // A card with the v0.3 fields the Python SDK merges in for old clients.
    let card: AgentCard = parse(json!({
        "name": "Old", "description": "d", "version": "1",
        "url": "http://h/", "preferredTransport": "JSONRPC", "protocolVersion": "0.3.0",
        "additionalInterfaces": [{"url": "http://h", "transport": "HTTP+JSON"}],
        "capabilities": {"streaming": true, "stateTransitionHistory": false},
        "supportedInterfaces": [{"url": "http://h/", "protocolBinding": "JSONRPC",
                                 "protocolVersion": "1.0", "extra": 1}],
    }));
    assert_eq!(card.name, "Old");
    assert_eq!(card.capabilities.streaming, Some(true));
    assert_eq!(card.supported_interfaces[0].url, "http://h/");
    let out = to_json(&card);
    for gone in [
        "url",
        "preferredTransport",
        "protocolVersion",
        "additionalInterfaces",
    ] {
        assert!(out.get(gone).is_none(), "{gone} must not be written");
    }
}

#[test]
fn unknown_fields_are_ignored_in_stream_responses() {
    let item: StreamResponse = parse(json!({
        "kind": "status-update",
        "statusUpdate": {"taskId": "t", "contextId": "c", "final": true,
                         "status": {"state": "TASK_STATE_WORKING"}},
    }));
    match item {
        StreamResponse::StatusUpdate(update) => {
            assert_eq!(update.task_id, TaskId::from("t"));
            assert_eq!(update.status.state, TaskState::Working);
        }
        other => panic!("expected a status update, got {other:?}"),
    }
}

// --- Defaults omitted ---

#[test]
fn default_values_are_omitted_on_output() {
    let task = Task {
        id: TaskId::from("t"),
        context_id: ContextId::from("c"),
        status: TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: None,
        },
        ..Task::default()
    };
    let out = to_json(&task);
    assert_eq!(
        out,
        json!({"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_SUBMITTED"}})
    );
    assert!(out.get("artifacts").is_none());
    assert!(out.get("history").is_none());

    let update = TaskArtifactUpdateEvent {
        task_id: TaskId::from("t"),
        context_id: ContextId::from("c"),
        artifact: Artifact {
            artifact_id: ArtifactId::from("a"),
            parts: vec![Part::text("x")],
            ..Artifact::default()
        },
        append: false,
        last_chunk: false,
        metadata: None,
    };
    assert_eq!(
        to_json(&update),
        json!({"taskId": "t", "contextId": "c",
               "artifact": {"artifactId": "a", "parts": [{"text": "x"}]}})
    );

    // Enum zero values and empty ids are defaults too.
    assert_eq!(to_json(&Message::default()), json!({}));
    assert_eq!(to_json(&TaskStatus::default()), json!({}));
    assert_eq!(
        to_json(&SendMessageRequest::default()),
        json!({"message": {}})
    );
}

#[test]
fn sdk_default_noise_parses_like_absence() {
    // ListTasks answers from the Python SDK print every default.
    let noisy: Message = parse(json!({
        "messageId": "m", "role": "ROLE_USER", "contextId": "", "taskId": "",
        "extensions": [], "referenceTaskIds": [], "metadata": null,
        "parts": [{"text": "q", "filename": "", "mediaType": ""}],
    }));
    let plain: Message =
        parse(json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "q"}]}));
    assert_eq!(noisy, plain);
    assert_eq!(noisy.context_id, None);
    assert_eq!(noisy.task_id, None);
}

// --- Bytes and Struct values ---

#[test]
fn raw_bytes_round_trip_as_standard_base64() {
    let bytes = vec![0u8, 1, 2, 0xfb, 0xff];
    let part = Part::new(PartContent::Raw(bytes.clone()));
    assert_eq!(to_json(&part), json!({"raw": "AAEC+/8="}));
    for text in ["AAEC+/8=", "AAEC+/8", "AAEC-_8=", "AAEC-_8"] {
        let parsed: Part = parse(json!({"raw": text}));
        assert_eq!(parsed.content, PartContent::Raw(bytes.clone()), "{text}");
    }
    let err = reject::<Part>(json!({"raw": "not base64!"}));
    assert!(err.contains("part.raw is not base64"), "{err}");
}

#[test]
fn data_part_keeps_json_null() {
    let part: Part = parse(json!({"data": null}));
    assert_eq!(part.content, PartContent::Data(Value::Null));
    assert_eq!(to_json(&part), json!({"data": null}));

    let part: Part =
        parse(json!({"data": {"n": 3, "none": null}, "mediaType": "application/json"}));
    assert_eq!(
        part.content,
        PartContent::Data(json!({"n": 3, "none": null}))
    );
    assert_eq!(part.media_type, "application/json");
}

// --- Integers and timestamps ---

#[test]
fn history_length_may_be_a_string() {
    let get: GetTaskRequest = parse(json!({"id": "t", "historyLength": "3"}));
    assert_eq!(get.history_length, Some(3));
    let get: GetTaskRequest = parse(json!({"id": "t", "historyLength": 3}));
    assert_eq!(get.history_length, Some(3));
    let send: SendMessageRequest = parse(json!({
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
        "configuration": {"historyLength": "0"},
    }));
    assert_eq!(send.history_length(), Some(0));
    let list: ListTasksRequest = parse(json!({"pageSize": "10", "historyLength": "2"}));
    assert_eq!((list.page_size, list.history_length), (Some(10), Some(2)));

    let err = reject::<GetTaskRequest>(json!({"id": "t", "historyLength": "three"}));
    assert!(
        err.contains(r#"expected an integer, found "three""#),
        "{err}"
    );
    let err = reject::<GetTaskRequest>(json!({"id": "t", "historyLength": 4_294_967_296_i64}));
    assert!(err.contains("out of range for int32"), "{err}");
}

#[test]
fn timestamps_with_offsets_parse_to_utc() {
    let status: TaskStatus = parse(json!({
        "state": "TASK_STATE_WORKING", "timestamp": "2025-06-01T14:00:05.250+02:00"
    }));
    assert_eq!(status.timestamp, Some(ts("2025-06-01T12:00:05.250Z")));
    assert_eq!(
        to_json(&status)["timestamp"],
        json!("2025-06-01T12:00:05.250Z")
    );
    let west: Timestamp = ts("2025-05-31T19:30:00-04:30");
    assert_eq!(west, ts("2025-06-01T00:00:00Z"));
    let err = reject::<TaskStatus>(json!({"timestamp": "2025-06-01 noon"}));
    assert!(err.contains("invalid timestamp"), "{err}");
}

// --- State machine ---

#[test]
fn terminal_states_accept_nothing() {
    let terminal: Vec<TaskState> = TaskState::ALL
        .iter()
        .copied()
        .filter(|s| s.is_terminal())
        .collect();
    assert_eq!(
        terminal,
        [
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Canceled,
            TaskState::Rejected
        ]
    );
    for from in &terminal {
        for to in TaskState::ALL {
            assert!(!from.can_become(*to), "{from} -> {to} must be refused");
        }
    }
}

#[test]
fn live_state_transitions() {
    assert!(TaskState::InputRequired.can_become(TaskState::Working));
    assert!(TaskState::AuthRequired.can_become(TaskState::Working));
    assert!(TaskState::Submitted.can_become(TaskState::Working));
    assert!(TaskState::Working.can_become(TaskState::Working));
    assert!(TaskState::Working.can_become(TaskState::Completed));
    assert!(TaskState::Working.can_become(TaskState::InputRequired));
    assert!(TaskState::InputRequired.can_become(TaskState::Canceled));
    assert!(!TaskState::Working.can_become(TaskState::Submitted));
    assert!(!TaskState::InputRequired.can_become(TaskState::Submitted));
    assert!(!TaskState::Working.can_become(TaskState::Unspecified));
}

// --- Task::apply ---

fn working_task() -> Task {
    Task {
        id: TaskId::from("t"),
        context_id: ContextId::from("c"),
        status: TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: Some(ts("2025-06-01T12:00:00Z")),
        },
        history: vec![Message::user_text("go")],
        ..Task::default()
    }
}

fn status_update(task: &str, state: TaskState, message: Option<Message>) -> StreamResponse {
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: TaskId::from(task),
        context_id: ContextId::from("c"),
        status: TaskStatus {
            state,
            message,
            timestamp: Some(ts("2025-06-01T12:00:01Z")),
        },
        metadata: None,
    })
}

fn artifact_update(task: &str, id: &str, text: &str, append: bool) -> StreamResponse {
    StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
        task_id: TaskId::from(task),
        context_id: ContextId::from("c"),
        artifact: Artifact {
            artifact_id: ArtifactId::from(id),
            name: "out".to_owned(),
            parts: vec![Part::text(text)],
            ..Artifact::default()
        },
        append,
        last_chunk: false,
        metadata: None,
    })
}

fn artifact_texts(task: &Task) -> Vec<(String, Vec<String>)> {
    task.artifacts
        .iter()
        .map(|a| {
            (
                a.artifact_id.to_string(),
                a.parts
                    .iter()
                    .filter_map(|p| p.as_text().map(str::to_owned))
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn apply_folds_status_updates() {
    let mut task = working_task();
    task.apply(&status_update("t", TaskState::Working, None));
    assert_eq!(task.status.state, TaskState::Working);
    assert_eq!(task.status.timestamp, Some(ts("2025-06-01T12:00:01Z")));
    assert_eq!(task.history.len(), 1);

    let question = Message::agent_text("which file?");
    let ask = status_update("t", TaskState::InputRequired, Some(question.clone()));
    task.apply(&ask);
    task.apply(&ask);
    assert_eq!(task.status.state, TaskState::InputRequired);
    assert_eq!(task.status.message.as_ref(), Some(&question));
    assert_eq!(task.history.len(), 2, "the same message is kept once");
    assert_eq!(task.history[1].text(), "which file?");

    task.apply(&status_update("other", TaskState::Failed, None));
    assert_eq!(task.status.state, TaskState::InputRequired);
}

#[test]
fn apply_folds_artifact_updates() {
    let mut task = working_task();
    task.apply(&artifact_update("t", "a1", "chunk 1", false));
    task.apply(&artifact_update("t", "a1", "chunk 2", true));
    task.apply(&artifact_update("t", "a2", "other", false));
    task.apply(&artifact_update("other", "a1", "ignored", true));
    assert_eq!(
        artifact_texts(&task),
        [
            (
                "a1".to_owned(),
                vec!["chunk 1".to_owned(), "chunk 2".to_owned()]
            ),
            ("a2".to_owned(), vec!["other".to_owned()]),
        ]
    );

    // Without append, an update for a known id replaces that artifact.
    task.apply(&artifact_update("t", "a1", "fresh", false));
    assert_eq!(
        artifact_texts(&task)[0],
        ("a1".to_owned(), vec!["fresh".to_owned()])
    );

    // A task snapshot replaces everything.
    let snapshot = working_task();
    task.apply(&StreamResponse::Task(snapshot.clone()));
    assert_eq!(task, snapshot);
}

#[test]
fn a_message_holds_at_most_max_parts() {
    use mew_cards::MAX_PARTS;
    let parts = |n: usize| Value::Array(vec![json!({"text": ""}); n]);
    let message = |n: usize| json!({"messageId": "m", "role": "ROLE_USER", "parts": parts(n)});
    let full: Message = parse(message(MAX_PARTS));
    assert_eq!(full.parts.len(), MAX_PARTS);
    let error = reject::<Message>(message(MAX_PARTS + 1));
    assert!(error.contains("more than 1000 parts"), "{error}");
    // `null` is no parts, as before.
    let none: Message = parse(json!({"messageId": "m", "role": "ROLE_USER", "parts": null}));
    assert!(none.parts.is_empty());
}
