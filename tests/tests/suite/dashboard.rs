//! The dashboard at `/ui` in a real headless Chromium, against real `mew` nodes: a running
//! task moves on screen and its artifact grows without a reload; a permission question shows
//! the tool call and Allow runs it, Deny tells the model; an MCP server's question shows its
//! form and the answer reaches the server; with `auth:` the page signs in, one
//! principal sees none of another's tasks and a forged cross-site request is refused; hostile
//! content renders as text and runs nothing; a list of 10,000 tasks shows its first page and
//! pages. Each test saves screenshots of what it saw under `target/ui-screenshots/`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, ensure};
use mew_tests::browser::{Browser, screenshot_dir};
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, mew_bin, scripted_model_config};
use mew_tests::process::command;
use serde_json::{Value, json};

/// Sends `text` to `role` over HTTP+JSON without waiting for the task (with `key` as the
/// caller's API key, if any), and returns the task's id.
async fn start_task(
    node: &MewNode,
    role: &str,
    text: &str,
    key: Option<&str>,
) -> anyhow::Result<String> {
    let mut request = reqwest::Client::new()
        .post(format!("{}/agents/{role}/message:send", node.url()))
        .header("A2A-Version", "1.0")
        .json(&json!({
            "message": {
                "messageId": uuid::Uuid::new_v4().to_string(),
                "role": "ROLE_USER",
                "parts": [{ "text": text }],
            },
            "configuration": { "returnImmediately": true },
        }));
    if let Some(key) = key {
        request = request.header("X-API-Key", key);
    }
    let response = request.send().await?;
    let status = response.status();
    let body: Value = response.json().await?;
    ensure!(status.is_success(), "send to {role}: {status} {body}");
    body["task"]["id"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no task in {body}"))
}

/// A command role that runs `script` (a shell script written beside the node) with `sh`.
fn script_role(node: &MewNode, name: &str, script: &str) -> anyhow::Result<()> {
    let path = node.dir().join(format!("{name}.sh"));
    std::fs::write(&path, script)?;
    let command = serde_json::to_string(&["sh", &path.display().to_string()])?;
    node.write_role(
        &format!("{name}.md"),
        &format!("---\nname: {name}\ndescription: A script of the dashboard tests.\ncommand: {command}\n---\nRuns a script.\n"),
    )
}

/// An artifact update line of a command role's output.
fn artifact_line(id: &str, text: &str, append: bool, last: bool) -> String {
    let line = json!({
        "artifactUpdate": {
            "artifact": { "artifactId": id, "name": id, "parts": [{ "text": text }] },
            "append": append,
            "lastChunk": last,
        }
    });
    // Single quotes around it in the script: the JSON holds none.
    format!("echo '{line}'\n")
}

fn shot(dir: &Path, name: &str) -> std::path::PathBuf {
    dir.join(format!("{name}.png"))
}

/// Whether the page was loaded once: a mark set in it is still there.
async fn still_same_page(browser: &Browser) -> anyhow::Result<bool> {
    let mark = browser
        .execute("return window.__mewTestMark === 7;", vec![])
        .await?;
    Ok(mark == Value::Bool(true))
}

#[tokio::test]
async fn a_running_task_moves_on_screen_and_its_streamed_artifact_grows() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    let gate = node.dir().join("gate");
    let script = format!(
        "cat >/dev/null\n{}while [ ! -e '{gate}' ]; do sleep 0.05; done\n{}",
        artifact_line("out", "first line. ", false, false),
        artifact_line("out", "second line.", true, true),
        gate = gate.display()
    );
    script_role(&node, "slow", &script)?;
    node.launch().await?;
    let shots = screenshot_dir("dashboard_running_task")?;
    let browser = Browser::start().await?;

    browser.goto(&format!("{}/ui", node.url())).await?;
    browser.wait_for("#task-rows", "the task list").await?;
    browser
        .execute("window.__mewTestMark = 7; return true;", vec![])
        .await?;
    let id = start_task(&node, "slow", "go", None).await?;
    let row = format!("tr[data-task=\"{id}\"]");
    browser
        .wait_for_text(
            &format!("{row} .state"),
            "the new task's row, working",
            |text| text == "working",
        )
        .await?;
    browser.screenshot(shot(&shots, "tasks")).await?;

    browser
        .find_all(&format!("{row} a"))
        .await?
        .first()
        .context("the row links to its task")?
        .click()
        .await?;
    browser
        .wait_for_text("#artifacts", "the first chunk", |text| {
            text.contains("first line.")
        })
        .await?;
    let before = browser.find_all("#artifacts").await?;
    ensure!(
        !before.is_empty() && !before[0].text().await?.contains("second line."),
        "the second chunk was there before the script sent it"
    );
    browser.screenshot(shot(&shots, "task-running")).await?;
    std::fs::write(&gate, "")?;
    browser
        .wait_for_text(
            "#artifacts",
            "the artifact grown by the second chunk",
            |text| text.contains("first line.") && text.contains("second line."),
        )
        .await?;
    browser
        .wait_for_text(
            "#task-head .state",
            "the task completed on screen",
            |text| text == "completed",
        )
        .await?;
    ensure!(
        still_same_page(&browser).await?,
        "the page was reloaded on the way"
    );
    browser.screenshot(shot(&shots, "task-completed")).await?;

    // Back on the list, the row says completed too.
    browser.goto(&format!("{}/ui#/tasks", node.url())).await?;
    browser
        .wait_for_text(&format!("{row} .state"), "the row, completed", |text| {
            text == "completed"
        })
        .await?;

    // The role's card, its signature checked against the node's key; the node's parts.
    browser.goto(&format!("{}/ui#/roles", node.url())).await?;
    browser
        .wait_for_text(
            "[data-role=\"slow\"] .signature[data-verified=\"yes\"]",
            "the card's signature, verified",
            |text| text.starts_with("verified with the node's key"),
        )
        .await?;
    browser.screenshot(shot(&shots, "roles")).await?;
    browser.goto(&format!("{}/ui#/node", node.url())).await?;
    browser.wait_for("#mcp", "the MCP servers").await?;
    browser.wait_for("#hooks", "the hooks").await?;
    browser.screenshot(shot(&shots, "node")).await?;
    Ok(())
}

/// A node, not launched yet, with the model role `writer` (bash allowed only with approval)
/// over `model`.
fn writer_node(model: &ScriptedModel) -> anyhow::Result<MewNode> {
    let node = MewNode::new()?;
    node.write_config(&scripted_model_config(model))?;
    node.write_role(
        "writer.md",
        "---\nname: writer\ndescription: Writes files.\ntools: [bash]\n---\nYou write files.\n",
    )?;
    Ok(node)
}

/// Sends `text` to `role` from the dashboard's Send view; waits for the task's view.
async fn send_from_page(
    browser: &Browser,
    node: &MewNode,
    role: &str,
    text: &str,
) -> anyhow::Result<()> {
    browser
        .goto(&format!("{}/ui#/send/{role}", node.url()))
        .await?;
    browser
        .wait_for("#send-text", "the send form")
        .await?
        .send_keys(text)
        .await?;
    browser
        .wait_for("#send button[type=submit]", "Send")
        .await?
        .click()
        .await?;
    browser
        .wait_for("#task-head", "the new task's view")
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_permission_question_shows_the_call_allow_runs_it_and_deny_tells_the_model()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "bash",
            json!({"command": "echo done > allowed.txt"}),
        ),
        Step::text("Wrote it.").expect_tool_results(["call_1"]),
        Step::tool_call("call_2", "bash", json!({"command": "echo no > denied.txt"})),
        Step::text("I was not allowed.").expect_tool_results(["call_2"]),
    ])?;
    let mut node = writer_node(&model)?;
    node.launch().await?;
    let shots = screenshot_dir("dashboard_permission")?;
    let browser = Browser::start().await?;

    send_from_page(&browser, &node, "writer", "write the file").await?;
    browser
        .wait_for_text("#ask-tool", "the tool asked about", |text| text == "bash")
        .await?;
    let input = browser
        .wait_for("#ask-input", "the call's arguments")
        .await?
        .text()
        .await?;
    ensure!(
        input.contains("echo done > allowed.txt"),
        "the ask shows {input:?}"
    );
    let rule = browser
        .wait_for("#ask-rule", "what asked")
        .await?
        .text()
        .await?;
    ensure!(
        rule == "the default mode asks before exec tools run, and no allow rule covers this call",
        "the ask says it was asked by {rule:?}"
    );
    ensure!(
        !node.project_dir().join("allowed.txt").exists(),
        "the command ran before it was allowed"
    );
    browser.screenshot(shot(&shots, "ask")).await?;
    browser.wait_for("#allow", "Allow").await?.click().await?;
    browser
        .wait_for_text("#task-head .state", "the allowed task completed", |text| {
            text == "completed"
        })
        .await?;
    ensure!(
        node.project_dir().join("allowed.txt").exists(),
        "Allow did not run the command"
    );
    browser.screenshot(shot(&shots, "allowed")).await?;

    send_from_page(&browser, &node, "writer", "write another").await?;
    browser
        .wait_for_text("#ask-input", "the second call's arguments", |text| {
            text.contains("denied.txt")
        })
        .await?;
    browser.wait_for("#deny", "Deny").await?.click().await?;
    browser
        .wait_for_text("#task-head .state", "the denied task completed", |text| {
            text == "completed"
        })
        .await?;
    ensure!(
        !node.project_dir().join("denied.txt").exists(),
        "Deny ran the command"
    );
    let requests = model.requests();
    let last = requests.last().context("no model call")?;
    ensure!(
        last.body
            .to_string()
            .contains("the user did not allow this call"),
        "the model did not see the refusal: {}",
        last.body
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn an_mcp_servers_question_shows_its_form_and_the_answer_reaches_the_server()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call("ask_1", "mcp__hermetic__ask", json!({})),
        Step::text("Greeted Ada.")
            .expect_tool_results(["ask_1"])
            .expect_last_user("hello Ada"),
    ])?;
    let mut node = MewNode::new()?;
    node.write_config(&format!(
        "{}permissions:\n  allow: [mcp__hermetic__ask]\nmcp_servers:\n  hermetic:\n    command: {}\n",
        scripted_model_config(&model),
        mew_tests::mcp::server_bin()?.display()
    ))?;
    node.write_role(
        "greeter.md",
        "---\nname: greeter\ndescription: Greets.\ntools: [mcp__hermetic]\n---\nGreet.\n",
    )?;
    node.launch().await?;
    let shots = screenshot_dir("dashboard_elicitation")?;
    let browser = Browser::start().await?;

    send_from_page(&browser, &node, "greeter", "greet me").await?;
    browser
        .wait_for_text("#ask-text", "the server's question", |text| {
            text.contains("What is your name?")
        })
        .await?;
    browser
        .wait_for("#field-name", "the form's field")
        .await?
        .send_keys("Ada")
        .await?;
    browser.screenshot(shot(&shots, "form")).await?;
    browser
        .wait_for("#submit-form", "Submit")
        .await?
        .click()
        .await?;
    browser
        .wait_for_text("#task-head .state", "the answered task completed", |text| {
            text == "completed"
        })
        .await?;
    browser.screenshot(shot(&shots, "answered")).await?;
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_sign_in_an_mcp_server_asks_for_shows_its_page_and_the_task_goes_on_by_itself()
-> anyhow::Result<()> {
    let server = mew_tests::oauth::ProtectedMcpServer::start().await?;
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "mcp__secure__sign_in", json!({})),
        Step::tool_call("call_2", "mcp__secure__echo", json!({"text": "hi"}))
            .expect_tool_results(["call_1"])
            .expect_tools_include(["mcp__secure__echo"]),
        Step::text("The server said hi.").expect_last_user("hi"),
    ])?;
    let mut node = MewNode::new()?;
    node.write_config(&format!(
        "{}permissions:\n  allow: [mcp__secure__echo]\nmcp_servers:\n  secure:\n    url: {}\n",
        scripted_model_config(&model),
        server.url()
    ))?;
    node.write_role(
        "toolsmith.md",
        "---\nname: toolsmith\ndescription: Uses MCP tools.\ntools: [mcp__secure]\n---\nUse the tools.\n",
    )?;
    node.launch().await?;
    let shots = screenshot_dir("dashboard_sign_in")?;
    let browser = Browser::start().await?;

    send_from_page(&browser, &node, "toolsmith", "say hi").await?;
    browser
        .wait_for_text("#ask-text", "the sign-in question", |text| {
            text.contains("asks you to sign in")
        })
        .await?;
    let link = browser.wait_for("#auth-url", "the sign-in link").await?;
    let href = link
        .attribute("href")
        .await?
        .context("the link has no href")?;
    ensure!(
        link.attribute("target").await?.as_deref() == Some("_blank")
            && link
                .attribute("rel")
                .await?
                .is_some_and(|rel| rel.contains("noopener")),
        "the sign-in page would open in the dashboard's own window"
    );
    browser.screenshot(shot(&shots, "asked")).await?;
    // The user signs in in another window: the authorization server approves at once.
    let page = reqwest::get(&href).await?.text().await?;
    ensure!(page.contains("Signed in"), "{page}");
    browser
        .wait_for_text(
            "#task-head .state",
            "the task went on and completed",
            |text| text == "completed",
        )
        .await?;
    browser.screenshot(shot(&shots, "completed")).await?;
    model.assert_done();
    Ok(())
}

const AUTH: &str = "auth:\n  api_keys:\n    - name: alice\n      key_env: TEST_ALICE_KEY\n    - name: bob\n      key_env: TEST_BOB_KEY\n";
const ALICE: &str = "alice-key-0123456789";
const BOB: &str = "bob-key-0123456789abc";

#[tokio::test]
async fn with_auth_the_page_signs_in_shows_only_ones_own_tasks_and_refuses_forged_requests()
-> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    node.write_config(AUTH)?;
    script_role(&node, "note", "cat\n")?;
    node.set_env("TEST_ALICE_KEY", ALICE);
    node.set_env("TEST_BOB_KEY", BOB);
    node.launch().await?;
    let bobs = start_task(&node, "note", "bob's secret", Some(BOB)).await?;
    let shots = screenshot_dir("dashboard_auth")?;
    let browser = Browser::start().await?;

    // Without a session: the sign-in form, and no data.
    browser.goto(&format!("{}/", node.url())).await?;
    browser.wait_for("#signin", "the sign-in form").await?;
    ensure!(
        browser.current_url().await?.ends_with("/ui"),
        "a browser at / was not sent to the dashboard"
    );
    browser.screenshot(shot(&shots, "signin")).await?;
    browser
        .wait_for("#credential", "the credential field")
        .await?
        .send_keys("wrong-key")
        .await?;
    browser
        .wait_for("#signin button", "Sign in")
        .await?
        .click()
        .await?;
    browser
        .wait_for_text("#signin-error", "the refusal of a wrong key", |text| {
            text.contains("401")
        })
        .await?;
    let field = browser
        .wait_for("#credential", "the credential field")
        .await?;
    field.clear().await?;
    field.send_keys(ALICE).await?;
    browser
        .wait_for("#signin button", "Sign in")
        .await?
        .click()
        .await?;
    browser
        .wait_for_text("#principal", "alice signed in", |text| text == "alice")
        .await?;
    browser.wait_for("#task-rows", "alice's task list").await?;

    let cookie = browser
        .cookie("mew_session")
        .await?
        .context("no session cookie")?;
    ensure!(
        cookie.http_only && cookie.same_site.as_deref() == Some("Strict"),
        "the session cookie is {cookie:?}"
    );

    // Alice's tasks appear live; Bob's, made before and after, never do.
    let first = start_task(&node, "note", "alice one", Some(ALICE)).await?;
    browser
        .wait_for(&format!("tr[data-task=\"{first}\"]"), "alice's first task")
        .await?;
    let bobs_later = start_task(&node, "note", "bob again", Some(BOB)).await?;
    let second = start_task(&node, "note", "alice two", Some(ALICE)).await?;
    browser
        .wait_for(
            &format!("tr[data-task=\"{second}\"]"),
            "alice's second task",
        )
        .await?;
    for id in [&bobs, &bobs_later] {
        ensure!(
            browser
                .find_all(&format!("tr[data-task=\"{id}\"]"))
                .await?
                .is_empty(),
            "bob's task {id} is on alice's list"
        );
    }
    browser.screenshot(shot(&shots, "alice-tasks")).await?;
    // Opening Bob's task by its id shows no task.
    browser
        .goto(&format!("{}/ui#/task/{bobs}", node.url()))
        .await?;
    browser
        .wait_for_text("#main .error", "the refusal of bob's task", |text| {
            text.contains("404")
        })
        .await?;

    // The session's cookie alone does not make a state-changing request: a forged
    // cross-site POST carries the cookie but not the CSRF token.
    let http = reqwest::Client::new();
    let send = |csrf: Option<String>| {
        let mut request = http
            .post(format!("{}/agents/note/message:send", node.url()))
            .header("A2A-Version", "1.0")
            .header("Cookie", format!("mew_session={}", cookie.value))
            .header("Origin", "http://attacker.example")
            .json(&json!({
                "message": { "messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{ "text": "forged" }] },
                "configuration": { "returnImmediately": true },
            }));
        if let Some(csrf) = csrf {
            request = request.header("X-CSRF-Token", csrf);
        }
        request.send()
    };
    let forged = send(None).await?;
    ensure!(
        forged.status() == reqwest::StatusCode::FORBIDDEN,
        "a POST without the CSRF token answered {}",
        forged.status()
    );
    let wrong = send(Some("not-the-token".to_owned())).await?;
    ensure!(
        wrong.status() == reqwest::StatusCode::FORBIDDEN,
        "a POST with a wrong CSRF token answered {}",
        wrong.status()
    );
    let session: Value = http
        .get(format!("{}/ui/session", node.url()))
        .header("Cookie", format!("mew_session={}", cookie.value))
        .send()
        .await?
        .json()
        .await?;
    let csrf = session["csrf"]
        .as_str()
        .context("no CSRF token")?
        .to_owned();
    let genuine = send(Some(csrf)).await?;
    ensure!(
        genuine.status().is_success(),
        "the session's own request answered {}",
        genuine.status()
    );
    // And the cookie reads nothing of Bob's.
    let peek = http
        .get(format!("{}/tasks/{bobs}", node.url()))
        .header("A2A-Version", "1.0")
        .header("Cookie", format!("mew_session={}", cookie.value))
        .send()
        .await?;
    ensure!(
        peek.status() == reqwest::StatusCode::NOT_FOUND,
        "alice's session read bob's task: {}",
        peek.status()
    );
    Ok(())
}

#[tokio::test]
async fn hostile_content_renders_as_text_and_runs_nothing() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    let hostile = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>";
    // The artifact as plain text, and as Markdown with a script link.
    let markdown = json!({
        "artifactUpdate": {
            "artifact": {
                "artifactId": "notes",
                "name": "notes.md",
                "parts": [{
                    "text": "# Notes\n\n[click me](javascript:window.__pwned=3) <b onmouseover=\"window.__pwned=4\">bold</b>\n",
                    "mediaType": "text/markdown",
                    "filename": "notes.md",
                }],
            },
            "lastChunk": true,
        }
    });
    let markdown_path = node.dir().join("markdown.json");
    std::fs::write(&markdown_path, format!("{markdown}\n"))?;
    let hostile_path = node.dir().join("hostile.txt");
    std::fs::write(&hostile_path, hostile)?;
    script_role(
        &node,
        "hostile",
        &format!(
            "cat >/dev/null\ncat '{}'\ncat '{}'\n",
            markdown_path.display(),
            hostile_path.display()
        ),
    )?;
    node.launch().await?;
    let id = start_task(&node, "hostile", "go", None).await?;
    let shots = screenshot_dir("dashboard_hostile")?;
    let browser = Browser::start().await?;

    browser
        .goto(&format!("{}/ui#/task/{id}", node.url()))
        .await?;
    browser
        .wait_for_text("#artifacts", "the hostile text, as text", |text| {
            text.contains("<img src=x onerror=") && text.contains("<script>")
        })
        .await?;
    browser
        .wait_for_text("#artifacts", "the Markdown artifact", |text| {
            text.contains("click me")
        })
        .await?;
    browser.screenshot(shot(&shots, "hostile")).await?;
    let found = browser
        .execute(
            "return {
                pwned: typeof window.__pwned,
                images: document.querySelectorAll('#main img').length,
                scripts: document.querySelectorAll('#main script').length,
                handlers: document.querySelectorAll('#main [onerror], #main [onmouseover]').length,
                scriptLinks: [...document.querySelectorAll('#main a')].filter(a => !/^(https?:|mailto:|#|blob:)/.test(a.getAttribute('href') || '')).length,
                bold: document.querySelectorAll('#main b').length,
            };",
            vec![],
        )
        .await?;
    ensure!(
        found
            == json!({
                "pwned": "undefined",
                "images": 0,
                "scripts": 0,
                "handlers": 0,
                "scriptLinks": 0,
                "bold": 0,
            }),
        "the page holds what the task's content made: {found}"
    );
    let errors = browser.console_errors().await?;
    ensure!(
        errors
            .iter()
            .all(|e| !e.message.contains("Content Security Policy") && !e.message.contains("pwned")),
        "the console shows {errors:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_list_of_ten_thousand_tasks_shows_its_first_page_and_pages() -> anyhow::Result<()> {
    const TASKS: usize = 10_000;
    let model = ScriptedModel::start((0..TASKS).map(|_| Step::text("ok")).collect())?;
    let mut node = MewNode::new()?;
    node.write_config(&scripted_model_config(&model))?;
    node.write_role(
        "answer.md",
        "---\nname: answer\ndescription: Answers.\n---\nYou answer.\n",
    )?;
    node.launch().await?;
    // Mew's own load generator makes them, as fast as the node takes them.
    let url = format!("{}/agents/answer", node.url());
    let mut bench = command(mew_bin()?);
    bench.args([
        "bench",
        &url,
        "-n",
        &TASKS.to_string(),
        "-c",
        "16",
        "--warmup",
        "0",
    ]);
    let out = tokio::time::timeout(Duration::from_secs(1800), bench.output())
        .await
        .context("mew bench did not end within half an hour")??;
    ensure!(
        out.status.success(),
        "mew bench failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let shots = screenshot_dir("dashboard_many_tasks")?;
    let browser = Browser::start().await?;

    browser.goto(&format!("{}/ui#/tasks", node.url())).await?;
    browser
        .wait_for_text("#task-count", "the count of every task", |text| {
            text == format!("{TASKS} tasks")
        })
        .await?;
    let rows = browser.find_all("#task-rows tr").await?;
    ensure!(rows.len() == 50, "the first page has {} rows", rows.len());
    browser.screenshot(shot(&shots, "first-page")).await?;
    browser
        .wait_for("#more", "Older tasks")
        .await?
        .click()
        .await?;
    browser
        .wait_until(
            "the second page below the first",
            "return document.querySelectorAll('#task-rows tr').length === 100;",
            vec![],
        )
        .await?;
    let ids = browser
        .execute(
            "return [...document.querySelectorAll('#task-rows tr')].map(r => r.dataset.task);",
            vec![],
        )
        .await?;
    let ids: Vec<String> = serde_json::from_value(ids)?;
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    ensure!(
        unique.len() == 100,
        "the pages repeat tasks: {} distinct of 100",
        unique.len()
    );
    Ok(())
}

#[tokio::test]
async fn a_delegation_across_nodes_shows_as_a_live_tree_with_usage_rolled_up() -> anyhow::Result<()>
{
    use mew_tests::model::Usage;

    // B: a model role that answers at once, and a command role that waits for a gate.
    let model_b = ScriptedModel::start(vec![
        Step::text("quick answer").with_usage(Usage::new(11, 7)),
    ])?;
    let mut b = MewNode::new()?;
    b.write_config(&scripted_model_config(&model_b))?;
    b.write_role(
        "quick.md",
        "---\nname: quick\ndescription: Answers at once.\n---\nAnswer.\n",
    )?;
    let gate = b.dir().join("gate");
    script_role(
        &b,
        "slow",
        &format!(
            "cat >/dev/null\nwhile [ ! -e '{}' ]; do sleep 0.05; done\necho slow answer\n",
            gate.display()
        ),
    )?;
    b.launch().await?;

    // A: a model role that delegates to b/quick, then to b/slow.
    let agent = |id: &str, to: &str| {
        Step::tool_call(
            id,
            "Agent",
            json!({"prompt": "help", "description": format!("ask {to}"), "subagent_type": to}),
        )
        .with_usage(Usage::new(10, 2))
    };
    let model_a = ScriptedModel::start(vec![
        agent("call_1", "b/quick"),
        agent("call_2", "b/slow").expect_tool_results(["call_1"]),
        Step::text("both answered")
            .expect_tool_results(["call_2"])
            .with_usage(Usage::new(10, 2)),
    ])?;
    let mut a = MewNode::new()?;
    a.write_config(&format!(
        "{}peers:\n  b: {{url: \"{}\"}}\n",
        scripted_model_config(&model_a),
        b.url()
    ))?;
    a.write_role(
        "lead.md",
        "---\nname: lead\ndescription: Delegates.\ntools: [Agent]\n---\nDelegate.\n",
    )?;
    a.launch().await?;
    let id = start_task(&a, "lead", "go", None).await?;
    let shots = screenshot_dir("dashboard_tree")?;
    let browser = Browser::start().await?;

    browser.goto(&format!("{}/ui#/task/{id}", a.url())).await?;
    browser
        .wait_for_text(
            "#children li[data-state=\"working\"] .child-role",
            "B's slow task, running, in A's tree",
            |text| text == "slow",
        )
        .await?;
    browser
        .wait_for_text(
            "#children li[data-state=\"completed\"] .child-role",
            "B's quick task, done",
            |text| text == "quick",
        )
        .await?;
    browser.screenshot(shot(&shots, "tree-running")).await?;
    std::fs::write(&gate, "")?;
    browser
        .wait_for_text("#task-head .state", "A's task completed", |text| {
            text == "completed"
        })
        .await?;
    // A's three model calls (36 tokens) and B's one (18): 54 tokens, over three tasks.
    browser
        .wait_for_text("#tree-total", "the usage rolled up", |text| {
            text.starts_with("3 tasks in all: 54 tokens, 4 model calls")
        })
        .await?;
    let done = browser
        .find_all("#children li[data-state=\"completed\"]")
        .await?;
    ensure!(done.len() == 2, "{} completed children", done.len());
    browser.screenshot(shot(&shots, "tree-done")).await?;
    model_a.assert_done();
    model_b.assert_done();
    Ok(())
}

/// One event of an SSE stream: its `event:`, `id:` and `data:` fields.
#[derive(Debug, Default, Clone)]
struct SseEvent {
    event: String,
    id: String,
    data: String,
}

/// Reads the dashboard's feed from `url`, from `last_id` on when given.
struct Feed {
    response: reqwest::Response,
    buffer: String,
}

impl Feed {
    async fn open(url: &str, last_id: Option<&str>) -> anyhow::Result<Self> {
        let mut request = reqwest::Client::new().get(format!("{url}/ui/api/events"));
        if let Some(id) = last_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await?;
        ensure!(
            response.status().is_success(),
            "the feed answered {}",
            response.status()
        );
        Ok(Self {
            response,
            buffer: String::new(),
        })
    }

    /// The next event of kind `task` (waiting at most a minute for it).
    async fn next_task(&mut self) -> anyhow::Result<SseEvent> {
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                while let Some(end) = self.buffer.find("\n\n") {
                    let block: String = self.buffer.drain(..end + 2).collect();
                    let mut event = SseEvent::default();
                    for line in block.lines() {
                        if let Some((field, value)) = line.split_once(':') {
                            let value = value.strip_prefix(' ').unwrap_or(value);
                            match field {
                                "event" => event.event = value.to_owned(),
                                "id" => event.id = value.to_owned(),
                                "data" => event.data.push_str(value),
                                _ => {}
                            }
                        }
                    }
                    if event.event == "task" {
                        return Ok(event);
                    }
                }
                let chunk = self.response.chunk().await?.context("the feed ended")?;
                self.buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await
        .context("no task event within a minute")?
    }

    /// The next `task` event about the task `id`.
    async fn next_about(&mut self, id: &str) -> anyhow::Result<SseEvent> {
        loop {
            let event = self.next_task().await?;
            let summary: Value = serde_json::from_str(&event.data)?;
            if summary["id"] == id {
                return Ok(event);
            }
        }
    }
}

#[tokio::test]
async fn the_feed_spans_the_replicas_of_a_cluster_and_resumes_after_a_dropped_connection()
-> anyhow::Result<()> {
    let url = mew_tests::postgres::database().await?;
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let mut node = MewNode::new()?;
        node.write_config("store:\n  lease: 2s\n")?;
        script_role(&node, "note", "cat\n")?;
        node.set_env("MEW_STORE_URL", &url);
        replicas.push(node);
    }
    futures_util::future::try_join_all(replicas.iter_mut().map(MewNode::launch)).await?;
    let (one, two) = (&replicas[0], &replicas[1]);

    // A task sent to the second replica shows in the first one's feed.
    let mut feed = Feed::open(one.url(), None).await?;
    let first = start_task(two, "note", "first", None).await?;
    let seen = feed.next_about(&first).await?;
    let summary: Value = serde_json::from_str(&seen.data)?;
    ensure!(
        summary["role"] == "note" && !seen.id.is_empty(),
        "the feed said {seen:?}"
    );
    // Wait for its last change, so that the position is after everything it did.
    let mut last = seen;
    while serde_json::from_str::<Value>(&last.data)?["state"] != "TASK_STATE_COMPLETED" {
        last = feed.next_about(&first).await?;
    }
    drop(feed);

    // While nobody listens, another task; a browser that reconnects with the last id it had
    // gets that one, and nothing from before.
    let second = start_task(two, "note", "second", None).await?;
    let mut resumed = Feed::open(one.url(), Some(&last.id)).await?;
    let next = resumed.next_task().await?;
    let summary: Value = serde_json::from_str(&next.data)?;
    ensure!(
        summary["id"] == second.as_str(),
        "after {} the feed resumed with {next:?}",
        last.id
    );
    Ok(())
}

#[tokio::test]
async fn a_task_shows_the_hooks_that_ran_for_it_and_a_blocked_calls_result() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "bash", json!({"command": "rm -rf build"})),
        Step::text("The hook refused it.").expect_tool_results(["call_1"]),
    ])?;
    let mut node = writer_node(&model)?;
    let hooks = node.home_dir().join(".mew/hooks.yaml");
    std::fs::create_dir_all(hooks.parent().context("no parent")?)?;
    std::fs::write(
        &hooks,
        "hooks:\n  - name: no-rm\n    event: PreToolUse\n    action:\n      type: shell\n      \
         command: 'cat >/dev/null; echo \"rm is not allowed here\" >&2; exit 2'\n",
    )?;
    node.launch().await?;
    let id = start_task(&node, "writer", "clean up", None).await?;
    let shots = screenshot_dir("dashboard_hooks")?;
    let browser = Browser::start().await?;

    browser
        .goto(&format!("{}/ui#/task/{id}", node.url()))
        .await?;
    browser
        .wait_for_text("#task-head .state", "the task completed", |text| {
            text == "completed"
        })
        .await?;
    browser
        .wait_for_text(
            "#timeline li[data-kind=\"hook\"][data-outcome=\"blocked\"]",
            "the hook's block in the timeline",
            |text| {
                text.contains("hook no-rm (PreToolUse): blocked")
                    && text.contains("rm is not allowed here")
            },
        )
        .await?;
    browser
        .wait_for_text(
            "#timeline .tool-output",
            "the blocked call's result",
            |text| text.contains("[hook no-rm] rm is not allowed here"),
        )
        .await?;
    browser.screenshot(shot(&shots, "hooks")).await?;
    model.assert_done();
    Ok(())
}
