//! Listing tasks, newest first, a page at a time: the page token is an opaque cursor.

use crate::tasks::store::{Cursor, TaskQuery};
use mew_cards::{
    DEFAULT_PAGE_SIZE, ErrorKind, ListTasksRequest, ListTasksResponse, MAX_PAGE_SIZE, TaskId,
    TaskState, Timestamp,
};
use mew_transport::Error;

use super::{Scope, TaskManager, protocol, store_error};

fn encode_token(cursor: &Cursor) -> String {
    use base64::Engine as _;
    let raw = format!("{}:{}", cursor.status_time.unix_nanos(), cursor.id);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_token(token: &str) -> Result<Cursor, Error> {
    use base64::Engine as _;
    let invalid = || {
        protocol(
            ErrorKind::InvalidParams,
            format!("pageToken {token:?} is not a token this node gave"),
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| invalid())?;
    let raw = String::from_utf8(raw).map_err(|_| invalid())?;
    let (nanos, id) = raw.split_once(':').ok_or_else(invalid)?;
    let nanos: i128 = nanos.parse().map_err(|_| invalid())?;
    if id.is_empty() {
        return Err(invalid());
    }
    Ok(Cursor {
        status_time: Timestamp::from_unix_nanos(nanos),
        id: TaskId::from(id),
    })
}

impl TaskManager {
    /// `ListTasks`.
    pub(crate) async fn list(
        &self,
        request: &ListTasksRequest,
        scope: &Scope,
    ) -> Result<ListTasksResponse, Error> {
        let page_size = request.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
        if !(1..=MAX_PAGE_SIZE).contains(&page_size) {
            return Err(protocol(
                ErrorKind::InvalidParams,
                format!("pageSize must be between 1 and {MAX_PAGE_SIZE}, not {page_size}"),
            ));
        }
        if request.history_length.is_some_and(|n| n < 0) {
            return Err(protocol(
                ErrorKind::InvalidParams,
                "historyLength must not be negative",
            ));
        }
        let after = if request.page_token.is_empty() {
            None
        } else {
            Some(decode_token(&request.page_token)?)
        };
        let query = TaskQuery {
            role: scope.role.clone(),
            owner: scope.owner.clone(),
            context_id: (!request.context_id.is_empty()).then(|| request.context_id.clone()),
            state: (request.status != TaskState::Unspecified).then_some(request.status),
            status_after: request.status_timestamp_after,
            after,
            limit: usize::try_from(page_size).unwrap_or(DEFAULT_PAGE_SIZE as usize),
            max_bytes: Some(self.limits.max_list_bytes),
        };
        let page = self.store.list(&query).await.map_err(store_error)?;
        let include_artifacts = request.include_artifacts.unwrap_or(false);
        // Unset: the node's default amount of history (the spec leaves it to the server).
        let history_length = request
            .history_length
            .unwrap_or_else(|| i32::try_from(self.limits.list_history).unwrap_or(i32::MAX));
        let tasks = page
            .tasks
            .into_iter()
            .map(|stored| {
                let mut task = stored.task;
                task.truncate_history(Some(history_length));
                if !include_artifacts {
                    task.artifacts.clear();
                }
                task
            })
            .collect();
        Ok(ListTasksResponse {
            tasks,
            next_page_token: page.next.map(|c| encode_token(&c)).unwrap_or_default(),
            page_size,
            total_size: i32::try_from(page.total).unwrap_or(i32::MAX),
        })
    }
}
