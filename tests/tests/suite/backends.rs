//! The backends the conformance suite runs against: in-process, Mew over HTTP and gRPC, the
//! Python SDK server, and a real `mew` node.

use std::sync::Arc;

use mew_cards::{AgentInterface, binding};
use mew_tests::EchoAgent;
use mew_tests::node::MewNode;
use mew_tests::python::PythonEchoServer;
use mew_transport::{AgentTransport, Binding, ClientOptions, RemoteAgent};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Where the agent under test lives and how it is reached.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// The `EchoAgent` object itself.
    InProcess,
    /// `EchoAgent` behind `mew_transport::router`, reached by `RemoteAgent` over JSON-RPC.
    MewJsonRpc,
    /// The same over HTTP+JSON.
    MewRest,
    /// `EchoAgent` behind `mew_transport::grpc_router` (beside `router`, on one port that
    /// speaks HTTP/1.1 and h2c), reached by `RemoteAgent` over gRPC.
    MewGrpc,
    /// The Python SDK's echo server, reached by `RemoteAgent` over JSON-RPC.
    PythonJsonRpc,
    /// The same over HTTP+JSON.
    PythonRest,
    /// The same over gRPC (the SDK's `GrpcHandler` on the server's second port).
    PythonGrpc,
    /// A `mew up` node whose default role runs `tests/peers/echo_role.py`, reached by
    /// `RemoteAgent` at the node's front agent over JSON-RPC.
    NodeJsonRpc,
    /// The same over HTTP+JSON.
    NodeRest,
    /// The same over gRPC (on the node's own port).
    NodeGrpc,
}

/// An agent under test, with whatever keeps it alive.
pub struct Backend {
    pub agent: Arc<dyn AgentTransport>,
    _server: Option<ServerGuard>,
    _python: Option<PythonEchoServer>,
    _node: Option<MewNode>,
}

/// A Mew server task, aborted on drop.
pub struct ServerGuard(JoinHandle<()>);

impl Drop for ServerGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves `agent` (built for its base URL) on a free loopback port: the HTTP bindings and,
/// over h2c on the same port, gRPC.
pub async fn serve<F>(make: F) -> anyhow::Result<(String, ServerGuard)>
where
    F: FnOnce(&str) -> Arc<dyn AgentTransport>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base_url = format!("http://{}", listener.local_addr()?);
    let agent = make(&base_url);
    let options = mew_transport::ServerOptions::default();
    let router =
        mew_transport::router(agent.clone()).merge(mew_transport::grpc_router(agent, &options));
    let handle = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok((base_url, ServerGuard(handle)))
}

/// An `EchoAgent` whose card lists a `GRPC` interface at `url` besides the HTTP ones, as
/// [`serve`] serves all three.
pub fn echo_with_grpc(url: &str) -> Arc<dyn AgentTransport> {
    let mut card = EchoAgent::default_card(url);
    card.supported_interfaces
        .push(AgentInterface::new(url, binding::GRPC));
    Arc::new(EchoAgent::with_card(card))
}

fn options(binding: Binding) -> ClientOptions {
    ClientOptions {
        binding: Some(binding),
        ..ClientOptions::default()
    }
}

impl Backend {
    pub async fn start(kind: Kind) -> anyhow::Result<Self> {
        let remote = |agent: RemoteAgent| Arc::new(agent) as Arc<dyn AgentTransport>;
        Ok(match kind {
            Kind::InProcess => Self {
                agent: Arc::new(EchoAgent::new("http://127.0.0.1:1")),
                _server: None,
                _python: None,
                _node: None,
            },
            Kind::MewJsonRpc | Kind::MewRest => {
                let (url, guard) = serve(|url| Arc::new(EchoAgent::new(url))).await?;
                let binding = if matches!(kind, Kind::MewJsonRpc) {
                    Binding::JsonRpc
                } else {
                    Binding::HttpJson
                };
                let agent = RemoteAgent::resolve_with(&url, options(binding)).await?;
                anyhow::ensure!(
                    agent.binding() == binding,
                    "the client picked {:?}",
                    agent.binding()
                );
                Self {
                    agent: remote(agent),
                    _server: Some(guard),
                    _python: None,
                    _node: None,
                }
            }
            Kind::MewGrpc => {
                let (url, guard) = serve(echo_with_grpc).await?;
                let agent = RemoteAgent::resolve_with(&url, options(Binding::Grpc)).await?;
                anyhow::ensure!(
                    agent.binding() == Binding::Grpc,
                    "the client picked {:?}",
                    agent.binding()
                );
                Self {
                    agent: remote(agent),
                    _server: Some(guard),
                    _python: None,
                    _node: None,
                }
            }
            Kind::PythonJsonRpc | Kind::PythonRest | Kind::PythonGrpc => {
                let server = PythonEchoServer::start().await?;
                let binding = match kind {
                    Kind::PythonJsonRpc => Binding::JsonRpc,
                    Kind::PythonRest => Binding::HttpJson,
                    _ => Binding::Grpc,
                };
                let agent = RemoteAgent::resolve_with(&server.base_url, options(binding)).await?;
                anyhow::ensure!(
                    agent.binding() == binding,
                    "the client picked {:?}",
                    agent.binding()
                );
                Self {
                    agent: remote(agent),
                    _server: None,
                    _python: Some(server),
                    _node: None,
                }
            }
            Kind::NodeJsonRpc | Kind::NodeRest | Kind::NodeGrpc => {
                let node = MewNode::start_echo("", &[]).await?;
                let binding = match kind {
                    Kind::NodeJsonRpc => Binding::JsonRpc,
                    Kind::NodeRest => Binding::HttpJson,
                    _ => Binding::Grpc,
                };
                let agent = node.agent("", binding).await?;
                Self {
                    agent: remote(agent),
                    _server: None,
                    _python: None,
                    _node: Some(node),
                }
            }
        })
    }
}
