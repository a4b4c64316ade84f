//! The children of one task: the agents it delegated to, where they run, and
//! the notices the background ones leave when they end.
//!
//! Every delegation is recorded in the parent task's metadata as a
//! [`ChildLink`] (`metadata.mew.children`), persisted with the task: `TaskList`,
//! `TaskGet`, `TaskStop` and `SendMessage` find children there, also after a
//! restart, and `mew tasks tree` follows the links from node to node.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mew_cards::TaskStatusUpdateEvent;
use mew_cards::mew::{ChildNote, MewMetadata};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::conversation::ChatMessage;
use crate::tasks::executor::{Annotation, EventSink};

/// One delegated task, as its parent records it (`metadata.mew.children`).
pub(crate) use mew_cards::mew::ChildLink;

/// What a task's delegations share during one turn.
pub(crate) struct Children {
    /// The parent task's sink: links are recorded in, and read from, its metadata. The sink
    /// of the parent's current turn: a task that asked for input and was answered gets its
    /// children back in its next turn ([`Self::resume`]).
    sink: std::sync::Mutex<Arc<dyn EventSink>>,
    /// Places for children running at once.
    places: Arc<Semaphore>,
    /// Children running in the background whose notice has not been sent.
    running: Arc<AtomicUsize>,
    notices: mpsc::UnboundedSender<String>,
    inbox: Mutex<mpsc::UnboundedReceiver<String>>,
    /// How long a foreground child may run before it moves to the background.
    pub(crate) background_after: Duration,
    /// The parent's role: a fork runs it again.
    pub(crate) role: String,
    /// The principal the parent task belongs to: its children on this node belong to it
    /// too, and the task tools ask for them as it.
    pub(crate) owner: Option<String>,
    /// The parent's conversation as of the tool calls being run, for forks.
    fork_source: std::sync::Mutex<Vec<ChatMessage>>,
}

impl std::fmt::Debug for Children {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Children")
            .field("places", &self.places.available_permits())
            .field("running", &self.running.load(Ordering::SeqCst))
            .field("background_after", &self.background_after)
            .finish_non_exhaustive()
    }
}

impl Children {
    /// The children of the task behind `sink`, which runs `role` for `owner`: at most
    /// `max_running` at once.
    pub(crate) fn new(
        sink: Arc<dyn EventSink>,
        (role, owner): (String, Option<String>),
        max_running: usize,
        background_after: Duration,
    ) -> Self {
        let (notices, inbox) = mpsc::unbounded_channel();
        Self {
            sink: std::sync::Mutex::new(sink),
            places: Arc::new(Semaphore::new(max_running.max(1))),
            running: Arc::new(AtomicUsize::new(0)),
            notices,
            inbox: Mutex::new(inbox),
            background_after,
            role,
            owner,
            fork_source: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Carries these children on into the parent's next turn, reporting through its `sink`:
    /// the notices of background children that ended while the parent waited for input
    /// are the next turn's to read.
    pub(crate) fn resume(&self, sink: Arc<dyn EventSink>) {
        *self
            .sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = sink;
    }

    /// The sink of the parent's current turn.
    fn sink(&self) -> Arc<dyn EventSink> {
        self.sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Keeps the parent's conversation for the forks its next tool calls start.
    pub(crate) fn set_fork_source(&self, messages: Vec<ChatMessage>) {
        *self
            .fork_source
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = messages;
    }

    /// The parent's conversation as [`Self::set_fork_source`] left it.
    pub(crate) fn fork_source(&self) -> Vec<ChatMessage> {
        self.fork_source
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Waits for a place for one more child; `None` when `cancel` fires first.
    pub(crate) async fn place(&self, cancel: &CancellationToken) -> Option<OwnedSemaphorePermit> {
        tokio::select! {
            permit = self.places.clone().acquire_owned() => permit.ok(),
            () = cancel.cancelled() => None,
        }
    }

    /// Records a delegation in the parent task.
    pub(crate) async fn record(&self, link: &ChildLink) {
        if self
            .sink()
            .annotate(Annotation::Child(link.clone()))
            .await
            .is_err()
        {
            tracing::warn!(child = %link.task_id, "cannot record a delegated task in its parent");
        }
    }

    /// Every child of the parent's context, oldest first; of several with one
    /// name, the newest is the one the name means.
    pub(crate) async fn links(&self) -> Vec<ChildLink> {
        self.sink().context_children().await
    }

    /// A background child has started: the parent waits for its notice before it ends.
    pub(crate) fn started_in_background(&self) -> Notifier {
        self.running.fetch_add(1, Ordering::SeqCst);
        Notifier {
            running: self.running.clone(),
            notices: self.notices.clone(),
            sent: false,
        }
    }

    /// Passes a child's status update on as a progress note of the parent task:
    /// `{"mew": {"child": {taskId, agent, description, state, text?, tool?}}}`, where
    /// `tool` is the child's own tool note. Nothing when the parent's turn is over.
    pub(crate) async fn report(&self, link: &ChildLink, update: &TaskStatusUpdateEvent) {
        let note = ChildNote {
            task_id: link.task_id.clone(),
            agent: link.agent.clone(),
            description: link.description.clone(),
            state: update.status.state.to_string(),
            text: update
                .status
                .message
                .as_ref()
                .map(mew_cards::Message::text)
                .filter(|t| !t.is_empty()),
            tool: MewMetadata::read(update.metadata.as_ref()).tool,
        };
        let _ = self
            .sink()
            .progress(MewMetadata {
                child: Some(note),
                ..MewMetadata::default()
            })
            .await;
    }

    /// Whether a background child still runs, or left a notice nobody has read.
    pub(crate) fn outstanding(&self) -> bool {
        self.running() > 0
            || self
                .inbox
                .try_lock()
                .map_or(true, |inbox| !inbox.is_empty())
    }

    /// Background children still running.
    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// The notices that arrived since the last call.
    pub(crate) async fn take_notices(&self) -> Vec<String> {
        let mut inbox = self.inbox.lock().await;
        let mut notices = Vec::new();
        while let Ok(notice) = inbox.try_recv() {
            notices.push(notice);
        }
        notices
    }

    /// Waits for the next notice; `None` when nothing runs in the background
    /// any more or `cancel` fires.
    pub(crate) async fn next_notice(&self, cancel: &CancellationToken) -> Option<String> {
        let mut inbox = self.inbox.lock().await;
        if let Ok(notice) = inbox.try_recv() {
            return Some(notice);
        }
        if self.running() == 0 {
            return None;
        }
        tokio::select! {
            notice = inbox.recv() => notice,
            () = cancel.cancelled() => None,
        }
    }
}

/// Sends one background child's notice when it ends (an empty one if dropped
/// before, so the parent never waits for a child that is gone).
pub(crate) struct Notifier {
    running: Arc<AtomicUsize>,
    notices: mpsc::UnboundedSender<String>,
    sent: bool,
}

impl Notifier {
    /// Sends the notice.
    pub(crate) fn send(mut self, notice: String) {
        self.finish(Some(notice));
    }

    fn finish(&mut self, notice: Option<String>) {
        if self.sent {
            return;
        }
        self.sent = true;
        // Count down before sending: a parent woken by the notice sees the right count.
        self.running.fetch_sub(1, Ordering::SeqCst);
        let notice = notice.unwrap_or_else(|| {
            "<task-notification>\nA background task ended without a result.\n</task-notification>"
                .to_owned()
        });
        // The parent's turn may be over: the link in its metadata still tells.
        let _ = self.notices.send(notice);
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.finish(None);
    }
}

/// The notice a background child leaves for its parent (the seed's task-notification).
pub(crate) fn notice(link: &ChildLink, state: &str, result: &str) -> String {
    let name = link
        .name
        .as_deref()
        .map(|n| format!(" (name \"{n}\")"))
        .unwrap_or_default();
    format!(
        "<task-notification>\nTask {}{name}, {} on {}: {state}\nResult: {result}\n</task-notification>",
        link.task_id, link.description, link.agent
    )
}
