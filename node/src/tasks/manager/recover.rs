//! Taking up what an earlier run of the node left unfinished. A task that never started runs
//! now; a turn that was running starts over if its role can (a model role continues from its
//! last checkpoint, a `resumable` command runs again), at most `limits.max_attempts` times;
//! any other fails, with the reason.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use mew_cards::{Message, Role, RoleDefinition, TaskState};
use tracing::{info, warn};

use super::{RESTART_REASON, Slot, TaskManager, TurnStart};
use crate::tasks::store::{StoreError, StoredTask};

/// What [`TaskManager::recover`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Recovery {
    /// Tasks that were waiting for a slot and now run.
    pub(crate) started: usize,
    /// Tasks whose turn starts over.
    pub(crate) resumed: usize,
    /// Tasks that failed: their role cannot start a turn over or is gone, or they ran out
    /// of attempts.
    pub(crate) failed: usize,
}

/// What becomes of one unfinished task.
enum Fate {
    /// It runs with this role, for this message: as it would have (it never started), or
    /// starting over (`recovered`).
    Run {
        role: Arc<RoleDefinition>,
        message: Message,
        recovered: bool,
    },
    /// It fails with this reason.
    Fail(String),
}

impl TaskManager {
    /// Takes up every task an earlier run of the node left SUBMITTED or WORKING (see the
    /// module's comment): on a shared store, those that no live replica holds, as many as
    /// there is room for (the heartbeat takes the rest as slots free). Call once, before the
    /// node takes requests.
    pub(crate) async fn recover(self: &Arc<Self>) -> Result<Recovery, StoreError> {
        let limit = if self.store.shared() {
            self.limits.max_running.max(1)
        } else {
            usize::MAX
        };
        self.take_over(limit).await
    }

    /// Takes up at most `limit` unfinished tasks that no live replica holds.
    pub(super) async fn take_over(self: &Arc<Self>, limit: usize) -> Result<Recovery, StoreError> {
        let mut recovery = Recovery::default();
        for stored in self.store.take_over(limit).await? {
            let fate = self.fate(&stored);
            match &fate {
                Fate::Run {
                    recovered: false, ..
                } => recovery.started += 1,
                Fate::Run { .. } => recovery.resumed += 1,
                Fate::Fail(_) => recovery.failed += 1,
            }
            match self.take_up(stored, fate).await {
                // Taken by another replica in the meantime: it is that one's now.
                Err(StoreError::Fenced(id)) => {
                    info!(task_id = %id, "another replica took the task first");
                }
                taken => {
                    taken?;
                    if self.store.shared() {
                        crate::metrics::takeovers(1);
                    }
                }
            }
        }
        Ok(recovery)
    }

    fn fate(&self, stored: &StoredTask) -> Fate {
        let Some(role) = self.roles.role(&stored.role) else {
            return Fate::Fail(format!(
                "{RESTART_REASON}, and its role {:?} is gone",
                stored.role
            ));
        };
        let Some(message) = last_request(stored).cloned() else {
            return Fate::Fail(RESTART_REASON.to_owned());
        };
        if stored.task.status.state == TaskState::Submitted {
            return Fate::Run {
                role,
                message,
                recovered: false,
            };
        }
        if !self.roles.executor(&role).resumable(&role) {
            return Fate::Fail(RESTART_REASON.to_owned());
        }
        if i64::from(stored.attempts) >= i64::from(self.limits.max_attempts) {
            return Fate::Fail(format!(
                "the node running this task was lost {} times while it ran; giving up",
                stored.attempts + 1
            ));
        }
        Fate::Run {
            role,
            message,
            recovered: true,
        }
    }

    async fn take_up(
        self: &Arc<Self>,
        mut stored: StoredTask,
        fate: Fate,
    ) -> Result<(), StoreError> {
        let id = stored.task.id.clone();
        let resumed = stored
            .task
            .history
            .iter()
            .filter(|m| m.role == Role::User)
            .count()
            > 1;
        if let Fate::Run {
            recovered: true, ..
        } = fate
        {
            // Counted before the turn runs: a turn that keeps losing its node runs out.
            stored.attempts = stored.attempts.saturating_add(1);
            self.store.put(&stored).await?;
        }
        let push = self.store.push_configs(&id).await?;
        let live = self.new_live(stored, push);
        {
            let mut state = live.state.lock().await;
            state.turn = 1;
            state.busy = true;
        }
        let (role, message, recovered) = match fate {
            Fate::Run {
                role,
                message,
                recovered,
            } => (role, message, recovered),
            Fate::Fail(reason) => {
                warn!(task_id = %id, "{reason}");
                self.fail(&live, reason, 1).await;
                return Ok(());
            }
        };
        self.live_map().insert(id, live.clone());
        self.queued.fetch_add(1, Ordering::SeqCst);
        let start = TurnStart {
            resumed,
            fresh_context: false,
            recovered,
        };
        self.spawn_turn(live, role, message, start, 1, Slot::Wait);
        Ok(())
    }
}

/// The message the task's current turn answers: the last one from the user.
fn last_request(stored: &StoredTask) -> Option<&Message> {
    stored
        .task
        .history
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
}
