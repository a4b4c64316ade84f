//! Push notifications: webhook configs checked against SSRF, and the dispatcher that delivers
//! the task store's outbox, at least once and in order per webhook.
//!
//! A task's events are enqueued in the task store's outbox in the same transaction as the
//! change they report (`tasks::manager`), so nothing is announced that is not stored and
//! nothing stored is forgotten by a crash. The dispatcher ([`deliver`]) takes the oldest
//! notification of each webhook, POSTs it, and removes it once the webhook answered 2xx;
//! a failure is retried with backoff, and a later notification of that webhook waits for it.
//! The SSRF guard ([`crate::ssrf`]) refuses webhooks on private, loopback, link-local and
//! metadata addresses unless `push.allow` names them, when a config is created and again
//! before each delivery.

pub(crate) mod deliver;

use std::sync::Arc;
use std::time::Duration;

use mew_cards::{ErrorKind, TaskPushNotificationConfig};
use mew_transport::Error;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::PushConfig;
use crate::identity::NodeKey;
use crate::tasks::store::TaskStore;

use self::deliver::Dispatcher;
use crate::ssrf::{Guard, GuardError, WEBHOOKS};

/// The guard of webhooks: what `push.allow` names may be reached despite it.
pub(crate) fn guard(config: &PushConfig) -> Guard {
    Guard::new(config.allow_rules(), WEBHOOKS)
}

/// What the A2A operations need: the guard that checks a webhook before its config is kept.
#[derive(Debug, Clone)]
pub(crate) struct Webhooks {
    guard: Guard,
}

impl Webhooks {
    /// The webhooks of `config`.
    pub(crate) fn new(config: &PushConfig) -> Self {
        Self {
            guard: guard(config),
        }
    }

    /// Checks a config a caller sends and completes it: a fresh `id` when it has none. A URL
    /// that is malformed or that the guard refuses is `InvalidParams`, saying why; one whose
    /// host does not resolve yet is taken (each delivery checks it again).
    pub(crate) async fn accept(
        &self,
        mut config: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, Error> {
        if config.id.is_empty() {
            config.id = new_id();
        }
        if config.id.len() > 256 || config.id.chars().any(char::is_control) {
            return Err(Error::protocol(
                ErrorKind::InvalidParams,
                "the push config's id must be at most 256 characters, without control characters",
            ));
        }
        let message = match self.guard.check(&config.url).await {
            // Every delivery checks again: a host that does not resolve now (a name not yet
            // published, DNS down) is refused then if it resolves somewhere it may not go.
            Ok(_) | Err(GuardError::Unresolved(_)) => return Ok(config),
            Err(GuardError::Invalid(why)) => format!("the push config's url is not usable: {why}"),
            Err(GuardError::Refused(why)) => format!("the push config's url is refused: {why}"),
        };
        Err(Error::protocol(ErrorKind::InvalidParams, message))
    }
}

/// The running dispatcher; [`Push::stop`] ends it.
pub(crate) struct Push {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Push {
    /// Starts the dispatcher over `store`'s outbox: it delivers what is due at once (what a
    /// stopped node left), then whenever `wake` is poked or a retry falls due. Webhooks over
    /// HTTPS are trusted by the system roots and `tls`'s extra roots.
    pub(crate) fn start(
        config: &PushConfig,
        store: Arc<dyn TaskStore>,
        wake: Arc<Notify>,
        key: Arc<NodeKey>,
        public_url: &str,
        tls: mew_transport::TlsOptions,
    ) -> Self {
        let stop = CancellationToken::new();
        let dispatcher = Arc::new(Dispatcher {
            store,
            wake,
            guard: guard(config),
            key,
            public_url: public_url.trim_end_matches('/').to_owned(),
            max_attempts: config.max_attempts.max(1),
            timeout: config.timeout,
            clients: deliver::Clients::new(tls),
        });
        let task = tokio::spawn(dispatcher.run(stop.clone()));
        Self {
            stop,
            task: Some(task),
        }
    }

    /// Stops the dispatcher and waits (briefly) for it: deliveries in flight are abandoned and
    /// stay in the outbox, to be delivered at the next start.
    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
        {
            tracing::warn!("the push dispatcher did not stop in time");
        }
    }
}

impl Drop for Push {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A new id for a config or a token: a UUID (version 7, as the node's task ids).
pub(crate) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_uuids() {
        let a = new_id();
        let b = new_id();
        assert_ne!(a, b);
        assert_eq!(
            uuid::Uuid::parse_str(&a).map(|id| id.get_version_num()),
            Ok(7)
        );
    }

    #[tokio::test]
    async fn configs_get_an_id_and_bad_urls_are_invalid_params() {
        let webhooks = Webhooks::new(&PushConfig {
            allow: vec!["127.0.0.1".to_owned()],
            ..PushConfig::default()
        });
        let config = TaskPushNotificationConfig {
            url: "http://127.0.0.1:9/hook".to_owned(),
            ..TaskPushNotificationConfig::default()
        };
        let accepted = webhooks.accept(config.clone()).await.unwrap();
        assert_eq!(accepted.id.len(), 36);
        let named = TaskPushNotificationConfig {
            id: "mine".to_owned(),
            ..config
        };
        assert_eq!(webhooks.accept(named).await.unwrap().id, "mine");
        let unresolved = TaskPushNotificationConfig {
            url: "https://example.invalid/hook".to_owned(),
            ..TaskPushNotificationConfig::default()
        };
        assert!(webhooks.accept(unresolved).await.is_ok());

        for (url, says) in [
            (
                "http://10.0.0.1/hook",
                "is refused: `http://10.0.0.1/hook` reaches 10.0.0.1, a private address",
            ),
            (
                "ftp://127.0.0.1/hook",
                "is not usable: `ftp://127.0.0.1/hook` is not an http or https URL",
            ),
        ] {
            let config = TaskPushNotificationConfig {
                url: url.to_owned(),
                ..TaskPushNotificationConfig::default()
            };
            match webhooks.accept(config).await {
                Err(Error::Protocol(e)) => {
                    assert_eq!(e.kind, ErrorKind::InvalidParams);
                    assert!(e.message.contains(says), "{}", e.message);
                }
                other => panic!("expected InvalidParams, got {other:?}"),
            }
        }
    }
}
