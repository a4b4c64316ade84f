//! Claude Code agent files as collections publish them, on a running node: filed in a
//! subfolder of `.claude/agents`, a 40-character name with a dot, a description with colons
//! and quotes that is not YAML as written, and tools Mew has and lacks.

use anyhow::ensure;
use mew_cards::TaskState;
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, scripted_model_config, send_text, status_text};

/// 40 characters, with a dot, as some public collections name their agents.
const NAME: &str = "backend-architecture-reviewer.v2-for-api";

#[tokio::test]
async fn a_claude_code_agent_in_a_subfolder_with_a_long_dotted_name_runs_on_a_node()
-> anyhow::Result<()> {
    assert_eq!(NAME.len(), 40);
    let model = ScriptedModel::start(vec![
        Step::text("The API looks sound.")
            .expect_system("You review backend architecture.")
            .expect_tools_include(["read_file", "web_fetch", "TodoWrite"])
            .expect_tools_exclude(["bash", "NotebookEdit"]),
    ])?;
    let mut node = MewNode::new()?;
    node.write_config(&scripted_model_config(&model))?;
    let file = node
        .project_dir()
        .join(".claude/agents/engineering/backend")
        .join(format!("{NAME}.md"));
    std::fs::create_dir_all(file.parent().unwrap_or(&node.project_dir()))?;
    std::fs::write(
        &file,
        format!(
            "---\nname: {NAME}\ndescription: \"Senior\" reviewer. Use when: reviewing APIs: REST and gRPC\n\
             tools: Read, WebFetch, TodoWrite, NotebookEdit\nmodel: sonnet\n---\n\
             You review backend architecture.\n"
        ),
    )?;
    // Listed, with a warning per thing Mew reads differently or lacks, naming the file.
    let (code, out, err) = node.client(&["agents"]).await?;
    ensure!(
        code == 0 && out.contains(NAME),
        "mew agents ({code}):\n{out}{err}"
    );
    let listing = format!("{out}{err}");
    ensure!(
        listing.contains("tool NotebookEdit is not provided by Mew")
            && listing.contains("description is not valid YAML as written"),
        "mew agents:\n{listing}"
    );

    node.launch().await?;
    let (status, card) = node
        .get_json(&format!("/agents/{NAME}/.well-known/agent-card.json"))
        .await?;
    ensure!(
        status == 200
            && card["description"]
                == "\"Senior\" reviewer. Use when: reviewing APIs: REST and gRPC",
        "card ({status}): {card}"
    );
    let task = send_text(&node, NAME, "review the orders API").await?;
    ensure!(
        task.status.state == TaskState::Completed && status_text(&task) == "The API looks sound.",
        "state {:?}: {}",
        task.status.state,
        status_text(&task)
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_users_own_claude_code_agent_in_the_home_directory_runs_on_a_node() -> anyhow::Result<()>
{
    let model = ScriptedModel::start(vec![
        Step::text("Noted.").expect_system("You keep the user's notes."),
    ])?;
    let mut node = MewNode::new()?;
    node.write_config(&scripted_model_config(&model))?;
    // `~/.claude/agents/`, in a subfolder, as Claude Code reads a user's agents.
    let file = node
        .home_dir()
        .join(".claude/agents/personal/note-keeper.md");
    std::fs::create_dir_all(file.parent().unwrap_or(&node.home_dir()))?;
    std::fs::write(
        &file,
        "---\nname: note-keeper\ndescription: Keeps notes: short ones\n---\nYou keep the user's notes.\n",
    )?;
    let (code, out, err) = node.client(&["agents"]).await?;
    ensure!(
        code == 0 && out.contains("note-keeper"),
        "mew agents ({code}):\n{out}{err}"
    );
    node.launch().await?;
    let task = send_text(&node, "note-keeper", "note: buy milk").await?;
    ensure!(
        task.status.state == TaskState::Completed && status_text(&task) == "Noted.",
        "state {:?}: {}",
        task.status.state,
        status_text(&task)
    );
    model.assert_done();
    Ok(())
}
