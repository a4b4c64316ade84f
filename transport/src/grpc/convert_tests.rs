//! Round trips of the object model through the generated messages and their protobuf bytes:
//! every sample the Python SDK wrote (`cards/tests/samples/`), every kind of part, stream item
//! and enum value, and the wire messages that are no value of the model.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Debug;
use std::path::{Path, PathBuf};

use mew_cards::{
    AgentCard, Artifact, CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse,
    MAX_PARTS, Message, Part, PartContent, Role, SendMessageRequest, SendMessageResponse,
    StreamResponse, SubscribeToTaskRequest, Task, TaskArtifactUpdateEvent,
    TaskPushNotificationConfig, TaskState, TaskStatus, TaskStatusUpdateEvent, Timestamp,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::super::proto;
use super::Invalid;

/// `value` to its proto message, to bytes, back to a message and back to the model.
fn through_the_wire<T, P>(value: &T) -> T
where
    T: Clone + Into<P> + TryFrom<P>,
    <T as TryFrom<P>>::Error: Debug,
    P: prost::Message + Default,
{
    let bytes = prost::Message::encode_to_vec(&value.clone().into());
    let decoded = P::decode(bytes.as_slice()).expect("the encoded message decodes");
    T::try_from(decoded).expect("the decoded message is a value of the model")
}

fn round_trip<T, P>(value: &T)
where
    T: Clone + PartialEq + Debug + Into<P> + TryFrom<P>,
    <T as TryFrom<P>>::Error: Debug,
    P: prost::Message + Default,
{
    assert_eq!(&through_the_wire::<T, P>(value), value);
}

/// JSON with every number as a double: a `google.protobuf.Value` number is one, so `1` and
/// `1.0` are the same value on the wire (the Python SDK writes `1.0`, the conversion reads an
/// integral double back as an integer).
fn as_doubles(value: Value) -> Value {
    match value {
        Value::Number(n) => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        Value::Array(items) => Value::Array(items.into_iter().map(as_doubles).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, as_doubles(v))).collect())
        }
        other => other,
    }
}

/// Parses a sample as `T` and round-trips it; the message names the sample.
fn sample<T, P>(text: &str) -> Result<(), String>
where
    T: Clone + PartialEq + Debug + DeserializeOwned + Serialize + Into<P> + TryFrom<P>,
    <T as TryFrom<P>>::Error: Debug,
    P: prost::Message + Default,
{
    let value: T = serde_json::from_str(text).map_err(|e| format!("does not parse: {e}"))?;
    let back = through_the_wire::<T, P>(&value);
    let json = |v: &T| as_doubles(serde_json::to_value(v).expect("the model serializes"));
    if json(&back) == json(&value) {
        Ok(())
    } else {
        Err(format!(
            "changed on the wire:\n{value:#?}\nbecame\n{back:#?}"
        ))
    }
}

type Check = fn(&str) -> Result<(), String>;

/// The type of each object sample, by file name; the rest are named as skipped.
fn check_of(name: &str) -> Option<Check> {
    let check: Check = match name {
        n if n.ends_with(".public_jwk.json") => return None,
        n if n.contains("_error_") => return None,
        n if n.starts_with("agent_card") => sample::<AgentCard, proto::AgentCard>,
        n if n.starts_with("task_") => sample::<Task, proto::Task>,
        n if n.starts_with("message_") => sample::<Message, proto::Message>,
        n if n.starts_with("stream_") => sample::<StreamResponse, proto::StreamResponse>,
        "send_message_request.json" => sample::<SendMessageRequest, proto::SendMessageRequest>,
        n if n.starts_with("send_message_response_") => {
            sample::<SendMessageResponse, proto::SendMessageResponse>
        }
        "list_tasks_request.json" => sample::<ListTasksRequest, proto::ListTasksRequest>,
        "list_tasks_response.json" => sample::<ListTasksResponse, proto::ListTasksResponse>,
        "get_task_request.json" => sample::<GetTaskRequest, proto::GetTaskRequest>,
        "cancel_task_request.json" => sample::<CancelTaskRequest, proto::CancelTaskRequest>,
        "subscribe_request.json" => sample::<SubscribeToTaskRequest, proto::SubscribeToTaskRequest>,
        "push_config.json" => {
            sample::<TaskPushNotificationConfig, proto::TaskPushNotificationConfig>
        }
        _ => panic!("no rule for the sample {name}: say which type it is"),
    };
    Some(check)
}

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cards/tests/samples")
}

#[test]
fn every_sample_round_trips_through_protobuf() {
    let mut names: Vec<String> = std::fs::read_dir(samples_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    let mut checked = 0;
    let mut failures = Vec::new();
    for name in &names {
        let Some(check) = check_of(name) else {
            continue;
        };
        let text = std::fs::read_to_string(samples_dir().join(name)).unwrap();
        checked += 1;
        if let Err(why) = check(&text) {
            failures.push(format!("{name}: {why}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Every object sample: all but the key and the two error envelopes.
    assert_eq!(checked, names.len() - 3, "{names:?}");
}

/// A part of each kind, with the members every part may carry.
fn every_part() -> Vec<Part> {
    let mut described = Part::new(PartContent::Url("https://example.com/a.png".into()));
    described.filename = "a.png".into();
    described.media_type = "image/png".into();
    described.metadata = Some(json!({"source": "camera"}).as_object().unwrap().clone());
    vec![
        Part::text("hello"),
        Part::text(""),
        Part::new(PartContent::Raw(vec![0, 1, 2, 255])),
        Part::new(PartContent::Raw(Vec::new())),
        described,
        Part::data(json!({
            "int": 42,
            "negative": -7,
            "float": 1.5,
            "big": 9_007_199_254_740_992_i64,
            "bool": true,
            "null": null,
            "text": "x",
            "list": [1, "two", [3.25], {"four": null}],
            "nested": {"deeper": {"deepest": []}},
        })),
        Part::data(json!(null)),
        Part::data(json!([1, 2])),
        Part::data(json!("a string")),
        Part::data(json!(0.1)),
    ]
}

fn message(role: Role) -> Message {
    let mut message = Message::new(role, every_part());
    message.context_id = Some("ctx-1".into());
    message.task_id = Some("task-1".into());
    message.extensions = vec!["urn:example:ext".into()];
    message.reference_task_ids = vec!["task-0".into()];
    message.metadata = Some(json!({"k": {"n": 1}}).as_object().unwrap().clone());
    message
}

#[test]
fn every_part_kind_and_role_round_trips() {
    for role in Role::ALL {
        round_trip::<Message, proto::Message>(&message(*role));
    }
    // Neither context nor task: proto3's empty strings read back as absent.
    round_trip::<Message, proto::Message>(&Message::user_text("bare"));
    let artifact = Artifact::new("result", every_part());
    round_trip::<Artifact, proto::Artifact>(&artifact);
}

fn task(state: TaskState) -> Task {
    Task {
        id: "task-1".into(),
        context_id: "ctx-1".into(),
        status: TaskStatus {
            state,
            message: Some(message(Role::Agent)),
            timestamp: Some(Timestamp::from_unix(1_780_000_000, 123_456_789)),
        },
        artifacts: vec![Artifact::new("a", every_part())],
        history: vec![message(Role::User), message(Role::Agent)],
        metadata: Some(
            json!({"mew": {"role": "coder"}})
                .as_object()
                .unwrap()
                .clone(),
        ),
    }
}

#[test]
fn every_task_state_and_stream_item_round_trips() {
    for state in TaskState::ALL {
        round_trip::<Task, proto::Task>(&task(*state));
    }
    let items = [
        StreamResponse::Task(task(TaskState::Working)),
        StreamResponse::Message(message(Role::Agent)),
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "task-1".into(),
            context_id: "ctx-1".into(),
            status: TaskStatus::new(TaskState::Completed),
            metadata: None,
        }),
        StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: "task-1".into(),
            context_id: "ctx-1".into(),
            artifact: Artifact::new("chunk", vec![Part::text("part")]),
            append: true,
            last_chunk: true,
            metadata: Some(json!({"i": 3}).as_object().unwrap().clone()),
        }),
    ];
    for item in &items {
        round_trip::<StreamResponse, proto::StreamResponse>(item);
    }
    round_trip::<SendMessageResponse, proto::SendMessageResponse>(&SendMessageResponse::Task(
        task(TaskState::Completed),
    ));
    round_trip::<SendMessageResponse, proto::SendMessageResponse>(&SendMessageResponse::Message(
        message(Role::Agent),
    ));
}

fn refused<T, P>(wire: P) -> Invalid
where
    T: TryFrom<P, Error = Invalid> + Debug,
{
    T::try_from(wire).expect_err("the wire message is no value of the model")
}

#[test]
fn wire_messages_that_are_no_value_of_the_model_are_refused() {
    let no_content = proto::Part::default();
    assert!(refused::<Part, _>(no_content).0.contains("one of text"));

    let unknown_state = proto::TaskStatus {
        state: 99,
        ..Default::default()
    };
    assert!(refused::<TaskStatus, _>(unknown_state).0.contains("99"));

    let unknown_role = proto::Message {
        role: -1,
        ..Default::default()
    };
    assert!(refused::<Message, _>(unknown_role).0.contains("role"));

    let nan = proto::Part {
        content: Some(proto::part::Content::Data(prost_types::Value {
            kind: Some(prost_types::value::Kind::NumberValue(f64::NAN)),
        })),
        ..Default::default()
    };
    assert!(refused::<Part, _>(nan).0.contains("JSON"));

    let bad_nanos = proto::TaskStatus {
        state: 1,
        timestamp: Some(prost_types::Timestamp {
            seconds: 0,
            nanos: -1,
        }),
        ..Default::default()
    };
    assert!(refused::<TaskStatus, _>(bad_nanos).0.contains("nanos"));

    let empty_stream = proto::StreamResponse::default();
    assert!(
        refused::<StreamResponse, _>(empty_stream)
            .0
            .contains("one of")
    );

    let no_message = proto::SendMessageRequest::default();
    assert!(
        refused::<SendMessageRequest, _>(no_message)
            .0
            .contains("message")
    );

    let too_many = proto::Message {
        role: 1,
        parts: vec![proto::Part::from(Part::text("x")); MAX_PARTS + 1],
        ..Default::default()
    };
    assert!(refused::<Message, _>(too_many).0.contains("parts"));
}
