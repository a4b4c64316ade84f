//! The task store from outside: `mew up` on PostgreSQL (`store.url` / `MEW_STORE_URL`).

use std::time::Duration;

use anyhow::ensure;
use mew_tests::node::{MewNode, poll_until, send_text};
use mew_tests::postgres;
use mew_transport::{AgentTransport, Binding, CallContext};

#[tokio::test]
async fn a_node_keeps_its_tasks_in_postgres_and_another_node_on_the_database_shares_them()
-> anyhow::Result<()> {
    let url = postgres::database().await?;
    let mut first = MewNode::new_echo("")?;
    first.set_env("MEW_STORE_URL", &url);
    first.launch().await?;
    // The banner names the database (the lines after `listening` arrive a moment later).
    poll_until(
        "the banner's store line",
        Duration::from_secs(30),
        || async {
            Ok(first
                .output()
                .contains("tasks in postgres://127.0.0.1:")
                .then_some(()))
        },
    )
    .await?;
    let task = send_text(&first, "echo", "echo kept").await?;

    // Another node, with its own data directory, on the same database: a replica, which
    // answers for the first one's task.
    let mut second = MewNode::new_echo("")?;
    second.set_env("MEW_STORE_URL", &url);
    second.launch().await?;
    let request = mew_cards::GetTaskRequest {
        id: task.id.clone(),
        ..Default::default()
    };
    let agent = second.agent("", Binding::HttpJson).await?;
    let got = agent
        .get_task(&CallContext::default(), request.clone())
        .await?;
    ensure!(got == task, "{got:?} vs {task:?}");

    // The tasks live in the database, not in the data directory: they outlive both nodes.
    first.stop().await?;
    second.stop().await?;
    let mut third = MewNode::new_echo("")?;
    third.set_env("MEW_STORE_URL", &url);
    third.launch().await?;
    let agent = third.agent("", Binding::HttpJson).await?;
    let got = agent.get_task(&CallContext::default(), request).await?;
    ensure!(got == task, "{got:?} vs {task:?}");
    Ok(())
}

#[tokio::test]
async fn a_password_in_a_config_file_is_refused_and_never_printed() -> anyhow::Result<()> {
    let mut node = MewNode::new_echo("store:\n  url: postgres://mew:hunter2@127.0.0.1:1/mew\n")?;
    ensure!(node.launch().await.is_err(), "the node started");
    let log = node.log();
    ensure!(log.contains("store.url"), "{log}");
    ensure!(log.contains("MEW_STORE_PASSWORD"), "{log}");
    ensure!(
        !log.contains("hunter2"),
        "the password is in the log: {log}"
    );
    Ok(())
}

/// The status code of a plain GET of `path` on `node`.
async fn probe(node: &MewNode, path: &str) -> anyhow::Result<u16> {
    let response = reqwest::get(format!("{}{path}", node.url())).await?;
    Ok(response.status().as_u16())
}

#[tokio::test]
async fn readiness_follows_the_database_and_liveness_does_not() -> anyhow::Result<()> {
    let url = postgres::database().await?;
    let name = postgres::name_of(&url).to_owned();
    let mut node = MewNode::new_echo("")?;
    node.set_env("MEW_STORE_URL", &url);
    node.launch().await?;
    ensure!(probe(&node, "/readyz").await? == 200, "not ready at start");

    // The database goes away: no new connections, and the node's are cut.
    postgres::execute(&format!(
        "ALTER DATABASE {name} ALLOW_CONNECTIONS false; \
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
    ))
    .await?;
    poll_until("readiness fails", Duration::from_secs(30), || async {
        Ok((probe(&node, "/readyz").await? == 503).then_some(()))
    })
    .await?;
    ensure!(
        probe(&node, "/healthz").await? == 200,
        "liveness followed the database"
    );
    let body = reqwest::get(format!("{}/readyz", node.url()))
        .await?
        .text()
        .await?;
    ensure!(
        body.contains("unready") && body.contains(&name),
        "the reason: {body}"
    );

    // It comes back, and so does readiness.
    postgres::execute(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true")).await?;
    poll_until("readiness comes back", Duration::from_secs(30), || async {
        Ok((probe(&node, "/readyz").await? == 200).then_some(()))
    })
    .await?;
    Ok(())
}
