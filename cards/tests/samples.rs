//! Round-trip tests against the samples that the Python a2a-sdk 1.3.0 wrote (`tests/samples/`).
//!
//! Every file in the directory must be claimed by [`classify`]: a new sample can't be skipped by
//! accident. Object samples are parsed into their Rust type, serialized back and compared with
//! the sample after ProtoJSON normalization (see [`normalize`]); error envelopes are checked for
//! an `ErrorInfo` reason that [`ErrorKind::from_reason`] knows.

use std::fmt::Debug;
use std::fs;
use std::path::{Path, PathBuf};

use mew_cards::{
    AgentCard, CancelTaskRequest, ErrorKind, GetTaskRequest, ListTasksRequest, ListTasksResponse,
    Message, SendMessageRequest, SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task,
    TaskPushNotificationConfig,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Checks one object sample; returns a description of the mismatch.
type Check = fn(&str) -> Result<(), String>;

/// What the test does with one sample file.
enum Class {
    /// Parse into a Rust type and round-trip; the name is the type's, for messages.
    RoundTrip(&'static str, Check),
    /// A JSON-RPC or REST error envelope.
    ErrorEnvelope,
    /// Not a wire object; the reason says what it is.
    Skip(&'static str),
}

/// One round-trip rule: which files it claims, the Rust type's name, and the check.
struct Rule {
    matches: fn(&str) -> bool,
    type_name: &'static str,
    check: Check,
}

/// Every round-trip rule, by file name.
const RULES: &[Rule] = &[
    Rule {
        matches: |n| n.starts_with("agent_card") && n.ends_with(".json"),
        type_name: "AgentCard",
        check: round_trip::<AgentCard>,
    },
    Rule {
        matches: |n| n.starts_with("task_"),
        type_name: "Task",
        check: round_trip::<Task>,
    },
    Rule {
        matches: |n| n.starts_with("message_"),
        type_name: "Message",
        check: round_trip::<Message>,
    },
    Rule {
        matches: |n| n.starts_with("stream_"),
        type_name: "StreamResponse",
        check: round_trip::<StreamResponse>,
    },
    Rule {
        matches: |n| n == "send_message_request.json",
        type_name: "SendMessageRequest",
        check: round_trip::<SendMessageRequest>,
    },
    Rule {
        matches: |n| n.starts_with("send_message_response_"),
        type_name: "SendMessageResponse",
        check: round_trip::<SendMessageResponse>,
    },
    Rule {
        matches: |n| n == "list_tasks_request.json",
        type_name: "ListTasksRequest",
        check: round_trip::<ListTasksRequest>,
    },
    Rule {
        matches: |n| n == "list_tasks_response.json",
        type_name: "ListTasksResponse",
        check: round_trip::<ListTasksResponse>,
    },
    Rule {
        matches: |n| n == "get_task_request.json",
        type_name: "GetTaskRequest",
        check: round_trip::<GetTaskRequest>,
    },
    Rule {
        matches: |n| n == "cancel_task_request.json",
        type_name: "CancelTaskRequest",
        check: round_trip::<CancelTaskRequest>,
    },
    Rule {
        matches: |n| n == "subscribe_request.json",
        type_name: "SubscribeToTaskRequest",
        check: round_trip::<SubscribeToTaskRequest>,
    },
    Rule {
        matches: |n| n == "push_config.json",
        type_name: "TaskPushNotificationConfig",
        check: round_trip::<TaskPushNotificationConfig>,
    },
];

fn classify(name: &str) -> Option<Class> {
    if name.ends_with(".status") {
        return Some(Class::Skip("HTTP status of the REST error sample"));
    }
    if name.ends_with(".public_jwk.json") {
        return Some(Class::Skip("public key of the signed card sample"));
    }
    if name.contains("_error_") && name.ends_with(".json") {
        return Some(Class::ErrorEnvelope);
    }
    RULES
        .iter()
        .find(|rule| (rule.matches)(name))
        .map(|rule| Class::RoundTrip(rule.type_name, rule.check))
}

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/samples")
}

/// Every sample file name, sorted.
fn sample_names() -> Vec<String> {
    let dir = samples_dir();
    let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    let mut names: Vec<String> = entries
        .map(|entry| {
            let entry = entry.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
            let name = entry.file_name();
            name.into_string()
                .unwrap_or_else(|name| panic!("sample file name is not UTF-8: {name:?}"))
        })
        .collect();
    names.sort();
    names
}

fn read_sample(name: &str) -> String {
    let path = samples_dir().join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// ProtoJSON normalization: drops object keys whose value is a default (`""`, `[]`, `false`, `0`,
/// `null`), recursively, and turns every number into an f64 so that `3` equals `3.0`. An empty
/// object stays: an empty message or Struct is a present value.
fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalize(v)))
                .filter(|(_, v)| !is_proto_default(v))
                .collect::<Map<_, _>>(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        Value::Number(n) => n.as_f64().map_or_else(|| value.clone(), Value::from),
        other => other.clone(),
    }
}

fn is_proto_default(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(_) => false,
    }
}

/// Parses `text` as `T`, serializes it back, and compares both ways.
fn round_trip<T>(text: &str) -> Result<(), String>
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let sample: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let parsed: T = serde_json::from_str(text).map_err(|e| format!("does not parse: {e}"))?;
    let out = serde_json::to_value(&parsed).map_err(|e| format!("does not serialize: {e}"))?;
    if normalize(&out) != normalize(&sample) {
        return Err(format!(
            "serialized form differs from the sample\n--- sample (normalized)\n{}\n--- ours \
             (normalized)\n{}",
            pretty(&normalize(&sample)),
            pretty(&normalize(&out)),
        ));
    }
    let again: T = serde_json::from_value(out.clone())
        .map_err(|e| format!("our own output does not parse: {e}\n{}", pretty(&out)))?;
    if again != parsed {
        return Err(format!(
            "parse(serialize(x)) != x\n--- x\n{parsed:#?}\n--- again\n{again:#?}"
        ));
    }
    // ProtoJSON parsers take the proto field names too: the same sample spelled so is the
    // same value.
    let spelled = proto_names(&sample);
    let by_proto_names: T = serde_json::from_value(spelled.clone()).map_err(|e| {
        format!(
            "the sample with proto field names does not parse: {e}\n{}",
            pretty(&spelled)
        )
    })?;
    if by_proto_names != parsed {
        return Err(format!(
            "the sample with proto field names parses differently\n--- camelCase\n{parsed:#?}\n\
             --- proto names\n{by_proto_names:#?}"
        ));
    }
    Ok(())
}

/// The proto field name of a JSON name: `historyLength` -> `history_length`.
fn proto_name(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 4);
    for c in json.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `value` with every field named by its proto field name. Free-form values (`metadata`,
/// `data`, extension `params`, a signature's `header`) stay as they are, and so do the keys
/// of maps keyed by the user (`securitySchemes`, a requirement's `schemes`, OAuth `scopes`).
fn proto_names(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, v)| {
                    let v = match key.as_str() {
                        "metadata" | "data" | "params" | "header" => v.clone(),
                        "securitySchemes" | "schemes" | "scopes" => match v {
                            Value::Object(entries) => Value::Object(
                                entries
                                    .iter()
                                    .map(|(k, v)| (k.clone(), proto_names(v)))
                                    .collect(),
                            ),
                            other => other.clone(),
                        },
                        _ => proto_names(v),
                    };
                    (proto_name(key), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(proto_names).collect()),
        other => other.clone(),
    }
}

#[test]
fn proto_names_are_converted_where_they_differ() {
    let value = serde_json::json!({
        "contextId": "c",
        "metadata": {"keepMe": 1},
        "securitySchemes": {"myKey": {"apiKeySecurityScheme": {"name": "X"}}},
    });
    assert_eq!(
        proto_names(&value),
        serde_json::json!({
            "context_id": "c",
            "metadata": {"keepMe": 1},
            "security_schemes": {"myKey": {"api_key_security_scheme": {"name": "X"}}},
        })
    );
}

#[test]
fn both_names_of_one_field_are_an_error() {
    for (text, field) in [
        (
            r#"{"id": "t", "historyLength": 1, "history_length": 2}"#,
            "historyLength",
        ),
        (
            r#"{"statusUpdate": {"taskId": "t"}, "status_update": {"taskId": "t"}}"#,
            "statusUpdate",
        ),
    ] {
        let error = if field == "statusUpdate" {
            serde_json::from_str::<StreamResponse>(text).map(drop)
        } else {
            serde_json::from_str::<GetTaskRequest>(text).map(drop)
        }
        .expect_err(text)
        .to_string();
        assert!(error.contains("duplicate field"), "{text}: {error}");
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("<{e}>"))
}

#[test]
fn every_sample_round_trips() {
    let mut failures = Vec::new();
    let mut unclaimed = Vec::new();
    let mut rule_hits = vec![0usize; RULES.len()];
    for name in sample_names() {
        match classify(&name) {
            None => unclaimed.push(name),
            Some(Class::RoundTrip(type_name, check)) => {
                if let Some(i) = RULES.iter().position(|rule| (rule.matches)(&name)) {
                    rule_hits[i] += 1;
                }
                if let Err(why) = check(&read_sample(&name)) {
                    failures.push(format!("{name} as {type_name}: {why}"));
                }
            }
            Some(Class::ErrorEnvelope | Class::Skip(_)) => {}
        }
    }
    assert!(
        unclaimed.is_empty(),
        "sample files not covered by the name mapping in tests/samples.rs (add a rule): {unclaimed:?}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let unused: Vec<&str> = RULES
        .iter()
        .zip(&rule_hits)
        .filter(|(_, hits)| **hits == 0)
        .map(|(rule, _)| rule.type_name)
        .collect();
    assert!(
        unused.is_empty(),
        "no sample file for these types (was a sample removed?): {unused:?}"
    );
}

/// The `ErrorInfo` details of an envelope: `error.data` in JSON-RPC, `error.details` in REST.
fn error_infos(envelope: &Value) -> Vec<&Value> {
    let error = &envelope["error"];
    ["data", "details"]
        .iter()
        .filter_map(|key| error[*key].as_array())
        .flatten()
        .filter(|detail| detail["@type"] == "type.googleapis.com/google.rpc.ErrorInfo")
        .collect()
}

#[test]
fn error_envelopes_carry_known_reasons() {
    let names: Vec<String> = sample_names()
        .into_iter()
        .filter(|name| matches!(classify(name), Some(Class::ErrorEnvelope)))
        .collect();
    assert_eq!(
        names,
        [
            "jsonrpc_error_task_not_found.json",
            "rest_error_task_not_found.json"
        ]
    );
    for name in &names {
        let envelope: Value = serde_json::from_str(&read_sample(name)).expect("JSON");
        let infos = error_infos(&envelope);
        assert_eq!(infos.len(), 1, "{name}: one ErrorInfo expected");
        let info = infos[0];
        assert_eq!(info["domain"], "a2a-protocol.org", "{name}");
        let reason = info["reason"].as_str().expect("reason is a string");
        assert_eq!(
            ErrorKind::from_reason(reason),
            Some(ErrorKind::TaskNotFound),
            "{name}: reason {reason:?}"
        );
    }
}

#[test]
fn only_keys_and_statuses_are_skipped() {
    let skipped: Vec<(String, &str)> = sample_names()
        .into_iter()
        .filter_map(|name| match classify(&name) {
            Some(Class::Skip(reason)) => Some((name, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(
        skipped,
        [
            (
                "agent_card_full.public_jwk.json".to_owned(),
                "public key of the signed card sample"
            ),
            (
                "rest_error_task_not_found.status".to_owned(),
                "HTTP status of the REST error sample"
            ),
        ]
    );
}

#[test]
fn rest_error_status_matches_its_envelope() {
    let envelope: Value =
        serde_json::from_str(&read_sample("rest_error_task_not_found.json")).expect("JSON");
    let status: u64 = read_sample("rest_error_task_not_found.status")
        .trim()
        .parse()
        .expect("a status code");
    assert_eq!(status, 404);
    assert_eq!(envelope["error"]["code"], status);
    assert_eq!(envelope["error"]["status"], "NOT_FOUND");
}

#[test]
fn normalization_drops_defaults_but_keeps_empty_objects() {
    let sample = serde_json::json!({
        "a": "", "b": [], "c": false, "d": 0, "e": null, "f": {}, "g": 3,
        "h": [{"x": "", "y": 1.5}], "i": {"j": 0.0}
    });
    let expected = serde_json::json!({
        "f": {}, "g": 3.0, "h": [{"y": 1.5}], "i": {}
    });
    assert_eq!(normalize(&sample), expected);
}
