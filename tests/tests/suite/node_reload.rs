//! Role and skill files changed while the node runs: a client sees each change (a new role
//! served, a changed one with a new card and ETag, a broken edit keeping the last good version
//! with its problem in `/status`, a removed role withdrawn) without a restart.

use std::time::Duration;

use anyhow::Context;
use mew_cards::{
    GetTaskRequest, Message, SendMessageConfiguration, SendMessageRequest, SendMessageResponse,
};
use mew_tests::node::{MewNode, command_role, poll_until, send_text};
use mew_transport::{AgentTransport as _, CallContext};
use serde_json::Value;

/// How long a change may take to show: the node looks every second; a busy machine is slower.
const SHOWS_WITHIN: Duration = Duration::from_secs(60);

/// The ETag and body of a GET of `path`, or the status when it is not 200.
async fn get(node: &MewNode, path: &str) -> anyhow::Result<Result<(String, Value), u16>> {
    let response = reqwest::get(format!("{}{path}", node.url())).await?;
    let status = response.status().as_u16();
    if status != 200 {
        return Ok(Err(status));
    }
    let etag = response
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Ok(Ok((etag, response.json().await?)))
}

/// The names of the cards `/agents` lists.
async fn listed(node: &MewNode) -> anyhow::Result<Vec<String>> {
    let (_, body) = node.get_json("/agents").await?;
    Ok(body["agents"]
        .as_array()
        .context("agents is a list")?
        .iter()
        .filter_map(|card| card["name"].as_str().map(str::to_owned))
        .collect())
}

const CARD: &str = "/agents/shout/.well-known/agent-card.json";

#[tokio::test]
async fn a_role_file_added_changed_broken_and_removed_is_seen_without_a_restart() {
    let node = MewNode::start(&[]).await.unwrap();
    assert_eq!(get(&node, CARD).await.unwrap(), Err(404));

    // Added: served, listed, on the front card, and it runs.
    node.write_role("shout.md", &command_role("shout", "tr a-z A-Z"))
        .unwrap();
    let (first_etag, card) = poll_until("the new role is served", SHOWS_WITHIN, || async {
        Ok(get(&node, CARD).await?.ok())
    })
    .await
    .unwrap();
    assert_eq!(card["description"], "Runs shout for the tests.");
    assert!(listed(&node).await.unwrap().contains(&"shout".to_owned()));
    let (_, front) = node.get_json("/.well-known/agent-card.json").await.unwrap();
    assert!(
        front["skills"]
            .as_array()
            .unwrap()
            .iter()
            .any(|skill| skill["name"] == "shout"),
        "{front}"
    );
    let (_, status) = node.get_json("/status").await.unwrap();
    let shout = status["catalog"]["roles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|role| role["name"] == "shout")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (&shout["kind"], &shout["source"]),
        (&Value::from("command"), &Value::from("project")),
        "{status}"
    );
    let task = send_text(&node, "shout", "hello").await.unwrap();
    assert!(
        format!("{task:?}").contains("HELLO"),
        "the new role runs: {task:?}"
    );

    // Changed: a new card, with a new ETag, and the new command runs.
    node.write_role(
        "shout.md",
        "---\nname: shout\ndescription: Shouts, changed.\ncommand: [sh, -c, \"tr a-z A-Z | rev\"]\n---\n\
         Changed.\n",
    )
    .unwrap();
    let (second_etag, _) = poll_until("the changed card is served", SHOWS_WITHIN, || async {
        Ok(get(&node, CARD)
            .await?
            .ok()
            .filter(|(_, card)| card["description"] == "Shouts, changed."))
    })
    .await
    .unwrap();
    assert_ne!(second_etag, first_etag, "the ETag follows the card");
    let task = send_text(&node, "shout", "hello").await.unwrap();
    assert!(format!("{task:?}").contains("OLLEH"), "{task:?}");

    // Broken: the last good version stays, and /status says what is wrong.
    node.write_role("shout.md", "---\nname: [shout\n---\nbroken\n")
        .unwrap();
    let problem = poll_until("the broken file is reported", SHOWS_WITHIN, || async {
        let (_, status) = node.get_json("/status").await?;
        Ok(status["problems"]
            .as_array()
            .and_then(|problems| {
                problems
                    .iter()
                    .find(|p| p["path"].as_str().is_some_and(|p| p.ends_with("shout.md")))
            })
            .cloned())
    })
    .await
    .unwrap();
    assert!(
        problem["message"]
            .as_str()
            .unwrap()
            .contains("keeps its last good version"),
        "{problem}"
    );
    let (etag, card) = get(&node, CARD).await.unwrap().unwrap();
    assert_eq!(
        (etag.as_str(), &card["description"]),
        (second_etag.as_str(), &Value::from("Shouts, changed."))
    );
    let task = send_text(&node, "shout", "still").await.unwrap();
    assert!(format!("{task:?}").contains("LLITS"), "{task:?}");

    // Removed: withdrawn from its path, the list and the front card.
    std::fs::remove_file(node.roles_dir().join("shout.md")).unwrap();
    poll_until("the removed role is withdrawn", SHOWS_WITHIN, || async {
        Ok((get(&node, CARD).await? == Err(404)).then_some(()))
    })
    .await
    .unwrap();
    assert!(!listed(&node).await.unwrap().contains(&"shout".to_owned()));
    let (_, status) = node.get_json("/status").await.unwrap();
    assert_eq!(status["problems"], Value::Array(vec![]), "{status}");
    assert!(
        node.output().contains("role files changed"),
        "{}",
        node.output()
    );
}

#[tokio::test]
async fn a_skill_or_command_added_while_the_node_runs_is_listed_on_model_role_cards() {
    let node = MewNode::start(&[]).await.unwrap();
    let card = "/agents/general-purpose/.well-known/agent-card.json";
    let listed = |card: &Value, id: &str| {
        card["skills"]
            .as_array()
            .is_some_and(|skills| skills.iter().any(|s| s["id"] == id))
    };
    let has_skill = |card: &Value| listed(card, "skill/release-notes");
    let (_, before) = node.get_json(card).await.unwrap();
    assert!(!has_skill(&before), "{before}");
    let dir = node.project_dir().join(".agents/skills/release-notes");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: release-notes\ndescription: Writes release notes from a changelog.\n---\n\
         Read CHANGELOG.md and summarize it.\n",
    )
    .unwrap();
    poll_until("the skill is on the card", SHOWS_WITHIN, || async {
        let (_, card) = node.get_json(card).await?;
        Ok(has_skill(&card).then_some(()))
    })
    .await
    .unwrap();
    // A Claude Code command in a namespace directory of the user's commands, too.
    let dir = node.home_dir().join(".claude/commands/team");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("standup.md"), "Summarize yesterday's commits.\n").unwrap();
    poll_until("the command is on the card", SHOWS_WITHIN, || async {
        let (_, card) = node.get_json(card).await?;
        Ok(listed(&card, "skill/team:standup").then_some(()))
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_task_running_while_its_role_changes_keeps_the_definition_it_started_with() {
    let gates = tempfile::tempdir().unwrap();
    let gate = gates.path().join("go");
    let waiting = |answer: &str| {
        format!(
            "---\nname: slow\ndescription: Waits for its gate.\ncommand: [sh, -c, \"while [ ! -e '{}' ]; \
             do sleep 0.05; done; echo {answer}\"]\n---\nWaits.\n",
            gate.display()
        )
    };
    let node = MewNode::start(&[("slow.md", &waiting("first"))])
        .await
        .unwrap();
    let agent = node
        .agent("/agents/slow", mew_transport::Binding::JsonRpc)
        .await
        .unwrap();
    let request = SendMessageRequest {
        configuration: Some(SendMessageConfiguration {
            return_immediately: true,
            ..Default::default()
        }),
        ..SendMessageRequest::new(Message::user_text("go"))
    };
    let SendMessageResponse::Task(running) = agent
        .send_message(&CallContext::default(), request)
        .await
        .unwrap()
    else {
        panic!("expected a task");
    };

    node.write_role("slow.md", &waiting("second")).unwrap();
    // The card does not show the command, so the node's log says when the new version is in.
    poll_until("the changed role is published", SHOWS_WITHIN, || async {
        Ok(node.output().contains("changed=slow").then_some(()))
    })
    .await
    .unwrap();
    std::fs::write(&gate, "").unwrap();
    let done = poll_until("the running task ends", SHOWS_WITHIN, || async {
        let task = agent
            .get_task(
                &CallContext::default(),
                GetTaskRequest {
                    id: running.id.clone(),
                    ..Default::default()
                },
            )
            .await?;
        Ok(task.status.state.is_terminal().then_some(task))
    })
    .await
    .unwrap();
    let text = format!("{:?}", done.artifacts);
    assert!(text.contains("first") && !text.contains("second"), "{text}");
    let next = send_text(&node, "slow", "again").await.unwrap();
    assert!(
        format!("{:?}", next.artifacts).contains("second"),
        "{next:?}"
    );
}
