//! The agent runtime: the conversation, the loop that drives a model through tool calls, and the runner of model-driven roles.

pub(crate) mod conversation;
pub(crate) mod delegate;
pub(crate) mod engine;
pub(crate) mod runner;

#[cfg(test)]
mod engine_tests;
