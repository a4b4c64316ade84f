//! The `store:` section: where the node keeps its tasks.
//!
//! ```yaml
//! store:
//!   url: postgres://mew@db.internal:5432/mew   # MEW_STORE_URL; unset: SQLite in the data directory
//!   password_env: MEW_STORE_PASSWORD            # the variable holding the password (the default)
//!   lease: 15s                                  # a replica's hold on a task without a heartbeat
//!   replica_id: mew-0                           # MEW_REPLICA_ID; unset: made once per data directory
//! ```
//!
//! Without `url` the tasks live in `tasks.db` in the data directory. A password belongs in the
//! environment, never in a file: a `url` from a file that holds one is refused.

use serde::{Deserialize, Serialize};

use super::{ConfigError, LoadedConfig, Origin};
use crate::tasks::StoreConfig;

/// The longest replica id, in characters (a Kubernetes pod name is at most 253).
const MAX_REPLICA_ID: usize = 253;

impl LoadedConfig {
    pub(super) fn resolve_store(&self) -> Result<StoreConfig, ConfigError> {
        let settings = &self.settings.store;
        let error = |key: &str, message: String| ConfigError::Resolve {
            origin: self.origin_of(key),
            key: key.to_owned(),
            message,
        };
        if let Some(url) = &settings.url {
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(error(
                    "store.url",
                    "must be a PostgreSQL URL (postgres://user@host:port/database)".to_owned(),
                ));
            }
            let in_file = matches!(self.origin_of("store.url"), Origin::File(_));
            if in_file && StoreConfig::url_has_password(url) {
                return Err(error(
                    "store.url",
                    format!(
                        "holds a password: put it in the environment variable {} (store.password_env) \
                         instead, or give the whole URL as MEW_STORE_URL",
                        settings.password_env
                    ),
                ));
            }
        }
        if settings.password_env.is_empty() {
            return Err(error(
                "store.password_env",
                "must name an environment variable".to_owned(),
            ));
        }
        if settings.lease < std::time::Duration::from_secs(1) {
            return Err(error(
                "store.lease",
                "must be at least 1s (a replica beats three times per lease)".to_owned(),
            ));
        }
        if let Some(id) = &settings.replica_id {
            let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
            if id.is_empty() || id.len() > MAX_REPLICA_ID || !id.chars().all(fine) {
                return Err(error(
                    "store.replica_id",
                    format!(
                        "{id:?} is not a replica id: 1 to {MAX_REPLICA_ID} letters, digits, \
                         '-', '_' or '.'"
                    ),
                ));
            }
        }
        Ok(StoreConfig {
            url: settings.url.clone(),
            password_env: settings.password_env.clone(),
            lease: settings.lease,
            replica_id: settings.replica_id.clone(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct StoreSettings {
    pub(crate) url: Option<String>,
    pub(crate) password_env: String,
    #[serde(with = "crate::duration")]
    pub(crate) lease: std::time::Duration,
    pub(crate) replica_id: Option<String>,
}

impl Default for StoreSettings {
    fn default() -> Self {
        let defaults = StoreConfig::default();
        Self {
            url: defaults.url,
            password_env: defaults.password_env,
            lease: defaults.lease,
            replica_id: defaults.replica_id,
        }
    }
}
