//! The agent runtime: the loop that drives a model through tool calls, and the runner of model-driven roles.

pub(crate) mod callback;
pub(crate) mod children;
pub(crate) mod compact;
pub(crate) mod delegate;
pub(crate) mod forward;
pub(crate) mod hook_subagent;
pub(crate) mod model_loop;
pub(crate) mod runner;
pub(crate) mod scope;
pub(crate) mod session;
pub(crate) mod skill_tools;
pub(crate) mod task_tools;
pub(crate) mod todo_tool;

#[cfg(test)]
mod model_loop_tests;
