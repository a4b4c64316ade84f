//! Bad input over HTTP gets the spec's error, on both bindings, and never a panic.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use mew_tests::EchoAgent;
use mew_transport::{ServerOptions, router_with};
use serde_json::{Value, json};
use tower::ServiceExt;

fn app() -> Router {
    let options = ServerOptions {
        max_body_bytes: 64 * 1024,
        ..ServerOptions::default()
    };
    router_with(Arc::new(EchoAgent::new("http://127.0.0.1:1")), options)
}

struct Answer {
    status: StatusCode,
    headers: header::HeaderMap,
    body: Value,
}

async fn call(request: Request<Body>) -> Answer {
    call_on(app(), request).await
}

/// [`call`] on `app`, whose agent keeps its tasks across calls.
async fn call_on(app: Router, request: Request<Body>) -> Answer {
    let response = app.oneshot(request).await.expect("the router never fails");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    Answer {
        status,
        headers,
        body,
    }
}

fn rpc(body: impl Into<Body>) -> Request<Body> {
    Request::post("/")
        .header(header::CONTENT_TYPE, "application/json")
        .header("A2A-Version", "1.0")
        .body(body.into())
        .unwrap()
}

fn rpc_code(answer: &Answer) -> i64 {
    answer.body["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not a JSON-RPC error: {}", answer.body))
}

fn send_params() -> Value {
    json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "echo hi"}]}})
}

#[tokio::test]
async fn jsonrpc_malformed_json_is_a_parse_error_with_null_id() {
    let answer = call(rpc("{\"jsonrpc\": \"2.0\", ")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(rpc_code(&answer), -32700);
    assert_eq!(answer.body["id"], Value::Null);
    assert_eq!(answer.body["error"]["data"][0]["reason"], "PARSE_ERROR");
}

#[tokio::test]
async fn jsonrpc_wrong_envelopes_are_invalid_requests() {
    for body in [
        json!([{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}]),
        json!("a string"),
        json!({"jsonrpc": "1.0", "id": 1, "method": "GetTask"}),
        json!({"id": 1, "method": "GetTask"}),
        json!({"jsonrpc": "2.0", "id": 1}),
        json!({"jsonrpc": "2.0", "id": {"nested": true}, "method": "GetTask"}),
        json!({"jsonrpc": "2.0", "method": "GetTask"}),
    ] {
        let answer = call(rpc(body.to_string())).await;
        assert_eq!(rpc_code(&answer), -32600, "{body}: {}", answer.body);
    }
    // An array is a batch, which is not supported, whatever it holds: even the envelope's
    // fields in order, which a lenient reader would take for an envelope.
    for body in [
        json!([{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}}]),
        json!(["2.0", 1, "GetTask", {"id": "t"}]),
    ] {
        let answer = call(rpc(format!("  {body}"))).await;
        assert_eq!(rpc_code(&answer), -32600, "{body}: {}", answer.body);
        let message = answer.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("batches"), "{message}");
    }
    let answer = call(rpc(
        json!({"jsonrpc": "1.0", "id": "abc", "method": "GetTask"}).to_string(),
    ))
    .await;
    assert_eq!(
        answer.body["id"], "abc",
        "the id is echoed when it can be read"
    );
}

#[tokio::test]
async fn jsonrpc_unknown_method_and_wrong_params() {
    let answer = call(rpc(
        json!({"jsonrpc": "2.0", "id": 7, "method": "message/send", "params": {}}).to_string(),
    ))
    .await;
    assert_eq!(rpc_code(&answer), -32601);
    assert_eq!(answer.body["id"], 7);
    let bad =
        json!({"jsonrpc": "2.0", "id": 8, "method": "SendMessage", "params": {"message": "hello"}});
    let answer = call(rpc(bad.to_string())).await;
    assert_eq!(rpc_code(&answer), -32602, "{}", answer.body);
    let bad_state = json!({"jsonrpc": "2.0", "id": 9, "method": "ListTasks", "params": {"status": "TASK_STATE_SLEEPING"}});
    assert_eq!(rpc_code(&call(rpc(bad_state.to_string())).await), -32602);
}

#[tokio::test]
async fn jsonrpc_version_header_is_enforced() {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send_params()})
        .to_string();
    let missing = Request::post("/")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.clone()))
        .unwrap();
    let answer = call(missing).await;
    assert_eq!(rpc_code(&answer), -32009);
    assert_eq!(
        answer.body["error"]["data"][0]["reason"],
        "VERSION_NOT_SUPPORTED"
    );
    for version in ["0.3", "2.0", "banana"] {
        let request = Request::post("/")
            .header(header::CONTENT_TYPE, "application/json")
            .header("A2A-Version", version)
            .body(Body::from(body.clone()))
            .unwrap();
        assert_eq!(rpc_code(&call(request).await), -32009, "version {version}");
    }
    let by_query = Request::post("/?A2A-Version=1.0")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.clone()))
        .unwrap();
    let answer = call(by_query).await;
    assert_eq!(
        answer.body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{}",
        answer.body
    );
    let patch = Request::post("/")
        .header(header::CONTENT_TYPE, "application/json")
        .header("A2A-Version", "1.0.1")
        .body(Body::from(body))
        .unwrap();
    assert!(
        call(patch).await.body.get("result").is_some(),
        "a patch version is accepted"
    );
}

#[tokio::test]
async fn jsonrpc_wrong_content_type_and_oversized_body() {
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}).to_string();
    let wrong = Request::post("/")
        .header(header::CONTENT_TYPE, "text/plain")
        .header("A2A-Version", "1.0")
        .body(Body::from(body))
        .unwrap();
    let answer = call(wrong).await;
    assert_eq!(answer.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(rpc_code(&answer), -32600);
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{{"id":"{}"}}}}"#,
        "x".repeat(100 * 1024)
    );
    let answer = call(rpc(huge)).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(rpc_code(&answer), -32600);
}

#[tokio::test]
async fn jsonrpc_a2a_errors_carry_error_info() {
    let body =
        json!({"jsonrpc": "2.0", "id": "q", "method": "GetTask", "params": {"id": "no-such-task"}})
            .to_string();
    let answer = call(rpc(body)).await;
    assert_eq!(rpc_code(&answer), -32001);
    let info = &answer.body["error"]["data"][0];
    assert_eq!(info["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
    assert_eq!(info["reason"], "TASK_NOT_FOUND");
    assert_eq!(info["domain"], "a2a-protocol.org");
}

fn rest(method: &str, path: &str, body: Option<&str>) -> Request<Body> {
    let builder = Request::builder()
        .method(method)
        .uri(path)
        .header("A2A-Version", "1.0");
    match body {
        Some(body) => builder
            .header(header::CONTENT_TYPE, "application/a2a+json")
            .body(Body::from(body.to_owned())),
        None => builder.body(Body::empty()),
    }
    .unwrap()
}

fn rest_reason(answer: &Answer) -> &str {
    answer.body["error"]["details"][0]["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("not an HTTP+JSON error: {}", answer.body))
}

/// ProtoJSON parsers accept a field's proto name (`history_length`) as well as its JSON name
/// (`historyLength`): in JSON-RPC params, in HTTP+JSON bodies and in query parameters. Both
/// names of one field in one request is an error.
#[tokio::test]
async fn proto_field_names_are_accepted_on_both_bindings() {
    let app = app();
    let sent = call_on(
        app.clone(),
        rpc(json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"message_id": "m1", "role": "ROLE_USER", "parts": [{"text": "echo hi"}]},
            "configuration": {"history_length": 0}
        }})
        .to_string()),
    )
    .await;
    let task = &sent.body["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "{}",
        sent.body
    );
    assert!(
        task.get("history").is_none(),
        "history_length 0 was ignored: {task}"
    );
    let id = task["id"].as_str().expect("a task id").to_owned();

    let got = call_on(
        app.clone(),
        rpc(json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                   "params": {"id": id, "history_length": 0}})
        .to_string()),
    )
    .await;
    assert_eq!(got.body["result"]["id"], id.as_str(), "{}", got.body);
    assert!(got.body["result"].get("history").is_none(), "{}", got.body);

    let got = call_on(
        app.clone(),
        rest("GET", &format!("/tasks/{id}?history_length=0"), None),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    assert!(got.body.get("history").is_none(), "{}", got.body);

    let pushed = call_on(
        app.clone(),
        rpc(
            json!({"jsonrpc": "2.0", "id": 3, "method": "CreateTaskPushNotificationConfig",
                   "params": {"task_id": id, "id": "p1", "url": "https://hooks.example/p"}})
            .to_string(),
        ),
    )
    .await;
    assert_eq!(
        pushed.body["result"]["taskId"],
        id.as_str(),
        "{}",
        pushed.body
    );

    let twice = call_on(
        app.clone(),
        rpc(json!({"jsonrpc": "2.0", "id": 4, "method": "GetTask",
                   "params": {"id": id, "historyLength": 0, "history_length": 1}})
        .to_string()),
    )
    .await;
    assert_eq!(rpc_code(&twice), -32602, "{}", twice.body);
    let twice = call_on(
        app,
        rest(
            "GET",
            &format!("/tasks/{id}?historyLength=0&history_length=1"),
            None,
        ),
    )
    .await;
    assert_eq!(twice.status, StatusCode::BAD_REQUEST, "{}", twice.body);
    assert_eq!(rest_reason(&twice), "INVALID_PARAMS");
}

/// A body that sends `first` and then never ends, as a client that stalls does.
fn stalled_body(first: &'static [u8]) -> Body {
    use futures_util::StreamExt as _;
    let chunk = futures_util::stream::once(async move {
        Ok::<_, std::io::Error>(bytes::Bytes::from_static(first))
    });
    Body::from_stream(chunk.chain(futures_util::stream::pending()))
}

/// A body that does not arrive within the body timeout is answered 408 with an A2A error, on
/// both bindings, and gives its room in the router's budget back.
#[tokio::test]
async fn a_stalled_body_times_out() {
    let options = ServerOptions {
        max_inflight_body_bytes: 4096,
        body_timeout: std::time::Duration::from_millis(200),
        ..ServerOptions::default()
    };
    let app = router_with(Arc::new(EchoAgent::new("http://127.0.0.1:1")), options);
    for path in ["/", "/message:send"] {
        let stalled = Request::post(path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, "4096")
            .header("A2A-Version", "1.0")
            .body(stalled_body(b"{\"jsonrpc\""))
            .unwrap();
        let answer = call_on(app.clone(), stalled).await;
        assert_eq!(
            answer.status,
            StatusCode::REQUEST_TIMEOUT,
            "{}",
            answer.body
        );
        let message = answer.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("did not arrive within"), "{}", answer.body);
    }
    // The whole budget is back: a request as large as it goes through.
    let answer = call_on(
        app,
        rpc(
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send_params()})
                .to_string(),
        ),
    )
    .await;
    assert_eq!(
        answer.body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{}",
        answer.body
    );
}

#[tokio::test]
async fn rest_errors_use_http_statuses_and_error_info() {
    let answer = call(rest("POST", "/message:send", Some("{not json"))).await;
    assert_eq!(
        (answer.status, rest_reason(&answer)),
        (StatusCode::BAD_REQUEST, "PARSE_ERROR")
    );
    assert_eq!(answer.body["error"]["status"], "INVALID_ARGUMENT");

    let answer = call(rest("POST", "/message:send", Some(r#"{"message": 5}"#))).await;
    assert_eq!(
        (answer.status, rest_reason(&answer)),
        (StatusCode::BAD_REQUEST, "INVALID_PARAMS")
    );
    // A ProtoJSON message is an object: an array is not read as its fields in order.
    let message = r#"{"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "hi"}]}"#;
    for body in [
        "[]".to_owned(),
        format!("[{message}]"),
        r#"{"message": []}"#.to_owned(),
        format!(r#"{{"message": {message}, "configuration": [true]}}"#),
    ] {
        let answer = call(rest("POST", "/message:send", Some(&body))).await;
        assert_eq!(
            (answer.status, rest_reason(&answer)),
            (StatusCode::BAD_REQUEST, "INVALID_PARAMS"),
            "{body}: {}",
            answer.body
        );
        let text = answer.body["error"]["message"].as_str().unwrap();
        assert!(text.contains("invalid type: sequence"), "{body}: {text}");
    }

    let answer = call(rest("GET", "/tasks/no-such-task", None)).await;
    assert_eq!(
        (answer.status, rest_reason(&answer)),
        (StatusCode::NOT_FOUND, "TASK_NOT_FOUND")
    );
    assert_eq!(answer.body["error"]["code"], 404);

    let answer = call(rest("GET", "/no/such/route", None)).await;
    assert_eq!(
        (answer.status, rest_reason(&answer)),
        (StatusCode::NOT_FOUND, "METHOD_NOT_FOUND")
    );

    let answer = call(rest("GET", "/tasks?pageSize=lots", None)).await;
    assert_eq!(
        (answer.status, rest_reason(&answer)),
        (StatusCode::BAD_REQUEST, "INVALID_PARAMS")
    );

    let answer = call(rest("GET", "/tasks?status=NOPE", None)).await;
    assert_eq!(
        (answer.status, rest_reason(&answer)),
        (StatusCode::BAD_REQUEST, "INVALID_PARAMS")
    );

    let answer = call(rest("POST", "/tasks/abc:explode", Some("{}"))).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);

    // A route asked with a method it does not take: 405 with an A2A error body, whose code
    // is the HTTP status.
    for (method, path) in [
        ("GET", "/"),
        ("DELETE", "/tasks"),
        ("PUT", "/message:send"),
        ("GET", "/message:stream"),
        ("PATCH", "/tasks/abc"),
        ("POST", "/.well-known/agent-card.json"),
        ("PUT", "/tenant-a/tasks"),
    ] {
        let answer = call(rest(method, path, None)).await;
        assert_eq!(
            (answer.status, rest_reason(&answer)),
            (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_FOUND"),
            "{method} {path}: {}",
            answer.body
        );
        assert_eq!(answer.body["error"]["code"], 405, "{method} {path}");
        assert!(
            answer.body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(method)),
            "{method} {path}: {}",
            answer.body
        );
    }

    let wrong_type = Request::post("/message:send")
        .header("A2A-Version", "1.0")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(
        call(wrong_type).await.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );

    let no_version = Request::get("/tasks").body(Body::empty()).unwrap();
    let answer = call(no_version).await;
    assert_eq!(
        (answer.status, rest_reason(&answer)),
        (StatusCode::BAD_REQUEST, "VERSION_NOT_SUPPORTED")
    );
    assert_eq!(answer.body["error"]["status"], "FAILED_PRECONDITION");
}

#[tokio::test]
async fn rest_success_bodies_use_the_a2a_media_type_and_tenants_route() {
    let answer = call(rest(
        "POST",
        "/message:send",
        Some(&send_params().to_string()),
    ))
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers[header::CONTENT_TYPE], "application/a2a+json");
    assert_eq!(
        answer.body["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let answer = call(rest("GET", "/tenant-a/tasks?pageSize=5", None)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["pageSize"], 5);
    let json_type = Request::post("/message:send")
        .header("A2A-Version", "1.0")
        .header(header::CONTENT_TYPE, "application/json; charset=utf-8")
        .body(Body::from(send_params().to_string()))
        .unwrap();
    assert_eq!(
        call(json_type).await.status,
        StatusCode::OK,
        "application/json is accepted too"
    );
}

#[tokio::test]
async fn well_known_card_caches_and_revalidates() {
    let first = call(
        Request::get("/.well-known/agent-card.json")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body["name"], "echo");
    let etag = first.headers[header::ETAG].to_str().unwrap().to_owned();
    assert!(
        first.headers[header::CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("max-age=")
    );
    let last_modified = first.headers[header::LAST_MODIFIED]
        .to_str()
        .unwrap()
        .to_owned();
    let again = Request::get("/.well-known/agent-card.json")
        .header(header::IF_NONE_MATCH, &etag)
        .body(Body::empty())
        .unwrap();
    let answer = call(again).await;
    assert_eq!(answer.status, StatusCode::NOT_MODIFIED);
    assert_eq!(answer.body, Value::Null);
    let stale = Request::get("/.well-known/agent-card.json")
        .header(header::IF_NONE_MATCH, "\"other\"")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(stale).await.status, StatusCode::OK);
    assert!(
        httpdate_parses(&last_modified),
        "Last-Modified {last_modified}"
    );
}

fn httpdate_parses(value: &str) -> bool {
    value.ends_with(" GMT") && value.len() == 29
}

/// Deterministic garbage, so a failure can be replayed.
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let alphabet =
        br#"{}[]":,0123456789abcdefnulltrue \ jsonrpc method params id message parts text"#;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            alphabet[(state >> 33) as usize % alphabet.len()]
        })
        .collect()
}

#[tokio::test]
async fn garbage_bodies_get_errors_not_panics() {
    for seed in 0..300u64 {
        let body = garbage(seed, (seed as usize * 7) % 400);
        let answer = call(rpc(body.clone())).await;
        assert_eq!(answer.status, StatusCode::OK, "seed {seed}");
        assert!(
            answer.body.get("error").is_some(),
            "seed {seed}: {}",
            answer.body
        );
        let answer = call(rest(
            "POST",
            "/message:send",
            Some(&String::from_utf8_lossy(&body)),
        ))
        .await;
        assert!(
            answer.status.is_client_error(),
            "seed {seed}: {}",
            answer.status
        );
    }
}
