//! A headless Chromium driven over W3C WebDriver, for the tests of the web dashboard.
//!
//! [`Browser::start`] runs Debian's `chromedriver` (installed by `scripts/deploy-tools`) on a
//! free loopback port and opens a session with headless Chromium, whose home and profile are
//! a temporary directory. Dropping the [`Browser`] kills the driver's process group, which
//! Chromium and its renderers share (its crash handlers leave the group, and exit with it);
//! the session ends with them. Every wait polls a condition against [`Browser::wait_timeout`]
//! (a generous [`WAIT_TIMEOUT`] unless a test sets another), so the tests pass on a busy
//! machine and never sleep for a guess.
//!
//! The client is the handful of WebDriver commands the tests need, over the workspace's
//! reqwest, rather than a WebDriver crate: `fantoccini`, the maintained async one, brings the
//! `webdriver` protocol crate, and with it a second `http` (0.2), a second `cookie`, a second
//! `thiserror` and ICU4X 1.x beside the 2.x that `url` uses; `thirtyfour` brings reqwest 0.12
//! beside the workspace's 0.13 and turns on serde_json's `preserve_order` for the whole
//! workspace build. Neither reads chromedriver's browser log, which the tests need most.
//!
//! The console: the session asks for `goog:loggingPrefs` `{"browser": "ALL"}`, and
//! [`Browser::log`] reads chromedriver's log endpoint (`POST /session/{id}/se/log` with
//! `{"type": "browser"}`), which hands out each entry once; the entries are kept here, so
//! [`Browser::log`] and [`Browser::console_errors`] always answer everything since the start.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::node::poll_until;
use crate::process::{ChildProcess, command, workspace_root};

/// How long [`Browser::wait_for`] and the other waits wait by default: long, because a busy
/// 2-core machine running the whole suite can take seconds to render a page.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long chromedriver may take to listen and say it is ready, and Chromium to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one WebDriver command may take before the test fails rather than hangs (a
/// navigation waits for the page to load, up to the session's page load timeout).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// The browser window, in pixels. The viewport (what a screenshot shows, see
/// [`Browser::viewport`]) is as wide, and less high by the browser frame that headless
/// Chromium still pretends to draw.
pub const WINDOW_SIZE: (u32, u32) = (1280, 900);

/// What chromedriver prints on stdout once it listens, before its port.
const LISTENING: &str = "ChromeDriver was started successfully on port ";

/// How many times chromedriver is started when the port it picked is taken.
const DRIVER_STARTS: u32 = 3;

/// The key of a web element reference in WebDriver's JSON (W3C WebDriver, "Elements").
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless Chromium session, with its chromedriver process and temporary directory.
///
/// Dropping it kills the driver's whole process group, Chromium with it, and then removes
/// the directory. (Not a `DELETE` of the session first: drop cannot wait on the async
/// client, and Chromium has nothing to keep.)
#[derive(Debug)]
pub struct Browser {
    session: Arc<Session>,
    /// Every browser log entry read so far (the driver hands each out once).
    log: Mutex<Vec<LogEntry>>,
    wait_timeout: Duration,
    // Declared in the order they must go: the driver (and the browser) before their files.
    driver: ChildProcess,
    dir: TempDir,
}

/// One WebDriver session: where its commands go.
#[derive(Debug)]
struct Session {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/{id}`.
    url: String,
}

/// An element of the page, as WebDriver references it.
///
/// A reference goes stale when the page replaces the element; commands on it then fail with
/// the WebDriver error `stale element reference` (see [`WebDriverError::is_stale`]).
#[derive(Debug, Clone)]
pub struct Element {
    session: Arc<Session>,
    id: String,
    /// The selector it was found with, for error messages.
    css: String,
}

/// An error a WebDriver command answered with: its W3C error code and message.
#[derive(Debug, Clone)]
pub struct WebDriverError {
    /// The command, as `METHOD /path`.
    pub command: String,
    /// The HTTP status.
    pub status: u16,
    /// The W3C error code, e.g. `no such element` or `stale element reference`.
    pub error: String,
    /// The driver's message.
    pub message: String,
}

impl WebDriverError {
    /// Whether the element the command named is no longer in the page.
    pub fn is_stale(&self) -> bool {
        self.error == "stale element reference"
    }
}

impl fmt::Display for WebDriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "WebDriver {} answered {} {}: {}",
            self.command, self.status, self.error, self.message
        )
    }
}

impl std::error::Error for WebDriverError {}

/// The level of a browser log entry, as chromedriver names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LogLevel {
    /// `console.debug`.
    Debug,
    /// `console.log` and `console.info`.
    Info,
    /// `console.warn`, and the browser's own warnings.
    Warning,
    /// `console.error`, uncaught exceptions, and resources that failed to load.
    Severe,
    /// A level this version of the driver adds.
    #[serde(other)]
    Other,
}

/// One entry of the browser log.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LogEntry {
    /// How bad it is.
    pub level: LogLevel,
    /// What was logged: chromedriver writes the source URL and line, then the logged values
    /// (strings quoted) or the exception's text.
    pub message: String,
    /// Where it came from: `console-api` for `console.*`, `javascript` for an uncaught
    /// exception, `network` for a failed load, and others.
    #[serde(default)]
    pub source: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
}

/// A cookie as WebDriver shows it: HttpOnly ones too, which the page's script cannot see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cookie {
    /// The name.
    pub name: String,
    /// The value.
    pub value: String,
    /// The path; the current page's when added without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The domain; the current page's host when added without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Sent over HTTPS only.
    #[serde(default)]
    pub secure: bool,
    /// Hidden from the page's script (`document.cookie`).
    #[serde(default)]
    pub http_only: bool,
    /// `Strict`, `Lax` or `None`, when the cookie says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_site: Option<String>,
    /// When it expires, in seconds since the Unix epoch; `None` for a session cookie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry: Option<u64>,
}

impl Cookie {
    /// A cookie for the current page's host and path, neither secure nor HttpOnly.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
            path: None,
            domain: None,
            secure: false,
            http_only: false,
            same_site: None,
            expiry: None,
        }
    }
}

/// A program on the `PATH`, or the error that says how to get it.
fn installed(name: &str) -> anyhow::Result<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .with_context(|| format!("{name} is not installed: run scripts/deploy-tools"))
}

impl Browser {
    /// Starts chromedriver on a free loopback port, waits until it says it is ready, and opens
    /// a session with headless Chromium (a temporary home and profile, a [`WINDOW_SIZE`]
    /// window, the browser log on).
    pub async fn start() -> anyhow::Result<Self> {
        let chromedriver = installed("chromedriver")?;
        let chromium = installed("chromium")?;
        let dir = tempfile::Builder::new().prefix("mew-browser-").tempdir()?;
        let home = dir.path().join("home");
        std::fs::create_dir(&home)?;
        let profile = dir.path().join("profile");

        // Port 0: the driver picks a free port and prints it, so no other test can take it
        // between a choice here and the driver's bind. Its stderr (and Chromium's, which it
        // passes on) goes to a file, quoted when the start fails. HOME and the XDG
        // directories are the temporary directory's, or Chromium would keep crash reports
        // and caches in the user's.
        let mut attempt = 1;
        let (driver, port) = loop {
            // Each start's own log, so that only its own failure is read.
            let _ = std::fs::remove_file(dir.path().join("chromedriver.log"));
            let mut cmd = command(&chromedriver);
            cmd.arg("--port=0")
                .arg(format!(
                    "--log-path={}",
                    dir.path().join("chromedriver.log").display()
                ))
                .env("HOME", &home)
                .env("XDG_CONFIG_HOME", home.join(".config"))
                .env("XDG_CACHE_HOME", home.join(".cache"))
                .env("XDG_DATA_HOME", home.join(".local/share"))
                .stderr(Stdio::from(std::fs::File::create(
                    dir.path().join("stderr.log"),
                )?));
            match ChildProcess::spawn_until("chromedriver", cmd, LISTENING, START_TIMEOUT).await {
                Ok(started) => break started,
                // Given port 0, the driver now and then fails its own bind ("Address already in
                // use", seen once in a full run of the suite) and exits at once; a new start
                // binds again.
                Err(_) if attempt < DRIVER_STARTS && address_in_use(dir.path()) => attempt += 1,
                Err(e) => return Err(e.context(failed_start(dir.path()))),
            }
        };
        let port: u16 = port
            .trim_end_matches('.')
            .parse()
            .with_context(|| format!("chromedriver printed no port: {port}"))?;
        let driver_url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(COMMAND_TIMEOUT)
            .build()?;

        let status_url = format!("{driver_url}/status");
        let (http_ref, status_url) = (&http, &status_url);
        poll_until(
            "chromedriver says it is ready",
            START_TIMEOUT,
            || async move {
                let Ok(response) = http_ref.get(status_url).send().await else {
                    return Ok(None);
                };
                let Ok(status) = response.json::<Value>().await else {
                    return Ok(None);
                };
                Ok((status["value"]["ready"] == json!(true)).then_some(()))
            },
        )
        .await
        .with_context(|| failed_start(dir.path()))?;

        let (width, height) = WINDOW_SIZE;
        let capabilities = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": chromium.display().to_string(),
                        "args": [
                            "--headless=new",
                            // No user namespaces in containers; the tests load their own pages.
                            "--no-sandbox",
                            "--disable-gpu",
                            // /dev/shm is small in containers; Chromium crashes when it fills.
                            "--disable-dev-shm-usage",
                            format!("--user-data-dir={}", profile.display()),
                            format!("--window-size={width},{height}"),
                            "--no-first-run",
                            "--no-default-browser-check",
                        ],
                    },
                    "goog:loggingPrefs": { "browser": "ALL" },
                    "timeouts": { "implicit": 0, "pageLoad": 60_000, "script": 30_000 },
                }
            }
        });
        let created = new_session(&http, &driver_url, &capabilities)
            .await
            .with_context(|| failed_start(dir.path()))?;
        let session = Arc::new(Session {
            http,
            url: format!("{driver_url}/session/{created}"),
        });
        Ok(Self {
            session,
            log: Mutex::new(Vec::new()),
            wait_timeout: WAIT_TIMEOUT,
            driver,
            dir,
        })
    }

    /// How long the waits wait ([`WAIT_TIMEOUT`] unless set).
    pub fn wait_timeout(&self) -> Duration {
        self.wait_timeout
    }

    /// Makes the waits wait `timeout` from now on.
    pub fn set_wait_timeout(&mut self, timeout: Duration) {
        self.wait_timeout = timeout;
    }

    /// The temporary directory: Chromium's home and profile (`--user-data-dir`), and the
    /// driver's logs. It goes when the browser is dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id of chromedriver, the leader of the process group the browser runs in.
    pub fn driver_pid(&self) -> Option<u32> {
        self.driver.id()
    }

    /// Opens `url` and waits until the page has loaded (its `load` event).
    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.session
            .command(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await?;
        Ok(())
    }

    /// The URL of the current page.
    pub async fn current_url(&self) -> anyhow::Result<String> {
        let url = self
            .session
            .command(reqwest::Method::GET, "/url", None)
            .await?;
        string(url, "the current URL")
    }

    /// The title of the current page.
    pub async fn title(&self) -> anyhow::Result<String> {
        let title = self
            .session
            .command(reqwest::Method::GET, "/title", None)
            .await?;
        string(title, "the title")
    }

    /// Every element that matches the CSS selector `css` now, in document order.
    pub async fn find_all(&self, css: &str) -> anyhow::Result<Vec<Element>> {
        let found = self.session.find_all("", css).await?;
        Ok(found)
    }

    /// Waits until an element matches the CSS selector `css`, and returns the first; `what`
    /// says what it is, for the error when none comes within [`Browser::wait_timeout`].
    pub async fn wait_for(&self, css: &str, what: &str) -> anyhow::Result<Element> {
        let waited = poll_until(what, self.wait_timeout, || async move {
            Ok(self.find_all(css).await?.into_iter().next())
        })
        .await;
        match waited {
            Ok(element) => Ok(element),
            Err(e) => Err(e.context(format!(
                "no element matches `{css}` on {}",
                self.describe_page().await
            ))),
        }
    }

    /// Waits until an element that matches `css` has a text (as the user sees it) for which
    /// `predicate` is true, and returns it; `what` says what is awaited. An element the page
    /// replaces meanwhile is looked for again, not an error.
    pub async fn wait_for_text(
        &self,
        css: &str,
        what: &str,
        predicate: impl Fn(&str) -> bool,
    ) -> anyhow::Result<Element> {
        let last_seen = Mutex::new(Vec::new());
        let (seen, predicate) = (&last_seen, &predicate);
        let waited = poll_until(what, self.wait_timeout, || async move {
            let mut texts = Vec::new();
            for element in self.find_all(css).await? {
                match element.text().await {
                    Ok(text) if predicate(&text) => return Ok(Some(element)),
                    Ok(text) => texts.push(text),
                    Err(e) if is_stale(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            *seen.lock().unwrap_or_else(PoisonError::into_inner) = texts;
            Ok(None)
        })
        .await;
        match waited {
            Ok(element) => Ok(element),
            Err(e) => {
                let seen = last_seen
                    .into_inner()
                    .unwrap_or_else(PoisonError::into_inner);
                Err(e.context(format!(
                    "the elements matching `{css}` on {} had the texts {seen:?}",
                    self.describe_page().await
                )))
            }
        }
    }

    /// Waits until `script` (the body of a function, as [`Browser::execute`] takes it)
    /// returns something other than `null`, `false`, `0` or `""`, and returns that.
    pub async fn wait_until(
        &self,
        what: &str,
        script: &str,
        args: Vec<Value>,
    ) -> anyhow::Result<Value> {
        let args = &args;
        let waited = poll_until(what, self.wait_timeout, || async move {
            let value = self.execute(script, args.clone()).await?;
            let falsy = match &value {
                Value::Null => true,
                Value::Bool(b) => !b,
                Value::Number(n) => n.as_f64() == Some(0.0),
                Value::String(s) => s.is_empty(),
                Value::Array(_) | Value::Object(_) => false,
            };
            Ok((!falsy).then_some(value))
        })
        .await;
        match waited {
            Ok(value) => Ok(value),
            Err(e) => Err(e.context(format!("on {}", self.describe_page().await))),
        }
    }

    /// Runs `script` in the page as the body of a synchronous function called with `args`
    /// (`arguments[0]`, ...; an [`Element::to_arg`] is the element itself), and returns what
    /// it returns, as JSON (elements as WebDriver references).
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        let body = json!({ "script": script, "args": args });
        self.session
            .command(reqwest::Method::POST, "/execute/sync", Some(body))
            .await
    }

    /// The size of the viewport, in CSS pixels (`innerWidth`, `innerHeight`).
    pub async fn viewport(&self) -> anyhow::Result<(u32, u32)> {
        let size = self
            .execute("return [window.innerWidth, window.innerHeight];", vec![])
            .await?;
        let side = |i: usize| {
            size[i]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .with_context(|| format!("the viewport is {size}"))
        };
        Ok((side(0)?, side(1)?))
    }

    /// The current viewport as a PNG.
    pub async fn screenshot_png(&self) -> anyhow::Result<Vec<u8>> {
        let encoded = self
            .session
            .command(reqwest::Method::GET, "/screenshot", None)
            .await?;
        let encoded = string(encoded, "the screenshot")?;
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .context("the screenshot is not base64")
    }

    /// Saves the current viewport as a PNG at `path` (its directory is made if missing), for
    /// a person to look at; see [`screenshot_dir`].
    pub async fn screenshot(&self, path: impl AsRef<Path>) -> anyhow::Result<()> {
        let path = path.as_ref();
        let png = self.screenshot_png().await?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::write(path, png).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Every browser log entry since the session started, oldest first: console calls of any
    /// level, uncaught exceptions, failed loads.
    pub async fn log(&self) -> anyhow::Result<Vec<LogEntry>> {
        let new = self
            .session
            .command(
                reqwest::Method::POST,
                "/se/log",
                Some(json!({ "type": "browser" })),
            )
            .await?;
        let new: Vec<LogEntry> =
            serde_json::from_value(new).context("the browser log is not a list of entries")?;
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.extend(new);
        Ok(log.clone())
    }

    /// The entries of [`Browser::log`] at level [`LogLevel::Severe`]: `console.error` calls
    /// (source `console-api`), uncaught exceptions and unhandled rejections (`javascript`), and
    /// resources that failed to load (`network`), the `/favicon.ico` Chromium asks for too
    /// unless the page names its icon.
    pub async fn console_errors(&self) -> anyhow::Result<Vec<LogEntry>> {
        let mut log = self.log().await?;
        log.retain(|entry| entry.level == LogLevel::Severe);
        Ok(log)
    }

    /// Waits until a console error (see [`Browser::console_errors`]) satisfies `predicate`,
    /// and returns it: script errors reach the log when they happen, not when the page loads.
    pub async fn wait_for_console_error(
        &self,
        what: &str,
        predicate: impl Fn(&LogEntry) -> bool,
    ) -> anyhow::Result<LogEntry> {
        let predicate = &predicate;
        poll_until(what, self.wait_timeout, || async move {
            Ok(self.console_errors().await?.into_iter().find(predicate))
        })
        .await
        .with_context(|| format!("on {}", self.log_summary()))
    }

    /// The cookies of the current page, HttpOnly ones included.
    pub async fn cookies(&self) -> anyhow::Result<Vec<Cookie>> {
        let cookies = self
            .session
            .command(reqwest::Method::GET, "/cookie", None)
            .await?;
        serde_json::from_value(cookies).context("the cookies are not a list of cookies")
    }

    /// The cookie of the current page named `name`, if there is one.
    pub async fn cookie(&self, name: &str) -> anyhow::Result<Option<Cookie>> {
        Ok(self
            .cookies()
            .await?
            .into_iter()
            .find(|cookie| cookie.name == name))
    }

    /// Sets `cookie` for the current page (a page of its domain must be open).
    pub async fn add_cookie(&self, cookie: &Cookie) -> anyhow::Result<()> {
        self.session
            .command(
                reqwest::Method::POST,
                "/cookie",
                Some(json!({ "cookie": cookie })),
            )
            .await?;
        Ok(())
    }

    /// Deletes every cookie of the current page.
    pub async fn delete_cookies(&self) -> anyhow::Result<()> {
        self.session
            .command(reqwest::Method::DELETE, "/cookie", None)
            .await?;
        Ok(())
    }

    /// The current URL and the start of the page's text, for the errors of the waits.
    async fn describe_page(&self) -> String {
        let url = self
            .current_url()
            .await
            .unwrap_or_else(|e| format!("(no URL: {e})"));
        let text = self
            .execute(
                "return document.body ? document.body.innerText : ''",
                vec![],
            )
            .await
            .ok()
            .and_then(|text| text.as_str().map(str::to_owned))
            .unwrap_or_default();
        let text: String = text.chars().take(500).collect();
        format!("{url} (its text: {text:?})")
    }

    /// The browser log kept so far, one entry a line, for the errors of the waits.
    fn log_summary(&self) -> String {
        let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        let lines: Vec<String> = log
            .iter()
            .map(|entry| format!("{:?} {}", entry.level, entry.message))
            .collect();
        format!("the browser log {lines:#?}")
    }
}

impl Element {
    /// The element's text as the user sees it (rendered, hidden parts left out).
    pub async fn text(&self) -> anyhow::Result<String> {
        let text = self.command(reqwest::Method::GET, "/text", None).await?;
        string(text, "the element's text")
    }

    /// Clicks the element in its middle, as a user would (it is scrolled into view first;
    /// an element covered by another is an error).
    pub async fn click(&self) -> anyhow::Result<()> {
        self.command(reqwest::Method::POST, "/click", Some(json!({})))
            .await?;
        Ok(())
    }

    /// Types `text` into the element (focused first), key by key.
    pub async fn send_keys(&self, text: &str) -> anyhow::Result<()> {
        self.command(
            reqwest::Method::POST,
            "/value",
            Some(json!({ "text": text })),
        )
        .await?;
        Ok(())
    }

    /// Empties an input or a text area.
    pub async fn clear(&self) -> anyhow::Result<()> {
        self.command(reqwest::Method::POST, "/clear", Some(json!({})))
            .await?;
        Ok(())
    }

    /// The attribute `name` as the markup (or a script) set it, `None` when absent; the
    /// current value of an input is its property `value` (see [`Element::property`]).
    pub async fn attribute(&self, name: &str) -> anyhow::Result<Option<String>> {
        let value = self
            .command(reqwest::Method::GET, &format!("/attribute/{name}"), None)
            .await?;
        match value {
            Value::Null => Ok(None),
            Value::String(value) => Ok(Some(value)),
            other => bail!("the attribute {name} of `{}` is {other}", self.css),
        }
    }

    /// The DOM property `name` (e.g. `value`, `checked`, `disabled`) as JSON.
    pub async fn property(&self, name: &str) -> anyhow::Result<Value> {
        self.command(reqwest::Method::GET, &format!("/property/{name}"), None)
            .await
    }

    /// The element's markup inside it (`innerHTML`).
    pub async fn inner_html(&self) -> anyhow::Result<String> {
        let html = self.property("innerHTML").await?;
        string(html, "the element's innerHTML")
    }

    /// Whether the element is shown (WebDriver's "is displayed").
    pub async fn is_displayed(&self) -> anyhow::Result<bool> {
        let shown = self
            .command(reqwest::Method::GET, "/displayed", None)
            .await?;
        shown
            .as_bool()
            .with_context(|| format!("is `{}` displayed: the driver said {shown}", self.css))
    }

    /// The elements inside this one that match the CSS selector `css`.
    pub async fn find_all(&self, css: &str) -> anyhow::Result<Vec<Element>> {
        let found = self
            .session
            .find_all(&format!("/element/{}", self.id), css)
            .await?;
        Ok(found)
    }

    /// The element as an argument of [`Browser::execute`].
    pub fn to_arg(&self) -> Value {
        json!({ ELEMENT_KEY: self.id })
    }

    /// The selector the element was found with.
    pub fn selector(&self) -> &str {
        &self.css
    }

    async fn command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        self.session
            .command(method, &format!("/element/{}{path}", self.id), body)
            .await
            .with_context(|| format!("on the element `{}`", self.css))
    }
}

impl Session {
    /// Sends a command of this session (`path` after `/session/{id}`) and returns its `value`;
    /// an error answer is a [`WebDriverError`].
    async fn command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        send(&self.http, method, &format!("{}{path}", self.url), body).await
    }

    /// The elements matching `css` under `scope` (`""` for the document, `/element/{id}`
    /// for an element).
    async fn find_all(self: &Arc<Self>, scope: &str, css: &str) -> anyhow::Result<Vec<Element>> {
        let body = json!({ "using": "css selector", "value": css });
        let found = self
            .command(
                reqwest::Method::POST,
                &format!("{scope}/elements"),
                Some(body),
            )
            .await?;
        let Value::Array(found) = found else {
            bail!("finding `{css}`: the driver answered {found}");
        };
        found
            .iter()
            .map(|reference| {
                let id = reference[ELEMENT_KEY]
                    .as_str()
                    .with_context(|| format!("finding `{css}`: not an element: {reference}"))?;
                Ok(Element {
                    session: self.clone(),
                    id: id.to_owned(),
                    css: css.to_owned(),
                })
            })
            .collect()
    }
}

/// Sends one WebDriver request and returns the `value` of its answer; an error answer is a
/// [`WebDriverError`].
async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let what = format!("{method} {url}");
    let mut request = http.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("WebDriver {what}"))?;
    let status = response.status();
    let mut answer: Value = response
        .json()
        .await
        .with_context(|| format!("WebDriver {what}: the answer is not JSON"))?;
    let value = answer["value"].take();
    if status.is_success() {
        return Ok(value);
    }
    let text = |key: &str| value[key].as_str().unwrap_or_default().to_owned();
    Err(WebDriverError {
        command: what,
        status: status.as_u16(),
        error: text("error"),
        message: text("message"),
    }
    .into())
}

/// Opens a session with `capabilities` and returns its id.
async fn new_session(
    http: &reqwest::Client,
    driver_url: &str,
    capabilities: &Value,
) -> anyhow::Result<String> {
    let created = send(
        http,
        reqwest::Method::POST,
        &format!("{driver_url}/session"),
        Some(capabilities.clone()),
    )
    .await
    .context("cannot start Chromium")?;
    let id = created["sessionId"]
        .as_str()
        .with_context(|| format!("the new session has no id: {created}"))?;
    Ok(id.to_owned())
}

/// Whether `error` is WebDriver's `stale element reference`.
fn is_stale(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<WebDriverError>()
        .is_some_and(WebDriverError::is_stale)
}

/// `value` as a string, or an error naming `what`.
fn string(value: Value, what: &str) -> anyhow::Result<String> {
    match value {
        Value::String(s) => Ok(s),
        other => bail!("{what} is not a string: {other}"),
    }
}

/// What a failed start says: the end of what chromedriver (and Chromium) wrote.
/// Whether chromedriver's log in `dir` says it could not bind its port.
fn address_in_use(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("chromedriver.log"))
        .is_ok_and(|log| log.contains("ERR_ADDRESS_IN_USE"))
}

fn failed_start(dir: &Path) -> String {
    let mut said = String::new();
    for name in ["stderr.log", "chromedriver.log"] {
        if let Ok(text) = std::fs::read_to_string(dir.join(name)) {
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(30)..].join("\n");
            said.push_str(&format!("\n--- {name} (the end) ---\n{tail}"));
        }
    }
    format!("starting headless Chromium through chromedriver{said}")
}

/// The directory for the screenshots of the test `test_name`, made if missing:
/// `<target>/ui-screenshots/<test_name>/`, where `<target>` is `CARGO_TARGET_DIR` (relative
/// to the workspace root when relative) or the workspace root's `target/`. Screenshots of a
/// test overwrite those of its earlier runs by name.
pub fn screenshot_dir(test_name: &str) -> anyhow::Result<PathBuf> {
    ensure!(
        !test_name.is_empty()
            && test_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
        "a test name for a screenshot directory is letters, digits, `_` and `-`: {test_name:?}"
    );
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    };
    let dir = target.join("ui-screenshots").join(test_name);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}
