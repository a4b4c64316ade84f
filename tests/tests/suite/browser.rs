//! The browser harness of the dashboard's tests (`mew_tests::browser`), on a page served
//! here: it reads the page's text, clicks and types, waits for an element the page adds only
//! when the test lets the server answer, runs scripts, sees console errors and uncaught
//! exceptions (and not `console.log`), reads HttpOnly cookies the page's script cannot,
//! saves a screenshot, and leaves no driver or browser process behind.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, ensure};
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use mew_tests::browser::{Browser, Cookie, LogLevel, WAIT_TIMEOUT, WINDOW_SIZE, screenshot_dir};
use mew_tests::node::poll_until;
use serde_json::json;
use tokio::sync::watch;

/// The page: a button that changes a text, an input echoed below it, a console error, an
/// uncaught exception, and a list item added once `/late` answers. Its icon is inline, so
/// Chromium asks for no `/favicon.ico` (whose 404 would be a console error too).
const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Browser self-test</title>
  <link rel="icon" href="data:,">
  <style>
    body { font: 16px sans-serif; margin: 2em; background: #fdf6e3; }
    #status { color: #268bd2; }
  </style>
</head>
<body>
  <h1>Hello from the page</h1>
  <button id="toggle" type="button">Click me</button>
  <p id="status">not clicked</p>
  <input id="name" placeholder="your name">
  <p id="echo"></p>
  <p id="hidden" hidden>not shown</p>
  <ul id="later"></ul>
  <script>
    document.getElementById("toggle").addEventListener("click", () => {
      document.getElementById("status").textContent = "clicked";
    });
    document.getElementById("name").addEventListener("input", (event) => {
      document.getElementById("echo").textContent = "hello, " + event.target.value;
    });
    console.log("self-test: only information");
    console.error("self-test: an error on purpose");
    setTimeout(() => { throw new Error("self-test: uncaught on purpose"); }, 0);
    fetch("/late").then((r) => r.text()).then((text) => {
      const item = document.createElement("li");
      item.className = "late";
      item.textContent = text;
      document.getElementById("later").appendChild(item);
    });
  </script>
</body>
</html>
"#;

/// The page's server on `127.0.0.1:0`; `/late` answers once [`TestPage::release_late`] is
/// called.
struct TestPage {
    url: String,
    release: watch::Sender<bool>,
}

impl TestPage {
    async fn serve() -> anyhow::Result<Self> {
        let (release, released) = watch::channel(false);
        let router = Router::new()
            .route("/", get(page))
            .route("/late", get(late))
            .with_state(released);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self { url, release })
    }

    /// Lets `/late` answer, so the page adds its late element.
    fn release_late(&self) {
        self.release.send_replace(true);
    }
}

/// The page, with a session cookie the page's script must not see.
async fn page() -> impl IntoResponse {
    (
        [(
            header::SET_COOKIE,
            "session=s3cret; Path=/; HttpOnly; SameSite=Strict",
        )],
        Html(PAGE),
    )
}

/// The late element's text, once the test releases it.
async fn late(State(mut released): State<watch::Receiver<bool>>) -> &'static str {
    let _ = released.wait_for(|released| *released).await;
    "arrived late"
}

#[tokio::test]
async fn the_browser_reads_clicks_types_and_waits_for_what_comes_late() -> anyhow::Result<()> {
    let page = TestPage::serve().await?;
    let mut browser = Browser::start().await?;
    browser.goto(&page.url).await?;
    ensure!(browser.current_url().await? == page.url);
    ensure!(browser.title().await? == "Browser self-test");

    let heading = browser.wait_for("h1", "the heading").await?;
    ensure!(heading.text().await? == "Hello from the page");
    let status = browser.wait_for("#status", "the status line").await?;
    ensure!(status.text().await? == "not clicked");
    browser
        .wait_for("#toggle", "the button")
        .await?
        .click()
        .await?;
    browser
        .wait_for_text("#status", "the click to show", |text| text == "clicked")
        .await?;

    let input = browser.wait_for("#name", "the name input").await?;
    ensure!(input.attribute("placeholder").await?.as_deref() == Some("your name"));
    ensure!(input.attribute("no-such-attribute").await?.is_none());
    input.send_keys("mew").await?;
    ensure!(input.property("value").await? == json!("mew"));
    browser
        .wait_for_text("#echo", "the typed name to be echoed", |text| {
            text == "hello, mew"
        })
        .await?;
    input.clear().await?;
    ensure!(input.property("value").await? == json!(""));
    ensure!(input.is_displayed().await?);
    let hidden = browser.wait_for("#hidden", "the hidden paragraph").await?;
    ensure!(!hidden.is_displayed().await?);
    let unseen = hidden.text().await?;
    ensure!(unseen.is_empty(), "the hidden paragraph's text: {unseen:?}");

    // The server holds `/late` until now, so the element cannot be there yet.
    ensure!(browser.find_all(".late").await?.is_empty());
    page.release_late();
    let late = browser.wait_for(".late", "the late element").await?;
    ensure!(late.text().await? == "arrived late");
    let list = browser.wait_for("#later", "the list").await?;
    let html = list.inner_html().await?;
    ensure!(
        html == r#"<li class="late">arrived late</li>"#,
        "innerHTML: {html}"
    );
    let items = list.find_all("li").await?;
    ensure!(items.len() == 1, "{} items", items.len());

    let sum = browser
        .execute(
            "return arguments[0] + arguments[1];",
            vec![json!(2), json!(3)],
        )
        .await?;
    ensure!(sum == json!(5), "2 + 3 = {sum}");
    let id = browser
        .execute("return arguments[0].id;", vec![status.to_arg()])
        .await?;
    ensure!(id == json!("status"), "the element's id: {id}");
    let late_count = browser
        .wait_until(
            "one late item",
            "return document.querySelectorAll('.late').length;",
            vec![],
        )
        .await?;
    ensure!(late_count == json!(1), "{late_count}");

    // A wait gives up, naming what it looked for, and says so as an error.
    browser.set_wait_timeout(Duration::from_millis(300));
    let missing = browser
        .wait_for("#never", "an element the page never makes")
        .await;
    let error = format!("{:#}", missing.err().context("waited for #never")?);
    ensure!(
        error.contains("`#never`") && error.contains("an element the page never makes"),
        "{error}"
    );
    let unmet = browser
        .wait_for_text("#status", "a text it never has", |text| text == "never")
        .await;
    let error = format!("{:#}", unmet.err().context("waited for a text")?);
    ensure!(error.contains(r#"["clicked"]"#), "{error}");
    browser.set_wait_timeout(WAIT_TIMEOUT);
    Ok(())
}

#[tokio::test]
async fn the_browser_sees_console_errors_cookies_and_saves_screenshots() -> anyhow::Result<()> {
    let page = TestPage::serve().await?;
    page.release_late();
    let browser = Browser::start().await?;
    browser.goto(&page.url).await?;
    browser.wait_for(".late", "the late element").await?;

    let error = browser
        .wait_for_console_error("the console.error call", |entry| {
            entry.message.contains("self-test: an error on purpose")
        })
        .await?;
    ensure!(error.source.as_deref() == Some("console-api"), "{error:?}");
    let uncaught = browser
        .wait_for_console_error("the uncaught exception", |entry| {
            entry.message.contains("self-test: uncaught on purpose")
        })
        .await?;
    ensure!(
        uncaught.source.as_deref() == Some("javascript"),
        "{uncaught:?}"
    );
    // console.log is in the log, as information, and not among the errors.
    let log = browser.log().await?;
    ensure!(
        log.iter().any(|entry| entry.level == LogLevel::Info
            && entry.message.contains("self-test: only information")),
        "{log:#?}"
    );
    let errors = browser.console_errors().await?;
    ensure!(
        errors.len() == 2
            && errors
                .iter()
                .all(|entry| !entry.message.contains("only information")),
        "{errors:#?}"
    );

    // The session cookie is HttpOnly: WebDriver sees it, the page's script does not.
    let session = browser
        .cookie("session")
        .await?
        .context("no session cookie")?;
    ensure!(
        session.value == "s3cret"
            && session.http_only
            && session.same_site.as_deref() == Some("Strict"),
        "{session:?}"
    );
    let script_sees = browser.execute("return document.cookie;", vec![]).await?;
    ensure!(script_sees == json!(""), "document.cookie: {script_sees}");
    browser.add_cookie(&Cookie::new("theme", "dark")).await?;
    let script_sees = browser.execute("return document.cookie;", vec![]).await?;
    ensure!(
        script_sees == json!("theme=dark"),
        "document.cookie: {script_sees}"
    );
    ensure!(browser.cookies().await?.len() == 2);
    browser.delete_cookies().await?;
    ensure!(browser.cookies().await?.is_empty());

    let dir = screenshot_dir("browser_self_test")?;
    ensure!(dir.ends_with("ui-screenshots/browser_self_test") && dir.is_dir());
    let path = dir.join("page.png");
    // A screenshot of an earlier run must not pass for this one.
    if path.exists() {
        std::fs::remove_file(&path)?;
    }
    browser.screenshot(&path).await?;
    let (width, height) = browser.viewport().await?;
    ensure!(
        width == WINDOW_SIZE.0 && height <= WINDOW_SIZE.1,
        "viewport {width}x{height}"
    );
    check_png(&path, width, height)?;
    ensure!(screenshot_dir("../elsewhere").is_err());
    Ok(())
}

#[tokio::test]
async fn dropping_the_browser_ends_the_driver_and_chromium() -> anyhow::Result<()> {
    let page = TestPage::serve().await?;
    page.release_late();
    let browser = Browser::start().await?;
    browser.goto(&page.url).await?;
    browser.wait_for(".late", "the late element").await?;
    let dir = browser.dir().to_path_buf();
    let driver = browser.driver_pid().context("chromedriver has no pid")?;
    // Chromium's processes name the directory: the browser and its helpers the profile, its
    // crash handlers (not in the driver's process group) their database in its home.
    let chromium = processes_using(&dir)?;
    ensure!(
        chromium.len() > 1,
        "{} processes name {}",
        chromium.len(),
        dir.display()
    );
    ensure!(is_running(driver));

    drop(browser);
    poll_until(
        "chromedriver and Chromium to exit",
        WAIT_TIMEOUT,
        || async {
            let left = processes_using(&dir)?;
            Ok((left.is_empty() && !is_running(driver)).then_some(()))
        },
    )
    .await?;
    ensure!(!dir.exists(), "{} is still there", dir.display());
    Ok(())
}

/// Checks that `path` is a PNG of `width` by `height` pixels, of more than a blank image's
/// bytes.
fn check_png(path: &Path, width: u32, height: u32) -> anyhow::Result<()> {
    let png =
        std::fs::read(path).with_context(|| format!("no screenshot at {}", path.display()))?;
    ensure!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        path.display()
    );
    // The first chunk is IHDR: its width and height follow the 8-byte signature, the chunk's
    // length and its type.
    ensure!(png.get(12..16) == Some(b"IHDR".as_slice()), "no IHDR chunk");
    let side = |at: usize| -> anyhow::Result<u32> {
        let bytes = png.get(at..at + 4).context("a short IHDR chunk")?;
        Ok(u32::from_be_bytes(bytes.try_into()?))
    };
    let (png_width, png_height) = (side(16)?, side(20)?);
    ensure!(
        (png_width, png_height) == (width, height),
        "the screenshot is {png_width}x{png_height}, the viewport {width}x{height}"
    );
    ensure!(png.len() > 5_000, "the screenshot is {} bytes", png.len());
    Ok(())
}

/// The ids of the live processes whose command line names `path`.
fn processes_using(path: &Path) -> anyhow::Result<Vec<u32>> {
    let needle = path.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may exit between the listing and the read.
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(&needle) && is_running(pid) {
            found.push(pid);
        }
    }
    Ok(found)
}

/// Whether the process `pid` exists and is not a zombie waiting to be reaped.
fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name, which is in parentheses.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}
