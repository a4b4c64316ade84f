//! The push configs of a task: set, get, list and delete, at most [`MAX_PUSH_CONFIGS`] each.

use mew_cards::{
    DEFAULT_PAGE_SIZE, ErrorKind, ListTaskPushNotificationConfigsResponse, MAX_PAGE_SIZE, TaskId,
    TaskPushNotificationConfig,
};
use mew_transport::Error;

use super::{LiveOrDone, Scope, TaskManager, protocol, store_error};

/// The most push configs one task may have.
pub(crate) const MAX_PUSH_CONFIGS: usize = 16;

impl TaskManager {
    /// `CreateTaskPushNotificationConfig`: saves `config` (its URL already checked, its id
    /// set) for a task the caller sees, replacing the config with the same id. Events the
    /// task records from now on are delivered to it.
    pub(crate) async fn set_push_config(
        &self,
        config: TaskPushNotificationConfig,
        scope: &Scope,
    ) -> Result<TaskPushNotificationConfig, Error> {
        let too_many = || {
            protocol(
                ErrorKind::InvalidParams,
                format!(
                    "task {} has {MAX_PUSH_CONFIGS} push configs already; delete one first",
                    config.task_id
                ),
            )
        };
        match self.live_or_load(&config.task_id, scope).await? {
            LiveOrDone::Live(live) => {
                // Under the task's lock: no event falls between the store and the live copy.
                let mut state = live.state.lock().await;
                let existing = state.push.iter().position(|c| c.id == config.id);
                if existing.is_none() && state.push.len() >= MAX_PUSH_CONFIGS {
                    return Err(too_many());
                }
                self.store
                    .put_push_config(&config)
                    .await
                    .map_err(store_error)?;
                match existing {
                    Some(index) => state.push[index] = config.clone(),
                    None => state.push.push(config.clone()),
                }
            }
            LiveOrDone::Done(_) => {
                // A finished task records no more events; the config is kept until deleted.
                let configs = self
                    .store
                    .push_configs(&config.task_id)
                    .await
                    .map_err(store_error)?;
                if configs.len() >= MAX_PUSH_CONFIGS && !configs.iter().any(|c| c.id == config.id) {
                    return Err(too_many());
                }
                self.store
                    .put_push_config(&config)
                    .await
                    .map_err(store_error)?;
            }
        }
        Ok(config)
    }

    /// `GetTaskPushNotificationConfig`.
    pub(crate) async fn get_push_config(
        &self,
        task: &TaskId,
        id: &str,
        scope: &Scope,
    ) -> Result<TaskPushNotificationConfig, Error> {
        self.get(task, scope).await?;
        self.store
            .push_configs(task)
            .await
            .map_err(store_error)?
            .into_iter()
            .find(|c| c.id == id)
            .ok_or_else(|| {
                protocol(
                    ErrorKind::TaskNotFound,
                    format!("task {task} has no push config {id:?}"),
                )
            })
    }

    /// `ListTaskPushNotificationConfigs`: by id; the page token is the last id returned.
    pub(crate) async fn list_push_configs(
        &self,
        task: &TaskId,
        page_size: i32,
        page_token: &str,
        scope: &Scope,
    ) -> Result<ListTaskPushNotificationConfigsResponse, Error> {
        let page_size = if page_size == 0 {
            DEFAULT_PAGE_SIZE
        } else {
            page_size
        };
        if !(1..=MAX_PAGE_SIZE).contains(&page_size) {
            return Err(protocol(
                ErrorKind::InvalidParams,
                format!("pageSize must be between 1 and {MAX_PAGE_SIZE}, not {page_size}"),
            ));
        }
        let after = if page_token.is_empty() {
            None
        } else {
            use base64::Engine as _;
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(page_token)
                .ok()
                .and_then(|raw| String::from_utf8(raw).ok())
                .ok_or_else(|| {
                    protocol(
                        ErrorKind::InvalidParams,
                        format!("pageToken {page_token:?} is not a token this node gave"),
                    )
                })?;
            Some(raw)
        };
        self.get(task, scope).await?;
        let mut configs: Vec<TaskPushNotificationConfig> = self
            .store
            .push_configs(task)
            .await
            .map_err(store_error)?
            .into_iter()
            .filter(|c| after.as_ref().is_none_or(|after| c.id > *after))
            .collect();
        let limit = usize::try_from(page_size).unwrap_or(1);
        let next_page_token = if configs.len() > limit {
            configs.truncate(limit);
            use base64::Engine as _;
            configs
                .last()
                .map(|c| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&c.id))
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(ListTaskPushNotificationConfigsResponse {
            configs,
            next_page_token,
        })
    }

    /// `DeleteTaskPushNotificationConfig`: idempotent for a task the caller sees; the
    /// notifications still waiting for the config are dropped with it.
    pub(crate) async fn delete_push_config(
        &self,
        task: &TaskId,
        id: &str,
        scope: &Scope,
    ) -> Result<(), Error> {
        match self.live_or_load(task, scope).await? {
            LiveOrDone::Live(live) => {
                let mut state = live.state.lock().await;
                self.store
                    .delete_push_config(task, id)
                    .await
                    .map_err(store_error)?;
                state.push.retain(|c| c.id != id);
            }
            LiveOrDone::Done(_) => self
                .store
                .delete_push_config(task, id)
                .await
                .map_err(store_error)?,
        }
        Ok(())
    }
}
