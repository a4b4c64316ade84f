//! Watching a task: `SendStreamingMessage` and `SubscribeToTask` streams, from a snapshot
//! and then each stored change, in order and without gaps: what a lagging subscriber missed
//! is read back from the task's event log (a fresh snapshot stands in when it cannot be).

use mew_cards::{ErrorKind, StreamResponse, TaskId, TaskState};
use mew_transport::{Error, EventStream};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::broadcast;
use tracing::warn;

use crate::tasks::store::TaskStore;

use super::{Live, LiveOrDone, LiveState, Scope, Stamped, TaskManager, protocol};

/// The most events a lagging subscription reads back from the log at once.
const READ_BACK_BATCH: usize = 256;

/// An event with its number in the task's history (the SSE `id`).
type Numbered = (Option<u64>, StreamResponse);

/// The state of one subscription.
pub(super) struct WatchState {
    pub(super) rx: broadcast::Receiver<Stamped>,
    /// The number of the last event reflected in what the subscriber has seen.
    pub(super) seq: u64,
    /// The number the task had when a resumed subscription began: the events up to it are
    /// read back from the log before any live one.
    pub(super) behind: u64,
    pub(super) live: Arc<Live>,
    /// Where a missed event is read back from.
    pub(super) store: Arc<dyn TaskStore>,
    /// Events read back from the store, not sent yet.
    pub(super) pending: VecDeque<(u64, StreamResponse)>,
    /// How many events to read back at once.
    pub(super) batch: usize,
    /// Whether an event is the subscription's last.
    pub(super) ends: fn(&StreamResponse) -> bool,
    pub(super) done: bool,
}

impl WatchState {
    pub(super) async fn next(mut self) -> Option<(Result<Numbered, Error>, Self)> {
        if self.done {
            return None;
        }
        loop {
            if self.pending.is_empty() && self.seq < self.behind {
                let behind = self.behind;
                if !self.read_back(behind).await {
                    return Some(self.snapshot().await);
                }
            }
            let received = match self.pending.pop_front() {
                Some(next) => Ok(next),
                None => tokio::select! {
                    received = self.rx.recv() => Err(received),
                    // Handed back by a node that stops: the task goes on elsewhere, later.
                    () = self.live.released.cancelled() => return None,
                },
            };
            let (seq, event) = match received {
                Ok(next) => next,
                Err(received) => match received {
                    Ok(stamped) => (stamped.seq, stamped.event),
                    // What the subscriber missed is in the log: read from the last one sent.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        if !self.read_back(u64::MAX).await {
                            return Some(self.snapshot().await);
                        }
                        continue;
                    }
                    // The sender lives as long as `live`, which this subscription holds.
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            };
            if seq <= self.seq {
                continue;
            }
            if seq == self.seq + 1 {
                return Some(self.send(seq, event));
            }
            // Events between the last one sent and this one were missed: they are read back
            // from the task's log, in order, before this one.
            self.pending.push_front((seq, event));
            if !self.read_back(seq - 1).await {
                return Some(self.snapshot().await);
            }
        }
    }

    fn send(mut self, seq: u64, event: StreamResponse) -> (Result<Numbered, Error>, Self) {
        self.seq = seq;
        self.done = (self.ends)(&event);
        (Ok((Some(seq), event)), self)
    }

    /// Queues the logged events after the last one sent, up to number `until`, at most a
    /// batch of them, before what is queued already (what is left is read back when the next
    /// gap shows). False when the log cannot be read or does not hold them: a fresh snapshot
    /// must stand in for them.
    async fn read_back(&mut self, until: u64) -> bool {
        let wanted = usize::try_from(until.saturating_sub(self.seq))
            .unwrap_or(usize::MAX)
            .min(self.batch);
        match self.store.events(&self.live.id, self.seq, wanted).await {
            Ok(events) if events.first().is_some_and(|(seq, _)| *seq == self.seq + 1) => {
                for event in events.into_iter().rev() {
                    self.pending.push_front(event);
                }
                true
            }
            Ok(_) => false,
            Err(e) => {
                warn!(error = %e, task_id = %self.live.id, "cannot read back missed events; sending a snapshot");
                false
            }
        }
    }

    /// The task as it is now, covering every event up to its number.
    async fn snapshot(mut self) -> (Result<Numbered, Error>, Self) {
        let (snapshot, seq) = {
            let state = self.live.state.lock().await;
            (state.stored.task.clone(), state.stored.generation)
        };
        self.pending.clear();
        self.behind = 0;
        self.send(seq, StreamResponse::Task(snapshot))
    }
}

impl TaskManager {
    /// `SubscribeToTask`; with `after` (the caller's `Last-Event-ID`), only the events after
    /// that number, read back from the task's log, then the live ones. A caller that lost
    /// its stream just before the task ended gets the rest of it from the log.
    pub(crate) async fn subscribe(
        self: &Arc<Self>,
        id: &TaskId,
        scope: &Scope,
        after: Option<u64>,
    ) -> Result<EventStream, Error> {
        let ended = |state: TaskState| {
            protocol(
                ErrorKind::UnsupportedOperation,
                format!("task {id} is {state}; there is nothing left to watch"),
            )
        };
        match self.live_or_load(id, scope).await? {
            LiveOrDone::Done(stored) => {
                let state = stored.task.status.state;
                self.rest_of_ended(id, stored.generation, after)
                    .await
                    .ok_or_else(|| ended(state))
            }
            LiveOrDone::Live(live) => {
                let state = live.state.lock().await;
                if state.stored.task.status.state.is_terminal() {
                    let (generation, task_state) =
                        (state.stored.generation, state.stored.task.status.state);
                    drop(state);
                    return self
                        .rest_of_ended(id, generation, after)
                        .await
                        .ok_or_else(|| ended(task_state));
                }
                let stream =
                    self.watch_after(&live, &state, StreamResponse::ends_subscription, after);
                let elsewhere = !state.busy;
                drop(state);
                if elsewhere {
                    self.follow(&live);
                }
                Ok(stream)
            }
        }
    }

    /// A subscription that starts with the current snapshot, taken under the
    /// task's lock so that no event falls between the two, and ends after the event `ends`
    /// says is the last: [`StreamResponse::ends_stream`] for the stream of a send (it ends
    /// when the task waits for input), [`StreamResponse::ends_subscription`] for
    /// `SubscribeToTask` (it ends with the task).
    pub(super) fn watch(
        &self,
        live: &Arc<Live>,
        state: &LiveState,
        ends: fn(&StreamResponse) -> bool,
    ) -> EventStream {
        self.watch_after(live, state, ends, None)
    }

    /// [`Self::watch`] for a task just created from `opening`, the events that made it (its
    /// SUBMITTED snapshot, then WORKING when it started at once), which stand in for the
    /// snapshot: the stream says each state the task went through.
    pub(super) fn watch_opening(
        &self,
        live: &Arc<Live>,
        state: &LiveState,
        ends: fn(&StreamResponse) -> bool,
        opening: Vec<StreamResponse>,
    ) -> EventStream {
        let generation = state.stored.generation;
        let count = u64::try_from(opening.len()).unwrap_or(u64::MAX);
        if count == 0 || count > generation {
            return self.watch(live, state, ends);
        }
        let first = generation + 1 - count;
        let start = futures_util::stream::iter(
            (first..)
                .zip(opening)
                .map(|(seq, event)| Ok((Some(seq), event))),
        );
        let rest = futures_util::stream::unfold(
            self.watch_state(live, state, ends, generation, 0),
            WatchState::next,
        );
        EventStream::numbered(futures_util::StreamExt::chain(start, rest))
    }

    /// A subscription's state, after the event `seq`; with the events up to `behind` to
    /// read back from the log first.
    fn watch_state(
        &self,
        live: &Arc<Live>,
        state: &LiveState,
        ends: fn(&StreamResponse) -> bool,
        seq: u64,
        behind: u64,
    ) -> WatchState {
        WatchState {
            rx: state.events.subscribe(),
            seq,
            behind,
            live: live.clone(),
            store: self.store.clone(),
            pending: VecDeque::new(),
            batch: READ_BACK_BATCH,
            ends,
            done: false,
        }
    }

    /// [`Self::watch`], or with `after` no older than the task, a subscription that starts
    /// with the events after that number instead of a snapshot.
    fn watch_after(
        &self,
        live: &Arc<Live>,
        state: &LiveState,
        ends: fn(&StreamResponse) -> bool,
        after: Option<u64>,
    ) -> EventStream {
        let generation = state.stored.generation;
        if let Some(after) = after.filter(|after| *after <= generation) {
            return EventStream::numbered(futures_util::stream::unfold(
                self.watch_state(live, state, ends, after, generation),
                WatchState::next,
            ));
        }
        let first = StreamResponse::Task(state.stored.task.clone());
        let over = ends(&first) && !state.busy;
        let start = futures_util::stream::iter([Ok((Some(generation), first))]);
        if over {
            return EventStream::numbered(start);
        }
        let rest = futures_util::stream::unfold(
            self.watch_state(live, state, ends, generation, 0),
            WatchState::next,
        );
        EventStream::numbered(futures_util::StreamExt::chain(start, rest))
    }

    /// The events after `after` of a task that ended with number `generation`, read from its
    /// log (the ended task itself when the log no longer holds them); `None` when there are
    /// none: the caller saw the end, or did not resume.
    async fn rest_of_ended(
        &self,
        id: &TaskId,
        generation: u64,
        after: Option<u64>,
    ) -> Option<EventStream> {
        let after = after.filter(|after| *after < generation)?;
        let wanted = usize::try_from(generation - after).unwrap_or(usize::MAX);
        let events = match self
            .store
            .events(id, after, wanted.min(READ_BACK_BATCH))
            .await
        {
            Ok(events)
                if events.first().is_some_and(|(seq, _)| *seq == after + 1)
                    && events.last().is_some_and(|(seq, _)| *seq == generation) =>
            {
                events
            }
            _ => {
                let stored = self.store.get(id).await.ok()??;
                vec![(stored.generation, StreamResponse::Task(stored.task))]
            }
        };
        Some(EventStream::numbered(futures_util::stream::iter(
            events
                .into_iter()
                .map(|(seq, event)| Ok((Some(seq), event))),
        )))
    }
}
