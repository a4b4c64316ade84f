//! Replicas on a shared store: what a replica does about the tasks other replicas write.
//!
//! A replica runs a task only while it holds the task's lease (see `TaskStore`). Here it
//! keeps its leases alive (a heartbeat every `limits.heartbeat`), lets go at once of a task it
//! lost (another replica took it over: nothing more is written for it here), takes over the
//! tasks lost replicas left (as [`TaskManager::recover`] does at start), passes a cancel asked
//! for elsewhere to the task it runs, reads again the push configs of a task it runs when
//! another replica changed them, and claims a task before it continues or cancels it.
//! A task run elsewhere that someone watches here is *followed*: its new events are read from
//! the store when the store says it changed, and at least every [`FOLLOW_POLL`], into the
//! task's live entry, whose subscribers read them as they read local ones.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mew_cards::{ErrorKind, StreamResponse, Task, TaskId};
use mew_transport::Error;
use tokio::sync::broadcast;
use tracing::{info, warn};

use super::{Live, Scope, Stamped, TaskManager, protocol, store_error};
use crate::tasks::store::Change;

/// How often a followed task is read again when no wake-up came.
pub(super) const FOLLOW_POLL: Duration = Duration::from_secs(1);

/// How long a cancel asked for on another replica waits for that replica to end the task.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

impl TaskManager {
    /// Beats, takes over lost work and follows what other replicas change, until the node
    /// stops.
    pub(super) async fn run_cluster(self: Arc<Self>, mut changes: broadcast::Receiver<Change>) {
        let mut ticker = tokio::time::interval(self.limits.heartbeat);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => break,
                _ = ticker.tick() => {
                    self.beat().await;
                    self.take_over_room().await;
                }
                change = changes.recv() => match change {
                    Ok(Change::Event(id)) => self.poke(&id),
                    Ok(Change::Cancel(id)) => self.cancel_asked(&id).await,
                    Ok(Change::Work) => self.take_over_room().await,
                    Ok(Change::PushConfigs(id)) => self.reload_push_configs(&id).await,
                    Ok(Change::Missed) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.poke_all();
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        // The store stopped listening: heartbeats and polls carry on alone.
                        changes = broadcast::channel(1).1;
                    }
                },
            }
        }
    }

    /// One heartbeat: lets go of the tasks lost, passes on the cancels asked for.
    async fn beat(self: &Arc<Self>) {
        match self.store.heartbeat().await {
            Ok(beat) => {
                self.others_alive.store(beat.others > 0, Ordering::SeqCst);
                for id in &beat.lost {
                    self.lose(id);
                    // Stopped first: a write of the old run before this was refused.
                    if let Err(e) = self.store.release(id).await {
                        warn!(task_id = %id, error = %e, "cannot forget a lost task's lease");
                    }
                }
                for id in &beat.cancel {
                    self.cancel_asked(id).await;
                }
            }
            Err(e) => warn!(error = %e, "cannot renew this replica's leases"),
        }
    }

    /// Takes over as many unfinished tasks of lost replicas as there is room for.
    async fn take_over_room(self: &Arc<Self>) {
        let room = self
            .slots
            .free()
            .saturating_sub(self.queued.load(Ordering::SeqCst));
        if room == 0 || self.shutdown.is_cancelled() {
            return;
        }
        match self.take_over(room).await {
            Ok(taken) if taken != Default::default() => info!(
                started = taken.started,
                resumed = taken.resumed,
                failed = taken.failed,
                "took over tasks a lost replica left"
            ),
            Ok(_) => {}
            Err(e) => warn!(error = %e, "cannot take over the tasks of lost replicas"),
        }
    }

    /// Another replica holds the task now: stop running it here, writing nothing more.
    pub(super) fn lose(&self, id: &TaskId) {
        let live = self.live_map().get(id).cloned();
        if let Some(live) = live {
            warn!(task_id = %id, "another replica took this task over; it stops here");
            live.lost();
            self.forget(&live);
        }
    }

    /// Someone asked another replica to cancel a task: cancel it here if it runs here.
    async fn cancel_asked(self: &Arc<Self>, id: &TaskId) {
        let live = self.live_map().get(id).cloned();
        let runs_here = match live {
            Some(live) => live.state.lock().await.busy,
            None => false,
        };
        if runs_here && let Err(e) = self.cancel(id, &Scope::default()).await {
            warn!(task_id = %id, error = %e, "cannot cancel a task as another replica asked");
        }
    }

    /// Another replica saved or deleted a push config of a task: the events this replica
    /// records for it go to the configs as stored now.
    async fn reload_push_configs(&self, id: &TaskId) {
        let live = self.live_map().get(id).cloned();
        let Some(live) = live else { return };
        match self.store.push_configs(id).await {
            Ok(push) => live.state.lock().await.push = push,
            Err(e) => warn!(task_id = %id, error = %e, "cannot read the push configs of a task"),
        }
    }

    fn poke(&self, id: &TaskId) {
        if let Some(live) = self.live_map().get(id) {
            live.poke.notify_one();
        }
    }

    fn poke_all(&self) {
        for live in self.live_map().values() {
            live.poke.notify_one();
        }
    }

    /// Takes the lease of a task this replica does not run, reading it afresh into `live`;
    /// false when another replica runs it (or it is over). True for a task running here.
    pub(super) async fn claim(&self, live: &Arc<Live>) -> Result<bool, Error> {
        // A task offered to the other replicas is claimed back as one run elsewhere is.
        if live.state.lock().await.busy && !live.offered.load(Ordering::SeqCst) {
            return Ok(true);
        }
        let claimed = self.store.claim(&live.id).await.map_err(store_error)?;
        let Some(fresh) = claimed else {
            // Not ours: what is said about it comes from the store.
            if let Some(fresh) = self.store.get(&live.id).await.map_err(store_error)? {
                let mut state = live.state.lock().await;
                if !state.busy && fresh.generation >= state.stored.generation {
                    state.stored = fresh;
                }
            }
            return Ok(false);
        };
        let push = self
            .store
            .push_configs(&live.id)
            .await
            .map_err(store_error)?;
        let mut state = live.state.lock().await;
        state.stored = fresh;
        state.push = push;
        Ok(true)
    }

    /// `CancelTask` for a task another replica runs: asks it to cancel, and waits a while for
    /// the task to end.
    pub(super) async fn cancel_elsewhere(
        self: &Arc<Self>,
        live: &Arc<Live>,
        scope: &Scope,
    ) -> Result<Task, Error> {
        let id = &live.id;
        let current = self.get(id, scope).await?;
        if current.task.status.state.is_terminal() {
            return Err(protocol(
                ErrorKind::TaskNotCancelable,
                format!("task {id} is already {}", current.task.status.state),
            ));
        }
        let mut stream = {
            let state = live.state.lock().await;
            self.watch(live, &state, StreamResponse::ends_subscription)
        };
        self.follow(live);
        self.store.request_cancel(id).await.map_err(store_error)?;
        let ended = tokio::time::timeout(CANCEL_WAIT, async {
            while let Some(event) = futures_util::StreamExt::next(&mut stream).await {
                if event.is_err() {
                    break;
                }
            }
        })
        .await;
        if ended.is_err() {
            warn!(task_id = %id, "the replica running the task has not canceled it yet");
        }
        Ok(self.get(id, scope).await?.task)
    }

    /// Follows a task another replica runs into `live`, unless it is followed already or runs
    /// here (see the module's comment). Only on a shared store.
    pub(super) fn follow(self: &Arc<Self>, live: &Arc<Live>) {
        if !self.store.shared() || live.following.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(self.clone().run_follower(live.clone()));
    }

    async fn run_follower(self: Arc<Self>, live: Arc<Live>) {
        // Its events wake this replica from now on; what came before is read at once.
        if let Err(e) = self.store.follow(&live.id).await {
            warn!(task_id = %live.id, error = %e, "cannot ask for a followed task's wake-ups; it is polled");
        }
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                tokio::select! {
                    () = live.poke.notified() => {}
                    () = tokio::time::sleep(FOLLOW_POLL) => {}
                    () = self.shutdown.cancelled() => break,
                    () = live.released.cancelled() => break,
                }
            }
            let fresh = match self.store.get(&live.id).await {
                Ok(Some(fresh)) => fresh,
                Ok(None) => break,
                Err(e) => {
                    warn!(task_id = %live.id, error = %e, "cannot read a followed task");
                    continue;
                }
            };
            let mut state = live.state.lock().await;
            if state.busy {
                // This replica runs it now.
                break;
            }
            if fresh.generation > state.stored.generation {
                // The newest event; subscribers read what lies between from the log.
                let last = self.store.events(&live.id, fresh.generation - 1, 1).await;
                state.stored = fresh;
                match last {
                    Ok(mut events) => {
                        if let Some((seq, event)) = events.pop() {
                            let _ = state.events.send(Stamped { seq, event });
                        }
                    }
                    Err(e) => {
                        warn!(task_id = %live.id, error = %e, "cannot read a followed task's events");
                    }
                }
            }
            let over = state.stored.task.status.state.is_terminal();
            if over || state.events.receiver_count() == 0 {
                // Decided under the lock: a subscriber that comes later starts a new follower.
                live.following.store(false, Ordering::SeqCst);
                drop(state);
                self.forget(&live);
                return;
            }
        }
        live.following.store(false, Ordering::SeqCst);
    }
}
