//! The HTTP behaviour both model APIs share: one client per provider, timeouts, retries with backoff, streaming, and error classification.

use std::time::Duration;

use futures_util::StreamExt;
use mew_transport::{SseDecoder, SseEvent};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};

use super::ProviderError;
use crate::conversation::{Delta, ModelResponse};

/// The longest a retry waits, whatever the attempt number.
pub(crate) const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// The longest `retry-after` honoured; a server that asks for more gets no retry.
pub(crate) const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);

/// The most bytes of an error answer read (they are small JSON objects; the rest is dropped).
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Timeouts and retries of one provider (the `providers.NAME` settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HttpSettings {
    /// The limit on one attempt, from sending the request to the end of the streamed answer.
    pub(crate) timeout: Duration,
    /// The limit on opening a connection.
    pub(crate) connect_timeout: Duration,
    /// The longest silence allowed while an answer streams, counted from the response headers
    /// (so it covers the wait for the first event too).
    pub(crate) idle_timeout: Duration,
    /// Retries after the first attempt, for rate limits, overload, 5xx and connection errors.
    pub(crate) max_retries: u32,
    /// The wait before the first retry; it doubles each time (with jitter), up to
    /// [`BACKOFF_CAP`].
    pub(crate) retry_backoff: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_retries: 4,
            retry_backoff: Duration::from_millis(500),
        }
    }
}

/// What an error answer (or an error event inside a stream) means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// The key is missing, wrong or not allowed.
    Auth,
    /// The model does not exist (for this key).
    UnknownModel,
    /// The request is invalid; sending it again will not help.
    BadRequest,
    /// Rate limited, overloaded or a transient server error: worth another attempt.
    Retry,
    /// There is no such endpoint (a 404 that is not the API's): the base URL is wrong.
    NoEndpoint,
    /// The service refuses for a reason time will not fix soon (e.g. quota exhausted).
    Unavailable,
}

impl ErrorClass {
    /// Classifies an error by the API's own error type or code when it is decisive, else by
    /// the HTTP status (`None` for an error event inside a stream, which has none).
    /// `recognized` says whether the body was the API's error form.
    pub(crate) fn classify(
        status: Option<StatusCode>,
        api: Option<ErrorClass>,
        recognized: bool,
    ) -> ErrorClass {
        if let Some(class) = api {
            return class;
        }
        match status.map(|status| status.as_u16()) {
            Some(401 | 403) => ErrorClass::Auth,
            Some(404) if recognized => ErrorClass::UnknownModel,
            Some(404) => ErrorClass::NoEndpoint,
            Some(429 | 500 | 502 | 503 | 504 | 529) => ErrorClass::Retry,
            Some(400..=499) => ErrorClass::BadRequest,
            Some(_) | None => ErrorClass::Unavailable,
        }
    }
}

/// An error answer read by the API's own rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    /// The class the API's error type or code decides, if it does.
    pub(crate) class: Option<ErrorClass>,
    /// What the service said (or the raw body, when it is not the API's error form).
    pub(crate) message: String,
    /// Whether the body was the API's error form: the service understood the request. A 404
    /// in the API's form refuses the model; any other 404 means there is no such endpoint.
    pub(crate) recognized: bool,
}

impl ApiError {
    /// An error in the API's own form.
    pub(crate) fn api(class: Option<ErrorClass>, message: String) -> Self {
        Self {
            class,
            message,
            recognized: true,
        }
    }

    /// A body that is not the API's error form, kept as it is.
    pub(crate) fn raw(body: &str) -> Self {
        Self {
            class: None,
            message: body.to_owned(),
            recognized: false,
        }
    }
}

/// Why a streamed answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StreamError {
    /// The payload is not what the API sends.
    Protocol(String),
    /// The service reported an error inside the stream.
    Remote(ApiError),
    /// The stream ended before the answer was complete.
    Truncated,
}

/// Reads one API's stream of events into a [`ModelResponse`].
pub(crate) trait StreamParser: Send {
    /// Reads one event, pushing the deltas to forward onto `deltas`. Returns `Ok(true)` when
    /// the event ends the answer.
    fn event(&mut self, event: SseEvent, deltas: &mut Vec<Delta>) -> Result<bool, StreamError>;

    /// The stream is over (`complete` if an event ended it): the answer, or why there is none.
    fn finish(self, complete: bool) -> Result<ModelResponse, StreamError>;
}

/// How one API reads its error answers and its streams.
pub(crate) trait Api: Sync {
    /// The parser of one answer.
    type Parser: StreamParser;

    /// The API's family, as OpenTelemetry's GenAI conventions name it (`gen_ai.system`).
    const SYSTEM: &'static str;

    /// A parser for a new attempt.
    fn parser(&self) -> Self::Parser;

    /// Reads an error answer's body.
    fn error(&self, body: &str) -> ApiError;

    /// What to tell a user whose requests to `url` find no endpoint (HTTP 404 not in the
    /// API's form): how the base URL should look.
    fn no_endpoint_hint(&self, url: &str) -> String;
}

/// One prepared model call: where it goes and what it sends.
#[derive(Debug, Clone)]
pub(crate) struct HttpRequest<'a> {
    /// The full endpoint URL.
    pub(crate) url: &'a str,
    /// Headers, the key among them (marked sensitive).
    pub(crate) headers: &'a HeaderMap,
    /// The JSON body.
    pub(crate) body: Vec<u8>,
    /// The model id, for errors.
    pub(crate) model: &'a str,
}

/// The HTTP client of one provider, with its name and settings.
#[derive(Debug, Clone)]
pub(crate) struct HttpClient {
    provider: String,
    client: reqwest::Client,
    settings: HttpSettings,
    /// Where the key comes from, for authentication errors ("env ANTHROPIC_API_KEY ...").
    key_hint: String,
}

/// A failed attempt.
enum Failure {
    /// Another attempt may succeed (if nothing of the answer was delivered yet).
    Retryable {
        cause: RetryCause,
        retry_after: Option<Duration>,
    },
    /// Final.
    Fatal(ProviderError),
}

/// Why a retryable attempt failed, to report when no attempt is left.
enum RetryCause {
    /// Rate limited, overloaded, or a transient server error.
    Unavailable(String),
    /// The connection failed or broke.
    Connect(String),
}

/// The most bytes of a prompt or completion put on a span (`telemetry.capture_content`).
const MAX_CAPTURED: usize = 64 * 1024;

/// `bytes` as text for a span, cut at [`MAX_CAPTURED`] (on a character boundary).
fn bounded(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_CAPTURED)]);
    text.trim_end_matches(char::REPLACEMENT_CHARACTER)
        .to_owned()
}

/// A count as OpenTelemetry's integer attribute (an `i64`; `u64` values become text).
fn as_i64(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Puts what a model call came to on its span: tokens and finish reason, or the error.
fn record_outcome(span: &tracing::Span, outcome: &Result<ModelResponse, ProviderError>) {
    match outcome {
        Ok(response) => {
            let reason = match &response.stop {
                crate::conversation::StopReason::EndTurn => "stop",
                crate::conversation::StopReason::ToolUse => "tool_calls",
                crate::conversation::StopReason::MaxTokens => "length",
                crate::conversation::StopReason::Other(other) => other.as_str(),
            };
            span.record("gen_ai.response.finish_reasons", reason);
            if let Some(model) = &response.model {
                span.record("gen_ai.response.model", model.as_str());
            }
            if let Some(usage) = &response.usage {
                span.record("gen_ai.usage.input_tokens", as_i64(usage.input));
                span.record("gen_ai.usage.output_tokens", as_i64(usage.output));
                span.record(
                    "gen_ai.usage.cache_read.input_tokens",
                    as_i64(usage.cache_read),
                );
                span.record(
                    "gen_ai.usage.cache_creation.input_tokens",
                    usage.cache_write,
                );
            }
            if crate::telemetry::captures_content() {
                let text: Vec<&str> = response
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        crate::conversation::Block::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                span.record("gen_ai.output.messages", bounded(text.join("").as_bytes()));
            }
        }
        Err(error) => {
            span.record("otel.status_code", "error");
            span.record("error.type", error.kind());
        }
    }
}

impl HttpClient {
    /// A client for the provider `provider`; `key_hint` says where its key comes from, for
    /// authentication errors.
    pub(crate) fn new(
        provider: &str,
        settings: HttpSettings,
        key_hint: String,
    ) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .user_agent(concat!("mew/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            provider: provider.to_owned(),
            client,
            settings,
            key_hint,
        })
    }

    /// The provider's name.
    pub(crate) fn provider(&self) -> &str {
        &self.provider
    }

    /// Sends `request` and reads the streamed answer with `api`'s parser, forwarding deltas to
    /// `on_delta`. Retries with backoff on 429, 5xx, 529, connection errors and error events
    /// worth retrying, but never once a delta has been forwarded.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the request; nothing is retried after.
    pub(crate) async fn stream<A: Api>(
        &self,
        api: &A,
        request: HttpRequest<'_>,
        on_delta: &(dyn Fn(Delta) + Send + Sync),
    ) -> Result<ModelResponse, ProviderError> {
        use tracing::field::Empty;
        let span = crate::telemetry::span!(
            "gen_ai.chat",
            otel.name = %format_args!("chat {}", request.model),
            otel.kind = "client",
            otel.status_code = Empty,
            gen_ai.operation.name = "chat",
            gen_ai.system = A::SYSTEM,
            gen_ai.provider.name = A::SYSTEM,
            gen_ai.request.model = %request.model,
            gen_ai.response.model = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.usage.cache_read.input_tokens = Empty,
            gen_ai.usage.cache_creation.input_tokens = Empty,
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
            mew.provider = %self.provider,
            error.type = Empty,
        );
        if !span.is_disabled() && crate::telemetry::captures_content() {
            // The conversation as the API has it (`messages` in both APIs' bodies).
            let messages = serde_json::from_slice::<serde_json::Value>(&request.body)
                .ok()
                .and_then(|body| body.get("messages").map(ToString::to_string))
                .unwrap_or_default();
            span.record("gen_ai.input.messages", bounded(messages.as_bytes()));
        }
        let outcome = tracing::Instrument::instrument(
            self.stream_in_span(api, request, on_delta),
            span.clone(),
        )
        .await;
        if !span.is_disabled() {
            record_outcome(&span, &outcome);
        }
        outcome
    }

    async fn stream_in_span<A: Api>(
        &self,
        api: &A,
        request: HttpRequest<'_>,
        on_delta: &(dyn Fn(Delta) + Send + Sync),
    ) -> Result<ModelResponse, ProviderError> {
        let attempts = self.settings.max_retries.saturating_add(1);
        let mut delivered = false;
        let mut attempt = 1;
        loop {
            let outcome = tokio::time::timeout(
                self.settings.timeout,
                self.attempt(api, &request, on_delta, &mut delivered),
            )
            .await;
            let (cause, retry_after) = match outcome {
                Ok(Ok(response)) => return Ok(response),
                Err(_elapsed) => return Err(self.timeout(self.settings.timeout)),
                Ok(Err(Failure::Fatal(mut error))) => {
                    if let ProviderError::Unavailable { attempts, .. } = &mut error {
                        *attempts = attempt;
                    }
                    return Err(error);
                }
                Ok(Err(Failure::Retryable { cause, retry_after })) => (cause, retry_after),
            };
            let give_up = |cause: RetryCause, note: &str| match cause {
                RetryCause::Unavailable(message) => ProviderError::Unavailable {
                    provider: self.provider.clone(),
                    attempts: attempt,
                    message: format!("{message}{note}"),
                },
                RetryCause::Connect(message) => ProviderError::Connect {
                    provider: self.provider.clone(),
                    url: request.url.to_owned(),
                    message: format!("{message}{note}"),
                },
            };
            if delivered {
                return Err(give_up(cause, " (after part of the answer was delivered)"));
            }
            if attempt >= attempts {
                return Err(give_up(cause, ""));
            }
            let wait = match retry_after {
                Some(wait) if wait > RETRY_AFTER_MAX => {
                    let note = format!(" (the server asked to retry after {}s)", wait.as_secs());
                    return Err(give_up(cause, &note));
                }
                Some(wait) => wait,
                None => backoff(self.settings.retry_backoff, attempt),
            };
            let reason = match &cause {
                RetryCause::Unavailable(message) | RetryCause::Connect(message) => message,
            };
            tracing::warn!(
                provider = %self.provider,
                attempt,
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                %reason,
                "model call failed; retrying"
            );
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// One attempt: send, check the status, stream the answer.
    async fn attempt<A: Api>(
        &self,
        api: &A,
        request: &HttpRequest<'_>,
        on_delta: &(dyn Fn(Delta) + Send + Sync),
        delivered: &mut bool,
    ) -> Result<ModelResponse, Failure> {
        let mut headers = request.headers.clone();
        crate::telemetry::inject(&mut headers);
        let sent = self
            .client
            .post(request.url)
            .headers(headers)
            .body(request.body.clone())
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(error) => return Err(self.transport_failure(&error)),
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let body = self.error_body(response).await;
            let error = api.error(&body);
            let hint = api.no_endpoint_hint(request.url);
            return Err(self.status_failure(Some(status), error, request, &hint, retry_after));
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("text/event-stream")
            .to_owned();
        if !content_type.starts_with("text/event-stream") {
            let body = self.error_body(response).await;
            return Err(self.protocol(format!(
                "expected an event stream, got {content_type}: {}",
                body.chars().take(500).collect::<String>()
            )));
        }

        let mut parser = api.parser();
        let mut decoder = SseDecoder::default();
        let mut body = response.bytes_stream();
        let mut deltas = Vec::new();
        let mut complete = false;
        // What arrived, to say how far an answer that stopped short got.
        let mut received = (0usize, 0usize);
        while !complete {
            let chunk = match tokio::time::timeout(self.settings.idle_timeout, body.next()).await {
                Err(_elapsed) => {
                    return Err(Failure::Fatal(self.timeout(self.settings.idle_timeout)));
                }
                Ok(None) => break,
                Ok(Some(Err(error))) => return Err(self.transport_failure(&error)),
                Ok(Some(Ok(chunk))) => chunk,
            };
            received.0 += chunk.len();
            decoder.push(&chunk);
            while let Some(event) = decoder
                .next_event()
                .map_err(|error| self.protocol(error.to_string()))?
            {
                received.1 += 1;
                let done = parser
                    .event(event, &mut deltas)
                    .map_err(|error| self.stream_failure(error, request, received))?;
                for delta in deltas.drain(..) {
                    *delivered = true;
                    on_delta(delta);
                }
                if done {
                    complete = true;
                    break;
                }
            }
        }
        if !complete
            && let Some(event) = decoder
                .finish()
                .map_err(|error| self.protocol(error.to_string()))?
        {
            received.1 += 1;
            complete = parser
                .event(event, &mut deltas)
                .map_err(|error| self.stream_failure(error, request, received))?;
            for delta in deltas.drain(..) {
                *delivered = true;
                on_delta(delta);
            }
        }
        parser
            .finish(complete)
            .map_err(|error| self.stream_failure(error, request, received))
    }

    /// Reads at most [`ERROR_BODY_LIMIT`] bytes of an error answer, as text.
    async fn error_body(&self, response: reqwest::Response) -> String {
        let mut bytes = Vec::new();
        let mut body = response.bytes_stream();
        while bytes.len() < ERROR_BODY_LIMIT {
            match tokio::time::timeout(self.settings.idle_timeout, body.next()).await {
                Ok(Some(Ok(chunk))) => bytes.extend_from_slice(&chunk),
                Ok(Some(Err(_)) | None) | Err(_) => break,
            }
        }
        bytes.truncate(ERROR_BODY_LIMIT);
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }

    /// An error answer or error event, by its class.
    fn status_failure(
        &self,
        status: Option<StatusCode>,
        error: ApiError,
        request: &HttpRequest<'_>,
        hint: &str,
        retry_after: Option<Duration>,
    ) -> Failure {
        let (model, url) = (request.model, request.url);
        let message = match (status, error.message.is_empty()) {
            (Some(status), true) => format!("HTTP {status}"),
            (Some(status), false) => format!("HTTP {status}: {}", error.message),
            (None, _) => error.message,
        };
        let provider = self.provider.clone();
        Failure::Fatal(
            match ErrorClass::classify(status, error.class, error.recognized) {
                ErrorClass::Retry => {
                    return Failure::Retryable {
                        cause: RetryCause::Unavailable(message),
                        retry_after,
                    };
                }
                ErrorClass::Auth => ProviderError::Auth {
                    provider,
                    message: format!("{message} ({})", self.key_hint),
                },
                ErrorClass::UnknownModel => ProviderError::UnknownModel {
                    provider,
                    model: model.to_owned(),
                    message,
                },
                ErrorClass::BadRequest => ProviderError::BadRequest { provider, message },
                ErrorClass::NoEndpoint => ProviderError::NoEndpoint {
                    provider,
                    url: url.to_owned(),
                    hint: hint.to_owned(),
                },
                ErrorClass::Unavailable => ProviderError::Unavailable {
                    provider,
                    attempts: 1,
                    message,
                },
            },
        )
    }

    /// A stream that could not be read, or stopped short after `received` (bytes, events).
    fn stream_failure(
        &self,
        error: StreamError,
        request: &HttpRequest<'_>,
        received: (usize, usize),
    ) -> Failure {
        match error {
            StreamError::Protocol(message) => self.protocol(message),
            StreamError::Remote(error) => self.status_failure(None, error, request, "", None),
            // The server ended its answer itself (a broken connection is a transport failure):
            // the same request would end the same way.
            StreamError::Truncated => Failure::Fatal(ProviderError::Incomplete {
                provider: self.provider.clone(),
                url: request.url.to_owned(),
                message: match received {
                    (0, _) => "the answer was empty (HTTP 200 with no body)".to_owned(),
                    (bytes, 0) => format!(
                        "the answer held no event ({bytes} bytes that are not a server-sent event)"
                    ),
                    (bytes, events) => format!(
                        "the answer stopped after {bytes} bytes ({events} events), before the \
                         model finished"
                    ),
                },
            }),
        }
    }

    /// A failure of the HTTP exchange itself (no status): timeout, connection, or unreadable.
    fn transport_failure(&self, error: &reqwest::Error) -> Failure {
        if error.is_timeout() && !error.is_connect() {
            return Failure::Fatal(self.timeout(self.settings.timeout));
        }
        if error.is_connect() || error.is_request() || error.is_body() {
            return Failure::Retryable {
                cause: RetryCause::Connect(error_chain(error)),
                retry_after: None,
            };
        }
        self.protocol(error_chain(error))
    }

    fn protocol(&self, message: String) -> Failure {
        Failure::Fatal(ProviderError::Protocol {
            provider: self.provider.clone(),
            message,
        })
    }

    fn timeout(&self, limit: Duration) -> ProviderError {
        ProviderError::Timeout {
            provider: self.provider.clone(),
            seconds: limit.as_secs(),
        }
    }
}

/// The wait before retry number `attempt` (1-based): `base * 2^(attempt-1)`, capped at
/// [`BACKOFF_CAP`], then jittered to between half and all of it.
pub(crate) fn backoff(base: Duration, attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
    let full = base.saturating_mul(factor).min(BACKOFF_CAP);
    full / 2 + full.mul_f64(jitter() / 2.0)
}

/// A number in `[0, 1)`, different on each call (from the standard library's random hasher
/// keys: jitter needs no cryptographic randomness).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x006d_6577);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// The `retry-after` header in seconds (an integer or a decimal), if present and readable.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let seconds: f64 = text.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// An error with its sources, `outer: inner: innermost`.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_api_codes_classify() {
        let class =
            |status: u16| ErrorClass::classify(StatusCode::from_u16(status).ok(), None, true);
        assert_eq!(class(401), ErrorClass::Auth);
        assert_eq!(class(403), ErrorClass::Auth);
        assert_eq!(class(404), ErrorClass::UnknownModel);
        // A 404 that is not the API's own error: the URL has no such endpoint.
        assert_eq!(
            ErrorClass::classify(StatusCode::from_u16(404).ok(), None, false),
            ErrorClass::NoEndpoint
        );
        assert_eq!(class(400), ErrorClass::BadRequest);
        assert_eq!(class(413), ErrorClass::BadRequest);
        for status in [429, 500, 502, 503, 504, 529] {
            assert_eq!(class(status), ErrorClass::Retry, "{status}");
        }
        assert_eq!(class(501), ErrorClass::Unavailable);
        assert_eq!(
            ErrorClass::classify(None, None, true),
            ErrorClass::Unavailable
        );
        let quota = ErrorClass::classify(
            StatusCode::from_u16(429).ok(),
            Some(ErrorClass::Unavailable),
            true,
        );
        assert_eq!(quota, ErrorClass::Unavailable);
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let base = Duration::from_millis(500);
        for attempt in 1..=4 {
            let full = base * 2u32.pow(attempt - 1);
            let wait = backoff(base, attempt);
            assert!(wait >= full / 2 && wait <= full, "{attempt}: {wait:?}");
        }
        let late = backoff(base, 40);
        assert!(late >= BACKOFF_CAP / 2 && late <= BACKOFF_CAP);
    }

    #[test]
    fn retry_after_reads_seconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert(RETRY_AFTER, "0.5".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(500)));
        headers.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&headers), None);
    }
}
