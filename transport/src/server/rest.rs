//! The HTTP+JSON binding: resource paths, query parameters for reads, SSE for streams.

use std::collections::HashMap;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::{HeaderMap, Method, Response, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};
use mew_cards::{
    A2aError, CancelTaskRequest, ContextId, ErrorKind, GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTasksRequest, SendMessageRequest, StreamResponse, SubscribeToTaskRequest, TaskId,
    TaskPushNotificationConfig, TaskState, Timestamp,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{
    Served, Shared, call_context, check_version, content_type_is, json_response, read_body,
    sse_response,
};
use crate::Binding;
use crate::agent::{CallContext, Principal};
use crate::wire::{A2A_JSON, rest_error_body};

/// The binding's routes, relative to the interface URL (tenant paths nest these).
pub(crate) fn routes() -> Router<Shared> {
    use axum::middleware::{from_fn, map_response};
    // Each answer names its operation (see `Served`); a task's path serves three.
    let named = |method: &'static str| {
        map_response(move |response: Response<Body>| async move { Served::name(method, response) })
    };
    Router::new()
        .route(
            "/message:send",
            post(send).route_layer(named("SendMessage")),
        )
        .route(
            "/message:stream",
            post(stream).route_layer(named("SendStreamingMessage")),
        )
        .route("/tasks", get(list).route_layer(named("ListTasks")))
        .route(
            "/tasks/{task}",
            get(task_get)
                .post(task_post)
                .route_layer(from_fn(name_task_operation)),
        )
        .route(
            "/tasks/{task}/pushNotificationConfigs",
            get(push_list)
                .route_layer(named("ListTaskPushNotificationConfigs"))
                .merge(post(push_create).route_layer(named("CreateTaskPushNotificationConfig"))),
        )
        .route(
            "/tasks/{task}/pushNotificationConfigs/{config}",
            get(push_get)
                .route_layer(named("GetTaskPushNotificationConfig"))
                .merge(delete(push_delete).route_layer(named("DeleteTaskPushNotificationConfig"))),
        )
        .route(
            "/extendedAgentCard",
            get(extended_card).route_layer(named("GetExtendedAgentCard")),
        )
}

/// Names the operation of an answer on `/tasks/{task}`: by the action the path ends with
/// and the HTTP method, as `task_get` and `task_post` choose it.
async fn name_task_operation(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response<Body> {
    let segment = request.uri().path().rsplit('/').next().unwrap_or("");
    let method = match (request.method(), split_action(segment).1) {
        (&Method::GET, None) => Some("GetTask"),
        (&Method::POST, Some("cancel")) => Some("CancelTask"),
        (_, Some("subscribe")) => Some("SubscribeToTask"),
        _ => None,
    };
    let response = next.run(request).await;
    match method {
        Some(method) => Served::name(method, response),
        None => response,
    }
}

type Params = Path<HashMap<String, String>>;

/// A request the binding refuses: an A2A error, with an HTTP status when the
/// kind's usual one does not fit (415, 413, 405).
pub(crate) struct Rejection {
    status: Option<StatusCode>,
    error: A2aError,
}

impl From<A2aError> for Rejection {
    fn from(error: A2aError) -> Self {
        Self {
            status: None,
            error,
        }
    }
}

impl From<crate::Error> for Rejection {
    fn from(error: crate::Error) -> Self {
        error.into_a2a().into()
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response<Body> {
        let (default_status, mut body) = rest_error_body(&self.error);
        let status = self.status.unwrap_or(default_status);
        // The body's `code` is the HTTP status the answer has (405, 413, 415, ...).
        body["error"]["code"] = status.as_u16().into();
        served(Err(self.error.kind)).attach(json_response(
            status,
            "application/json",
            body.to_string().into_bytes(),
        ))
    }
}

type Answer = Result<Response<Body>, Rejection>;

/// What a response of this binding served; its route names the method.
fn served(outcome: Result<(), ErrorKind>) -> Served {
    Served {
        binding: Binding::HttpJson,
        method: None,
        outcome,
    }
}

fn ok<T: Serialize>(value: &T) -> Answer {
    serde_json::to_vec(value)
        .map(|body| served(Ok(())).attach(json_response(StatusCode::OK, A2A_JSON, body)))
        .map_err(|e| A2aError::internal(format!("cannot serialize the response: {e}")).into())
}

/// Fallback for a path of the binding asked with a method it does not take: 405, with an
/// A2A error body like every other error.
pub async fn method_not_allowed(method: Method, uri: axum::http::Uri) -> Response<Body> {
    wrong_method(&format!("{} does not take {method}", uri.path())).into_response()
}

/// Fallback for paths that are not part of the binding; a gRPC call of a service that is not
/// served gets gRPC's `UNIMPLEMENTED`, which its client can read.
pub(crate) async fn not_found(
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response<Body> {
    let message = format!("no route for {method} {}", uri.path());
    let grpc = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        return tonic::Status::unimplemented(message).into_http();
    }
    Rejection::from(A2aError::new(ErrorKind::MethodNotFound, message)).into_response()
}

/// The checks every operation shares: protocol version, then the caller's context.
fn begin(
    headers: &HeaderMap,
    principal: Option<Extension<Principal>>,
    query: Option<&str>,
) -> Result<CallContext, Rejection> {
    check_version(headers, query)?;
    Ok(call_context(headers, principal.map(|Extension(p)| p)))
}

/// Reads a JSON body into `T`; an empty body is `T::default()`.
async fn json_body<T: DeserializeOwned + Default>(
    shared: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, Rejection> {
    let body = read_body(shared, headers, body).await.map_err(|e| {
        let (status, error) = e.into_a2a();
        Rejection {
            status: Some(status),
            error,
        }
    })?;
    // The body's room in the budget is given back when this returns, parsed.
    let bytes = &body.bytes;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    if !content_type_is(headers, &[A2A_JSON, "application/json"]) {
        let error = A2aError::new(
            ErrorKind::InvalidRequest,
            "HTTP+JSON bodies must have Content-Type: application/a2a+json or application/json",
        );
        return Err(Rejection {
            status: Some(StatusCode::UNSUPPORTED_MEDIA_TYPE),
            error,
        });
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let kind = if e.is_syntax() || e.is_eof() {
            ErrorKind::ParseError
        } else {
            ErrorKind::InvalidParams
        };
        A2aError::new(kind, format!("invalid request body: {e}")).into()
    })
}

fn tenant(params: &HashMap<String, String>) -> String {
    params.get("tenant").cloned().unwrap_or_default()
}

fn param(params: &HashMap<String, String>, name: &str) -> String {
    params.get(name).cloned().unwrap_or_default()
}

async fn send(
    State(shared): State<Shared>,
    Path(params): Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
    body: Body,
) -> Answer {
    let ctx = begin(&headers, principal, query.as_deref())?;
    let mut request: SendMessageRequest = json_body(&shared, &headers, body).await?;
    if params.contains_key("tenant") {
        request.tenant = tenant(&params);
    }
    ok(&shared.agent.send_message(&ctx, request).await?)
}

async fn stream(
    State(shared): State<Shared>,
    Path(params): Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
    body: Body,
) -> Answer {
    let ctx = begin(&headers, principal, query.as_deref())?;
    let mut request: SendMessageRequest = json_body(&shared, &headers, body).await?;
    if params.contains_key("tenant") {
        request.tenant = tenant(&params);
    }
    let events = shared.agent.send_streaming_message(&ctx, request).await?;
    Ok(served(Ok(())).attach(sse_response(
        events,
        shared.options.keep_alive,
        StreamResponse::ends_stream,
        render_event,
    )))
}

fn render_event(item: Result<StreamResponse, A2aError>) -> String {
    let rendered = match &item {
        Ok(event) => serde_json::to_string(event),
        Err(e) => Ok(rest_error_body(e).1.to_string()),
    };
    rendered.unwrap_or_else(|e| {
        let error = A2aError::internal(format!("cannot serialize an event: {e}"));
        rest_error_body(&error).1.to_string()
    })
}

/// Query parameters of a read, by their JSON (lowerCamelCase) names; repeated keys keep the
/// last value. A parameter may also be named by its proto field name (`history_length` for
/// `historyLength`), as ProtoJSON parsers accept; both names of one field is an error.
fn query_map(query: Option<&str>) -> Result<HashMap<String, String>, A2aError> {
    let uri: axum::http::Uri = format!("/?{}", query.unwrap_or(""))
        .parse()
        .map_err(|e| A2aError::invalid_params(format!("invalid query string: {e}")))?;
    let pairs = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map_err(|e| A2aError::invalid_params(format!("invalid query string: {}", e.body_text())))?
        .0;
    let mut map = HashMap::new();
    let mut spelled: HashMap<String, String> = HashMap::new();
    for (key, value) in pairs {
        let name = lower_camel(&key);
        match spelled.get(&name) {
            Some(other) if *other != key => {
                return Err(A2aError::invalid_params(format!(
                    "the query names one field twice: {other} and {key}"
                )));
            }
            _ => {
                spelled.insert(name.clone(), key);
            }
        }
        map.insert(name, value);
    }
    Ok(map)
}

/// The JSON name of a proto field name (`history_length` -> `historyLength`); a JSON name
/// stays as it is.
fn lower_camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        match c {
            '_' if !out.is_empty() => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

fn int_param(map: &HashMap<String, String>, name: &str) -> Result<Option<i32>, A2aError> {
    map.get(name)
        .map(|v| {
            v.parse::<i32>().map_err(|_| {
                A2aError::invalid_params(format!("{name} must be an integer, not {v:?}"))
            })
        })
        .transpose()
}

fn bool_param(map: &HashMap<String, String>, name: &str) -> Result<Option<bool>, A2aError> {
    map.get(name)
        .map(|v| match v.as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(A2aError::invalid_params(format!(
                "{name} must be true or false, not {v:?}"
            ))),
        })
        .transpose()
}

fn list_request(tenant: String, query: Option<&str>) -> Result<ListTasksRequest, A2aError> {
    let map = query_map(query)?;
    let status = match map.get("status") {
        None => TaskState::Unspecified,
        Some(v) => TaskState::from_name(v)
            .or_else(|| v.parse::<i64>().ok().and_then(TaskState::from_number))
            .ok_or_else(|| A2aError::invalid_params(format!("unknown task state {v:?}")))?,
    };
    let status_timestamp_after = map
        .get("statusTimestampAfter")
        .map(|v| {
            v.parse::<Timestamp>()
                .map_err(|e| A2aError::invalid_params(e.to_string()))
        })
        .transpose()?;
    Ok(ListTasksRequest {
        tenant,
        context_id: ContextId::from(map.get("contextId").cloned().unwrap_or_default()),
        status,
        page_size: int_param(&map, "pageSize")?,
        page_token: map.get("pageToken").cloned().unwrap_or_default(),
        history_length: int_param(&map, "historyLength")?,
        status_timestamp_after,
        include_artifacts: bool_param(&map, "includeArtifacts")?,
    })
}

async fn list(
    State(shared): State<Shared>,
    Path(params): Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Answer {
    let ctx = begin(&headers, principal, query.as_deref())?;
    let request = list_request(tenant(&params), query.as_deref())?;
    ok(&shared.agent.list_tasks(&ctx, request).await?)
}

/// Splits `id:action` (the action may be absent).
fn split_action(segment: &str) -> (&str, Option<&str>) {
    match segment.rsplit_once(':') {
        Some((id, action @ ("cancel" | "subscribe"))) => (id, Some(action)),
        _ => (segment, None),
    }
}

fn wrong_method(message: &str) -> Rejection {
    let error = A2aError::new(ErrorKind::MethodNotFound, message);
    Rejection {
        status: Some(StatusCode::METHOD_NOT_ALLOWED),
        error,
    }
}

async fn task_get(
    State(shared): State<Shared>,
    Path(params): Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Answer {
    let ctx = begin(&headers, principal, query.as_deref())?;
    let segment = param(&params, "task");
    match split_action(&segment) {
        (id, None) => {
            let history_length = int_param(&query_map(query.as_deref())?, "historyLength")?;
            let request = GetTaskRequest {
                tenant: tenant(&params),
                id: TaskId::from(id),
                history_length,
            };
            ok(&shared.agent.get_task(&ctx, request).await?)
        }
        (id, Some("subscribe")) => {
            let request = SubscribeToTaskRequest {
                tenant: tenant(&params),
                id: TaskId::from(id),
            };
            let events = shared.agent.subscribe_to_task(&ctx, request).await?;
            Ok(served(Ok(())).attach(sse_response(
                events,
                shared.options.keep_alive,
                StreamResponse::ends_subscription,
                render_event,
            )))
        }
        (_, Some(_)) => Err(wrong_method(":cancel needs POST")),
    }
}

async fn task_post(
    State(shared): State<Shared>,
    Path(params): Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
    body: Body,
) -> Answer {
    let ctx = begin(&headers, principal, query.as_deref())?;
    let segment = param(&params, "task");
    let (id, action) = split_action(&segment);
    let id = TaskId::from(id);
    match action {
        Some("cancel") => {
            let mut request: CancelTaskRequest = json_body(&shared, &headers, body).await?;
            request.id = id;
            request.tenant = tenant(&params);
            ok(&shared.agent.cancel_task(&ctx, request).await?)
        }
        Some("subscribe") => {
            let request = SubscribeToTaskRequest {
                tenant: tenant(&params),
                id,
            };
            let events = shared.agent.subscribe_to_task(&ctx, request).await?;
            Ok(served(Ok(())).attach(sse_response(
                events,
                shared.options.keep_alive,
                StreamResponse::ends_subscription,
                render_event,
            )))
        }
        _ => Err(wrong_method("POST on a task needs :cancel or :subscribe")),
    }
}

async fn push_create(
    State(shared): State<Shared>,
    Path(params): Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
    body: Body,
) -> Answer {
    let ctx = begin(&headers, principal, query.as_deref())?;
    let mut config: TaskPushNotificationConfig = json_body(&shared, &headers, body).await?;
    config.task_id = TaskId::from(param(&params, "task"));
    config.tenant = tenant(&params);
    ok(&shared
        .agent
        .create_task_push_notification_config(&ctx, config)
        .await?)
}

async fn push_list(
    State(shared): State<Shared>,
    Path(params): Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Answer {
    let ctx = begin(&headers, principal, query.as_deref())?;
    let map = query_map(query.as_deref())?;
    let request = ListTaskPushNotificationConfigsRequest {
        tenant: tenant(&params),
        task_id: TaskId::from(param(&params, "task")),
        page_size: int_param(&map, "pageSize")?.unwrap_or(0),
        page_token: map.get("pageToken").cloned().unwrap_or_default(),
    };
    ok(&shared
        .agent
        .list_task_push_notification_configs(&ctx, request)
        .await?)
}

fn config_request(params: &HashMap<String, String>) -> GetTaskPushNotificationConfigRequest {
    GetTaskPushNotificationConfigRequest {
        tenant: tenant(params),
        task_id: TaskId::from(param(params, "task")),
        id: param(params, "config"),
    }
}

async fn push_get(
    State(shared): State<Shared>,
    Path(params): Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Answer {
    let ctx = begin(&headers, principal, query.as_deref())?;
    ok(&shared
        .agent
        .get_task_push_notification_config(&ctx, config_request(&params))
        .await?)
}

async fn push_delete(
    State(shared): State<Shared>,
    Path(params): Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Answer {
    let ctx = begin(&headers, principal, query.as_deref())?;
    shared
        .agent
        .delete_task_push_notification_config(&ctx, config_request(&params))
        .await?;
    ok(&serde_json::json!({}))
}

async fn extended_card(
    State(shared): State<Shared>,
    Path(params): Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Answer {
    let ctx = begin(&headers, principal, query.as_deref())?;
    let request = GetExtendedAgentCardRequest {
        tenant: tenant(&params),
    };
    ok(&shared.agent.get_extended_agent_card(&ctx, request).await?)
}
