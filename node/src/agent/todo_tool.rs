//! `TodoWrite`: the model's plan for its task, shown as the task's progress.
//!
//! Each call replaces the plan. The run reports it ([`super::scope::plan`]): the task's
//! `metadata.mew.todos` holds the newest plan (so `GetTask` shows it) and a WORKING status
//! update carries it as it changes (so a subscriber sees it and `mew run` prints it). The
//! plan is not part of the task's history, which holds the conversation.

use std::sync::Arc;

use async_trait::async_trait;
use mew_cards::mew::TodoItem;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use crate::tools::{Category, Tool, ToolContext, ToolOutput};

/// The most steps a plan holds.
const MAX_TODOS: usize = 100;

/// The most characters of one step's text.
const MAX_TEXT_CHARS: usize = 500;

/// `TodoWrite`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TodoWrite;

/// Where a run's plans go: the runner's reports to the task.
#[derive(Clone)]
pub(crate) struct PlanReport(pub(crate) Arc<dyn Fn(Vec<TodoItem>) + Send + Sync>);

impl std::fmt::Debug for PlanReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlanReport")
    }
}

/// The input of `TodoWrite`: Claude Code's, in its current form (`content`, `status`,
/// `activeForm`) and its earlier one (`id`, `priority`, which are accepted and not kept).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    todos: Vec<Step>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    content: String,
    status: Status,
    #[serde(default, rename = "activeForm", alias = "active_form")]
    active_form: Option<String>,
    /// Accepted from Claude Code's earlier schema, not kept.
    #[serde(default, rename = "id")]
    _id: Option<IgnoredAny>,
    /// Accepted from Claude Code's earlier schema, not kept.
    #[serde(default, rename = "priority")]
    _priority: Option<IgnoredAny>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Status {
    Pending,
    InProgress,
    Completed,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
        }
    }
}

#[async_trait]
impl Tool for TodoWrite {
    fn name(&self) -> &str {
        "TodoWrite"
    }

    fn description(&self) -> String {
        format!(
            "Writes your plan for this task as a list of steps, which the user sees as the \
             task's progress. Each call replaces the whole list.\n\
             - Use it for work of three steps or more: write the plan first, keep exactly one \
             step in_progress while you work on it, and mark each completed as soon as it is \
             done (not in a batch at the end). Skip it for a single simple step.\n\
             - content is the step in the imperative (\"Run the tests\"), activeForm the same \
             as it is being done (\"Running the tests\").\n\
             - At most {MAX_TODOS} steps."
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "maxItems": MAX_TODOS,
                    "description": "The whole plan, in order.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string", "minLength": 1, "description": "The step, in the imperative."},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                            "activeForm": {"type": "string", "minLength": 1, "description": "The step as it is being done."}
                        },
                        "required": ["content", "status"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["todos"],
            "additionalProperties": false
        })
    }

    fn category(&self) -> Category {
        // It changes nothing but what the user is shown.
        Category::Read
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput {
        let input: Input = match serde_json::from_value(input) {
            Ok(input) => input,
            Err(err) => return ToolOutput::error(format!("invalid input for TodoWrite: {err}")),
        };
        if input.todos.len() > MAX_TODOS {
            return ToolOutput::error(format!(
                "{} steps is more than {MAX_TODOS}; plan in larger steps",
                input.todos.len()
            ));
        }
        let mut plan = Vec::with_capacity(input.todos.len());
        for (n, step) in input.todos.into_iter().enumerate() {
            let content = step.content.trim();
            if content.is_empty() {
                return ToolOutput::error(format!("step {}: content is empty", n + 1));
            }
            plan.push(TodoItem {
                content: cut(content),
                status: step.status.name().to_owned(),
                active_form: step
                    .active_form
                    .as_deref()
                    .map(str::trim)
                    .filter(|form| !form.is_empty())
                    .map(cut),
            });
        }
        let Some(report) = super::scope::plan(ctx) else {
            return ToolOutput::error("TodoWrite works only inside a task");
        };
        let count = |status: &str| plan.iter().filter(|step| step.status == status).count();
        let summary = format!(
            "The plan is updated: {} completed, {} in progress, {} pending. Keep it current: \
             mark each step completed as soon as it is done.",
            count("completed"),
            count("in_progress"),
            count("pending")
        );
        (report.0)(plan);
        ToolOutput::text(summary)
    }
}

/// `text` cut to [`MAX_TEXT_CHARS`] characters, with `…` when cut.
fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT_CHARS) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::agent::scope::RunScope;
    use crate::tools::test_support::context;

    /// A context whose run keeps the plans reported.
    fn reporting() -> (ToolContext, Arc<Mutex<Vec<Vec<TodoItem>>>>) {
        let plans = Arc::new(Mutex::new(Vec::new()));
        let kept = plans.clone();
        let mut ctx = context(std::path::Path::new("/"));
        ctx.scope = RunScope {
            plan: Some(PlanReport(Arc::new(move |plan| {
                kept.lock().unwrap().push(plan);
            }))),
            ..RunScope::default()
        }
        .into_context();
        (ctx, plans)
    }

    fn step(content: &str, status: &str, active: Option<&str>) -> TodoItem {
        TodoItem {
            content: content.to_owned(),
            status: status.to_owned(),
            active_form: active.map(str::to_owned),
        }
    }

    #[tokio::test]
    async fn each_call_reports_the_whole_plan() {
        let (ctx, plans) = reporting();
        let out = TodoWrite
            .call(
                json!({"todos": [
                    {"content": "Read the notes", "status": "completed", "activeForm": "Reading the notes"},
                    {"content": " Write the summary ", "status": "in_progress", "activeForm": "Writing the summary"},
                    {"content": "Check spelling", "status": "pending", "activeForm": " "},
                ]}),
                &ctx,
            )
            .await;
        assert_eq!(
            out,
            ToolOutput::text(
                "The plan is updated: 1 completed, 1 in progress, 1 pending. Keep it current: \
                 mark each step completed as soon as it is done."
            )
        );
        // Claude Code's earlier form: ids and priorities, no activeForm.
        let out = TodoWrite
            .call(
                json!({"todos": [{"id": "1", "content": "Ship", "status": "completed", "priority": "high"}]}),
                &ctx,
            )
            .await;
        assert!(!out.is_error, "{out:?}");
        assert_eq!(
            *plans.lock().unwrap(),
            [
                vec![
                    step("Read the notes", "completed", Some("Reading the notes")),
                    step(
                        "Write the summary",
                        "in_progress",
                        Some("Writing the summary")
                    ),
                    step("Check spelling", "pending", None),
                ],
                vec![step("Ship", "completed", None)],
            ]
        );
    }

    #[tokio::test]
    async fn bad_plans_are_errors_and_report_nothing() {
        let (ctx, plans) = reporting();
        for (input, error) in [
            (
                json!({"todos": [{"content": "x", "status": "done"}]}),
                "invalid input for TodoWrite: unknown variant `done`",
            ),
            (
                json!({"todos": [{"content": "x", "status": "pending"}, {"content": " ", "status": "pending"}]}),
                "step 2: content is empty",
            ),
            (
                json!({"todos": (0..=MAX_TODOS).map(|n| json!({"content": n.to_string(), "status": "pending"})).collect::<Vec<_>>()}),
                "101 steps is more than 100; plan in larger steps",
            ),
        ] {
            let out = TodoWrite.call(input, &ctx).await;
            assert!(
                out.is_error && out.text_content().starts_with(error),
                "{out:?}"
            );
        }
        assert!(plans.lock().unwrap().is_empty());
        let long = "é".repeat(MAX_TEXT_CHARS + 10);
        let out = TodoWrite
            .call(
                json!({"todos": [{"content": long, "status": "pending"}]}),
                &ctx,
            )
            .await;
        assert!(!out.is_error);
        assert_eq!(
            plans.lock().unwrap()[0][0].content.chars().count(),
            MAX_TEXT_CHARS + 1
        );
        // Outside a task there is no one to show the plan to.
        let out = TodoWrite
            .call(json!({"todos": []}), &context(std::path::Path::new("/")))
            .await;
        assert_eq!(out, ToolOutput::error("TodoWrite works only inside a task"));
    }
}
