//! The executor of `remote:` roles: each turn is handed, as a child task, to the agent the role names.
//!
//! The turn goes the way the `Agent` tool's delegations go ([`super::delegate::send_to`]): the
//! target (`peer/role` through the configured peers and with their credentials, or a URL) is
//! resolved by the node's [`Directory`], the child's message carries `parentTask`, the parent
//! task records the child in `mew.children`, and cancelling the parent cancels the child. The
//! child's answer is the parent's answer; a child that fails fails the parent.
//!
//! Known gaps: a child that stops to ask (INPUT_REQUIRED) ends the parent with its question as
//! the answer instead of relaying it, and a node lost mid-turn does not follow the child again.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mew_cards::{Message, TaskState};

use super::children::Children;
use super::delegate::{Directory, Handoff, send_to, turn_context};
use crate::tasks::executor::{EventSink, ExecError, Executor, Turn};

/// Runs the turns of `remote:` roles.
pub(crate) struct RemoteExecutor {
    /// Resolves the roles' targets.
    pub(crate) directory: Arc<Directory>,
    /// The deepest a delegation chain may go.
    pub(crate) max_depth: u32,
    /// The node's environment snapshot, for the context of the delegation.
    pub(crate) env: Arc<HashMap<String, String>>,
    /// The project directory.
    pub(crate) project_dir: PathBuf,
}

#[async_trait]
impl Executor for RemoteExecutor {
    async fn run(&self, turn: Turn, sink: Arc<dyn EventSink>) -> Result<(), ExecError> {
        let Some(target) = turn.role.remote.as_ref() else {
            return Err(ExecError(format!(
                "role {} names no remote agent",
                turn.role.name
            )));
        };
        if turn.depth + 1 > self.max_depth {
            return Err(ExecError(format!(
                "delegation is limited to {} level(s)",
                self.max_depth
            )));
        }
        sink.status(TaskState::Working, None)
            .await
            .map_err(|_| ExecError("the task is gone".to_owned()))?;
        // The child is followed to its end: a remote role's answer is its child's.
        let children = Arc::new(Children::new(
            sink.clone(),
            (turn.role.name.clone(), turn.owner.clone()),
            1,
            Duration::MAX,
        ));
        let ctx = turn_context(
            (self.project_dir.clone(), self.env.clone()),
            turn.task_id.clone(),
            turn.depth,
            turn.cancel.clone(),
            children,
        );
        let target = target.to_string();
        let send = Handoff {
            target: &target,
            prompt: turn.message.text(),
            description: format!("{} forwards to {target}", turn.role.name),
            name: None,
            background: false,
        };
        let output = send_to(&self.directory, &ctx, send).await;
        if output.is_error {
            return Err(ExecError(output.text_content()));
        }
        sink.status(
            TaskState::Completed,
            Some(Message::agent_text(output.text_content())),
        )
        .await
        .map_err(|_| ExecError("the task is gone".to_owned()))
    }
}
