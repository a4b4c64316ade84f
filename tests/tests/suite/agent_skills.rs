//! Skills in model-driven roles on a real node: disclosure in the system prompt, LoadSkill
//! activating an inline skill for the following turns and the context's later tasks,
//! `/name args` commands, a fork skill run in a child with its tool filter, its context
//! and its model, and Claude Code's custom commands (`.claude/commands`) run as skills.

use anyhow::{Context, ensure};
use mew_cards::{Message, Task, TaskState};
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, send};
use mew_transport::{AgentTransport, Binding};
use serde_json::json;

/// A node with `roles`, the project skills `skills` (directory name, SKILL.md text), and its
/// model roles on `model` (OpenAI-compatible API).
async fn node(
    model: &ScriptedModel,
    roles: &[(&str, &str)],
    skills: &[(&str, &str)],
) -> anyhow::Result<MewNode> {
    let mut node = MewNode::new()?;
    node.write_config(&config(model))?;
    for (file, text) in roles {
        node.write_role(file, text)?;
    }
    for (dir, text) in skills {
        let dir = node.project_dir().join(".mew/skills").join(dir);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("SKILL.md"), text)?;
    }
    node.launch().await?;
    Ok(node)
}

/// A Claude Code plugin's kind of skill: a display name, no description, and a bundled script
/// its body names by a path relative to the skill's directory.
const PLUGIN_SKILL: &str = "---\nname: Greeting Style\nversion: 0.1.0\nallowed-tools: Bash NotebookEdit\n---\n\n# Greeting Style\n\n\
    Greets people in the house style.\n\nRun `bash scripts/greet.sh NAME` and give back what it \
    prints.\n";

/// The skill's script: it prints the greeting and leaves it in the working directory.
const GREET_SCRIPT: &str =
    "#!/bin/sh\nprintf 'hello from the skill, %s\\n' \"$1\" | tee greeted.txt\n";

#[tokio::test]
async fn a_claude_code_skill_with_a_display_name_runs_its_bundled_script() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    let skill_dir = node.project_dir().join(".claude/skills/greeting-style");
    std::fs::create_dir_all(skill_dir.join("scripts"))?;
    let skill_dir = skill_dir.canonicalize()?;
    std::fs::write(skill_dir.join("SKILL.md"), PLUGIN_SKILL)?;
    std::fs::write(skill_dir.join("scripts/greet.sh"), GREET_SCRIPT)?;
    let script = skill_dir.join("scripts/greet.sh");
    let base = format!("Base directory for this skill: {}", skill_dir.display());
    let model = ScriptedModel::start(vec![
        // Listed under its directory's name, described by its body's first paragraph.
        Step::tool_call("call_1", "LoadSkill", json!({"name": "greeting-style"}))
            .expect_system("- **greeting-style**: Greets people in the house style."),
        // The model is told where the skill lives, so it can run the script by its path.
        Step::tool_call(
            "call_2",
            "bash",
            json!({"command": format!("bash {} Ada", script.display())}),
        )
        .expect_tool_results(["call_1"])
        .expect_last_user(base),
        Step::text("The skill says hello to Ada.")
            .expect_tool_results(["call_2"])
            .expect_last_user("hello from the skill, Ada"),
    ])?;
    // Running the script is the user's to allow, as any command is.
    node.write_config(&format!(
        "{}permissions:\n  allow: [\"Bash(bash:*)\"]\n",
        config(&model)
    ))?;
    node.write_role("greeter.md", &role("greeter", "tools: [bash]\n"))?;
    node.launch().await?;
    let task = send(&node, "greeter", Message::user_text("greet Ada")).await?;
    ensure!(
        task.status.state == TaskState::Completed && said(&task) == "The skill says hello to Ada.",
        "{:?}: {}",
        task.status.state,
        said(&task)
    );
    let greeted = std::fs::read_to_string(node.project_dir().join("greeted.txt"))
        .context("the skill's script did not run in the project")?;
    ensure!(greeted == "hello from the skill, Ada\n", "{greeted:?}");
    // `mew skills list` names the skill and says what it made of the display name.
    let (code, listed, errors) = node.client(&["skills", "list"]).await?;
    ensure!(
        code == 0
            && listed.contains("greeting-style")
            && format!("{listed}{errors}").contains(
                "name \"Greeting Style\" is not a skill name (1 to 64 lowercase letters, digits and single hyphens); using the directory name \"greeting-style\""
            ),
        "skills list ({code}):\n{listed}{errors}"
    );
    // A tool the skill names and Mew lacks is a warning of the node, naming the file.
    ensure!(
        node.log()
            .lines()
            .any(|line| line.contains("greeting-style")
                && line.contains("names the tool \"NotebookEdit\", which does not exist")),
        "{}",
        node.log()
    );
    model.assert_done();
    Ok(())
}

/// A node configuration whose model roles run on `model` (OpenAI-compatible API).
fn config(model: &ScriptedModel) -> String {
    format!(
        "agent:\n  provider: scripted\n  model: sonnet\nproviders:\n  scripted:\n    kind: openai\n    base_url: {}/v1\n    max_retries: 0\n",
        model.base_url()
    )
}

fn role(name: &str, frontmatter: &str) -> String {
    format!("---\nname: {name}\ndescription: A test role.\n{frontmatter}---\nYou help.\n")
}

const REVIEW: &str = "---\nname: review\ndescription: Reviews text for a kind of mistake.\n---\nCheck the text for $ARGUMENTS, one finding a line.\n";

fn said(task: &Task) -> String {
    task.status
        .message
        .as_ref()
        .map(Message::text)
        .unwrap_or_default()
}

#[tokio::test]
async fn load_skill_activates_an_inline_skill_for_the_following_turns() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "LoadSkill",
            json!({"name": "review", "args": "typos"}),
        )
        .expect_system("- **review**: Reviews text for a kind of mistake.")
        .expect_tools_include(["LoadSkill"]),
        Step::text("No typos found.")
            .expect_tool_results(["call_1"])
            .expect_last_user("Check the text for typos, one finding a line."),
    ])?;
    // The role's allowlist names no skill tool: LoadSkill is exempt from allowlists.
    let node = node(
        &model,
        &[("writer.md", &role("writer", "tools: [read_file]\n"))],
        &[("review", REVIEW)],
    )
    .await?;
    let task = send(
        &node,
        "writer",
        Message::user_text("review my text for typos"),
    )
    .await?;
    ensure!(
        task.status.state == TaskState::Completed && said(&task) == "No typos found.",
        "{:?}: {}",
        task.status.state,
        said(&task)
    );
    // The role card lists the skills the role can use.
    let card = node
        .agent("/agents/writer", Binding::JsonRpc)
        .await?
        .card()
        .await?;
    ensure!(
        card.skills
            .iter()
            .any(|s| s.id == "skill/review" && s.tags == ["mew-skill"]),
        "card skills {:?}",
        card.skills
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_slash_command_activates_a_skill_that_stays_active_in_its_context() -> anyhow::Result<()>
{
    let model = ScriptedModel::start(vec![
        Step::text("Found one typo.").expect_last_user("Check the text for typos"),
        Step::text("Still checking.").expect_last_user("## Active Skills"),
        Step::text("Fresh start."),
    ])?;
    let node = node(
        &model,
        &[("writer.md", &role("writer", ""))],
        &[("review", REVIEW)],
    )
    .await?;
    let first = send(&node, "writer", Message::user_text("/review typos")).await?;
    ensure!(said(&first) == "Found one typo.", "{}", said(&first));
    let mut again = Message::user_text("and this paragraph?");
    again.context_id = Some(first.context_id.clone());
    let second = send(&node, "writer", again).await?;
    ensure!(said(&second) == "Still checking.", "{}", said(&second));
    // A new context is a new session: nothing is active.
    let third = send(&node, "writer", Message::user_text("hello")).await?;
    ensure!(said(&third) == "Fresh start.", "{}", said(&third));
    let last = model
        .requests()
        .last()
        .context("requests")?
        .last_user_text();
    ensure!(
        !last.contains("Active Skills"),
        "a skill leaked into a new context: {last}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_fork_skill_runs_in_a_child_with_its_tools_context_and_model() -> anyhow::Result<()> {
    let counter = "---\nname: counter\ndescription: Counts lines in a child agent.\nmode: fork\n\
                   fork_context: recent\nmodel: haiku\nallowed-tools: [read_file]\n---\n\
                   Count the lines of $ARGUMENTS.\n";
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "LoadSkill",
            json!({"name": "counter", "args": "notes.txt"}),
        )
        .expect_model("gpt-4o"),
        Step::text("Scope: notes.txt has 3 lines.")
            .expect_model("gpt-4o-mini")
            .expect_tools_include(["read_file", "LoadSkill"])
            .expect_tools_exclude(["bash", "glob", "Agent"])
            .expect_last_user("Count the lines of notes.txt."),
        Step::text("It has 3 lines.")
            .expect_tool_results(["call_1"])
            .expect_last_user("Scope: notes.txt has 3 lines."),
    ])?;
    let node = node(
        &model,
        &[(
            "boss.md",
            &role("boss", "tools: [read_file, bash, glob, Agent]\n"),
        )],
        &[("counter", counter)],
    )
    .await?;
    let task = send(&node, "boss", Message::user_text("how long is notes.txt?")).await?;
    ensure!(
        task.status.state == TaskState::Completed && said(&task) == "It has 3 lines.",
        "{:?}: {}",
        task.status.state,
        said(&task)
    );
    // fork_context: recent — the child saw the parent's request.
    let child_request = model
        .requests()
        .get(1)
        .context("the child's request")?
        .body
        .to_string();
    ensure!(
        child_request.contains("how long is notes.txt?"),
        "the child did not see the recent conversation: {child_request}"
    );
    model.assert_done();
    Ok(())
}

/// A Claude Code command as its documentation writes them: a namespace directory, positional
/// arguments, `argument-hint` and `allowed-tools`.
const COMMIT_MESSAGE_COMMAND: &str = "---\n\
    description: Writes a commit message\n\
    argument-hint: [change] [area]\n\
    allowed-tools: read_file, Bash(git diff:*)\n\
    ---\n\
    Write a commit message for $0 in the $1 area.\n\n\
    Everything asked: $ARGUMENTS\n";

#[tokio::test]
async fn a_claude_code_command_runs_by_its_namespaced_name_with_its_arguments() -> anyhow::Result<()>
{
    let model = ScriptedModel::start(vec![
        Step::text("docs: fix a typo")
            .expect_last_user("Write a commit message for fix a typo in the docs area."),
    ])?;
    let node = MewNode::new()?;
    node.write_config(&config(&model))?;
    node.write_role("writer.md", &role("writer", "tools: [read_file]\n"))?;
    let command = node
        .project_dir()
        .join(".claude/commands/git/commit-message.md");
    std::fs::create_dir_all(command.parent().context("a parent")?)?;
    std::fs::write(&command, COMMIT_MESSAGE_COMMAND)?;

    let (code, out, err) = node
        .client(&[
            "run",
            "--role",
            "writer",
            "/git:commit-message \"fix a typo\" docs",
        ])
        .await?;
    ensure!(
        code == 0 && out.contains("docs: fix a typo"),
        "mew run ({code}):\n{out}{err}"
    );
    let asked = model
        .requests()
        .first()
        .context("the model's request")?
        .last_user_text();
    ensure!(
        asked.contains("Everything asked: \"fix a typo\" docs")
            && asked.contains(
                "This command is designed to use only these tools: read_file, Bash(git diff:*)."
            )
            && !asked.contains("Base directory"),
        "{asked}"
    );
    // The model is told of the command and what arguments it takes.
    let system = model.requests()[0].system_text();
    ensure!(
        system.contains("- **git:commit-message** [change] [area]: Writes a commit message"),
        "{system}"
    );
    // What Claude Code would do with allowed-tools and Mew does not is said, naming the file.
    ensure!(
        err.contains(&command.display().to_string())
            && err.contains("allowed-tools does not pre-approve these tools"),
        "mew run's warnings:\n{err}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn the_users_commands_are_offered_to_the_model_unless_user_only_and_a_skill_wins()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        // The user's command without frontmatter is described by its first line.
        Step::tool_call("call_1", "LoadSkill", json!({"name": "release"}))
            .expect_system("- **review**: Review the text for $ARGUMENTS, one finding a line."),
        Step::tool_call(
            "call_2",
            "LoadSkill",
            json!({"name": "review", "args": "typos"}),
        )
        .expect_tool_results(["call_1"])
        .expect_last_user("runs only when a user types /release"),
        Step::text("No typos found.")
            .expect_tool_results(["call_2"])
            .expect_last_user("Review the text for typos, one finding a line."),
    ])?;
    let mut node = MewNode::new()?;
    node.write_config(&config(&model))?;
    node.write_role("writer.md", &role("writer", ""))?;
    let user_commands = node.home_dir().join(".claude/commands");
    std::fs::create_dir_all(&user_commands)?;
    std::fs::write(
        user_commands.join("review.md"),
        "Review the text for $ARGUMENTS, one finding a line.\n",
    )?;
    std::fs::write(
        user_commands.join("release.md"),
        "---\ndescription: Cuts a release\ndisable-model-invocation: true\n---\nRelease $0.\n",
    )?;
    // A command and a skill of one name: the skill is the one offered.
    let commands = node.project_dir().join(".claude/commands");
    std::fs::create_dir_all(&commands)?;
    std::fs::write(commands.join("greet.md"), "Greet the command's way.\n")?;
    let skill = node.project_dir().join(".claude/skills/greet");
    std::fs::create_dir_all(&skill)?;
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: greet\ndescription: Greets the skill's way.\n---\nGreet.\n",
    )?;
    node.launch().await?;

    let task = send(
        &node,
        "writer",
        Message::user_text("review my text for typos"),
    )
    .await?;
    ensure!(
        task.status.state == TaskState::Completed && said(&task) == "No typos found.",
        "{:?}: {}",
        task.status.state,
        said(&task)
    );
    let system = model.requests()[0].system_text();
    ensure!(
        system.contains("- **greet**: Greets the skill's way.")
            && !system.contains("command's way")
            && !system.contains("release"),
        "{system}"
    );
    model.assert_done();
    Ok(())
}
