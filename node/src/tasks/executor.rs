//! `Executor`: what runs a turn of a task (a command role, a model-driven role), and the sink it reports through.

use std::sync::Arc;

use async_trait::async_trait;
use mew_cards::mew::{ChildLink, MewMetadata, Usage};
use mew_cards::{
    Artifact, ArtifactId, ContextId, Message, Part, RoleDefinition, TaskId, TaskState,
};
use tokio_util::sync::CancellationToken;

/// One turn of a task: from an incoming message to a terminal or interrupted state.
#[derive(Debug)]
pub struct Turn {
    /// The task.
    pub task_id: TaskId,
    /// Its context.
    pub context_id: ContextId,
    /// The principal the task belongs to (`None` without authentication): what the task
    /// delegates on this node belongs to it too.
    pub owner: Option<String>,
    /// The role that runs it.
    pub role: Arc<RoleDefinition>,
    /// The message that started or resumed the task, with its ids filled in.
    pub message: Message,
    /// The conversation before `message`, oldest first: earlier tasks of the
    /// same context, then this task's own history.
    pub history: Vec<Message>,
    /// True when `message` answers this task's INPUT_REQUIRED question.
    pub resumed: bool,
    /// True when this turn was running when its node was lost, and starts over: the private
    /// state holds what the runner last checkpointed ([`EventSink::checkpoint`]), and the
    /// runner continues from there (or runs again, for a role that declares it safe).
    pub recovered: bool,
    /// How deep the task is in a delegation chain: 0 when a user started it,
    /// one more than its parent's when an agent delegated it.
    pub depth: u32,
    /// The runner's private state of this task as last saved (`Null` at first):
    /// a model role keeps its conversation here, so a task resumes after a restart.
    pub private: serde_json::Value,
    /// The private state of the newest earlier task of the same context (`Null` if none):
    /// what a session carries from task to task (a model role's active skills).
    pub earlier_private: serde_json::Value,
    /// Canceled when the task is canceled, times out, or the node stops.
    pub cancel: CancellationToken,
}

/// Where an executor reports progress. Every event is persisted before it is
/// announced to subscribers; what is never announced (the private state, a set
/// annotation) is persisted with the next event, at the latest the one that ends
/// the turn. Calls fail once the task is over (canceled, say), which tells the
/// executor to stop.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Moves the task to `state` with an optional agent message.
    async fn status(&self, state: TaskState, message: Option<Message>) -> Result<(), SinkClosed>;

    /// Adds an artifact, or a chunk of one (`append` to the artifact with the same id).
    async fn artifact(
        &self,
        artifact: Artifact,
        append: bool,
        last_chunk: bool,
    ) -> Result<(), SinkClosed>;

    /// Streams a piece of the text of artifact `artifact_id` (`append` after the first piece,
    /// `last_chunk` on the last): subscribers get each piece as a chunk, while the stored
    /// artifact keeps the text whole, in one part, rather than one part per piece.
    async fn text(
        &self,
        artifact_id: ArtifactId,
        name: &str,
        text: String,
        (append, last_chunk): (bool, bool),
    ) -> Result<(), SinkClosed> {
        let artifact = Artifact {
            artifact_id,
            name: name.to_owned(),
            parts: vec![Part::text(text)],
            ..Artifact::default()
        };
        self.artifact(artifact, append, last_chunk).await
    }

    /// The last piece of the text of artifact `artifact_id` (as [`Self::text`] with
    /// `last_chunk`), then the move to `state`: in one write where the sink can, so that an
    /// answer and the status that ends its turn are stored together.
    async fn text_then_status(
        &self,
        (artifact_id, name): (ArtifactId, &str),
        (text, append): (String, bool),
        state: TaskState,
        message: Option<Message>,
    ) -> Result<(), SinkClosed> {
        self.text(artifact_id, name, text, (append, true)).await?;
        self.status(state, message).await
    }

    /// Answers with a direct agent message; the task completes with it.
    async fn message(&self, message: Message) -> Result<(), SinkClosed>;

    /// Reports progress that is not part of the task's history (a tool call
    /// starting, say): a WORKING status update carrying `note` as metadata.
    /// Sinks that announce nothing (test recorders) may ignore it.
    async fn progress(&self, _note: MewMetadata) -> Result<(), SinkClosed> {
        Ok(())
    }

    /// Saves the runner's private state of the task; persisted, not announced.
    /// The write is deferred: the state is stored with the task's next event
    /// (an artifact, a status, INPUT_REQUIRED) or, when none follows, with the
    /// state that ends the turn, so a task that asks for input resumes after a
    /// restart with the state saved before the question. Fails once the turn is
    /// over. Sinks that keep no state (test recorders) may ignore it.
    async fn save_private(&self, _private: serde_json::Value) -> Result<(), SinkClosed> {
        Ok(())
    }

    /// Saves the runner's private state now, durably, before it returns: what the turn
    /// continues from if its node is lost before the turn ends. A runner calls it before
    /// anything it could not undo or redo cheaply (a tool call, say), so that a turn started
    /// over knows what was under way. Fails once the turn is over. Sinks that keep no state
    /// may ignore it.
    async fn checkpoint(&self, _private: serde_json::Value) -> Result<(), SinkClosed> {
        Ok(())
    }

    /// Records `annotation` in the task's `metadata.mew`; persisted, not announced (readers
    /// see it in the task). A usage set while the turn runs is written with the task's next
    /// event, at the latest the one that ends the turn (readers see it from then on); a child
    /// link, or any annotation once the turn is over, is written at once. Sinks that keep no
    /// state (test recorders) may ignore it.
    async fn annotate(&self, _annotation: Annotation) -> Result<(), SinkClosed> {
        Ok(())
    }

    /// The children the tasks of this task's context recorded (this one included), oldest
    /// task first.
    async fn context_children(&self) -> Vec<ChildLink> {
        Vec::new()
    }
}

/// What a turn records about its task in `metadata.mew` without announcing it.
#[derive(Clone, Debug, PartialEq)]
pub enum Annotation {
    /// The task's own model use so far (`mew.usage`), replacing what was recorded.
    Usage(Usage),
    /// A task it delegated (`mew.children`), appended.
    Child(ChildLink),
    /// The task's plan (`mew.todos`), replacing what was recorded.
    Todos(Vec<mew_cards::mew::TodoItem>),
}

/// The task is over; nothing more can be reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the task is already over")]
pub struct SinkClosed;

/// Why a turn failed; the task becomes FAILED with this reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ExecError(pub String);

/// Runs turns of tasks for some kind of role.
///
/// `run` returns when the turn is over. If it returns `Ok` without having
/// reached a terminal or interrupted state, the task completes; `Err` fails
/// it. A panic inside `run` fails the task, not the node.
#[async_trait]
pub trait Executor: Send + Sync {
    /// Runs one turn, reporting through `sink`.
    async fn run(&self, turn: Turn, sink: Arc<dyn EventSink>) -> Result<(), ExecError>;

    /// Whether a turn of `role` that was running when its node was lost may start over
    /// ([`Turn::recovered`]): the runner continues from its checkpoint, or runs again where
    /// that is safe. When not, such a turn fails with the reason.
    fn resumable(&self, _role: &RoleDefinition) -> bool {
        false
    }
}
