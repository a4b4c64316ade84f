//! `TaskList`, `TaskGet` and `TaskStop`: what a delegating agent sees of, and does to, the tasks it delegated.
//!
//! They read the children recorded in the conversation's tasks (see
//! [`super::children`]) and ask the agent that runs each child for its
//! current state, so they tell the truth after a restart and across nodes.
//! Unlike the seed's in-memory task table, a finished task stays listed with
//! its final state, and `TaskStop` reports the state the task reached.

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::future::join_all;
use mew_cards::{CancelTaskRequest, Task, TaskId};
use serde::Deserialize;
use serde_json::{Value, json};

use super::children::{ChildLink, Children};
use super::delegate::{Directory, call_for, fetch_child, find_child};
use crate::tools::{Category, Tool, ToolContext, ToolOutput};

fn children_of(ctx: &ToolContext) -> Result<&Arc<Children>, ToolOutput> {
    super::scope::children(ctx)
        .ok_or_else(|| ToolOutput::error("this tool works only inside a task"))
}

/// One task as these tools show it.
fn summary(link: &ChildLink, task: Option<&Task>, error: Option<&str>) -> Value {
    let mut entry = json!({
        "task_id": link.task_id,
        "agent": link.agent,
        "description": link.description,
        "background": link.background,
    });
    if let Some(name) = &link.name {
        entry["name"] = json!(name);
    }
    if let Some(task) = task {
        entry["status"] = json!(task.status.state.to_string());
        if let Some(time) = task.status.timestamp {
            entry["last_activity"] = json!(time.to_string());
        }
    }
    if let Some(error) = error {
        entry["error"] = json!(error);
    }
    entry
}

/// The links of this conversation, one per task (the newest record of each), oldest first.
async fn distinct_links(children: &Children) -> Vec<ChildLink> {
    let mut links: Vec<ChildLink> = Vec::new();
    for link in children.links().await {
        match links.iter_mut().find(|l| l.task_id == link.task_id) {
            Some(existing) => *existing = link,
            None => links.push(link),
        }
    }
    links
}

/// `TaskList`.
pub(crate) struct TaskList {
    pub(crate) directory: Arc<Directory>,
}

#[async_trait]
impl Tool for TaskList {
    fn name(&self) -> &str {
        "TaskList"
    }

    fn description(&self) -> String {
        "Lists the tasks delegated in this conversation (running and finished) with their \
         current state, name and agent."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }

    fn category(&self) -> Category {
        Category::Read
    }

    async fn call(&self, _input: Value, ctx: &ToolContext) -> ToolOutput {
        let children = match children_of(ctx) {
            Ok(children) => children,
            Err(output) => return output,
        };
        let links = distinct_links(children).await;
        if links.is_empty() {
            return ToolOutput::text("[]");
        }
        let entries = join_all(links.iter().map(|link| async move {
            match fetch_child(&self.directory, children, link).await {
                Ok((_, task)) => summary(link, Some(&task), None),
                Err(e) => summary(link, None, Some(&e)),
            }
        }))
        .await;
        ToolOutput::text(Value::Array(entries).to_string())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskInput {
    task_id: String,
}

/// `TaskGet`.
pub(crate) struct TaskGet {
    pub(crate) directory: Arc<Directory>,
}

#[async_trait]
impl Tool for TaskGet {
    fn name(&self) -> &str {
        "TaskGet"
    }

    fn description(&self) -> String {
        "Shows one delegated task (by task id or name): its state, its result or question so \
         far, and the tokens it used."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"task_id": {"type": "string", "description": "The task's id or name."}},
            "required": ["task_id"],
            "additionalProperties": false
        })
    }

    fn category(&self) -> Category {
        Category::Read
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput {
        let input: TaskInput = match serde_json::from_value(input) {
            Ok(input) => input,
            Err(e) => return ToolOutput::error(format!("invalid input for TaskGet: {e}")),
        };
        let children = match children_of(ctx) {
            Ok(children) => children,
            Err(output) => return output,
        };
        let link = match find_child(children, input.task_id.trim()).await {
            Ok(link) => link,
            Err(e) => return ToolOutput::error(e),
        };
        let task = match fetch_child(&self.directory, children, &link).await {
            Ok((_, task)) => task,
            Err(e) => return ToolOutput::error(e),
        };
        let mut entry = summary(&link, Some(&task), None);
        let result = super::delegate::result_text(&task);
        if !result.is_empty() {
            entry["result"] = json!(result);
        }
        if let Some(usage) = mew_cards::mew::MewMetadata::read(task.metadata.as_ref()).usage {
            entry["usage"] = json!(usage);
        }
        ToolOutput::text(entry.to_string())
    }
}

/// `TaskStop`.
pub(crate) struct TaskStop {
    pub(crate) directory: Arc<Directory>,
}

#[async_trait]
impl Tool for TaskStop {
    fn name(&self) -> &str {
        "TaskStop"
    }

    fn description(&self) -> String {
        "Stops (cancels) a delegated task that is still running, by task id or name.".to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"task_id": {"type": "string", "description": "The task's id or name."}},
            "required": ["task_id"],
            "additionalProperties": false
        })
    }

    fn category(&self) -> Category {
        Category::Delegate
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput {
        let input: TaskInput = match serde_json::from_value(input) {
            Ok(input) => input,
            Err(e) => return ToolOutput::error(format!("invalid input for TaskStop: {e}")),
        };
        let children = match children_of(ctx) {
            Ok(children) => children,
            Err(output) => return output,
        };
        let link = match find_child(children, input.task_id.trim()).await {
            Ok(link) => link,
            Err(e) => return ToolOutput::error(e),
        };
        let resolved = match self.directory.resolve(&link.agent).await {
            Ok(resolved) => resolved,
            Err(e) => return ToolOutput::error(e),
        };
        let request = CancelTaskRequest {
            id: TaskId::from(link.task_id.as_str()),
            ..CancelTaskRequest::default()
        };
        match resolved
            .agent
            .cancel_task(&call_for(Some(children)), request)
            .await
        {
            Ok(task) => ToolOutput::text(summary(&link, Some(&task), None).to_string()),
            Err(e) => ToolOutput::error(format!("cannot stop task {}: {e}", link.task_id)),
        }
    }
}
