//! The Mew node: publishes roles as A2A agents and runs their tasks.
