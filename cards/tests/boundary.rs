//! The dependency boundary of `mew-cards`: no async runtime, HTTP stack or MCP SDK in its tree.

use std::path::Path;
use std::process::Command;

/// Crates that must never be normal dependencies of `mew-cards`, directly or not. Their
/// companion crates (`tokio-util`, `axum-core`, `hyper-util`, ...) count too.
const FORBIDDEN: [&str; 6] = ["tokio", "reqwest", "axum", "hyper", "rmcp", "mio"];

fn is_forbidden(name: &str) -> bool {
    FORBIDDEN.iter().any(|bad| {
        name == *bad
            || name
                .strip_prefix(bad)
                .is_some_and(|rest| rest.starts_with('-'))
    })
}

// This is the dependency-boundary check: it has to run `cargo tree` itself, and no process
// helper exists in this crate (nor may it: that would need the runtime this test keeps out).
#[allow(clippy::disallowed_methods)]
#[test]
fn cards_depends_on_no_runtime_or_network_crate() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cards/ sits in the workspace root");
    let output = Command::new(&cargo)
        .args([
            "tree",
            "-p",
            "mew-cards",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(workspace)
        .output()
        .unwrap_or_else(|e| panic!("could not run {cargo:?} tree: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "`cargo tree -p mew-cards` failed ({}), so the dependency boundary is unchecked:\n{stderr}",
        output.status
    );

    // Lines look like `serde v1.0.228` or `mew-cards v0.1.0 (/path)`, with `(*)` on repeats.
    let names: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(
        names.first(),
        Some(&"mew-cards"),
        "unexpected cargo tree output:\n{stdout}"
    );
    assert!(
        names.contains(&"serde"),
        "cargo tree output lists no serde; has its format changed?\n{stdout}"
    );
    let mut bad: Vec<&str> = names.into_iter().filter(|n| is_forbidden(n)).collect();
    bad.sort_unstable();
    bad.dedup();
    assert!(
        bad.is_empty(),
        "mew-cards must stay free of runtimes and network stacks, but depends on {bad:?}:\n{stdout}"
    );
}

#[test]
fn forbidden_names_match_whole_crate_names() {
    for name in [
        "tokio",
        "tokio-util",
        "axum-core",
        "hyper",
        "hyper-util",
        "rmcp",
        "mio",
    ] {
        assert!(is_forbidden(name), "{name}");
    }
    for name in ["serde", "tokenizers", "miow", "hyperlocal_free", "axumx"] {
        assert!(!is_forbidden(name), "{name}");
    }
}
