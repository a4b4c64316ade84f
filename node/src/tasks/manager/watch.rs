//! Watching a task: `SendStreamingMessage` and `SubscribeToTask` streams, from a snapshot
//! and then each stored change, a lagging subscriber getting a fresh snapshot.

use mew_cards::{ErrorKind, StreamResponse, TaskId};
use mew_transport::{Error, EventStream};
use std::sync::Arc;
use tokio::sync::broadcast;

use super::{Live, LiveOrDone, LiveState, Scope, Stamped, TaskManager, protocol};

/// The state of one subscription.
pub(super) struct WatchState {
    pub(super) rx: broadcast::Receiver<Stamped>,
    /// The last event reflected in what the subscriber has seen.
    pub(super) seq: u64,
    pub(super) live: Arc<Live>,
    /// Whether an event is the subscription's last.
    pub(super) ends: fn(&StreamResponse) -> bool,
    pub(super) done: bool,
}

impl WatchState {
    pub(super) async fn next(mut self) -> Option<(Result<StreamResponse, Error>, Self)> {
        if self.done {
            return None;
        }
        loop {
            match self.rx.recv().await {
                Ok(stamped) if stamped.seq <= self.seq => {}
                Ok(stamped) => {
                    self.seq = stamped.seq;
                    self.done = (self.ends)(&stamped.event);
                    return Some((Ok(stamped.event), self));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Events were missed: send a fresh snapshot and skip what it covers.
                    let (snapshot, seq) = {
                        let state = self.live.state.lock().await;
                        (state.stored.task.clone(), state.seq)
                    };
                    self.seq = seq;
                    let snapshot = StreamResponse::Task(snapshot);
                    self.done = (self.ends)(&snapshot);
                    return Some((Ok(snapshot), self));
                }
                // The sender lives as long as `live`, which this subscription holds.
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl TaskManager {
    /// `SubscribeToTask`.
    pub(crate) async fn subscribe(&self, id: &TaskId, scope: &Scope) -> Result<EventStream, Error> {
        match self.live_or_load(id, scope).await? {
            LiveOrDone::Done(stored) => Err(protocol(
                ErrorKind::UnsupportedOperation,
                format!(
                    "task {id} is {}; there is nothing left to watch",
                    stored.task.status.state
                ),
            )),
            LiveOrDone::Live(live) => {
                let state = live.state.lock().await;
                if state.stored.task.status.state.is_terminal() {
                    return Err(protocol(
                        ErrorKind::UnsupportedOperation,
                        format!(
                            "task {id} is {}; there is nothing left to watch",
                            state.stored.task.status.state
                        ),
                    ));
                }
                Ok(self.watch(&live, &state, StreamResponse::ends_subscription))
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
        let rx = state.events.subscribe();
        let first = StreamResponse::Task(state.stored.task.clone());
        let seq = state.seq;
        let live = live.clone();
        let over = ends(&first) && !state.busy;
        let start = futures_util::stream::iter([Ok(first)]);
        if over {
            return Box::pin(start);
        }
        let rest = futures_util::stream::unfold(
            WatchState {
                rx,
                seq,
                live,
                ends,
                done: false,
            },
            WatchState::next,
        );
        Box::pin(futures_util::StreamExt::chain(start, rest))
    }
}
