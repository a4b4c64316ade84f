//! Delegations made by command roles' programs: `mew send` run inside a command role's turn
//! (`MEW_TASK_TOKEN` in its environment) asks the node, at [`CALLBACK_PATH`], to delegate on
//! behalf of the turn's task, so the child is recorded in that task's `mew.children` the way
//! the `Agent` tool and `remote:` roles record theirs, reached with the node's peers and their
//! credentials.
//!
//! The token is a fresh 256-bit secret per turn, good only while the turn's program runs:
//! whoever holds it acts for that task alone, and a request without a live token is refused.
//! What a token started is canceled when the turn ends.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mew_cards::TaskId;
use tokio_util::sync::CancellationToken;

use super::children::Children;
use super::delegate::{Directory, Handoff, send_to, turn_context};
use crate::roles::command::{Callback, Ticket};
use crate::tasks::executor::{EventSink, Turn};
use crate::tools::ToolOutput;

/// Where a command role's program asks the node to delegate for its task.
pub(crate) const CALLBACK_PATH: &str = "/mew/v1/delegations";

/// The header that carries a turn's token.
pub(crate) const TOKEN_HEADER: &str = "x-mew-task-token";

/// The open turns of command roles, by token, and what their delegations need.
pub(crate) struct CommandDelegations {
    /// Resolves targets: local roles, `peer/role`, URLs.
    directory: Arc<Directory>,
    /// The deepest a delegation chain may go.
    max_depth: u32,
    /// How many children of one turn run at once.
    max_children: usize,
    /// The node's environment snapshot.
    env: Arc<HashMap<String, String>>,
    /// The project directory.
    project_dir: PathBuf,
    /// The open turns, by token.
    open: Arc<Mutex<HashMap<String, Arc<OpenTurn>>>>,
}

/// One turn that takes delegations.
#[derive(Debug)]
struct OpenTurn {
    /// The turn's task: the parent of what is delegated.
    task_id: TaskId,
    /// The role running the turn.
    role: String,
    /// The task's depth in its delegation chain.
    depth: u32,
    /// Canceled when the task is canceled or the turn ends.
    cancel: CancellationToken,
    /// The turn's children, recorded through its sink.
    children: Arc<Children>,
}

/// Why a delegation was refused before it started.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No running turn holds that token.
    #[error("no running task of a command role holds this token")]
    UnknownToken,
    /// The chain would be too deep.
    #[error("delegation is limited to {0} level(s)")]
    TooDeep(u32),
}

impl std::fmt::Debug for CommandDelegations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The tokens are secrets: only how many turns are open.
        let open = self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("CommandDelegations")
            .field("max_depth", &self.max_depth)
            .field("open", &open)
            .finish_non_exhaustive()
    }
}

/// Closes a turn's way in: forgets its token and cancels what it started.
struct Close {
    open: Arc<Mutex<HashMap<String, Arc<OpenTurn>>>>,
    token: String,
}

impl Drop for Close {
    fn drop(&mut self) {
        let turn = self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.token);
        if let Some(turn) = turn {
            turn.cancel.cancel();
        }
    }
}

impl CommandDelegations {
    /// Delegations resolved by `directory`, at most `max_depth` deep, `max_children` at once
    /// per turn.
    pub(crate) fn new(
        directory: Arc<Directory>,
        max_depth: u32,
        max_children: usize,
        env: Arc<HashMap<String, String>>,
        project_dir: PathBuf,
    ) -> Self {
        Self {
            directory,
            max_depth,
            max_children,
            env,
            project_dir,
            open: Arc::default(),
        }
    }

    /// Sends `text` to `target` as a child of the task whose turn holds `token`, follows the
    /// child to its end and gives its answer (an error output when it failed).
    pub(crate) async fn send(
        &self,
        token: &str,
        target: &str,
        text: String,
    ) -> Result<ToolOutput, Refused> {
        let turn = self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(token)
            .cloned()
            .ok_or(Refused::UnknownToken)?;
        if turn.depth + 1 > self.max_depth {
            return Err(Refused::TooDeep(self.max_depth));
        }
        let ctx = turn_context(
            (self.project_dir.clone(), self.env.clone()),
            turn.task_id.clone(),
            turn.depth,
            turn.cancel.clone(),
            turn.children.clone(),
        );
        let send = Handoff {
            target,
            prompt: text,
            description: format!("{} sends to {target}", turn.role),
            name: None,
            background: false,
        };
        Ok(send_to(&self.directory, &ctx, send).await)
    }
}

impl Callback for CommandDelegations {
    fn open(&self, turn: &Turn, sink: Arc<dyn EventSink>) -> Option<Ticket> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).ok()?;
        let token = URL_SAFE_NO_PAD.encode(secret);
        let open = Arc::new(OpenTurn {
            task_id: turn.task_id.clone(),
            role: turn.role.name.clone(),
            depth: turn.depth,
            cancel: turn.cancel.child_token(),
            // Every child is followed to its end: `mew send` waits for the answer.
            children: Arc::new(Children::new(
                sink,
                (turn.role.name.clone(), turn.owner.clone()),
                self.max_children,
                Duration::MAX,
            )),
        });
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.clone(), open);
        Some(Ticket {
            token: token.clone(),
            _close: Box::new(Close {
                open: self.open.clone(),
                token,
            }),
        })
    }
}
