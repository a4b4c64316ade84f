//! End-to-end tests of Mew: one test binary, modules under `suite/`.

// Test helpers outside #[test] functions may unwrap too: a panic is a test failure here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
