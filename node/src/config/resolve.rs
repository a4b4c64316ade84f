//! Resolution: from the merged settings to the `Config` the node runs with (paths, computed defaults).

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_yaml_ng::Value;

use super::merge::leaves;
use super::{
    Config, ConfigError, LimitsConfig, LoadedConfig, LogConfig, NodeConfig, Origin,
    PermissionsConfig, RolesConfig, default_public_url,
};

/// One leaf of the resolved configuration, with the layer that set it (`mew config show
/// --origins`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// The dotted key, such as `node.port`.
    pub key: String,
    /// The resolved value.
    pub value: Value,
    /// Where it came from; computed defaults (`data_dir`, `public_url`) have the origin of
    /// the key they replace a null of, normally [`Origin::Default`].
    pub origin: Origin,
}

impl LoadedConfig {
    /// Resolves the merged settings: expands `~` (to [`Sources::home`](super::Sources::home)),
    /// makes paths absolute against the project directory, and computes `node.data_dir`
    /// (the project's `.mew/data`) and `node.public_url` (`http://{host}:{port}`, or `https://` when
    /// `tls:` has a server certificate) when they are not set.
    /// Checks each `mcp_servers` entry and expands its variables; a bad entry is not an error
    /// but a [`Config::mcp_problems`] entry.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let settings = &self.settings;
        let project =
            std::path::absolute(&self.project).map_err(|source| ConfigError::Resolve {
                origin: Origin::Default,
                key: "project directory".to_owned(),
                message: format!(
                    "`{}` cannot be made absolute: {source}",
                    self.project.display()
                ),
            })?;
        let home = self.home.as_deref();

        // Each project keeps its own tasks unless a data directory is shared on purpose.
        let data_dir = match &settings.node.data_dir {
            Some(path) => self.path("node.data_dir", path, home, &project)?,
            None => project.join(".mew").join("data"),
        };
        let (public_url, public_url_is_default) = match &settings.node.public_url {
            Some(url) => (url.trim_end_matches('/').to_owned(), false),
            None => (
                default_public_url(
                    settings.tls.cert_file.is_some(),
                    &settings.node.host,
                    settings.node.port,
                ),
                true,
            ),
        };
        let dirs = settings
            .roles
            .dirs
            .iter()
            .map(|dir| self.path("roles.dirs", dir, home, &project))
            .collect::<Result<_, _>>()?;
        let skills = self.resolve_skills(home, &project)?;
        let limits = &settings.limits;
        let (mcp_servers, mcp_problems) = self.resolve_mcp(&project);
        let auth = self.resolve_auth()?;
        if settings.metrics.access == crate::metrics::MetricsAccess::Authenticated
            && !auth.is_enabled()
        {
            return Err(ConfigError::Resolve {
                origin: self.origin_of("metrics.access"),
                key: "metrics.access".to_owned(),
                message: "authenticated needs an auth: scheme (api_keys or jwt) to authenticate                           scrapers with"
                    .to_owned(),
            });
        }

        Ok(Config {
            node: NodeConfig {
                host: settings.node.host.clone(),
                port: settings.node.port,
                name: settings.node.name.clone(),
                public_url,
                public_url_is_default,
                default_role: settings.node.default_role.clone(),
                data_dir,
                shutdown_grace: settings.node.shutdown_grace,
                drain_delay: settings.node.drain_delay,
            },
            log: LogConfig {
                level: settings.log.level.clone(),
                format: settings.log.format,
            },
            limits: LimitsConfig {
                max_running_tasks: limits.max_running_tasks.get(),
                max_running_per_role: per_role_limit(
                    limits.max_running_per_role,
                    limits.max_running_tasks.get(),
                ),
                max_queued_tasks: limits.max_queued_tasks,
                queue_notice: Some(limits.queue_notice).filter(|after| !after.is_zero()),
                task_timeout: Some(limits.task_timeout).filter(|timeout| !timeout.is_zero()),
                event_buffer: limits.event_buffer.get(),
                max_body_bytes: limits.max_body_bytes.get(),
                max_inflight_body_bytes: limits.max_inflight_body_bytes.get(),
                body_timeout: limits.body_timeout,
                max_connections: limits.max_connections,
                header_timeout: limits.header_timeout,
                idle_timeout: limits.idle_timeout,
                list_history: limits.list_history,
                max_list_bytes: limits.max_list_bytes.get(),
                max_attempts: limits.max_attempts,
            },
            roles: RolesConfig {
                dirs,
                watch: Some(settings.roles.watch).filter(|every| !every.is_zero()),
            },
            skills,
            hooks: self.resolve_hooks(),
            permissions: PermissionsConfig {
                mode: settings.permissions.mode,
                allow: settings.permissions.allow.clone(),
                deny: settings.permissions.deny.clone(),
                ask: settings.permissions.ask.clone(),
            },
            auth,
            tls: self.resolve_tls(home, &project)?,
            push: self.resolve_push()?,
            web: self.resolve_web()?,
            store: self.resolve_store()?,
            telemetry: self.resolve_telemetry(),
            metrics: settings.metrics,
            agent: self.resolve_agent(),
            providers: self.resolve_providers()?,
            peers: self.resolve_peers()?,
            mcp_servers,
            mcp_problems,
            project_dir: project,
            home_dir: self.home.clone(),
        })
    }

    /// Every leaf of `config` (resolved from this) with its origin, in file order.
    pub fn entries(&self, config: &Config) -> Result<Vec<Entry>, serde_yaml_ng::Error> {
        let tree = serde_yaml_ng::to_value(config)?;
        Ok(leaves(&tree)
            .into_iter()
            .map(|(key, value)| Entry {
                origin: self.origin_of(&key),
                value: value.clone(),
                key,
            })
            .collect())
    }

    pub(super) fn origin_of(&self, key: &str) -> Origin {
        self.origins.get(key).cloned().unwrap_or(Origin::Default)
    }

    /// An error about the key `key` (dotted), blamed on the layer that set it or a key below
    /// it (the built-in defaults when none did).
    pub(super) fn key_error(&self, key: &str, message: String) -> ConfigError {
        let below = format!("{key}.");
        let origin = self
            .origins
            .iter()
            .find(|(k, _)| *k == key || k.starts_with(&below))
            .map(|(_, origin)| origin.clone())
            .unwrap_or(Origin::Default);
        ConfigError::Resolve {
            origin,
            key: key.to_owned(),
            message,
        }
    }

    /// Expands a leading `~` and makes `path` absolute against the project directory.
    pub(super) fn path(
        &self,
        key: &str,
        path: &Path,
        home: Option<&Path>,
        project: &Path,
    ) -> Result<PathBuf, ConfigError> {
        let expanded = match path.strip_prefix("~") {
            Ok(rest) => {
                let Some(home) = home else {
                    return Err(ConfigError::Resolve {
                        origin: self.origin_of(key),
                        key: key.to_owned(),
                        message: format!(
                            "`{}` starts with ~ but no home directory is known",
                            path.display()
                        ),
                    });
                };
                if rest.as_os_str().is_empty() {
                    home.to_owned()
                } else {
                    home.join(rest)
                }
            }
            Err(_) => path.to_owned(),
        };
        Ok(if expanded.is_absolute() {
            expanded
        } else {
            project.join(expanded)
        })
    }
}

/// `limits.max_running_per_role`: as configured (never above the node's limit), or, when 0,
/// three quarters of the node's limit, so that one role's backlog leaves room for others.
fn per_role_limit(configured: usize, node: usize) -> usize {
    if configured == 0 {
        (node - node / 4).max(1)
    } else {
        configured.min(node)
    }
}
