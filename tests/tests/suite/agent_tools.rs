//! Claude Code's tools that Mew provides (`WebFetch`, `WebSearch`, `MultiEdit`, `LS`,
//! `TodoWrite`), named the Claude Code way in role files and called the Claude Code way by a
//! scripted model, through `mew run` and `mew up`: `web_fetch` through the SSRF guard against a
//! local site, `web_search` against a local server that answers as SearXNG does.

use std::sync::{Arc, Mutex};

use anyhow::{Context, ensure};
use axum::Router;
use axum::extract::Query;
use axum::http::header;
use axum::routing::get;
use mew_cards::mew::MewMetadata;
use mew_cards::{GetTaskRequest, Message, TaskId, TaskState};
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, scripted_model_config, send, status_text};
use mew_transport::{AgentTransport, Binding, CallContext};
use serde_json::{Value, json};

/// The page the local site serves at `/changes.html`.
const PAGE: &str = "<!doctype html><html><head><title>Changes</title>\
    <script>document.write('not text')</script></head><body>\
    <h1>Version 2</h1><p>Version 2 adds <a href=\"/streams.html\">streams</a>.</p>\
    </body></html>";

/// A local site: a page, and a search endpoint that answers SearXNG's JSON shape. Its base
/// URL, and the queries the search endpoint was asked (`q`, `format`).
async fn site() -> anyhow::Result<(String, Arc<Mutex<Vec<(String, String)>>>)> {
    let queries = Arc::new(Mutex::new(Vec::new()));
    let seen = queries.clone();
    let app = Router::new()
        .route(
            "/changes.html",
            get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE) }),
        )
        .route(
            "/search",
            get(
                move |Query(params): Query<std::collections::HashMap<String, String>>| {
                    let seen = seen.clone();
                    async move {
                        let q = params.get("q").cloned().unwrap_or_default();
                        let format = params.get("format").cloned().unwrap_or_default();
                        if let Ok(mut seen) = seen.lock() {
                            seen.push((q.clone(), format));
                        }
                        axum::Json(json!({
                            "query": q,
                            "number_of_results": 2,
                            "results": [
                                {"url": "https://docs.rs/tokio", "title": "tokio - Rust",
                                 "content": "An asynchronous runtime.", "engine": "duckduckgo"},
                                {"url": "https://tokio.rs/", "title": "Tokio",
                                 "content": "Build reliable network applications.",
                                 "engine": "bing"}
                            ],
                            "answers": [],
                            "suggestions": [],
                            "unresponsive_engines": []
                        }))
                    }
                },
            ),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((format!("http://{address}"), queries))
}

fn role(name: &str, tools: &str) -> String {
    format!("---\nname: {name}\ndescription: A test role.\ntools: {tools}\n---\nYou help.\n")
}

#[tokio::test]
async fn web_fetch_is_refused_on_loopback_until_web_allow_admits_it() -> anyhow::Result<()> {
    let (site, _) = site().await?;
    let url = format!("{site}/changes.html");
    let input = json!({"url": url, "prompt": "What is new?"});
    let model = ScriptedModel::start(vec![
        // mew run, with the default configuration: the guard refuses loopback.
        Step::tool_call("call_1", "web_fetch", input.clone())
            .expect_tools_include(["web_fetch"])
            .expect_tools_exclude(["bash", "web_search"]),
        Step::text("The page is out of reach.")
            .expect_tool_results(["call_1"])
            .expect_last_user(
                "a loopback address; web_fetch may not go there unless `web.allow` names the \
                 host or the address",
            ),
        // mew up, with web.allow naming the site's address.
        Step::tool_call("call_2", "web_fetch", input),
        Step::text("Version 2 adds streams.")
            .expect_tool_results(["call_2"])
            .expect_last_user("Prompt: What is new?"),
    ])?;
    let mut node = MewNode::new()?;
    // Claude Code's names, in the role file and in the permission rule.
    node.write_role("reader.md", &role("reader", "WebFetch"))?;
    let permissions = "permissions:\n  allow: [\"WebFetch(domain:127.0.0.1)\"]\n";
    node.write_config(&format!("{}{permissions}", scripted_model_config(&model)))?;

    let (code, out, err) = node
        .client(&["run", "--role", "reader", "what is new?"])
        .await?;
    ensure!(
        code == 0 && out.contains("The page is out of reach.") && err.contains("✗ web_fetch"),
        "mew run: exit {code}\nstdout: {out}\nstderr: {err}"
    );

    node.write_config(&format!(
        "{}{permissions}web:\n  allow: [\"127.0.0.1\"]\n",
        scripted_model_config(&model)
    ))?;
    node.launch().await?;
    let task = send(&node, "reader", Message::user_text("what is new?")).await?;
    ensure!(
        task.status.state == TaskState::Completed
            && status_text(&task) == "Version 2 adds streams.",
        "{:?}: {}",
        task.status.state,
        status_text(&task)
    );
    let fetched = model
        .requests()
        .get(3)
        .context("the model was not called after the fetch")?
        .last_user_text();
    for expected in [
        "Title: Changes",
        "# Version 2",
        "Version 2 adds streams[1].",
        &format!("[1]: {site}/streams.html"),
    ] {
        ensure!(fetched.contains(expected), "{expected:?} not in {fetched}");
    }
    ensure!(
        !fetched.contains("not text"),
        "the script leaked: {fetched}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn web_search_asks_the_configured_searxng_and_says_when_there_is_none() -> anyhow::Result<()>
{
    let (site, queries) = site().await?;
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "web_search", json!({"query": "tokio runtime"}))
            .expect_tools_include(["web_search"]),
        Step::text("There is no search here.")
            .expect_tool_results(["call_1"])
            .expect_last_user("web search is not configured on this node"),
        Step::tool_call(
            "call_2",
            "web_search",
            json!({"query": "tokio runtime", "allowed_domains": ["tokio.rs"]}),
        ),
        Step::text("Tokio's site is tokio.rs.")
            .expect_tool_results(["call_2"])
            .expect_last_user(
                "Results for \"tokio runtime\":\n\n1. Tokio\n   https://tokio.rs/\n   Build \
                 reliable network applications.",
            ),
    ])?;
    let mut node = MewNode::new()?;
    node.write_role("searcher.md", &role("searcher", "[WebSearch]"))?;
    let permissions = "permissions:\n  allow: [WebSearch]\n";
    node.write_config(&format!("{}{permissions}", scripted_model_config(&model)))?;

    // Nothing configured: a clear error, and no search anywhere.
    let (code, out, err) = node
        .client(&["run", "--role", "searcher", "find tokio"])
        .await?;
    ensure!(
        code == 0 && out.contains("There is no search here."),
        "mew run: exit {code}\nstdout: {out}\nstderr: {err}"
    );
    ensure!(queries.lock().map(|q| q.is_empty()).unwrap_or(false));

    node.write_config(&format!(
        "{}{permissions}web:\n  search:\n    provider: searxng\n    url: {site}\n",
        scripted_model_config(&model)
    ))?;
    node.launch().await?;
    let task = send(&node, "searcher", Message::user_text("find tokio")).await?;
    ensure!(
        status_text(&task) == "Tokio's site is tokio.rs.",
        "{:?}: {}",
        task.status.state,
        status_text(&task)
    );
    let asked = queries.lock().map(|q| q.clone()).unwrap_or_default();
    ensure!(
        asked == [("tokio runtime".to_owned(), "json".to_owned())],
        "{asked:?}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn ls_and_multi_edit_list_and_change_the_project_all_or_nothing() -> anyhow::Result<()> {
    let node = MewNode::new()?;
    let project = node.project_dir();
    std::fs::create_dir_all(project.join("src"))?;
    let lib = project.join("src/lib.rs");
    std::fs::write(&lib, "fn old_name() {}\nfn main() { old_name(); }\n")?;
    std::fs::write(project.join("build.log"), "noise")?;
    let model = ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "ls",
            json!({"path": project.display().to_string(), "ignore": ["*.log", ".*"]}),
        )
        .expect_tools_include(["ls", "multi_edit", "read_file"])
        .expect_tools_exclude(["edit_file", "bash"]),
        Step::tool_call(
            "call_2",
            "multi_edit",
            json!({"file_path": "src/lib.rs", "edits": [
                {"old_string": "fn old_name()", "new_string": "fn new_name()"},
                {"old_string": "old_name();", "new_string": "new_name();"}
            ]}),
        )
        .expect_tool_results(["call_1"])
        .expect_last_user(format!("- {}/\n  - src/\n", project.display())),
        Step::tool_call(
            "call_3",
            "multi_edit",
            json!({"file_path": "src/lib.rs", "edits": [
                {"old_string": "new_name", "new_string": "third_name", "replace_all": true},
                {"old_string": "no such text", "new_string": "x"}
            ]}),
        )
        .expect_last_user("made 2 edits"),
        Step::text("Renamed; the second change did not apply.")
            .expect_tool_results(["call_3"])
            .expect_last_user("edit 2: old_string was not found"),
    ])?;
    node.write_role("editor.md", &role("editor", "[LS, MultiEdit, Read]"))?;
    node.write_config(&format!(
        "{}permissions:\n  mode: acceptEdits\n",
        scripted_model_config(&model)
    ))?;
    let (code, out, err) = node
        .client(&["run", "--role", "editor", "rename old_name"])
        .await?;
    ensure!(
        code == 0 && out.contains("Renamed"),
        "mew run: exit {code}\nstdout: {out}\nstderr: {err}"
    );
    let text = std::fs::read_to_string(&lib)?;
    ensure!(
        text == "fn new_name() {}\nfn main() { new_name(); }\n",
        "src/lib.rs is {text:?}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn todo_write_shows_the_plan_as_the_tasks_progress() -> anyhow::Result<()> {
    let step = |content: &str, status: &str, active: &str| json!({"content": content, "status": status, "activeForm": active});
    let first = json!({"todos": [
        step("Read the notes", "in_progress", "Reading the notes"),
        step("Write the summary", "pending", "Writing the summary"),
        step("Check spelling", "pending", "Checking spelling"),
    ]});
    let second = json!({"todos": [
        step("Read the notes", "completed", "Reading the notes"),
        step("Write the summary", "completed", "Writing the summary"),
        step("Check spelling", "in_progress", "Checking spelling"),
    ]});
    let model = ScriptedModel::start(vec![
        Step::tool_call("call_1", "TodoWrite", first).expect_tools_include(["TodoWrite"]),
        Step::tool_call("call_2", "TodoWrite", second.clone())
            .expect_last_user("The plan is updated: 0 completed, 1 in progress, 2 pending."),
        Step::text("Summary written.")
            .expect_last_user("The plan is updated: 2 completed, 1 in progress, 0 pending."),
    ])?;
    let mut node = MewNode::new()?;
    node.use_default_data_dir();
    node.write_role("planner.md", &role("planner", "[TodoWrite, Read]"))?;
    node.write_config(&scripted_model_config(&model))?;
    node.launch().await?;

    // On the running node: mew run prints the plan as it changes.
    let (code, out, err) = node
        .client(&["run", "--role", "planner", "summarize the notes"])
        .await?;
    ensure!(
        code == 0 && out.contains("Summary written.") && err.contains(node.url()),
        "mew run: exit {code}\nstdout: {out}\nstderr: {err}"
    );
    for plan in [
        "  plan (0 of 3 done):\n    → Reading the notes\n    ○ Write the summary\n    ○ Check \
         spelling\n",
        "  plan (2 of 3 done):\n    ✓ Read the notes\n    ✓ Write the summary\n    → Checking \
         spelling\n",
    ] {
        ensure!(err.contains(plan), "{plan:?} not in stderr:\n{err}");
    }

    // The task keeps the newest plan in its metadata, and its history only the conversation.
    let id = err
        .lines()
        .find_map(|line| line.strip_prefix("[completed] task "))
        .and_then(|rest| rest.split_whitespace().next())
        .context("mew run named no task")?;
    let agent = node.agent("/agents/planner", Binding::JsonRpc).await?;
    let task = agent
        .get_task(
            &CallContext::default(),
            GetTaskRequest {
                id: TaskId::from(id),
                ..Default::default()
            },
        )
        .await?;
    let todos = MewMetadata::read(task.metadata.as_ref())
        .todos
        .context("the task has no plan")?;
    ensure!(
        serde_json::to_value(&todos)? == second["todos"],
        "the task's plan is {todos:?}"
    );
    let history: Value = serde_json::to_value(&task.history)?;
    ensure!(
        !history.to_string().contains("Check spelling"),
        "the plan went into the history: {history}"
    );
    model.assert_done();
    Ok(())
}
