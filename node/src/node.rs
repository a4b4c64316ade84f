//! The node's runtime (roles, task store, task manager), which `mew up`, `mew run` and
//! `mew chat` assemble alike, and `mew up`, which serves it over HTTP until stopped.

use std::collections::HashMap;
use std::fs::{File, TryLockError};
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use anyhow::{Context as _, bail};
use mew_cards::{AgentCard, CardOptions, RoleDefinition, front_card, role_base_url, role_card};
use mew_transport::{AgentTransport, ServerOptions};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::agent::callback::CommandDelegations;
use crate::agent::delegate::{AgentTool, Directory, LocalRole, SendMessageTool};
use crate::agent::runner::ModelExecutor;
use crate::agent::skill_tools::{InstallSkill, LoadSkill};
use crate::agent::task_tools::{TaskGet, TaskList, TaskStop};
use crate::config::Config;
use crate::hooks::rules::HookFile;
use crate::hooks::{
    HookDispatcher, HookSettings, TrustStore, default_trust_file, load, standard_files,
};
use crate::mcp::{McpContext, McpManager};
use crate::peers::Peers;
use crate::permission::PermissionPolicy;
use crate::plugins::{LoadedPlugins, Plugin, PluginScope};
use crate::process::{ledger_dir, reap_orphans};
use crate::provider::Providers;
use crate::roles::catalog::{RoleCatalog, RoleDirs, Severity};
use crate::roles::command::CommandExecutor;
use crate::server::PublishedRole;
use crate::server::agent::RoleAgent;
use crate::skills::catalog::{SkillCatalog, SkillRoot, SkillSource, standard_roots};
use crate::tasks::executor::Executor;
use crate::tasks::manager::{Limits, Roles, TaskManager};
use crate::tasks::store::TaskStore;
use crate::tools::registry::ToolRegistry;

/// The node's roles and what runs them. The catalog is replaced whole when role files
/// change; a task's turn holds the definition it started with.
struct NodeRoles {
    catalog: RwLock<Arc<RoleCatalog>>,
    command: Arc<dyn Executor>,
    remote: Arc<dyn Executor>,
    model: Arc<dyn Executor>,
}

impl NodeRoles {
    fn catalog(&self) -> Arc<RoleCatalog> {
        self.catalog
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Roles for NodeRoles {
    fn role(&self, name: &str) -> Option<Arc<RoleDefinition>> {
        self.catalog().get(name)
    }

    fn executor(&self, role: &RoleDefinition) -> Arc<dyn Executor> {
        if role.is_command() {
            self.command.clone()
        } else if role.is_remote() {
            self.remote.clone()
        } else {
            self.model.clone()
        }
    }
}

/// The directories roles are loaded from: the installed plugins' agents, the standard ones,
/// and `roles.dirs`.
fn role_dirs(config: &Config) -> RoleDirs {
    let mut dirs = RoleDirs::standard(config.home_dir.as_deref(), &config.project_dir);
    dirs.extra.extend(config.roles.dirs.iter().cloned());
    dirs.plugins = load_plugins(config)
        .plugins
        .iter()
        .flat_map(Plugin::agent_paths)
        .collect();
    dirs
}

/// The installed plugins of the user and the project, each verified against its lock file
/// (a changed one is a problem, and none of its parts load).
pub(crate) fn load_plugins(config: &Config) -> LoadedPlugins {
    crate::plugins::load(&crate::plugins::standard_roots(
        config.home_dir.as_deref(),
        &config.project_dir,
    ))
}

/// The skill roots: the plugins' commands and skills, then the standard ones and
/// `skills.roots`, so the user's and the project's own of the same name win over a plugin's.
pub(crate) fn skill_roots(config: &Config, plugins: &LoadedPlugins) -> Vec<SkillRoot> {
    let commands = plugins.plugins.iter().flat_map(|plugin| {
        plugin
            .command_paths()
            .into_iter()
            .map(|dir| SkillRoot::commands(dir, SkillSource::Plugin).of_plugin(&plugin.name))
    });
    let skills = plugins.plugins.iter().flat_map(|plugin| {
        plugin
            .skill_paths()
            .into_iter()
            .map(|dir| SkillRoot::new(dir, SkillSource::Plugin).of_plugin(&plugin.name))
    });
    let mut roots: Vec<SkillRoot> = commands.chain(skills).collect();
    roots.extend(standard_roots(
        config.home_dir.as_deref(),
        &config.project_dir,
        &config.skills.roots,
    ));
    roots
}

/// Every hook file, in the order its rules run: the user's and the project's, then the
/// plugins' (a project's plugin's hooks, like the project's own, run once trusted).
pub(crate) fn hook_files(config: &Config, plugins: &LoadedPlugins) -> Vec<HookFile> {
    let mut files = standard_files(config.home_dir.as_deref(), &config.project_dir);
    files.extend(plugin_hook_files(plugins, None));
    files
}

/// The hooks files of the plugins (of one scope, when given).
pub(crate) fn plugin_hook_files(
    plugins: &LoadedPlugins,
    scope: Option<PluginScope>,
) -> Vec<HookFile> {
    plugins
        .plugins
        .iter()
        .filter(|plugin| scope.is_none_or(|scope| plugin.scope == scope))
        .filter_map(|plugin| {
            let file = plugin.hooks_file()?;
            let scope = match plugin.scope {
                PluginScope::User => crate::hooks::rules::Scope::User,
                PluginScope::Project => crate::hooks::rules::Scope::Project,
            };
            Some(HookFile::plugin(file, scope, plugin.root.clone()))
        })
        .collect()
}

/// Loads the role catalog from the standard directories plus `roles.dirs`.
pub(crate) fn load_catalog(config: &Config) -> RoleCatalog {
    RoleCatalog::load(&role_dirs(config))
}

/// Loads the roles as the node runs them: the catalog (its problems logged and skipped) and
/// the default role, which must be one of them.
pub(crate) fn load_roles(config: &Config) -> anyhow::Result<(RoleCatalog, Arc<RoleDefinition>)> {
    let catalog = load_catalog(config);
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
            role_names(&catalog)
        );
    };
    Ok((catalog, default_role))
}

/// The file in the data directory that says where the node using it serves: written by
/// `mew up` once it serves, removed when it stops. `mew run` and `mew chat` use the node it
/// names rather than running the project's roles in-process.
pub(crate) const NODE_FILE: &str = "node.json";

/// The longest [`NODE_FILE`] read, in bytes.
const NODE_FILE_MAX: u64 = 4096;

/// The URL of the node serving from `data_dir`: what its [`NODE_FILE`] says, while a process
/// holds the data directory's lock. `None` when no node runs there (no file, or a file left by
/// a node that died: nobody holds the lock).
pub(crate) fn running_node(data_dir: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::new();
    File::open(data_dir.join(NODE_FILE))
        .ok()?
        .take(NODE_FILE_MAX)
        .read_to_string(&mut text)
        .ok()?;
    let url = serde_json::from_str::<serde_json::Value>(&text).ok()?["url"]
        .as_str()?
        .to_owned();
    // Opened without `create`: a lock file that is not there is not held.
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(data_dir.join("node.lock"))
        .ok()?;
    match lock.try_lock() {
        Err(TryLockError::WouldBlock) => Some(url),
        // Nobody holds it: the file is stale. Dropping the file releases the lock again.
        Ok(()) | Err(TryLockError::Error(_)) => None,
    }
}

/// Writes [`NODE_FILE`] into `data_dir`: the node at `url`, this process. Written whole
/// (through a temporary file), so a reader never sees half of it.
fn write_node_file(data_dir: &Path, url: &str) -> std::io::Result<()> {
    let path = data_dir.join(NODE_FILE);
    let temporary = path.with_extension("json.new");
    let text = json!({ "url": url, "pid": std::process::id() }).to_string();
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, &path)
}

/// The names of the catalog's roles, comma-separated.
fn role_names(catalog: &RoleCatalog) -> String {
    catalog
        .roles()
        .map(|r| r.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The node's runtime without its HTTP surface: roles, the task store, the task manager and
/// what runs tasks. `mew up` serves it over HTTP; `mew run` and `mew chat` use its role agents
/// in-process.
pub(crate) struct Runtime {
    /// The configuration it runs with; cards name `node.public_url`.
    pub(crate) config: Config,
    /// Every task.
    pub(crate) manager: Arc<TaskManager>,
    /// The model providers.
    pub(crate) providers: Arc<Providers>,
    /// The peer nodes and their roles.
    pub(crate) peers: Arc<Peers>,
    /// The MCP servers and their tools.
    pub(crate) mcp: Arc<McpManager>,
    /// The skills model roles can activate.
    pub(crate) skills: Arc<SkillCatalog>,
    /// The hook rules and what runs them.
    pub(crate) hooks: Arc<HookDispatcher>,
    /// What was wrong in the hook files (the rules and files skipped).
    pub(crate) hook_problems: Vec<crate::hooks::HookProblem>,
    /// The node's signing key (cards, JWTs to peers and webhooks).
    pub(crate) identity: Arc<crate::identity::NodeKey>,
    /// The role the front agent runs: the last version that loaded.
    default_role: RwLock<Arc<RoleDefinition>>,
    roles: Arc<NodeRoles>,
    /// The agent of every role, made (and its card signed) when its catalog is published.
    agents: RwLock<HashMap<String, Arc<RoleAgent>>>,
    /// Where delegations find roles: this node's (replaced with the catalog) and the peers'.
    directory: Arc<Directory>,
    /// The delegations command roles' programs ask for (`mew send` inside a turn).
    delegations: Arc<CommandDelegations>,
    /// What a change of role files is looked for in, and what they looked like last.
    role_dirs: RoleDirs,
    role_stamp: std::sync::Mutex<crate::user_file::Stamp>,
    store: Arc<dyn TaskStore>,
    /// The push notification dispatcher.
    push: crate::push::Push,
    /// Held while the runtime uses the data directory.
    _lock: File,
}

impl Runtime {
    /// Loads the roles ([`load_roles`]) and starts the runtime over them.
    pub(crate) async fn load(config: Config, env: HashMap<String, String>) -> anyhow::Result<Self> {
        let (catalog, default_role) = load_roles(&config)?;
        Self::start(config, catalog, default_role, env).await
    }

    /// Starts the runtime: takes the data directory (one process at a time), opens the task
    /// store in it, kills the commands a crashed run left running, sets up the providers, the
    /// permission rules and what runs each kind of role, and starts the task manager (which
    /// fails the tasks a crashed run left unfinished). `env` is the environment that providers,
    /// tools and commands draw on.
    pub(crate) async fn start(
        config: Config,
        catalog: RoleCatalog,
        default_role: Arc<RoleDefinition>,
        env: HashMap<String, String>,
    ) -> anyhow::Result<Self> {
        let lock = lock_data_dir(&config.node.data_dir)?;
        let identity = Arc::new(crate::identity::NodeKey::load_or_create(
            &config.node.data_dir,
        )?);
        let store = crate::tasks::open_store(
            &config.store,
            &config.node.data_dir,
            &env,
            &config.node.public_url,
        )
        .await
        .context("cannot open the task store")?;
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
        let env = Arc::new(env);
        let limits = Limits {
            max_running: config.limits.max_running_tasks,
            max_running_per_role: config.limits.max_running_per_role,
            max_queued: config.limits.max_queued_tasks,
            queue_notice: config.limits.queue_notice,
            task_timeout: config.limits.task_timeout,
            event_buffer: config.limits.event_buffer,
            list_history: config.limits.list_history,
            max_list_bytes: config.limits.max_list_bytes,
            max_attempts: config.limits.max_attempts,
            heartbeat: config.store.lease / 3,
        };
        let providers = Arc::new(
            Providers::new(&config.providers, config.agent.provider.as_deref(), &env)
                .context("cannot set up the model providers")?,
        );
        let permissions = Arc::new(
            PermissionPolicy::new(
                &config.permissions,
                &config.project_dir,
                config.home_dir.as_deref(),
            )
            .context("cannot read the permission rules")?,
        );
        // Peers and MCP servers connect at once, each bounded by its own timeout.
        let client_options = mew_transport::ClientOptions {
            tls: config.tls.client_options().map_err(anyhow::Error::msg)?,
            context_headers: Some(Arc::new(crate::telemetry::TraceHeaders)),
            ..mew_transport::ClientOptions::default()
        };
        let outbound = crate::peers::Outbound {
            env: env.clone(),
            key: identity.clone(),
            issuer: config.node.public_url.clone(),
            subject: config.node.name.clone(),
        };
        let (peers, mcp) = tokio::join!(
            Peers::start_with(&config.peers, &client_options, Some(&outbound)),
            McpManager::start(
                &config.mcp_servers,
                McpContext {
                    env: env.clone(),
                    project_dir: config.project_dir.clone(),
                    ledger: Some(ledger.clone()),
                    vault: Some(Arc::new(crate::mcp::oauth::Vault::new(
                        &config.node.data_dir
                    ))),
                    // Enabled once the node serves (`run`).
                    sign_ins: Some(Arc::default()),
                    memory: Some(Arc::new(crate::mcp::memory::ProtocolMemory::new(
                        &config.node.data_dir,
                    ))),
                },
            ),
        );
        let directory = Arc::new(Directory::new(peers.clone()));
        let plugins = load_plugins(&config);
        for problem in &plugins.problems {
            warn!("plugin: {problem}");
        }
        let skills = Arc::new(SkillCatalog::load(skill_roots(&config, &plugins)));
        for problem in skills.problems() {
            warn!(path = %problem.path, "skill: {}", problem.message);
        }
        let (hooks, hook_problems) = load_hooks(&config, &plugins, &env, &ledger, &directory)?;
        let hooks = Arc::new(hooks);
        let model_tools = {
            let mut tools = ToolRegistry::builtin_with(&config.web, client_options.tls.clone());
            tools.register(Arc::new(AgentTool {
                directory: directory.clone(),
                max_depth: config.agent.max_depth,
            }));
            tools.register(Arc::new(SendMessageTool {
                directory: directory.clone(),
            }));
            tools.register(Arc::new(TaskList {
                directory: directory.clone(),
            }));
            tools.register(Arc::new(TaskGet {
                directory: directory.clone(),
            }));
            tools.register(Arc::new(TaskStop {
                directory: directory.clone(),
            }));
            tools.register(Arc::new(crate::agent::todo_tool::TodoWrite));
            tools.register(Arc::new(LoadSkill {
                directory: directory.clone(),
            }));
            tools.register(Arc::new(InstallSkill {
                catalog: skills.clone(),
                options: config.skills.install_options(|name| env.get(name).cloned()),
                home: config.home_dir.clone(),
                project: config.project_dir.clone(),
            }));
            tools
        };
        let delegations = Arc::new(CommandDelegations::new(
            directory.clone(),
            config.agent.max_depth,
            config.agent.max_children,
            env.clone(),
            config.project_dir.clone(),
        ));
        let roles = Arc::new(NodeRoles {
            catalog: RwLock::new(Arc::new(catalog)),
            command: Arc::new(
                CommandExecutor::new(env.clone(), config.limits.task_timeout, Some(ledger))
                    .with_node_url(config.node.public_url.clone())
                    .with_callback(delegations.clone()),
            ),
            remote: Arc::new(crate::agent::forward::RemoteExecutor {
                directory: directory.clone(),
                max_depth: config.agent.max_depth,
                env: env.clone(),
                project_dir: config.project_dir.clone(),
            }),
            model: Arc::new(ModelExecutor {
                providers: providers.clone(),
                tools: model_tools.clone(),
                mcp: Some(mcp.clone()),
                permissions,
                env,
                project_dir: config.project_dir.clone(),
                agent: config.agent.clone(),
                skills: Some(skills.clone()),
                directory: Some(directory.clone()),
                hooks: Some(hooks.clone()),
                waiting: Default::default(),
            }),
        });
        // Skills that name tools nobody has: a warning each (the skill still works).
        let known: std::collections::HashSet<String> = model_tools
            .specs()
            .into_iter()
            .map(|spec| spec.name)
            .chain(mcp.tools().iter().map(|tool| tool.name().to_owned()))
            .collect();
        for problem in
            skills.validate_tools(|name| known.contains(name) || name.starts_with("mcp__"))
        {
            warn!(path = %problem.path, "skill: {}", problem.message);
        }
        let manager = TaskManager::start(store.clone(), roles.clone(), limits).await?;
        let push = crate::push::Push::start(
            &config.push,
            store.clone(),
            manager.push_wake(),
            identity.clone(),
            &config.node.public_url,
            client_options.tls.clone(),
        );
        let role_dirs = role_dirs(&config);
        let runtime = Self {
            config,
            manager,
            providers,
            peers,
            mcp,
            skills,
            hooks,
            hook_problems,
            identity,
            default_role: RwLock::new(default_role),
            roles,
            agents: RwLock::default(),
            directory,
            // Empty: the first look finds the files "changed" and reads them once more, so a
            // change made while the node started is not missed.
            role_stamp: Default::default(),
            delegations,
            role_dirs,
            store,
            push,
            _lock: lock,
        };
        runtime.publish_agents();
        Ok(runtime)
    }

    /// Makes the agent of every role of the catalog (published or not: each can take
    /// delegated work from this node's agents) and hands them to the delegation directory.
    fn publish_agents(&self) {
        let catalog = self.catalog();
        let agents: HashMap<String, Arc<RoleAgent>> = catalog
            .roles()
            .map(|role| (role.name.clone(), Arc::new(self.role_agent(role))))
            .collect();
        let local = catalog
            .roles()
            .filter_map(|role| {
                let agent = agents.get(&role.name)?.clone();
                Some((
                    role.name.clone(),
                    LocalRole {
                        description: role.description.clone(),
                        agent: agent.clone(),
                        forker: agent,
                    },
                ))
            })
            .collect();
        *self.agents.write().unwrap_or_else(PoisonError::into_inner) = agents;
        self.directory.set_local(local);
    }

    /// Reads the role and skill files again if any changed since the last look, and publishes
    /// what they define now: new roles get agents and cards, changed ones new versions, removed
    /// ones are withdrawn; a file that no longer loads keeps its last good version (with a
    /// problem that says so). Tasks already running keep the definition they started with.
    /// `None` when nothing changed.
    pub(crate) fn reload(&self) -> Option<RoleChanges> {
        let stamp = {
            let mut stamp = self.role_dirs.stamp();
            for root in self.skills.roots() {
                stamp.add_dir(&root.dir, root.depth());
            }
            stamp
        };
        {
            let mut last = self
                .role_stamp
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if *last == stamp {
                return None;
            }
            *last = stamp;
        }
        let before = self.catalog();
        let skills_before = (self.skills.list(), self.skills.problems());
        self.skills.reload();
        let catalog = RoleCatalog::load(&self.role_dirs).keeping_last_good(&before);
        let skills_changed = (self.skills.list(), self.skills.problems()) != skills_before;
        if catalog == *before && !skills_changed {
            return None;
        }
        let changes = RoleChanges::between(&before, &catalog, skills_changed);
        match catalog.get(&self.config.node.default_role) {
            Some(role) => {
                *self
                    .default_role
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = role;
            }
            None => warn!(
                role = %self.config.node.default_role,
                "the default role is gone from the role files; the front agent keeps its last \
                 version"
            ),
        }
        *self
            .roles
            .catalog
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(catalog);
        self.publish_agents();
        Some(changes)
    }

    /// Every role the node knows, as last loaded.
    pub(crate) fn catalog(&self) -> Arc<RoleCatalog> {
        self.roles.catalog()
    }

    /// The role `name`; the error lists the known roles.
    pub(crate) fn known_role(&self, name: &str) -> anyhow::Result<Arc<RoleDefinition>> {
        let catalog = self.catalog();
        catalog.get(name).ok_or_else(|| {
            anyhow::anyhow!(
                "there is no role {name:?}; known roles: {}",
                role_names(&catalog)
            )
        })
    }

    fn card_options(&self) -> CardOptions {
        let (security_schemes, security_requirements) =
            crate::server::auth::Authenticator::card_security(&self.config.auth);
        CardOptions {
            node_name: self.config.node.name.clone(),
            skills: self
                .skills
                .list()
                .iter()
                .map(|skill| (skill.name().to_owned(), skill.meta.description.clone()))
                .collect(),
            security_schemes,
            security_requirements,
            push_notifications: true,
            extended_agent_card: self.config.auth.extended_card.is_some(),
            // gRPC is served on the node's own port (`server/listen.rs`).
            grpc_url: Some(self.config.node.public_url.clone()),
            ..CardOptions::default()
        }
    }

    /// The extended card that goes with the public `card` (`auth.extended_card` applied), or
    /// `None` when none is configured.
    pub(crate) fn extended_card(&self, card: &AgentCard) -> Option<AgentCard> {
        let extra = self.config.auth.extended_card.as_ref()?;
        match mew_cards::extended_card(card, extra) {
            Ok(extended) => Some(self.signed(extended)),
            Err(e) => {
                warn!(card = %card.name, "auth.extended_card: {e}; serving no extended card");
                None
            }
        }
    }

    /// The card of `role`, served under `node.public_url`.
    pub(crate) fn role_card(&self, role: &RoleDefinition) -> AgentCard {
        let base = role_base_url(&self.config.node.public_url, &role.name);
        self.signed(role_card(role, &base, &self.card_options()))
    }

    /// `card` signed with the node key (replacing the key's earlier signature, which an
    /// extended card copies from the public one), its `jku` the node's JWKS; unsigned, with a
    /// warning, if signing fails.
    fn signed(&self, card: AgentCard) -> AgentCard {
        let jku = crate::identity::signing::jwks_url(&self.config.node.public_url);
        match crate::identity::signing::sign_card(&self.identity, card.clone(), &jku) {
            Ok(signed) => signed,
            Err(e) => {
                warn!(card = %card.name, "cannot sign the card: {e:#}");
                card
            }
        }
    }

    /// The agent of `role`: the one made for this version of a role of the catalog.
    pub(crate) fn agent(&self, role: &Arc<RoleDefinition>) -> Arc<RoleAgent> {
        let known = self
            .agents
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&role.name)
            .filter(|agent| agent.definition() == role)
            .cloned();
        known.unwrap_or_else(|| Arc::new(self.role_agent(role)))
    }

    /// The agent of `role` alone.
    fn role_agent(&self, role: &Arc<RoleDefinition>) -> RoleAgent {
        let card = self.role_card(role);
        let extended = self.extended_card(&card);
        RoleAgent::role(self.manager.clone(), role.clone(), card)
            .with_hooks(self.hooks.clone(), self.config.project_dir.clone())
            .with_push(crate::push::Webhooks::new(&self.config.push))
            .with_extended_card(extended)
    }

    /// The node's front agent: runs the default role, sees every task; its card lists the
    /// published roles.
    pub(crate) fn front_agent(&self) -> RoleAgent {
        let catalog = self.catalog();
        let published: Vec<&RoleDefinition> = catalog.published().map(AsRef::as_ref).collect();
        let default_role = self
            .default_role
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let card = self.signed(front_card(
            &published,
            &self.config.node.public_url,
            &default_role.name,
            &self.card_options(),
        ));
        let extended = self.extended_card(&card);
        RoleAgent::front(self.manager.clone(), default_role, card)
            .with_hooks(self.hooks.clone(), self.config.project_dir.clone())
            .with_push(crate::push::Webhooks::new(&self.config.push))
            .with_extended_card(extended)
    }

    /// The node's HTTP surface over the roles as they are now: the front agent, each published
    /// role under `/agents/{role}`, the list of their cards, and `/status`.
    fn router(&self, surface: &Surface) -> axum::Router {
        let catalog = self.catalog();
        let published: Vec<&Arc<RoleDefinition>> = catalog.published().collect();
        if let Some(authenticator) = &surface.authenticator {
            authenticator.set_served_roles(published.iter().map(|r| r.name.clone()).collect());
        }
        let published_roles: Vec<PublishedRole> = published
            .iter()
            .map(|role| {
                let agent = self.agent(role);
                PublishedRole {
                    name: role.name.clone(),
                    card: agent.public_card().clone(),
                    agent,
                }
            })
            .collect();
        let front: Arc<dyn AgentTransport> = Arc::new(self.front_agent());
        let status = json!({
            "name": self.config.node.name,
            "url": self.config.node.public_url,
            "roles": published.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            "problems": catalog.problems(),
            "catalog": crate::roles::catalog::catalog_json(&catalog),
            "hook_problems": self.hook_problems,
            "skill_problems": self.skills.problems(),
            "peers": self.peers.status_json(),
        });
        let status: crate::server::StatusSource = {
            let store = self.store.clone();
            Arc::new(move || {
                let (store, mut status) = (store.clone(), status.clone());
                Box::pin(async move {
                    if store.shared() {
                        status["replicas"] = match store.replicas().await {
                            Ok(replicas) => json!(replicas),
                            Err(e) => json!({ "error": e.to_string() }),
                        };
                    }
                    status
                })
            })
        };
        let dashboard = crate::server::ui::router(crate::server::ui::Dashboard {
            auth: surface.authenticator.clone(),
            secure: self.config.tls.server().is_some(),
            store: self.store.clone(),
            manager: self.manager.clone(),
            overview: self.overview(
                status.clone(),
                published_roles
                    .iter()
                    .map(|role| role.card.clone())
                    .collect(),
            ),
            peers: self.peers.clone(),
            node_url: self.config.node.public_url.clone(),
        });
        let app = crate::server::app(
            front,
            &published_roles,
            &self.identity.jwks(),
            &surface.options,
            crate::server::Guards {
                auth: surface.authenticator.clone(),
                observe: crate::server::observe::Observe {
                    inbound: self.config.telemetry.inbound,
                    front_role: self.config.node.default_role.clone(),
                },
            },
            crate::server::NodeRoutes {
                status,
                ready: surface.ready.clone(),
                dashboard,
            },
        )
        // Authenticated by the turn's token, not by the node's `auth:`.
        .merge(crate::server::callback::router(self.delegations.clone()));
        // Protected by the OAuth flow's state and PKCE: the browser carries no credentials.
        let app = match self.mcp.sign_ins() {
            Some(sign_ins) => app.merge(crate::server::mcp_oauth::router(sign_ins)),
            None => app,
        };
        if !self.config.metrics.enabled {
            return app;
        }
        // Its own access rule (`metrics.access`), not the node's `auth:` alone.
        app.merge(crate::server::metrics::router(
            self.config.metrics.access,
            surface.authenticator.clone(),
            self.metrics_snapshot(),
        ))
    }

    /// What the dashboard's overview shows: `/status`, and the parts that change while the node
    /// runs (MCP servers) or that `/status` leaves out (skills, hooks).
    ///
    /// Each of `cards` is checked against the node's own key set, as `mew card verify` would
    /// check it: what the dashboard shows beside each role.
    fn overview(
        &self,
        status: crate::server::StatusSource,
        cards: Vec<AgentCard>,
    ) -> crate::server::StatusSource {
        let (mcp, skills, hooks) = (self.mcp.clone(), self.skills.clone(), self.hooks.clone());
        // The key set is given: the verifier's client never fetches one, so one serves all.
        let (jwks, cards, client) = (
            self.identity.jwks(),
            Arc::new(cards),
            reqwest::Client::new(),
        );
        Arc::new(move || {
            let (mcp, skills, hooks, status) =
                (mcp.clone(), skills.clone(), hooks.clone(), status.clone());
            let (jwks, cards, client) = (jwks.clone(), cards.clone(), client.clone());
            Box::pin(async move {
                let mut overview = status().await;
                let mut verifier = crate::identity::signing::Verifier::new(Some(jwks), client);
                let mut checks = serde_json::Map::new();
                for card in cards.iter() {
                    let report = match verifier.verify(card, "").await {
                        Ok(reports) => json!(reports),
                        Err(e) => json!([{ "ok": false, "error": e.to_string() }]),
                    };
                    checks.insert(card.name.clone(), report);
                }
                overview["signatures"] = serde_json::Value::Object(checks);
                overview["mcp"] = json!(mcp.status());
                overview["skills"] = skills
                    .list()
                    .iter()
                    .map(|skill| {
                        json!({
                            "name": skill.name(),
                            "description": skill.meta.description,
                            "path": skill.path(),
                        })
                    })
                    .collect();
                overview["hooks"] = hooks
                    .rules()
                    .map(|rule| {
                        json!({
                            "name": rule.name,
                            "event": rule.event.as_str(),
                            "file": rule.source.path,
                            "scope": format!("{:?}", rule.source.scope).to_lowercase(),
                        })
                    })
                    .collect();
                overview
            })
        })
    }

    /// What each scrape of `/metrics` reads from the node, each part with a bounded cost: the
    /// live tasks (the manager's live set), the MCP servers (the configured ones), the push
    /// outbox (counted up to [`OUTBOX_COUNT_LIMIT`]) and the leases held (kept in memory).
    fn metrics_snapshot(&self) -> crate::server::metrics::SnapshotSource {
        let (manager, mcp, store) = (self.manager.clone(), self.mcp.clone(), self.store.clone());
        Arc::new(move || {
            let (manager, mcp, store) = (manager.clone(), mcp.clone(), store.clone());
            Box::pin(async move {
                let tasks = manager.live_counts().await;
                let mcp_servers = mcp
                    .status()
                    .iter()
                    .map(|server| (server.state.as_str(), 1))
                    .collect();
                let push_outbox = match store.push_depth(OUTBOX_COUNT_LIMIT).await {
                    Ok(depth) => Some(i64::try_from(depth).unwrap_or(i64::MAX)),
                    Err(e) => {
                        warn!(error = %e, "metrics: cannot count the push outbox");
                        None
                    }
                };
                let leases_held = store
                    .leases_held()
                    .await
                    .ok()
                    .flatten()
                    .map(|held| i64::try_from(held).unwrap_or(i64::MAX));
                crate::metrics::Snapshot {
                    tasks,
                    mcp_servers,
                    push_outbox,
                    leases_held,
                }
            })
        })
    }

    /// Stops the tasks (waiting up to `node.shutdown_grace`), closes the task store and lets
    /// go of the data directory.
    pub(crate) async fn shutdown(self) {
        let Self {
            config,
            manager,
            roles,
            store,
            mcp,
            hooks,
            push,
            _lock,
            ..
        } = self;
        manager.shutdown(config.node.shutdown_grace).await;
        push.stop().await;
        hooks.shutdown().await;
        mcp.shutdown(MCP_SHUTDOWN_DEADLINE).await;
        drop(manager);
        drop(roles);
        if let Err(e) = store.close().await {
            warn!(error = %e, "closing the task store failed");
        }
    }
}

/// What the node's HTTP surface is made with besides the roles.
struct Surface {
    options: ServerOptions,
    authenticator: Option<Arc<crate::server::auth::Authenticator>>,
    ready: crate::server::Readiness,
}

/// What a [`Runtime::reload`] changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct RoleChanges {
    /// Roles that are new.
    pub(crate) added: Vec<String>,
    /// Roles defined anew (or published or withdrawn from the cards).
    pub(crate) changed: Vec<String>,
    /// Roles that are gone.
    pub(crate) removed: Vec<String>,
    /// Whether the skills changed (every card lists them).
    pub(crate) skills: bool,
    /// The problems of the role files that are new since the last load.
    pub(crate) problems: Vec<crate::roles::catalog::Problem>,
}

impl RoleChanges {
    fn between(before: &RoleCatalog, after: &RoleCatalog, skills: bool) -> Self {
        let mut changes = Self {
            skills,
            ..Self::default()
        };
        for role in after.roles() {
            match before.get(&role.name) {
                None => changes.added.push(role.name.clone()),
                Some(old) if old != *role => changes.changed.push(role.name.clone()),
                Some(_) => {}
            }
        }
        changes.removed = before
            .roles()
            .filter(|role| after.get(&role.name).is_none())
            .map(|role| role.name.clone())
            .collect();
        changes.problems = after
            .problems()
            .iter()
            .filter(|problem| !before.problems().contains(problem))
            .cloned()
            .collect();
        changes
    }

    /// Logs the changes: a line for the roles, a warning for each new problem.
    fn log(&self) {
        let list = |names: &[String]| names.join(", ");
        info!(
            added = %list(&self.added),
            changed = %list(&self.changed),
            removed = %list(&self.removed),
            skills_changed = self.skills,
            "role files changed; serving what they define now"
        );
        for problem in &self.problems {
            warn!(path = %problem.path, "role file: {}", problem.message);
        }
    }
}

/// The hook rules of the user's and the project's files (project hooks only once trusted with
/// `mew hooks trust`), and the problems found, each logged and skipped; `subagent` actions run
/// the roles of `directory`.
fn load_hooks(
    config: &Config,
    plugins: &LoadedPlugins,
    env: &Arc<HashMap<String, String>>,
    ledger: &Path,
    directory: &Arc<Directory>,
) -> anyhow::Result<(HookDispatcher, Vec<crate::hooks::HookProblem>)> {
    let trust = config
        .home_dir
        .as_deref()
        .map(default_trust_file)
        .map(|file| {
            TrustStore::load(&file).unwrap_or_else(|e| {
                warn!(file = %file.display(), "cannot read the trusted hooks: {e}; trusting none");
                TrustStore::default()
            })
        })
        .unwrap_or_default();
    let loaded = load(&hook_files(config, plugins), &trust);
    for problem in &loaded.problems {
        warn!("hook: {problem}");
    }
    let settings = HookSettings {
        env: env.clone(),
        extra_env: config.hooks.env.clone(),
        project_dir: config.project_dir.clone(),
        ledger_dir: Some(ledger.to_path_buf()),
        transcript_dir: Some(config.node.data_dir.join("transcripts")),
    };
    let subagents =
        crate::agent::hook_subagent::HookSubagents::new(directory.clone(), config.agent.max_depth);
    let dispatcher = HookDispatcher::new(loaded.rules, settings)
        .context("cannot start the hook dispatcher")?
        .with_subagents(Arc::new(subagents));
    Ok((dispatcher, loaded.problems))
}

/// How long MCP servers get to close their sessions when the node stops; then their process
/// groups are killed.
const MCP_SHUTDOWN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// Takes `dir` for this process: creates it, and locks `dir/node.lock` until the returned file
/// is dropped (or the process dies). A second process on the same data directory would fail
/// the first one's running tasks and kill its commands as if they were left over from a crash.
/// How often, and how far apart, taking the data directory's lock is tried.
const LOCK_ATTEMPTS: u32 = 20;
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(25);

fn lock_data_dir(dir: &Path) -> anyhow::Result<File> {
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
        // A data directory inside a project is no part of its sources: keep it out of git, the
        // way Python's venv does.
        let ignore = dir.join(".gitignore");
        std::fs::write(
            &ignore,
            "# Created by mew: the node's state, not for version control.\n*\n",
        )
        .with_context(|| format!("cannot write {}", ignore.display()))?;
    }
    let path = dir.join("node.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    // A lock just released can stay held for a moment: the file may be shared with a child
    // process that was forked and has not yet run `exec` (which closes it). Try for a while.
    let mut attempts = 0;
    let locked = loop {
        match file.try_lock() {
            Err(TryLockError::WouldBlock) if attempts < LOCK_ATTEMPTS => {
                attempts += 1;
                std::thread::sleep(LOCK_RETRY);
            }
            other => break other,
        }
    };
    match locked {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => bail!(
            "the data directory {} is in use by another mew process (`mew up`, `mew run` or \
             `mew chat`); stop it, or give this one another data directory (node.data_dir, \
             MEW_DATA_DIR, --data-dir)",
            dir.display()
        ),
        Err(TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// Whether `host` only accepts connections from this machine.
fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Starts the node and serves until Ctrl-C or SIGTERM.
/// How long `/readyz` waits for the task store to answer.
/// The push outbox is counted for `/metrics` up to this many notifications: a scrape reads at
/// most this many rows, however long the outbox grows.
const OUTBOX_COUNT_LIMIT: u64 = 10_000;

const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// A line of `mew up`'s banner: printed on stdout, or, when the logs are JSON lines on stdout,
/// logged as one of them, so that stdout stays JSON throughout.
macro_rules! say {
    ($json:expr, $($arg:tt)*) => {
        if $json {
            info!(target: "mew::banner", "{}", format!($($arg)*));
        } else {
            println!($($arg)*);
        }
    };
}

pub(crate) async fn run(mut config: Config) -> anyhow::Result<()> {
    let json_logs = config.log.format == crate::config::LogFormat::Json;
    if !config.auth.is_enabled()
        && !config.auth.allow_unauthenticated
        && !is_loopback_host(&config.node.host)
    {
        anyhow::bail!(
            "refusing to serve {} without authentication: configure `auth.api_keys` or \
             `auth.jwt`, or set `auth.allow_unauthenticated: true` to serve this address to \
             anyone",
            config.node.host
        );
    }
    if config.metrics.enabled {
        crate::metrics::enable();
    }
    let (catalog, default_role) = load_roles(&config)?;
    crate::server::auth::warn_unknown_roles(&config.auth, &|role| catalog.get(role).is_some());
    let served_roles: Vec<String> = catalog.published().map(|r| r.name.clone()).collect();
    let authenticator = crate::server::auth::Authenticator::from_config(
        &config.auth,
        &default_role.name,
        &served_roles,
        &|name| std::env::var(name).ok(),
    )?
    .map(Arc::new);
    if let Some(authenticator) = &authenticator {
        authenticator.start().await;
    }
    let listener = TcpListener::bind(config.node.listen_address())
        .await
        .with_context(|| format!("cannot listen on {}", config.node.listen_address()))?;
    let open_files = crate::server::listen::raise_file_limit();
    let connection_limits = crate::server::listen::ConnectionLimits::for_files(
        open_files,
        Some(config.limits.max_connections).filter(|n| *n > 0),
        config.limits.header_timeout,
        config.limits.idle_timeout,
    );
    config.node.bound_to(listener.local_addr()?);
    let tls = match config.tls.server() {
        Some(server) => Some(
            crate::server::tls::server_config(&server)
                .map_err(|error| anyhow::anyhow!("cannot serve HTTPS: {error}"))?,
        ),
        None => None,
    };
    let base = config.node.public_url.clone();
    let env = std::env::vars().collect();
    let runtime = Runtime::start(config, catalog, default_role, env).await?;
    // Tasks may ask their callers to sign in to MCP servers: the callback is this node's. The
    // node's own tokens act for every task: where callers are told apart (`auth:`), one
    // caller's grant must not act for another, so there a task signs in only its own caller
    // (`oauth.per_caller`), and `mew mcp login` signs the node in.
    if let Some(sign_ins) = runtime.mcp.sign_ins() {
        let node_sign_ins = authenticator.is_none();
        let manager = Arc::downgrade(&runtime.manager);
        sign_ins.enable(
            &base,
            Arc::new(move |task, text| {
                let Some(manager) = manager.upgrade() else {
                    return;
                };
                tokio::spawn(async move {
                    if let Err(e) = manager.continue_task(task.clone(), text).await {
                        tracing::info!(task = %task, "the task that asked for a sign-in did not go on: {e}");
                    }
                });
            }),
            node_sign_ins,
        );
    }
    let config = &runtime.config;
    let manager = &runtime.manager;
    let providers = &runtime.providers;
    // What the last run left unfinished is taken up before any request is served.
    let recovery = manager
        .recover()
        .await
        .context("cannot take up the tasks the last run left unfinished")?;
    if recovery != Default::default() {
        say!(
            json_logs,
            "mew: tasks left unfinished by the last run: {} started, {} resumed, {} failed",
            recovery.started,
            recovery.resumed,
            recovery.failed
        );
    }

    let server_options = ServerOptions {
        max_body_bytes: config.limits.max_body_bytes,
        max_inflight_body_bytes: config.limits.max_inflight_body_bytes,
        body_timeout: config.limits.body_timeout,
        ..ServerOptions::default()
    };
    let stopping = CancellationToken::new();
    let ready: crate::server::Readiness = {
        let (store, stopping) = (runtime.store.clone(), stopping.clone());
        Arc::new(move || {
            let (store, stopping) = (store.clone(), stopping.clone());
            Box::pin(async move {
                if stopping.is_cancelled() {
                    return Err("the node is stopping".to_owned());
                }
                match tokio::time::timeout(READY_TIMEOUT, store.ping()).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!(
                        "the task store did not answer within {}",
                        crate::tasks::manager::humanize(READY_TIMEOUT)
                    )),
                }
            })
        })
    };
    let surface = Surface {
        options: server_options,
        authenticator,
        ready,
    };
    // The whole HTTP surface is made again when role or skill files change, and swapped in at
    // once: a request is served by one version of it from start to end.
    let app = Arc::new(RwLock::new(runtime.router(&surface)));
    let mut gauges = None;
    if config.metrics.enabled
        && let Some((meter, every)) = crate::telemetry::meter(&config.telemetry, &config.node.name)?
    {
        crate::metrics::export(&meter);
        // The gauges read from the node (live tasks, MCP servers, the outbox, leases), read
        // as often as the meter exports them; the counters and histograms are recorded as
        // things happen.
        let snapshot = runtime.metrics_snapshot();
        gauges = Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                crate::metrics::observe(&snapshot().await);
            }
        }));
    }
    let catalog = runtime.catalog();
    let published: Vec<&Arc<RoleDefinition>> = catalog.published().collect();
    let problems = catalog.problems();

    // Caught before the node says it listens: a SIGTERM from then on stops it gracefully.
    let signals = ShutdownSignals::catch()?;
    // Before the line that says the node listens (the socket is bound: a client that comes
    // now waits in its backlog until the server takes it).
    let node_file = config.node.data_dir.join(NODE_FILE);
    if let Err(e) = write_node_file(&config.node.data_dir, &base) {
        warn!(
            path = %node_file.display(),
            error = %e,
            "cannot say where the node serves: mew run and mew chat will not find it"
        );
    }
    say!(json_logs, "mew: listening on {base}");
    say!(
        json_logs,
        "mew: {} roles: {}",
        published.len(),
        published
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !problems.is_empty() {
        say!(
            json_logs,
            "mew: {} problems in role files (see `mew agents`)",
            problems.len()
        );
    }
    match providers.default() {
        Some(provider) => say!(
            json_logs,
            "mew: model roles run on provider {}",
            provider.name()
        ),
        None => say!(
            json_logs,
            "mew: no model provider configured: model roles fail until one is (set ANTHROPIC_API_KEY or OPENAI_API_KEY, or add `providers:` to the config)"
        ),
    }
    for peer in runtime.peers.list() {
        match &peer.error {
            Some(error) => say!(
                json_logs,
                "mew: peer {} at {} is unreachable: {error}",
                peer.name,
                peer.url
            ),
            None => say!(
                json_logs,
                "mew: peer {} at {}: {} roles",
                peer.name,
                peer.url,
                peer.roles.len()
            ),
        }
    }
    for server in runtime.mcp.status() {
        match &server.last_error {
            Some(error) if server.state != crate::mcp::ServerState::Connected => say!(
                json_logs,
                "mew: MCP server {} ({}) is {}: {}",
                server.name,
                server.transport,
                server.state.as_str(),
                crate::peers::one_line(error)
            ),
            _ => say!(
                json_logs,
                "mew: MCP server {} ({}): {} tools",
                server.name,
                server.transport,
                server.tools
            ),
        }
    }
    for problem in &config.mcp_problems {
        say!(json_logs, "mew: skipped an MCP server entry: {problem}");
    }
    let whose = if config.node.data_dir == config.project_dir.join(".mew").join("data") {
        "this project's own; set node.data_dir to share one"
    } else {
        "node.data_dir"
    };
    say!(
        json_logs,
        "mew: tasks in {} ({whose})",
        runtime.store.location()
    );
    say!(
        json_logs,
        "mew: at most {} connections at once (open-file limit {open_files})",
        connection_limits.max_connections
    );
    say!(
        json_logs,
        "mew: cards signed with key {} ({}; public at {}{})",
        runtime.identity.kid(),
        config
            .node
            .data_dir
            .join(crate::identity::KEY_FILE)
            .display(),
        base,
        crate::identity::JWKS_PATH
    );
    info!(url = %base, roles = published.len(), "node started");

    // On Ctrl-C or SIGTERM: stop the tasks first, so that open streams and
    // blocking sends see their final state and end; then let the server drain,
    // for at most the grace period.
    let grace = config.node.shutdown_grace;
    // Cancelled once the drain delay is over and the tasks are stopping.
    let stopped = CancellationToken::new();
    let signal = {
        let (manager, stopping, stopped) = (manager.clone(), stopping.clone(), stopped.clone());
        let drain_delay = config.node.drain_delay;
        async move {
            signals.received().await;
            // Unready first (`/readyz` answers 503), still serving: a load balancer's health
            // checks move new work elsewhere before anything stops.
            stopping.cancel();
            if !drain_delay.is_zero() {
                info!(
                    delay = %crate::tasks::manager::humanize(drain_delay),
                    "stopping: unready, serving until the load balancer has noticed"
                );
                tokio::time::sleep(drain_delay).await;
            }
            info!("stopping: canceling running tasks");
            manager.stop();
            stopped.cancel();
        }
    };
    let service = {
        let app = app.clone();
        tower::service_fn(move |request: axum::http::Request<hyper::body::Incoming>| {
            let request = crate::server::strip_trailing_slash(request.map(axum::body::Body::new));
            let app = app.read().unwrap_or_else(PoisonError::into_inner).clone();
            tower::ServiceExt::oneshot(app, request)
        })
    };
    let tls = tls.map(|config| tokio_rustls::TlsAcceptor::from(Arc::new(config)));
    let drain = CancellationToken::new();
    tokio::spawn({
        let drain = drain.clone();
        async move {
            signal.await;
            drain.cancel();
        }
    });
    let server = crate::server::listen::serve(listener, tls, service, connection_limits, drain);
    let watch = async {
        let Some(every) = runtime.config.roles.watch else {
            return std::future::pending().await;
        };
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = stopping.cancelled() => return std::future::pending().await,
            }
            // Reading files: off the runtime's worker threads.
            let changes = tokio::task::block_in_place(|| runtime.reload());
            if let Some(changes) = changes {
                changes.log();
                let router = tokio::task::block_in_place(|| runtime.router(&surface));
                *app.write().unwrap_or_else(PoisonError::into_inner) = router;
            }
        }
    };
    tokio::select! {
        () = server => {}
        () = async { stopped.cancelled().await; tokio::time::sleep(grace).await } => {
            warn!("connections still open after the shutdown grace period; closing them");
        }
        () = watch => {}
    }
    info!("shutting down");
    // New clients run in-process from now on (once the lock is let go).
    let _ = std::fs::remove_file(&node_file);
    drop(app);
    if let Some(gauges) = gauges {
        gauges.abort();
    }
    runtime.shutdown().await;
    // The spans of the last requests, before the process ends.
    let _ = tokio::task::spawn_blocking(crate::telemetry::flush).await;
    Ok(())
}

/// SIGINT (Ctrl-C) and SIGTERM, caught from the moment this is made: a signal that comes
/// before anyone waits for it is kept, not left to kill the process.
struct ShutdownSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Starts catching the two signals.
    fn catch() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).context("cannot catch SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot catch SIGTERM")?,
        })
    }

    /// Resolves on the first of them.
    async fn received(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
