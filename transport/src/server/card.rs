//! The well-known agent card, with `ETag`, `Last-Modified`, `Cache-Control` and `304 Not Modified`.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};

use super::{Shared, json_response};
use crate::wire::rest_error_body;

/// The last card served: its entity tag and when it changed.
#[derive(Default)]
pub(crate) struct CardCache {
    last: Mutex<Option<(String, SystemTime)>>,
}

impl CardCache {
    /// The `Last-Modified` time of the card with `etag`: now if it changed.
    fn modified(&self, etag: &str) -> SystemTime {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        match &*last {
            Some((known, at)) if known == etag => *at,
            _ => {
                // HTTP dates have whole seconds; round down so If-Modified-Since compares cleanly.
                let now = httpdate::parse_http_date(&httpdate::fmt_http_date(SystemTime::now()))
                    .unwrap_or_else(|_| SystemTime::now());
                *last = Some((etag.to_owned(), now));
                now
            }
        }
    }
}

/// `GET /.well-known/agent-card.json`.
pub(crate) async fn well_known(State(shared): State<Shared>, headers: HeaderMap) -> Response<Body> {
    let card = match shared.agent.card().await {
        Ok(card) => card,
        Err(error) => {
            let (status, body) = rest_error_body(&error.into_a2a());
            return json_response(status, "application/json", body.to_string().into_bytes());
        }
    };
    let body = match serde_json::to_vec(&card) {
        Ok(body) => body,
        Err(error) => {
            let error =
                mew_cards::A2aError::internal(format!("cannot serialize the card: {error}"));
            let (status, body) = rest_error_body(&error);
            return json_response(status, "application/json", body.to_string().into_bytes());
        }
    };
    let mut hasher = DefaultHasher::new();
    body.hash(&mut hasher);
    let etag = format!("\"{:016x}\"", hasher.finish());
    let modified = shared.card.modified(&etag);

    let not_modified = match headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
    {
        Some(tags) => tags
            .split(',')
            .map(str::trim)
            .any(|t| t == "*" || t.trim_start_matches("W/") == etag),
        None => headers
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .is_some_and(|since| modified <= since),
    };
    let mut response = if not_modified {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        response
    } else {
        json_response(StatusCode::OK, "application/json", body)
    };
    let headers = response.headers_mut();
    let max_age = shared.options.card_max_age.as_secs();
    let values = [
        (header::ETAG, etag),
        (header::LAST_MODIFIED, httpdate::fmt_http_date(modified)),
        (header::CACHE_CONTROL, format!("public, max-age={max_age}")),
    ];
    for (name, value) in values {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    response
}
