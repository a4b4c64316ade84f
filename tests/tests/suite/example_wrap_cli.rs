//! `examples/wrap-cli` runs as its README says: the node on the example's project, then the
//! README's own `curl` commands, with the answers the README promises.

use mew_tests::example::{copy_dir, example_dir, sh_blocks};
use mew_tests::node::MewNode;

/// Runs one shell block of the README against `url` (the README's `127.0.0.1:7777`): stdout.
async fn run_block(block: &str, url: &str) -> String {
    let block = block.replace("http://127.0.0.1:7777", url);
    let output = mew_tests::process::command("sh")
        .args(["-c", &block])
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{block}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn the_wrap_cli_example_runs_as_its_readme_says() {
    let example = example_dir("wrap-cli");
    let blocks = sh_blocks(&example.join("README.md")).unwrap();
    let [up, wc, upper] = blocks.as_slice() else {
        panic!("the README has three shell blocks: {blocks:?}");
    };
    // What the README runs is what this test runs, with the built binary for `cargo run`.
    assert_eq!(
        up.trim(),
        "cargo run --release -p mew-node -- up --project examples/wrap-cli"
    );
    let mut node = MewNode::new().unwrap();
    copy_dir(&example, &node.project_dir()).unwrap();
    node.launch().await.unwrap();

    let answer: serde_json::Value = serde_json::from_str(&run_block(wc, node.url()).await).unwrap();
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    assert_eq!(task["artifacts"][0]["name"], "output", "{answer}");
    let counts = task["artifacts"][0]["parts"][0]["text"].as_str().unwrap();
    assert_eq!(
        counts.split_whitespace().collect::<Vec<_>>(),
        ["1", "4", "20"],
        "{answer}"
    );

    let events = run_block(upper, node.url()).await;
    let working = events.find("TASK_STATE_WORKING").expect(&events);
    let artifact = events.find("MAKE THIS LOUD").expect(&events);
    let completed = events.find("TASK_STATE_COMPLETED").expect(&events);
    assert!(working < artifact && artifact < completed, "{events}");
}
