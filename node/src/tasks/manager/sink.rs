//! The sink a turn writes through: each event is applied to the task's snapshot, stored,
//! and only then announced.

use crate::tasks::executor::{Annotation, EventSink, SinkClosed};
use crate::tasks::store::TaskStore;
use async_trait::async_trait;
use mew_cards::{
    Artifact, ArtifactId, Message, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent, Timestamp,
};
use std::sync::Arc;
use tokio::sync::Notify;
use tracing::warn;

use super::{Live, Stored, apply_annotation, own_message, record_all, status_event};

/// Reports events from a running turn into its task.
pub(super) struct Sink {
    pub(super) store: Arc<dyn TaskStore>,
    pub(super) push_wake: Arc<Notify>,
    pub(super) live: Arc<Live>,
    /// The turn this sink reports for; it closes when that turn is over.
    pub(super) turn: u64,
}

impl Sink {
    async fn record(
        &self,
        make: impl FnOnce(&Task) -> Option<StreamResponse>,
    ) -> Result<(), SinkClosed> {
        self.record_as(make, Stored::AsSent).await
    }

    async fn record_as(
        &self,
        make: impl FnOnce(&Task) -> Option<StreamResponse>,
        stored: Stored,
    ) -> Result<(), SinkClosed> {
        self.record_all(|task| {
            make(task)
                .map(|event| (event, stored))
                .into_iter()
                .collect()
        })
        .await
    }

    /// Records the events `make` gives, in one write (none: nothing).
    async fn record_all(
        &self,
        make: impl FnOnce(&Task) -> Vec<(StreamResponse, Stored)>,
    ) -> Result<(), SinkClosed> {
        let mut state = self.live.state.lock().await;
        if state.turn != self.turn || !state.busy || self.live.cancel.is_cancelled() {
            return Err(SinkClosed);
        }
        let events = make(&state.stored.task);
        if events.is_empty() {
            return Ok(());
        }
        record_all(self.store.as_ref(), &self.push_wake, &mut state, events)
            .await
            .map_err(|e| {
                warn!(error = %e, "cannot persist an event; the task stops");
                if matches!(e, crate::tasks::store::StoreError::Fenced(_)) {
                    self.live.lost();
                }
                SinkClosed
            })
    }
}

#[async_trait]
impl EventSink for Sink {
    async fn status(&self, state: TaskState, message: Option<Message>) -> Result<(), SinkClosed> {
        self.record(|task| status_change(task, state, message))
            .await
    }

    async fn text_then_status(
        &self,
        (artifact_id, name): (ArtifactId, &str),
        (text, append): (String, bool),
        state: TaskState,
        message: Option<Message>,
    ) -> Result<(), SinkClosed> {
        let artifact = text_artifact(artifact_id, name, text);
        self.record_all(|task| {
            let mut events = vec![(
                artifact_update(task, artifact, (append, true)),
                Stored::JoiningText,
            )];
            events.extend(status_change(task, state, message).map(|e| (e, Stored::AsSent)));
            events
        })
        .await
    }

    async fn artifact(
        &self,
        mut artifact: Artifact,
        append: bool,
        last_chunk: bool,
    ) -> Result<(), SinkClosed> {
        if artifact.artifact_id.is_empty() {
            artifact.artifact_id = ArtifactId::generate();
        }
        self.record(|task| Some(artifact_update(task, artifact, (append, last_chunk))))
            .await
    }

    async fn text(
        &self,
        artifact_id: ArtifactId,
        name: &str,
        text: String,
        (append, last_chunk): (bool, bool),
    ) -> Result<(), SinkClosed> {
        let artifact = text_artifact(artifact_id, name, text);
        self.record_as(
            |task| Some(artifact_update(task, artifact, (append, last_chunk))),
            Stored::JoiningText,
        )
        .await
    }

    async fn message(&self, message: Message) -> Result<(), SinkClosed> {
        let mut reply = None;
        self.record(|task| {
            let message = own_message(task, message);
            reply = Some(message.clone());
            Some(StreamResponse::Message(message))
        })
        .await?;
        // The direct answer ends the task.
        self.record(|task| {
            let mut status = TaskStatus::new(TaskState::Completed);
            status.message = reply;
            Some(status_event(task, status))
        })
        .await
    }

    async fn progress(&self, note: mew_cards::mew::MewMetadata) -> Result<(), SinkClosed> {
        self.record(|task| {
            let event = TaskStatusUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                status: TaskStatus::new(task.status.state),
                metadata: Some(note.to_metadata()),
            };
            Some(StreamResponse::StatusUpdate(event))
        })
        .await
    }

    async fn save_private(&self, private: serde_json::Value) -> Result<(), SinkClosed> {
        let mut state = self.live.state.lock().await;
        if state.turn != self.turn || !state.busy {
            return Err(SinkClosed);
        }
        // Written with the task's next event: at the latest the one that ends the turn.
        state.stored.private = private;
        Ok(())
    }

    async fn checkpoint(&self, private: serde_json::Value) -> Result<(), SinkClosed> {
        let mut state = self.live.state.lock().await;
        if state.turn != self.turn || !state.busy || self.live.cancel.is_cancelled() {
            return Err(SinkClosed);
        }
        // The write takes the annotations kept for the next event along.
        let previous = (
            std::mem::replace(&mut state.stored.private, private),
            state.stored.task.metadata.clone(),
        );
        state.apply_annotations();
        if let Err(e) = self.store.put(&state.stored).await {
            warn!(error = %e, "cannot persist a checkpoint; the task stops");
            if matches!(e, crate::tasks::store::StoreError::Fenced(_)) {
                self.live.lost();
            }
            (state.stored.private, state.stored.task.metadata) = previous;
            return Err(SinkClosed);
        }
        state.annotations.clear();
        Ok(())
    }

    async fn annotate(&self, annotation: Annotation) -> Result<(), SinkClosed> {
        let mut state = self.live.state.lock().await;
        // Released: handed back, or another replica runs the task now.
        if state.turn != self.turn || self.live.released.is_cancelled() {
            return Err(SinkClosed);
        }
        let append = matches!(annotation, Annotation::Child(_));
        state.annotations.push(annotation);
        // A value set during the turn is written with the task's next event. An appended
        // entry (a delegation link) is written now: the store's readers need it while the
        // turn runs (`context_children`, listings), and it must outlive a crash. So is
        // anything once the turn is over: no event of this turn follows.
        if state.busy && !append {
            return Ok(());
        }
        let previous = state.stored.task.metadata.clone();
        state.apply_annotations();
        if let Err(e) = self.store.put(&state.stored).await {
            warn!(error = %e, "cannot persist the task's metadata");
            if matches!(e, crate::tasks::store::StoreError::Fenced(_)) {
                self.live.lost();
            }
            state.stored.task.metadata = previous;
            state.annotations.pop();
            return Err(SinkClosed);
        }
        state.annotations.clear();
        Ok(())
    }

    async fn context_children(&self) -> Vec<mew_cards::mew::ChildLink> {
        let mut tasks = match self
            .store
            .context(&self.live.context_id, self.live.owner.as_deref())
            .await
        {
            Ok(tasks) => tasks,
            Err(e) => {
                warn!(error = %e, "cannot read the context's tasks");
                return Vec::new();
            }
        };
        // This task as the turn sees it, with the annotations it has not written yet.
        {
            let state = self.live.state.lock().await;
            if !state.annotations.is_empty()
                && let Some(own) = tasks.iter_mut().find(|t| t.task.id == self.live.id)
            {
                own.task.metadata = state.stored.task.metadata.clone();
                for annotation in &state.annotations {
                    apply_annotation(annotation, &mut own.task.metadata);
                }
            }
        }
        tasks
            .iter()
            .flat_map(|t| mew_cards::mew::MewMetadata::read(t.task.metadata.as_ref()).children)
            .collect()
    }
}

/// The move of `task` to `state`, or `None` (with a warning) when it may not move there.
fn status_change(
    task: &Task,
    state: TaskState,
    message: Option<Message>,
) -> Option<StreamResponse> {
    let current = task.status.state;
    if !current.can_become(state) || state == TaskState::Submitted {
        warn!(from = %current, to = %state, "ignoring an illegal state change");
        return None;
    }
    let message = message.map(|m| own_message(task, m));
    Some(status_event(
        task,
        TaskStatus {
            state,
            message,
            timestamp: Some(Timestamp::now()),
        },
    ))
}

/// A text artifact (or piece of one) with one part.
fn text_artifact(artifact_id: ArtifactId, name: &str, text: String) -> Artifact {
    Artifact {
        artifact_id,
        name: name.to_owned(),
        parts: vec![mew_cards::Part::text(text)],
        ..Artifact::default()
    }
}

/// The event that adds `artifact` to `task` (`append`ed to its earlier pieces, `last_chunk`).
fn artifact_update(
    task: &Task,
    artifact: Artifact,
    (append, last_chunk): (bool, bool),
) -> StreamResponse {
    StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        artifact,
        append,
        last_chunk,
        metadata: None,
    })
}
