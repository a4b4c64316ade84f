//! `mew up`: assembles the node (roles, task store, task manager, HTTP surface) and runs it until stopped.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use mew_cards::{CardOptions, RoleDefinition, front_card, role_base_url, role_card};
use mew_transport::{AgentTransport, ServerOptions};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::agent::delegate::{AgentTool, Directory, LocalRole};
use crate::agent::runner::ModelExecutor;
use crate::config::Config;
use crate::permission::PermissionEngine;
use crate::process::{ledger_dir, reap_orphans};
use crate::provider::Providers;
use crate::roles::catalog::{Catalog, RoleDirs, Severity};
use crate::roles::command::CommandExecutor;
use crate::server::PublishedRole;
use crate::server::agent::RoleAgent;
use crate::tasks::executor::Executor;
use crate::tasks::manager::{Limits, Roles, TaskManager};
use crate::tasks::sqlite::SqliteStore;
use crate::tools::registry::ToolRegistry;

/// The node's roles and what runs them.
struct NodeRoles {
    catalog: Catalog,
    command: Arc<dyn Executor>,
    model: Arc<dyn Executor>,
}

impl Roles for NodeRoles {
    fn role(&self, name: &str) -> Option<Arc<RoleDefinition>> {
        self.catalog.get(name)
    }

    fn executor(&self, role: &RoleDefinition) -> Arc<dyn Executor> {
        if role.is_command() {
            self.command.clone()
        } else {
            self.model.clone()
        }
    }
}

/// Loads the role catalog from the standard directories plus `roles.dirs`.
pub(crate) fn load_catalog(config: &Config) -> Catalog {
    let mut dirs = RoleDirs::standard(config.home_dir.as_deref(), &config.project_dir);
    dirs.extra.extend(config.roles.dirs.iter().cloned());
    Catalog::load(&dirs)
}

/// Starts the node and serves until Ctrl-C or SIGTERM.
pub(crate) async fn run(mut config: Config) -> anyhow::Result<()> {
    let catalog = load_catalog(&config);
    for problem in catalog.problems() {
        match problem.severity {
            Severity::Error => {
                warn!(path = %problem.path, "skipped a role file: {}", problem.message)
            }
            Severity::Warning => warn!(path = %problem.path, "{}", problem.message),
        }
    }
    let Some(default_role) = catalog.get(&config.node.default_role) else {
        bail!(
            "the default role {:?} is not a known role; known roles: {}",
            config.node.default_role,
            catalog
                .roles()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };

    let listener = TcpListener::bind(config.node.listen_address())
        .await
        .with_context(|| format!("cannot listen on {}", config.node.listen_address()))?;
    config.node.bound_to(listener.local_addr()?);
    let base = config.node.public_url.clone();

    let database = config.node.data_dir.join("tasks.db");
    let store = SqliteStore::open(&database)
        .with_context(|| format!("cannot open the task store at {}", database.display()))?;
    // Before the task manager fails the tasks a crashed node left running: kill their commands.
    let ledger = ledger_dir(&config.node.data_dir);
    for reaped in reap_orphans(&ledger) {
        warn!(
            task = %reaped.task,
            role = %reaped.role,
            pgid = reaped.pgid,
            "killed a command the previous run of the node left running"
        );
    }
    let env: Arc<HashMap<String, String>> = Arc::new(std::env::vars().collect());
    let limits = Limits {
        max_running: config.limits.max_running_tasks,
        max_queued: config.limits.max_queued_tasks,
        task_timeout: config.limits.task_timeout,
        event_buffer: config.limits.event_buffer,
    };
    let providers = Arc::new(
        Providers::from_config(&config, &env).context("cannot set up the model providers")?,
    );
    let permissions = Arc::new(
        PermissionEngine::from_config(&config).context("cannot read the permission rules")?,
    );
    let directory = Arc::new(Directory::default());
    let published: Vec<Arc<RoleDefinition>> = catalog.published().cloned().collect();
    let all_roles: Vec<Arc<RoleDefinition>> = catalog.roles().cloned().collect();
    let problems: Vec<_> = catalog.problems().to_vec();
    let roles = Arc::new(NodeRoles {
        catalog,
        command: Arc::new(CommandExecutor::new(
            env.clone(),
            config.limits.task_timeout,
            Some(ledger),
        )),
        model: Arc::new(ModelExecutor {
            providers: providers.clone(),
            tools: {
                let mut tools = ToolRegistry::builtin();
                tools.register(Arc::new(AgentTool {
                    directory: directory.clone(),
                    max_depth: 3,
                }));
                tools
            },
            permissions,
            env,
            project_dir: config.project_dir.clone(),
            default_model: config.agent.model.clone(),
            max_tokens: config.agent.max_tokens,
        }),
    });
    let manager = TaskManager::start(Arc::new(store.clone()), roles, limits).await?;

    let options = CardOptions {
        node_name: config.node.name.clone(),
        ..CardOptions::default()
    };
    // Every role, published or not, can take delegated work from this node's agents.
    let local = all_roles
        .iter()
        .map(|role| {
            let card = role_card(role, &role_base_url(&base, &role.name), &options);
            let agent: Arc<dyn AgentTransport> =
                Arc::new(RoleAgent::role(manager.clone(), role.clone(), card));
            (
                role.name.clone(),
                LocalRole {
                    description: role.description.clone(),
                    agent,
                },
            )
        })
        .collect();
    directory.set_local(local);
    let published_roles: Vec<PublishedRole> = published
        .iter()
        .map(|role| {
            let card = role_card(role, &role_base_url(&base, &role.name), &options);
            let agent: Arc<dyn AgentTransport> =
                Arc::new(RoleAgent::role(manager.clone(), role.clone(), card.clone()));
            PublishedRole {
                name: role.name.clone(),
                agent,
                card,
            }
        })
        .collect();
    let refs: Vec<&RoleDefinition> = published.iter().map(AsRef::as_ref).collect();
    let front = front_card(&refs, &base, &default_role.name, &options);
    let front: Arc<dyn AgentTransport> =
        Arc::new(RoleAgent::front(manager.clone(), default_role, front));
    let status = json!({
        "name": config.node.name,
        "url": base,
        "roles": published.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        "problems": problems,
    });
    let server_options = ServerOptions {
        max_body_bytes: config.limits.max_body_bytes,
        ..ServerOptions::default()
    };
    let app = crate::server::app(front, &published_roles, status, &server_options);

    println!("mew: listening on {base}");
    println!(
        "mew: {} roles: {}",
        published.len(),
        published
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !problems.is_empty() {
        println!(
            "mew: {} problems in role files (see `mew agents`)",
            problems.len()
        );
    }
    match providers.default() {
        Some(provider) => println!("mew: model roles run on provider {}", provider.name()),
        None => println!(
            "mew: no model provider configured: model roles fail until one is (set ANTHROPIC_API_KEY or OPENAI_API_KEY, or add `providers:` to the config)"
        ),
    }
    println!("mew: tasks in {}", database.display());
    info!(url = %base, roles = published.len(), "node started");

    // On Ctrl-C or SIGTERM: stop the tasks first, so that open streams and
    // blocking sends see their final state and end; then let the server drain,
    // for at most the grace period.
    let grace = config.node.shutdown_grace;
    let stopping = CancellationToken::new();
    let signal = {
        let (manager, stopping) = (manager.clone(), stopping.clone());
        async move {
            shutdown_signal().await;
            info!("stopping: canceling running tasks");
            manager.stop();
            stopping.cancel();
        }
    };
    let app = tower::ServiceExt::map_request(app, crate::server::strip_trailing_slash);
    let server = axum::serve(
        listener,
        axum::ServiceExt::<axum::extract::Request>::into_make_service(app),
    )
    .with_graceful_shutdown(signal);
    tokio::select! {
        served = server => served.context("the HTTP server failed")?,
        () = async { stopping.cancelled().await; tokio::time::sleep(grace).await } => {
            warn!("connections still open after the shutdown grace period; closing them");
        }
    }
    info!("shutting down");
    manager.shutdown(config.node.shutdown_grace).await;
    drop(manager);
    if let Err(e) = store.close().await {
        warn!(error = %e, "closing the task store failed");
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
