//! The accept loop of `mew up`: every connection is served under limits that keep the node
//! answering whatever its clients do.
//!
//! - **A bounded number of connections**, below the process's open-file limit (raised to its
//!   hard limit at start), so accepting never fails for want of file descriptors and the
//!   node keeps room for its store, its child processes and its own clients.
//! - **Idle connections make room.** At the limit, a new connection closes the oldest one that
//!   has no request in flight: one that has not sent its first request's headers yet (a
//!   slowloris client), or a kept-alive one waiting for its next request. Only when every
//!   connection is busy is the newcomer turned away (`503`). A probe of `/healthz` therefore
//!   gets through a flood of half-sent requests.
//! - **Timeouts:** a connection has `header_timeout` to send its first request's headers
//!   (after a TLS handshake of at most [`HANDSHAKE_TIMEOUT`]), and `idle_timeout` for each
//!   later one. Request bodies are timed by the router (`ServerOptions::body_timeout`).
//! - **Graceful shutdown:** when `shutdown` fires the loop stops accepting and every
//!   connection finishes its request in flight, then closes.
//!
//! hyper serves each connection (HTTP/1.1, or HTTP/2 for gRPC: h2c by its preface, or `h2`
//! by TLS ALPN); this module only decides which connections live.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, HttpBody};
use axum::http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;
use tracing::{debug, info, warn};

/// How long a client gets to finish its TLS handshake.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The fewest file descriptors kept free of connections for everything else the node opens.
const MIN_RESERVED_FILES: u64 = 64;

/// The default cap on connections, however high the open-file limit.
const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;

/// Requests one HTTP/2 connection may have in flight at once.
const H2_MAX_STREAMS: u32 = 100;

/// The largest header block of an HTTP/2 request (hyper's HTTP/1.1 limit is of the same
/// order).
const H2_MAX_HEADER_LIST: u32 = 64 * 1024;

/// How often an HTTP/2 connection is pinged, and how long the answer may take.
const H2_PING_INTERVAL: Duration = Duration::from_secs(30);

/// The limits one server holds its connections to.
#[derive(Clone, Debug)]
pub(crate) struct ConnectionLimits {
    /// Connections served at once.
    pub(crate) max_connections: usize,
    /// The time a new connection has to send its first request's headers (zero: no limit).
    pub(crate) header_timeout: Duration,
    /// The time a kept-alive connection may wait for (the headers of) its next request
    /// (zero: no limit).
    pub(crate) idle_timeout: Duration,
}

impl ConnectionLimits {
    /// The limits for a process whose open-file limit is `files`: `configured` connections,
    /// or as many as leave a quarter of the files (at least [`MIN_RESERVED_FILES`], at most
    /// 1024) to the rest of the node, up to [`DEFAULT_MAX_CONNECTIONS`]. A configured number
    /// above that room is lowered to it, with a warning.
    pub(crate) fn for_files(
        files: u64,
        configured: Option<usize>,
        header_timeout: Duration,
        idle_timeout: Duration,
    ) -> Self {
        let reserved = (files / 4).clamp(MIN_RESERVED_FILES, 1024);
        let room = files.saturating_sub(reserved).max(1);
        let max = match configured {
            Some(n) if n as u64 > room => {
                warn!(
                    configured = n,
                    open_file_limit = files,
                    "limits.max_connections is more than the open-file limit leaves room for; serving {room} at most"
                );
                room
            }
            Some(n) => n as u64,
            None => room.min(DEFAULT_MAX_CONNECTIONS),
        };
        Self {
            max_connections: usize::try_from(max).unwrap_or(usize::MAX).max(1),
            header_timeout,
            idle_timeout,
        }
    }
}

/// Raises the soft open-file limit of this process to its hard limit, and returns the limit
/// now in force.
pub(crate) fn raise_file_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    if let Some(maximum) = limit.maximum
        && maximum > current
    {
        let raised = rustix::process::Rlimit {
            current: Some(maximum),
            maximum: Some(maximum),
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                debug!(from = current, to = maximum, "raised the open-file limit");
                return maximum;
            }
            Err(error) => debug!(%error, "cannot raise the open-file limit"),
        }
    }
    current
}

/// One connection as the registry sees it.
struct Entry {
    state: Arc<ConnState>,
    /// Closes the connection at once.
    evict: CancellationToken,
}

/// What a connection's requests tell the registry.
#[derive(Default)]
struct ConnState {
    /// Requests whose answer has not been sent whole yet.
    in_flight: AtomicUsize,
    /// Whether any request arrived.
    served: AtomicBool,
}

/// Every connection whose socket is open, oldest first: an entry goes when its socket is
/// closed, so the count is the count of open sockets.
#[derive(Default)]
struct Registry {
    next: u64,
    entries: BTreeMap<u64, Entry>,
}

impl Registry {
    /// Tells the oldest connection without a request in flight (and not told already) to
    /// close; false when there is none.
    fn evict_oldest_idle(&mut self) -> bool {
        let idle = self.entries.values().find(|entry| {
            !entry.evict.is_cancelled() && entry.state.in_flight.load(Ordering::SeqCst) == 0
        });
        match idle {
            Some(entry) => {
                entry.evict.cancel();
                true
            }
            None => false,
        }
    }

    fn insert(&mut self, state: Arc<ConnState>, evict: CancellationToken) -> u64 {
        let id = self.next;
        self.next += 1;
        self.entries.insert(id, Entry { state, evict });
        id
    }
}

/// A connection's registration, removed when its socket is closed.
struct Registered {
    registry: Arc<Mutex<Registry>>,
    /// Poked each time a connection closes.
    closed: Arc<tokio::sync::Notify>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.registry).entries.remove(&self.id);
        self.closed.notify_one();
    }
}

fn lock(registry: &Mutex<Registry>) -> std::sync::MutexGuard<'_, Registry> {
    registry.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Serves `service` on `listener` (over TLS with `tls`) under `limits`, until `shutdown`
/// fires and every connection has finished its request in flight.
pub(crate) async fn serve<S>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    service: S,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) where
    S: tower::Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let registry = Arc::new(Mutex::new(Registry::default()));
    let closed = Arc::new(tokio::sync::Notify::new());
    let tracker = TaskTracker::new();
    let mut warned: Option<Instant> = None;
    loop {
        // Room first: at the limit, the oldest idle connection is told to close, and the next
        // connection is accepted once a socket is closed. With every connection busy, the
        // next one is turned away.
        let full = {
            let mut registry = lock(&registry);
            (registry.entries.len() >= limits.max_connections).then(|| registry.evict_oldest_idle())
        };
        if full == Some(true) {
            tokio::select! {
                () = closed.notified() => {}
                () = shutdown.cancelled() => break,
            }
            continue;
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors (something else of the node holds many): an idle
                // connection makes room, and the loop breathes before trying again.
                let starved = rustix::io::Errno::from_io_error(&error).is_some_and(|errno| {
                    errno == rustix::io::Errno::MFILE || errno == rustix::io::Errno::NFILE
                });
                if starved {
                    lock(&registry).evict_oldest_idle();
                }
                if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                    warn!(%error, open = lock(&registry).entries.len(), "cannot accept a connection");
                    warned = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(if starved { 50 } else { 5 })).await;
                continue;
            }
        };
        // Small SSE frames must leave at once: no Nagle delay waiting for an ACK.
        let _ = tcp.set_nodelay(true);
        let state = Arc::new(ConnState::default());
        let evict = CancellationToken::new();
        if full == Some(false) {
            debug!(%peer, "every connection is busy; turning one away");
            if tls.is_none() {
                turn_away(&tcp);
            }
            continue;
        }
        let registered = Registered {
            id: lock(&registry).insert(state.clone(), evict.clone()),
            registry: registry.clone(),
            closed: closed.clone(),
        };
        let connection = Connection {
            service: service.clone(),
            limits: limits.clone(),
            state,
            evict,
            shutdown: shutdown.clone(),
            peer,
        };
        let tls = tls.clone();
        tracker.spawn(async move {
            let _registered = registered;
            match tls {
                None => connection.run(tcp).await,
                Some(acceptor) => {
                    let handshake = tokio::select! {
                        done = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)) => done,
                        () = connection.evict.cancelled() => return,
                        () = connection.shutdown.cancelled() => return,
                    };
                    match handshake {
                        Ok(Ok(stream)) => connection.run(stream).await,
                        Ok(Err(error)) => debug!(peer = %connection.peer, %error, "TLS handshake failed"),
                        Err(_) => debug!(peer = %connection.peer, "TLS handshake timed out"),
                    }
                }
            }
        });
    }
    drop(listener);
    tracker.close();
    let open = lock(&registry).entries.len();
    if open > 0 {
        info!(connections = open, "waiting for open connections to finish");
    }
    tracker.wait().await;
}

/// The answer to a connection turned away because every connection is busy: a 503 with an
/// A2A error body, as HTTP/1.1 bytes (hyper never sees such a connection).
fn busy_response() -> Vec<u8> {
    let body = serde_json::json!({"error": {
        "code": 503,
        "status": "UNAVAILABLE",
        "message": "every connection of the node is busy; try again",
        "details": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "INTERNAL",
            "domain": "a2a-protocol.org",
        }],
    }})
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Tells a client that every connection is busy, as far as its socket takes it at once (a
/// new socket's buffer takes it all); the connection closes when `tcp` is dropped.
fn turn_away(tcp: &TcpStream) {
    let _ = tcp.try_write(&busy_response());
}

/// One accepted connection and what governs it.
struct Connection<S> {
    service: S,
    limits: ConnectionLimits,
    state: Arc<ConnState>,
    evict: CancellationToken,
    shutdown: CancellationToken,
    peer: SocketAddr,
}

impl<S> Connection<S>
where
    S: tower::Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    /// Serves HTTP/1.1 or HTTP/2 on `io` until the client closes, a timeout, eviction, or shutdown.
    async fn run<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let state = self.state.clone();
        let service = self.service.clone();
        let peer = self.peer;
        let handler = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            // Who is calling, for the rules that depend on it (`metrics.access: loopback`).
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            let guard = InFlight::start(state.clone());
            let call = service.clone().oneshot(request);
            async move {
                let response = call.await?;
                Ok::<_, Infallible>(response.map(|body| {
                    Body::new(Tracked {
                        body,
                        _guard: guard,
                    })
                }))
            }
        });
        // HTTP/1.1, or HTTP/2 when the connection opens with its preface (h2c) or TLS chose
        // it by ALPN: gRPC shares the node's port with the HTTP bindings.
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .keep_alive(true)
            // hyper times the headers of every request, the first one included; the first
            // one has the shorter `header_timeout` below.
            .header_read_timeout(
                (!self.limits.idle_timeout.is_zero()).then_some(self.limits.idle_timeout),
            );
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(H2_MAX_STREAMS)
            .max_header_list_size(H2_MAX_HEADER_LIST)
            // A peer that stops answering pings is gone: its connection is closed.
            .keep_alive_interval(H2_PING_INTERVAL)
            .keep_alive_timeout(H2_PING_INTERVAL);
        let connection = builder.serve_connection(TokioIo::new(io), handler);
        tokio::pin!(connection);
        let first_request = async {
            if self.limits.header_timeout.is_zero() {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(self.limits.header_timeout).await;
        };
        tokio::pin!(first_request);
        let mut first_request_timed = false;
        let mut draining = false;
        loop {
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(error) = served {
                        debug!(peer = %self.peer, %error, "connection ended");
                    }
                    return;
                }
                () = self.evict.cancelled() => {
                    debug!(peer = %self.peer, "closing an idle connection to make room");
                    return;
                }
                () = self.shutdown.cancelled(), if !draining => {
                    draining = true;
                    connection.as_mut().graceful_shutdown();
                }
                () = &mut first_request, if !first_request_timed => {
                    first_request_timed = true;
                    if !self.state.served.load(Ordering::SeqCst) {
                        debug!(peer = %self.peer, "no request headers in time; closing");
                        return;
                    }
                }
            }
        }
    }
}

/// A request in flight on its connection, from its headers to the last byte of its answer.
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn start(state: Arc<ConnState>) -> Self {
        state.served.store(true, Ordering::SeqCst);
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An answer's body, which keeps its request in flight until it is sent whole or dropped.
struct Tracked {
    body: Body,
    /// Dropped with the body.
    _guard: InFlight,
}

impl HttpBody for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Serves `app` on `tcp` (over TLS with `tls`) with generous limits, until the test ends.
#[cfg(test)]
pub(crate) fn spawn_for_test(
    tcp: TcpListener,
    tls: Option<tokio_rustls::rustls::ServerConfig>,
    app: axum::Router,
) {
    let service = tower::service_fn(move |request: Request<Incoming>| {
        tower::ServiceExt::oneshot(app.clone(), request)
    });
    let limits =
        ConnectionLimits::for_files(1024, None, Duration::from_secs(30), Duration::from_secs(30));
    let tls = tls.map(|config| TlsAcceptor::from(Arc::new(config)));
    tokio::spawn(serve(tcp, tls, service, limits, CancellationToken::new()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_stay_below_the_open_file_limit() {
        let limits = |files, configured| {
            ConnectionLimits::for_files(files, configured, Duration::ZERO, Duration::ZERO)
                .max_connections
        };
        assert_eq!(limits(1024, None), 768);
        assert_eq!(limits(256, None), 192);
        assert_eq!(limits(100, None), 36);
        assert_eq!(limits(1 << 20, None), 10_000);
        assert_eq!(limits(1024, Some(100)), 100);
        assert_eq!(limits(1024, Some(5000)), 768);
        assert_eq!(limits(10, None), 1);
    }

    #[test]
    fn a_full_registry_closes_its_oldest_idle_connection() {
        let mut registry = Registry::default();
        let busy = Arc::new(ConnState::default());
        busy.in_flight.store(1, Ordering::SeqCst);
        let idle = [
            Arc::new(ConnState::default()),
            Arc::new(ConnState::default()),
        ];
        let tokens: Vec<CancellationToken> = (0..3).map(|_| CancellationToken::new()).collect();
        registry.insert(busy.clone(), tokens[0].clone());
        registry.insert(idle[0].clone(), tokens[1].clone());
        registry.insert(idle[1].clone(), tokens[2].clone());
        // The busy one is older, but only an idle one makes room: the oldest idle one.
        assert!(registry.evict_oldest_idle());
        assert!(!tokens[0].is_cancelled());
        assert!(tokens[1].is_cancelled());
        assert!(!tokens[2].is_cancelled());
        // Told once: its socket stays counted until it is closed; the next one is told next.
        assert_eq!(registry.entries.len(), 3);
        idle[1].in_flight.store(1, Ordering::SeqCst);
        assert!(
            !registry.evict_oldest_idle(),
            "every other connection is busy"
        );
    }
}
