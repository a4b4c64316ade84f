//! What a run hands the agent's own tools through their context: the task's children, its skills, its hooks and where its plan goes.
//!
//! The base [`ToolContext`] carries this as a value of a type it does not know, so the tools
//! module stays below the agent: the built-in tools never see it, and the agent's tools
//! (`Agent`, `SendMessage`, the task tools, the skill tools) and its loop read it back here.

use std::any::Any;
use std::sync::Arc;

use super::children::Children;
use super::skill_tools::SkillState;
use super::todo_tool::PlanReport;
use crate::hooks::RunHooks;
use crate::tools::ToolContext;

/// The agent's part of one run's tool context.
#[derive(Debug, Default)]
pub(crate) struct RunScope {
    /// The task's children, for the tools that delegate and manage delegated tasks (`None`
    /// outside a task).
    pub(crate) children: Option<Arc<Children>>,
    /// The skill catalog and the task's active skills (`None` where skills are off).
    pub(crate) skills: Option<Arc<SkillState>>,
    /// The hooks of the run (`None` where hooks are off).
    pub(crate) hooks: Option<Arc<RunHooks>>,
    /// Where `TodoWrite`'s plans go (`None` outside a task).
    pub(crate) plan: Option<PlanReport>,
}

impl RunScope {
    /// This scope, as a tool context carries it.
    pub(crate) fn into_context(self) -> Option<Arc<dyn Any + Send + Sync>> {
        Some(Arc::new(self))
    }
}

/// The run's scope in `ctx`, if the agent put one there.
fn of(ctx: &ToolContext) -> Option<&RunScope> {
    ctx.scope.as_deref()?.downcast_ref()
}

/// The task's children, inside a task.
pub(crate) fn children(ctx: &ToolContext) -> Option<&Arc<Children>> {
    of(ctx)?.children.as_ref()
}

/// The run's skills, where skills are on.
pub(crate) fn skills(ctx: &ToolContext) -> Option<&Arc<SkillState>> {
    of(ctx)?.skills.as_ref()
}

/// The run's hooks, where hooks are on.
pub(crate) fn hooks(ctx: &ToolContext) -> Option<&Arc<RunHooks>> {
    of(ctx)?.hooks.as_ref()
}

/// Where the run's plans go, inside a task.
pub(crate) fn plan(ctx: &ToolContext) -> Option<&PlanReport> {
    of(ctx)?.plan.as_ref()
}
