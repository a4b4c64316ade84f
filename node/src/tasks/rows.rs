//! A task and a push config as the stores' columns: encoded once, before any store writes them,
//! and decoded back the same way by every store.

use mew_cards::{StreamResponse, Task, TaskId, TaskPushNotificationConfig, Timestamp};

use super::store::{StoreError, StoredTask};

/// Nanoseconds since the epoch as stored, or `None` outside the years 1677..2262.
pub(super) fn stored_nanos(time: Timestamp) -> Option<i64> {
    i64::try_from(time.unix_nanos()).ok()
}

/// Nanoseconds since the epoch for a query bound, clamped to the stored range.
pub(super) fn bound_nanos(time: Timestamp) -> i64 {
    let nanos = time.unix_nanos();
    i64::try_from(nanos).unwrap_or(if nanos < 0 { i64::MIN } else { i64::MAX })
}

/// A task as its columns, encoded by the caller so the writer only writes.
pub(super) struct Row {
    pub(super) id: String,
    pub(super) context_id: String,
    pub(super) role: String,
    pub(super) owner: Option<String>,
    pub(super) parent: Option<String>,
    pub(super) state: i32,
    pub(super) status_time: i64,
    pub(super) created: i64,
    pub(super) task: String,
    pub(super) private: String,
    pub(super) attempts: i32,
    pub(super) generation: i64,
    /// The events this row's snapshot comes from, in order, as JSON, to log under the last
    /// numbers up to `generation`.
    pub(super) events: Vec<String>,
}

impl Row {
    pub(super) fn encode(stored: &StoredTask) -> Result<Self, StoreError> {
        let id = stored.task.id.as_str();
        if id.is_empty() {
            return Err(StoreError::Backend(
                "cannot store a task without an id".to_owned(),
            ));
        }
        let out_of_range = |what: &str, time: Timestamp| {
            StoreError::Backend(format!(
                "cannot store task {id}: its {what} {time} is outside the years 1677 to 2262"
            ))
        };
        let status_time = stored.status_time();
        let status_time =
            stored_nanos(status_time).ok_or_else(|| out_of_range("status time", status_time))?;
        let created = stored_nanos(stored.created)
            .ok_or_else(|| out_of_range("creation time", stored.created))?;
        let encode_error = |what: &str, e: serde_json::Error| {
            StoreError::Backend(format!("cannot encode the {what} of task {id}: {e}"))
        };
        Ok(Self {
            id: id.to_owned(),
            context_id: stored.task.context_id.as_str().to_owned(),
            role: stored.role.clone(),
            owner: stored.owner.clone(),
            parent: stored.parent.as_ref().map(|p| p.as_str().to_owned()),
            state: stored.task.status.state.number(),
            status_time,
            created,
            task: serde_json::to_string(&stored.task).map_err(|e| encode_error("task", e))?,
            private: serde_json::to_string(&stored.private)
                .map_err(|e| encode_error("private state", e))?,
            attempts: stored.attempts,
            generation: i64::try_from(stored.generation).map_err(|_| {
                StoreError::Backend(format!("task {id} has too many events to store"))
            })?,
            events: Vec::new(),
        })
    }

    /// [`Row::encode`], with `events` to log under the task's last numbers.
    pub(super) fn with_events(
        stored: &StoredTask,
        events: &[StreamResponse],
    ) -> Result<Self, StoreError> {
        let mut row = Self::encode(stored)?;
        if i64::try_from(events.len()).map_or(true, |n| n > row.generation) {
            return Err(StoreError::Backend(format!(
                "task {} has {} events to log under number {}",
                row.id,
                events.len(),
                row.generation
            )));
        }
        row.events = events
            .iter()
            .map(|event| {
                serde_json::to_string(event).map_err(|e| {
                    StoreError::Backend(format!("cannot encode an event of task {}: {e}", row.id))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(row)
    }

    /// The numbers `events` are logged under, in order.
    pub(super) fn event_numbers(&self) -> Vec<i64> {
        let count = i64::try_from(self.events.len()).unwrap_or(0);
        (self.generation - count + 1..=self.generation).collect()
    }

    /// [`Row::encode`], logging the task as it is as its event (a new task's first one).
    pub(super) fn with_snapshot(stored: &StoredTask) -> Result<Self, StoreError> {
        let mut row = Self::encode(stored)?;
        // The `task` member of a StreamResponse is the task as the row stores it.
        row.events = vec![format!("{{\"task\":{}}}", row.task)];
        Ok(row)
    }
}

/// Parses a logged event of task `id`.
pub(super) fn decode_event(
    id: &str,
    generation: i64,
    json: &str,
) -> Result<(u64, StreamResponse), StoreError> {
    let event = serde_json::from_str(json).map_err(|e| StoreError::Corrupt {
        id: id.to_owned(),
        reason: format!("its event {generation} does not parse: {e}"),
    })?;
    Ok((u64::try_from(generation).unwrap_or(0), event))
}

/// Parses the `task` column of the row with this id.
pub(super) fn decode_task(id: &str, json: &str) -> Result<Task, StoreError> {
    let task: Task = serde_json::from_str(json).map_err(|e| StoreError::Corrupt {
        id: id.to_owned(),
        reason: format!("its task JSON does not parse: {e}"),
    })?;
    if task.id.as_str() != id {
        return Err(StoreError::Corrupt {
            id: id.to_owned(),
            reason: format!("its task JSON has the id {:?}", task.id.as_str()),
        });
    }
    Ok(task)
}

/// A push config as its columns, encoded by the caller.
pub(super) struct ConfigRow {
    pub(super) task_id: String,
    pub(super) id: String,
    pub(super) config: String,
}

impl ConfigRow {
    pub(super) fn encode(config: &TaskPushNotificationConfig) -> Result<Self, StoreError> {
        if config.task_id.as_str().is_empty() || config.id.is_empty() {
            return Err(StoreError::Backend(
                "cannot store a push config without a task id and an id".to_owned(),
            ));
        }
        let json = serde_json::to_string(config).map_err(|e| {
            StoreError::Backend(format!(
                "cannot encode push config {} of task {}: {e}",
                config.id, config.task_id
            ))
        })?;
        Ok(Self {
            task_id: config.task_id.as_str().to_owned(),
            id: config.id.clone(),
            config: json,
        })
    }
}

pub(super) fn decode_config(
    task_id: &str,
    id: &str,
    json: &str,
) -> Result<TaskPushNotificationConfig, StoreError> {
    serde_json::from_str(json).map_err(|e| StoreError::Corrupt {
        id: task_id.to_owned(),
        reason: format!("its push config {id} does not parse: {e}"),
    })
}

/// Assembles a stored task from its columns (`created` in nanoseconds since the epoch).
pub(super) fn assemble(
    id: String,
    role: String,
    owner: Option<String>,
    parent: Option<String>,
    created: i64,
    task: &str,
    private: &str,
) -> Result<StoredTask, StoreError> {
    let task = decode_task(&id, task)?;
    let private = serde_json::from_str(private).map_err(|e| StoreError::Corrupt {
        id: id.clone(),
        reason: format!("its private state is not valid JSON: {e}"),
    })?;
    Ok(StoredTask {
        task,
        role,
        owner,
        parent: parent.map(TaskId::from),
        created: Timestamp::from_unix_nanos(i128::from(created)),
        private,
        attempts: 0,
        generation: 0,
    })
}
