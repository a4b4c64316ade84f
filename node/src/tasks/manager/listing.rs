//! Listing tasks, newest first, a page at a time: the page token is an opaque cursor.
//!
//! `totalSize` is exact. A2A 1.0 makes it a required field of `ListTasksResponse`, "Total
//! number of tasks available (before pagination)", and says nothing of estimates; the
//! reference SDKs (Python's in-memory and database stores, JS's in-memory store) count every
//! task that matches the filters on every page. So does this listing, from counts the store
//! keeps exact, with one exception that keeps a page's cost from growing with the store:
//! with `statusTimestampAfter`, the only filter counted by walking the tasks it matches,
//! the first page counts and its token carries that total to the next pages, so a listing
//! reports the total it had when it began (a task whose status changes during the walk
//! moves ahead of the cursor, out of the walk, either way).

use crate::tasks::store::{Cursor, TaskQuery};
use mew_cards::{
    DEFAULT_PAGE_SIZE, ErrorKind, ListTasksRequest, ListTasksResponse, MAX_PAGE_SIZE, TaskId,
    TaskState, Timestamp,
};
use mew_transport::Error;

use super::{Scope, TaskManager, protocol, store_error};

/// Where the next page starts, and the listing's total when the next page is not to count
/// it again.
#[derive(Debug, PartialEq)]
struct Token {
    cursor: Cursor,
    total: Option<usize>,
}

/// `NANOS:ID`, or `tTOTAL:NANOS:ID` with a total (a cursor never starts with `t`, so the
/// tokens given before totals were carried still read).
fn encode_token(token: &Token) -> String {
    use base64::Engine as _;
    let cursor = &token.cursor;
    let mut raw = format!("{}:{}", cursor.status_time.unix_nanos(), cursor.id);
    if let Some(total) = token.total {
        raw = format!("t{total}:{raw}");
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_token(token: &str) -> Result<Token, Error> {
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
    let (total, raw) = match raw.strip_prefix('t') {
        Some(rest) => {
            let (total, raw) = rest.split_once(':').ok_or_else(invalid)?;
            (Some(total.parse().map_err(|_| invalid())?), raw)
        }
        None => (None, raw.as_str()),
    };
    let (nanos, id) = raw.split_once(':').ok_or_else(invalid)?;
    let nanos: i128 = nanos.parse().map_err(|_| invalid())?;
    if id.is_empty() {
        return Err(invalid());
    }
    Ok(Token {
        cursor: Cursor {
            status_time: Timestamp::from_unix_nanos(nanos),
            id: TaskId::from(id),
        },
        total,
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
        let token = if request.page_token.is_empty() {
            None
        } else {
            Some(decode_token(&request.page_token)?)
        };
        let (after, known_total) = match token {
            Some(Token { cursor, total }) => (Some(cursor), total),
            None => (None, None),
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
            known_total,
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
            next_page_token: page
                .next
                .map(|cursor| {
                    encode_token(&Token {
                        cursor,
                        // Counted by walking the time range: once per listing.
                        total: query.status_after.map(|_| page.total),
                    })
                })
                .unwrap_or_default(),
            page_size,
            total_size: i32::try_from(page.total).unwrap_or(i32::MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_back_with_its_total_and_without() {
        for total in [None, Some(0), Some(250_000)] {
            let token = Token {
                cursor: Cursor {
                    status_time: Timestamp::from_unix_nanos(1_700_000_000_123_456_789),
                    id: TaskId::from("019a-task"),
                },
                total,
            };
            assert_eq!(decode_token(&encode_token(&token)).unwrap(), token);
        }
        // What this node gave before totals were carried.
        use base64::Engine as _;
        let old = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("-5:a:b");
        let read = decode_token(&old).unwrap();
        assert_eq!(
            (
                read.cursor.status_time.unix_nanos(),
                read.cursor.id.as_str(),
                read.total
            ),
            (-5, "a:b", None)
        );
        for bad in ["t12", "tx:1:a", "t1:1:", "1", "1:"] {
            let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bad);
            assert!(decode_token(&token).is_err(), "{bad}");
        }
    }
}
