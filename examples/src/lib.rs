//! Runnable examples of Mew.
