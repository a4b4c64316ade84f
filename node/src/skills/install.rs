//! Installing skills from GitHub, and removing them.
//!
//! # Sources
//!
//! [`parse_skill_url`] accepts three kinds of URL, all fetched through the GitHub contents API
//! (its base URL is [`InstallOptions::api_base`]):
//!
//! - `https://github.com/<owner>/<repo>/tree/<ref>/<path>`: the directory `<path>` at `<ref>`
//!   (a `blob/<ref>/<path>/SKILL.md` URL means its directory, and `<owner>/<repo>` alone the
//!   repository root at the default branch). A ref containing `/` cannot be told from the
//!   path: the first segment is the ref.
//! - `https://raw.githubusercontent.com/<owner>/<repo>/<ref>/<path>/SKILL.md` (or
//!   `.../refs/heads/<ref>/...`): the whole directory holding that `SKILL.md`, so its scripts
//!   and references come too.
//! - `https://skills.sh/<org>/<name>[/<version>]`: the directory `skills/<name>` of the
//!   repository `<org>/<name>`, at the ref `<version>` when given, else the default branch.
//!
//! The ref is first resolved to a commit (`GET /repos/<owner>/<repo>/commits/<ref>`); when that
//! works, the files are fetched at that commit and the commit is recorded, else at the ref.
//!
//! # Checks
//!
//! Each limit of [`InstallOptions`] has its own error: a file over `max_file_bytes` (checked on
//! the listed size, then while downloading), more than `max_total_bytes` in all, more than
//! `max_files` files, a directory nested deeper than `max_depth`, a request over `timeout`.
//! Names from the listing must be plain file names (no `/`, `\`, `..`, NUL or control
//! characters), and two may not differ only in letter case. Symlinks and submodules in the
//! repository are skipped with a warning: nothing downloaded is ever a link, and links are
//! never followed. The content must have a top-level `SKILL.md` with a frontmatter that parses
//! and names the skill; the skill is installed under that name.
//!
//! # Layout and atomicity
//!
//! The skill ends up in `<root>/<name>/`, recorded in `<root>/skills-lock.json` (see
//! [`super::lock`]). Files are written to a hidden staging directory `<root>/.install-*`, on the
//! same file system as the target, so the final `rename` is atomic. An existing version is first
//! renamed aside to `<root>/.replaced-*`, and put back if the new one cannot be moved in or the
//! lock file cannot be written; it is deleted only once both succeeded. A failure at any step
//! leaves the previous version and the lock file as they were, and no staging directory behind.
//! Between the two renames the skill is briefly absent; the catalog skips dot-directories, so it
//! never sees a half-written skill. Installs and removals in one process are serialized.
//!
//! Files are written with default permissions: the contents API does not say which are
//! executable.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use mew_cards::Timestamp;
use reqwest::header::ACCEPT;
use reqwest::{StatusCode, Url};
use serde::Deserialize;

use super::catalog::SKILL_FILE;
use super::lock::{FileHash, LockEntry, LockError, read_lock, write_lock};
use super::parse::{is_valid_skill_name, parse_skill};
use super::unique_suffix;

/// The GitHub API.
pub(crate) const DEFAULT_API_BASE: &str = "https://api.github.com";

/// Largest file installed, in bytes.
pub(crate) const DEFAULT_MAX_FILE_BYTES: u64 = 1 << 20;

/// Largest skill installed, all files together, in bytes.
pub(crate) const DEFAULT_MAX_TOTAL_BYTES: u64 = 8 << 20;

/// Most files in one skill.
pub(crate) const DEFAULT_MAX_FILES: usize = 64;

/// Deepest directory nesting in one skill.
pub(crate) const DEFAULT_MAX_DEPTH: usize = 4;

/// Longest one HTTP request may take.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest directory listing read, in bytes.
const MAX_LISTING_BYTES: u64 = 4 << 20;

/// How much of an error response is quoted.
const ERROR_BODY_BYTES: usize = 1024;

/// How to install: where the API is, the limits, the credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InstallOptions {
    /// Base URL of the GitHub API, without a trailing `/` needed.
    pub(crate) api_base: String,
    /// Largest file, in bytes.
    pub(crate) max_file_bytes: u64,
    /// Largest total, in bytes.
    pub(crate) max_total_bytes: u64,
    /// Most files.
    pub(crate) max_files: usize,
    /// Deepest nesting of directories below the skill's own.
    pub(crate) max_depth: usize,
    /// Longest one request may take.
    pub(crate) timeout: Duration,
    /// A GitHub token, sent to the API (never to download hosts), for private repositories
    /// and a higher rate limit.
    pub(crate) token: Option<String>,
}

impl Default for InstallOptions {
    fn default() -> Self {
        Self {
            api_base: DEFAULT_API_BASE.to_owned(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
            max_files: DEFAULT_MAX_FILES,
            max_depth: DEFAULT_MAX_DEPTH,
            timeout: DEFAULT_TIMEOUT,
            token: None,
        }
    }
}

/// Which install root to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum InstallScope {
    /// `~/.mew/skills`: every project sees it.
    User,
    /// `<project>/.mew/skills`: this project only.
    Project,
}

/// The install root for `scope`; `None` for the user scope when the home directory is unknown.
pub(crate) fn install_root(
    scope: InstallScope,
    home: Option<&Path>,
    project: &Path,
) -> Option<PathBuf> {
    match scope {
        InstallScope::User => home.map(|home| home.join(".mew").join("skills")),
        InstallScope::Project => Some(project.join(".mew").join("skills")),
    }
}

/// The kind of URL a skill came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum UrlKind {
    /// `github.com/<owner>/<repo>/tree/<ref>/<path>`.
    GitHubTree,
    /// `raw.githubusercontent.com/<owner>/<repo>/<ref>/<path>/SKILL.md`.
    RawGitHub,
    /// `skills.sh/<org>/<name>[/<version>]`.
    SkillsSh,
}

/// Where a skill lives on GitHub, from [`parse_skill_url`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkillUrl {
    /// The kind of URL.
    pub(crate) kind: UrlKind,
    /// Repository owner.
    pub(crate) owner: String,
    /// Repository name.
    pub(crate) repo: String,
    /// The skill directory in the repository, `/`-separated, empty for the root.
    pub(crate) path: String,
    /// The ref named, `None` for the default branch.
    pub(crate) git_ref: Option<String>,
    /// The directory's name (the repository's for the root): what the skill is expected to
    /// be called.
    pub(crate) dir_name: String,
}

/// A finished installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Installed {
    /// The skill's name.
    pub(crate) name: String,
    /// Its directory.
    pub(crate) dir: PathBuf,
    /// True when an earlier version was replaced.
    pub(crate) replaced: bool,
    /// What was recorded in the lock file.
    pub(crate) entry: LockEntry,
    /// Things skipped or odd, one sentence each (symlinks skipped, `SKILL.md` warnings...).
    pub(crate) warnings: Vec<String>,
}

impl Installed {
    /// How many files were installed.
    pub(crate) fn file_count(&self) -> usize {
        self.entry.files.len()
    }

    /// How many bytes were installed.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.entry.files.values().map(|file| file.size).sum()
    }
}

/// A finished removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Removed {
    /// The skill's name.
    pub(crate) name: String,
    /// True when a directory was removed.
    pub(crate) dir_removed: bool,
    /// True when the lock file had an entry, now gone.
    pub(crate) was_locked: bool,
    /// Set when the directory, already out of the way, could not be deleted.
    pub(crate) warning: Option<String>,
}

/// Why an installation or removal failed. Nothing was changed on disk when one is returned.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InstallError {
    /// The URL is not one of the supported kinds.
    #[error("unsupported skill URL {url:?}: {reason}")]
    UnsupportedUrl {
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client could not be set up.
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
    /// A request took longer than the timeout.
    #[error("{url} did not answer within {} s", .limit.as_secs_f64())]
    Timeout {
        /// The URL.
        url: String,
        /// The timeout.
        limit: Duration,
    },
    /// A request failed on the network.
    #[error("cannot fetch {url}: {message}")]
    Network {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// GitHub refused the request, most likely for the API rate limit.
    #[error(
        "{url} answered HTTP {status}, most likely the GitHub API rate limit (a token raises \
         it): {body}"
    )]
    RateLimited {
        /// The URL.
        url: String,
        /// 403 or 429.
        status: u16,
        /// The start of the answer.
        body: String,
    },
    /// Nothing is there.
    #[error("{url} was not found (HTTP 404): check the owner, repository, ref and path")]
    NotFound {
        /// The URL.
        url: String,
    },
    /// Another unexpected status.
    #[error("{url} answered HTTP {status}")]
    Http {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// The listing is not what the contents API sends.
    #[error("unexpected answer from {url}: {message}")]
    BadListing {
        /// The URL.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// The URL names a file, not a directory.
    #[error("{url} is a file, not a skill directory")]
    NotADirectory {
        /// The URL.
        url: String,
    },
    /// A name in the listing could escape the skill directory, or is not a plain name.
    #[error("refusing the entry {name:?}: not a plain file name")]
    UnsafeName {
        /// The name.
        name: String,
    },
    /// Two entries would be the same file.
    #[error("refusing {path:?}: listed twice (names may not differ only in letter case)")]
    Duplicate {
        /// The path.
        path: String,
    },
    /// A file over the per-file limit.
    #[error("{path} is larger than the limit of {limit} bytes per file")]
    FileTooLarge {
        /// The file.
        path: String,
        /// The limit.
        limit: u64,
    },
    /// The files together over the total limit.
    #[error("the skill is larger than the limit of {limit} bytes in all")]
    TotalTooLarge {
        /// The limit.
        limit: u64,
    },
    /// More files than allowed.
    #[error("the skill has more than the limit of {limit} files")]
    TooManyFiles {
        /// The limit.
        limit: usize,
    },
    /// A directory nested too deep.
    #[error("{path} is nested deeper than the limit of {limit} directories")]
    TooDeep {
        /// The directory.
        path: String,
        /// The limit.
        limit: usize,
    },
    /// No top-level `SKILL.md`.
    #[error("the downloaded content has no SKILL.md at its top level; it is not a skill")]
    MissingSkillMd,
    /// `SKILL.md` is not a valid skill.
    #[error("SKILL.md is invalid: {0}")]
    InvalidSkillMd(String),
    /// A name given to remove breaks the name rule.
    #[error("{0:?} is not a skill name")]
    InvalidName(String),
    /// Nothing to remove.
    #[error("no skill {name:?} is installed in {}", .root.display())]
    NotInstalled {
        /// The name.
        name: String,
        /// The install root.
        root: PathBuf,
    },
    /// The lock file cannot be used.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// A file-system step failed.
    #[error("cannot {action} {}: {message}", .path.display())]
    Io {
        /// What was being done.
        action: String,
        /// The path.
        path: PathBuf,
        /// Why, and what was done about it.
        message: String,
    },
}

fn io_error(action: &str, path: &Path, err: impl std::fmt::Display) -> InstallError {
    InstallError::Io {
        action: action.to_owned(),
        path: path.to_path_buf(),
        message: err.to_string(),
    }
}

/// A rename, replaceable in tests to make one step fail.
pub(crate) type RenameFn = fn(&Path, &Path) -> io::Result<()>;

fn std_rename(from: &Path, to: &Path) -> io::Result<()> {
    fs::rename(from, to)
}

/// Serializes the file-system steps of installs and removals in this process.
static COMMIT_LOCK: Mutex<()> = Mutex::new(());

/// Parses a skill URL (see the module docs).
pub(crate) fn parse_skill_url(input: &str) -> Result<SkillUrl, InstallError> {
    let unsupported = |reason: &str| InstallError::UnsupportedUrl {
        url: input.to_owned(),
        reason: reason.to_owned(),
    };
    let url = Url::parse(input.trim()).map_err(|err| unsupported(&format!("not a URL: {err}")))?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err(unsupported("only https URLs are supported"));
    }
    let mut segments = Vec::new();
    for segment in url.path_segments().into_iter().flatten() {
        if segment.is_empty() {
            continue;
        }
        let decoded =
            percent_decode(segment).ok_or_else(|| unsupported("the path is not valid UTF-8"))?;
        if !is_safe_name(&decoded) {
            return Err(unsupported(&format!(
                "{decoded:?} is not a plain path segment"
            )));
        }
        segments.push(decoded);
    }
    let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
    let parsed = match host.as_str() {
        "github.com" | "www.github.com" => github_tree(segments),
        "raw.githubusercontent.com" => raw_github(segments),
        "skills.sh" | "www.skills.sh" => skills_sh(segments),
        _ => Err(
            "only github.com, raw.githubusercontent.com and skills.sh URLs are supported"
                .to_owned(),
        ),
    };
    let parsed = parsed.map_err(|reason| unsupported(&reason))?;
    if !is_repo_part(&parsed.owner) || !is_repo_part(&parsed.repo) {
        return Err(unsupported("the owner or repository name is not valid"));
    }
    Ok(parsed)
}

fn skill_url(
    kind: UrlKind,
    owner: &str,
    repo: &str,
    path: &[String],
    git_ref: Option<String>,
) -> SkillUrl {
    let repo = repo.strip_suffix(".git").unwrap_or(repo);
    SkillUrl {
        kind,
        owner: owner.to_owned(),
        repo: repo.to_owned(),
        path: path.join("/"),
        git_ref,
        dir_name: path.last().map_or(repo, String::as_str).to_owned(),
    }
}

fn github_tree(segments: Vec<String>) -> Result<SkillUrl, String> {
    const SHAPE: &str = "expected https://github.com/<owner>/<repo>/tree/<ref>/<path>";
    match segments.as_slice() {
        [owner, repo] => Ok(skill_url(UrlKind::GitHubTree, owner, repo, &[], None)),
        [owner, repo, kind, git_ref, path @ ..] if kind == "tree" || kind == "blob" => {
            let mut path = path.to_vec();
            if path.last().is_some_and(|last| last == SKILL_FILE) {
                path.pop();
            } else if kind == "blob" {
                return Err("a blob URL must name a SKILL.md".to_owned());
            }
            Ok(skill_url(
                UrlKind::GitHubTree,
                owner,
                repo,
                &path,
                Some(git_ref.clone()),
            ))
        }
        _ => Err(SHAPE.to_owned()),
    }
}

fn raw_github(segments: Vec<String>) -> Result<SkillUrl, String> {
    const SHAPE: &str =
        "expected https://raw.githubusercontent.com/<owner>/<repo>/<ref>/<path>/SKILL.md";
    let [owner, repo, rest @ ..] = segments.as_slice() else {
        return Err(SHAPE.to_owned());
    };
    let (git_ref, rest) = match rest {
        [refs, kind, git_ref, rest @ ..]
            if refs == "refs" && (kind == "heads" || kind == "tags") =>
        {
            (git_ref, rest)
        }
        [git_ref, rest @ ..] => (git_ref, rest),
        [] => return Err(SHAPE.to_owned()),
    };
    match rest {
        [path @ .., file] if file == SKILL_FILE => Ok(skill_url(
            UrlKind::RawGitHub,
            owner,
            repo,
            path,
            Some(git_ref.clone()),
        )),
        _ => Err(format!("{SHAPE}: a raw URL must name a SKILL.md")),
    }
}

fn skills_sh(segments: Vec<String>) -> Result<SkillUrl, String> {
    match segments.as_slice() {
        [org, name] | [org, name, _] => {
            let version = segments.get(2).cloned();
            let path = ["skills".to_owned(), name.clone()];
            Ok(skill_url(UrlKind::SkillsSh, org, name, &path, version))
        }
        _ => Err("expected https://skills.sh/<org>/<name>[/<version>]".to_owned()),
    }
}

/// `%XX` escapes decoded; `None` when the result is not UTF-8 or an escape is malformed.
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// True for a plain file name: not empty, not `.` or `..`, no `/`, `\`, NUL or other control
/// characters.
fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control())
}

/// True for a GitHub owner or repository name.
fn is_repo_part(part: &str) -> bool {
    is_safe_name(part)
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Installs the skill at `url` into `target_root` (see the module docs).
pub(crate) async fn install(
    url: &str,
    target_root: &Path,
    options: &InstallOptions,
) -> Result<Installed, InstallError> {
    install_with(url, target_root, options, std_rename).await
}

/// [`install`], renaming with `rename` (tests make one step fail through it).
pub(crate) async fn install_with(
    url: &str,
    target_root: &Path,
    options: &InstallOptions,
    rename: RenameFn,
) -> Result<Installed, InstallError> {
    let source = parse_skill_url(url)?;
    let client = reqwest::Client::builder()
        .timeout(options.timeout)
        .user_agent(concat!("mew/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|err| InstallError::Client(error_chain(&err)))?;
    let api = Api {
        client,
        options,
        source: &source,
    };
    let resolved = api.resolve_commit().await;
    let fetch_ref = resolved.clone().or_else(|| source.git_ref.clone());
    let mut download = Download::default();
    api.fetch_tree(fetch_ref.as_deref(), &mut download).await?;

    let skill_md = download
        .files
        .iter()
        .find(|(path, _)| path == SKILL_FILE)
        .ok_or(InstallError::MissingSkillMd)?;
    let text = std::str::from_utf8(&skill_md.1)
        .map_err(|_| InstallError::InvalidSkillMd("it is not UTF-8 text".to_owned()))?;
    let parsed = parse_skill(text, Some(&source.dir_name))
        .map_err(|err| InstallError::InvalidSkillMd(err.to_string()))?;
    if !parsed.has_frontmatter {
        return Err(InstallError::InvalidSkillMd(
            "it has no frontmatter (a first line `---`)".to_owned(),
        ));
    }
    if parsed.name_from_dir && parsed.display_name.is_none() {
        return Err(InstallError::InvalidSkillMd(
            "its frontmatter has no name".to_owned(),
        ));
    }
    let name = parsed.meta.name;
    let mut warnings: Vec<String> = parsed
        .warnings
        .into_iter()
        .map(|warning| format!("SKILL.md: {warning}"))
        .collect();
    warnings.append(&mut download.warnings);

    let entry = LockEntry {
        source: url.trim().to_owned(),
        repository: format!("{}/{}", source.owner, source.repo),
        path: source.path.clone(),
        git_ref: source.git_ref.clone(),
        resolved_ref: resolved
            .or_else(|| source.git_ref.clone())
            .unwrap_or_else(|| "HEAD".to_owned()),
        installed_at: Timestamp::now(),
        files: download
            .files
            .iter()
            .map(|(path, data)| (path.clone(), FileHash::of(data)))
            .collect(),
    };
    let root = target_root.to_path_buf();
    let commit_name = name.clone();
    let commit_entry = entry.clone();
    let replaced = tokio::task::spawn_blocking(move || {
        commit(&root, &commit_name, &download.files, commit_entry, rename)
    })
    .await
    .map_err(|err| io_error("install into", target_root, err))??;
    Ok(Installed {
        dir: target_root.join(&name),
        name,
        replaced,
        entry,
        warnings,
    })
}

/// Files fetched so far.
#[derive(Default)]
struct Download {
    /// (relative path with `/`, content), in the order fetched.
    files: Vec<(String, Vec<u8>)>,
    /// Bytes so far.
    total: u64,
    /// Relative paths so far, lowercase.
    seen: HashSet<String>,
    warnings: Vec<String>,
}

/// One entry of a contents API directory listing.
#[derive(Debug, Deserialize)]
struct ListingEntry {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    download_url: Option<String>,
}

/// Talks to the GitHub API about one skill.
struct Api<'a> {
    client: reqwest::Client,
    options: &'a InstallOptions,
    source: &'a SkillUrl,
}

impl Api<'_> {
    /// `<api_base>/repos/<owner>/<repo>/` followed by `tail`, each item one or more
    /// `/`-separated segments.
    fn url(&self, tail: &[&str]) -> Result<Url, InstallError> {
        let bad_base = |reason: String| {
            InstallError::Client(format!(
                "the API base URL {:?} {reason}",
                self.options.api_base
            ))
        };
        let mut url =
            Url::parse(&self.options.api_base).map_err(|err| bad_base(err.to_string()))?;
        {
            let mut segments = url
                .path_segments_mut()
                .map_err(|()| bad_base("cannot have a path".to_owned()))?;
            segments.pop_if_empty();
            segments.extend(["repos", &self.source.owner, &self.source.repo]);
            for part in tail {
                segments.extend(part.split('/').filter(|s| !s.is_empty()));
            }
        }
        Ok(url)
    }

    fn get(&self, url: &Url, accept: &str) -> reqwest::RequestBuilder {
        let request = self.client.get(url.clone()).header(ACCEPT, accept);
        match &self.options.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    fn request_error(&self, url: &Url, err: &reqwest::Error) -> InstallError {
        if err.is_timeout() {
            InstallError::Timeout {
                url: url.to_string(),
                limit: self.options.timeout,
            }
        } else {
            InstallError::Network {
                url: url.to_string(),
                message: error_chain(err),
            }
        }
    }

    /// The commit the ref points to, when the API says; `None` on any failure.
    async fn resolve_commit(&self) -> Option<String> {
        let git_ref = self.source.git_ref.as_deref().unwrap_or("HEAD");
        let url = self.url(&["commits", git_ref]).ok()?;
        let response = self
            .get(&url, "application/vnd.github.sha")
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        let text = response.text().await.ok()?;
        let sha = text.trim();
        (matches!(sha.len(), 40 | 64) && sha.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| sha.to_ascii_lowercase())
    }

    /// Sends `request` and checks its status.
    async fn send(
        &self,
        url: &Url,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, InstallError> {
        let response = request
            .send()
            .await
            .map_err(|err| self.request_error(url, &err))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let url = url.to_string();
        Err(match status {
            StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS => {
                let body = response.text().await.unwrap_or_default();
                let mut end = body.len().min(ERROR_BODY_BYTES);
                while !body.is_char_boundary(end) {
                    end -= 1;
                }
                InstallError::RateLimited {
                    url,
                    status: status.as_u16(),
                    body: body[..end].trim().to_owned(),
                }
            }
            StatusCode::NOT_FOUND => InstallError::NotFound { url },
            _ => InstallError::Http {
                url,
                status: status.as_u16(),
            },
        })
    }

    /// Every file of the skill directory, breadth first, into `download`.
    async fn fetch_tree(
        &self,
        git_ref: Option<&str>,
        download: &mut Download,
    ) -> Result<(), InstallError> {
        // (relative directory, depth below the skill's directory).
        let mut pending: Vec<(String, usize)> = vec![(String::new(), 0)];
        let mut index = 0;
        while let Some((dir, depth)) = pending.get(index).cloned() {
            index += 1;
            let mut url = self.url(&["contents", &self.source.path, &dir])?;
            if let Some(git_ref) = git_ref {
                url.query_pairs_mut().append_pair("ref", git_ref);
            }
            let mut entries = self.list(&url).await?;
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            for entry in entries {
                if !is_safe_name(&entry.name) {
                    return Err(InstallError::UnsafeName { name: entry.name });
                }
                let path = if dir.is_empty() {
                    entry.name.clone()
                } else {
                    format!("{dir}/{}", entry.name)
                };
                if !download.seen.insert(path.to_lowercase()) {
                    return Err(InstallError::Duplicate { path });
                }
                match entry.kind.as_str() {
                    "file" => self.fetch_file(&url, &path, &entry, download).await?,
                    "dir" => {
                        if depth + 1 > self.options.max_depth {
                            return Err(InstallError::TooDeep {
                                path,
                                limit: self.options.max_depth,
                            });
                        }
                        pending.push((path, depth + 1));
                    }
                    "symlink" => download.warnings.push(format!(
                        "{path} is a symlink and was not installed: links are never followed"
                    )),
                    "submodule" => download
                        .warnings
                        .push(format!("{path} is a git submodule and was not installed")),
                    other => download.warnings.push(format!(
                        "{path} has the unknown type {other:?} and was not installed"
                    )),
                }
            }
        }
        Ok(())
    }

    /// A directory listing.
    async fn list(&self, url: &Url) -> Result<Vec<ListingEntry>, InstallError> {
        let response = self
            .send(url, self.get(url, "application/vnd.github+json"))
            .await?;
        let bad = |message: String| InstallError::BadListing {
            url: url.to_string(),
            message,
        };
        let body = self
            .read_body(url, response, MAX_LISTING_BYTES, || {
                bad(format!(
                    "the listing is larger than {MAX_LISTING_BYTES} bytes"
                ))
            })
            .await?;
        let value: serde_json::Value =
            serde_json::from_slice(&body).map_err(|err| bad(format!("not JSON: {err}")))?;
        match value {
            serde_json::Value::Array(_) => serde_json::from_value(value)
                .map_err(|err| bad(format!("not a directory listing: {err}"))),
            serde_json::Value::Object(ref object)
                if object.get("type").and_then(serde_json::Value::as_str) == Some("file") =>
            {
                Err(InstallError::NotADirectory {
                    url: url.to_string(),
                })
            }
            _ => Err(bad("not a directory listing".to_owned())),
        }
    }

    /// Reads a body of at most `limit` bytes; `too_large` makes the error past that.
    async fn read_body(
        &self,
        url: &Url,
        mut response: reqwest::Response,
        limit: u64,
        too_large: impl FnOnce() -> InstallError,
    ) -> Result<Vec<u8>, InstallError> {
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|err| self.request_error(url, &err))?
        {
            if body.len() as u64 + chunk.len() as u64 > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Downloads one file within the limits.
    async fn fetch_file(
        &self,
        listing: &Url,
        path: &str,
        entry: &ListingEntry,
        download: &mut Download,
    ) -> Result<(), InstallError> {
        let options = self.options;
        if download.files.len() >= options.max_files {
            return Err(InstallError::TooManyFiles {
                limit: options.max_files,
            });
        }
        let file_too_large = || InstallError::FileTooLarge {
            path: path.to_owned(),
            limit: options.max_file_bytes,
        };
        let total_too_large = InstallError::TotalTooLarge {
            limit: options.max_total_bytes,
        };
        if entry.size > options.max_file_bytes {
            return Err(file_too_large());
        }
        if download.total + entry.size > options.max_total_bytes {
            return Err(total_too_large);
        }
        let url = entry
            .download_url
            .as_deref()
            .and_then(|url| Url::parse(url).ok())
            .filter(|url| matches!(url.scheme(), "https" | "http"))
            .ok_or_else(|| InstallError::BadListing {
                url: listing.to_string(),
                message: format!("{path} has no usable download_url"),
            })?;
        // Downloads go to the URL the API gave, without the token.
        let response = self.send(&url, self.client.get(url.clone())).await?;
        let room = options.max_total_bytes - download.total;
        let limit = options.max_file_bytes.min(room);
        let body = self
            .read_body(&url, response, limit, || {
                if room < options.max_file_bytes {
                    total_too_large
                } else {
                    file_too_large()
                }
            })
            .await?;
        download.total += body.len() as u64;
        download.files.push((path.to_owned(), body));
        Ok(())
    }
}

/// The error and its sources, joined by `: `.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}

/// Removes `path` when dropped, if it is still there.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if fs::symlink_metadata(&self.0).is_ok() {
            let _ = remove_any(&self.0);
        }
    }
}

/// Removes a directory tree, a file or a symlink (never what a symlink points to).
fn remove_any(path: &Path) -> io::Result<()> {
    let metadata = fs::symlink_metadata(path)?;
    if metadata.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    }
}

/// Writes `files` into the empty directory `staging`, creating subdirectories; never follows
/// or creates a symlink (every path is new, created by this function).
fn write_files(staging: &Path, files: &[(String, Vec<u8>)]) -> Result<(), InstallError> {
    for (rel, data) in files {
        let mut path = staging.to_path_buf();
        let parts: Vec<&str> = rel.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            if !is_safe_name(part) {
                return Err(InstallError::UnsafeName { name: rel.clone() });
            }
            path.push(part);
            if i + 1 < parts.len() {
                match fs::create_dir(&path) {
                    Ok(()) => {}
                    Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                        if !fs::symlink_metadata(&path).is_ok_and(|meta| meta.is_dir()) {
                            return Err(io_error("create the directory", &path, err));
                        }
                    }
                    Err(err) => return Err(io_error("create the directory", &path, err)),
                }
            }
        }
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut file| {
                file.write_all(data)?;
                file.sync_all()
            })
            .map_err(|err| io_error("write", &path, err))?;
    }
    Ok(())
}

/// Puts `backup` (the previous version) back at `target`; a sentence for the error message
/// when that fails too.
fn restore(backup: Option<&Path>, target: &Path, rename: RenameFn) -> String {
    match backup {
        None => String::new(),
        Some(backup) => match rename(backup, target) {
            Ok(()) => "; the previous version is in place".to_owned(),
            Err(err) => format!(
                "; the previous version could not be put back ({err}) and is at {}",
                backup.display()
            ),
        },
    }
}

/// Writes the files into a staging directory next to the target, swaps it in and records the
/// lock entry (see the module docs); returns whether a previous version was replaced.
fn commit(
    root: &Path,
    name: &str,
    files: &[(String, Vec<u8>)],
    entry: LockEntry,
    rename: RenameFn,
) -> Result<bool, InstallError> {
    let _serialized = COMMIT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    fs::create_dir_all(root).map_err(|err| io_error("create", root, err))?;
    // A lock file that cannot be read stops the install before anything changes.
    let mut lock = read_lock(root)?;

    let staging = root.join(format!(".install-{name}-{}", unique_suffix()));
    fs::create_dir(&staging).map_err(|err| io_error("create", &staging, err))?;
    let _cleanup = RemoveOnDrop(staging.clone());
    write_files(&staging, files)?;

    let target = root.join(name);
    let backup = match fs::symlink_metadata(&target) {
        Ok(_) => {
            let backup = root.join(format!(".replaced-{name}-{}", unique_suffix()));
            rename(&target, &backup)
                .map_err(|err| io_error("move the previous version aside from", &target, err))?;
            Some(backup)
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => None,
        Err(err) => return Err(io_error("inspect", &target, err)),
    };
    if let Err(err) = rename(&staging, &target) {
        let restored = restore(backup.as_deref(), &target, rename);
        return Err(io_error(
            "move the new version into",
            &target,
            format!("{err}{restored}"),
        ));
    }

    lock.skills.insert(name.to_owned(), entry);
    if let Err(err) = write_lock(root, &lock, rename) {
        // Take the new version out (back to the staging path, removed on return), then put
        // the previous one back.
        if rename(&target, &staging).is_err() {
            let _ = remove_any(&target);
        }
        let restored = restore(backup.as_deref(), &target, rename);
        return Err(io_error(
            "record the install in",
            &super::lock::lock_path(root),
            format!("{err}{restored}"),
        ));
    }
    if let Some(backup) = &backup {
        // The install is complete; a leftover hidden directory is only clutter.
        let _ = remove_any(backup);
    }
    Ok(backup.is_some())
}

/// Removes the installed skill `name` from `root`: its directory and its lock entry. A
/// directory the lock file does not know is removed too. Blocking.
pub(crate) fn remove(root: &Path, name: &str) -> Result<Removed, InstallError> {
    remove_with(root, name, std_rename)
}

/// [`remove`], renaming with `rename`.
pub(crate) fn remove_with(
    root: &Path,
    name: &str,
    rename: RenameFn,
) -> Result<Removed, InstallError> {
    let name = name.trim().to_lowercase();
    if !is_valid_skill_name(&name) {
        return Err(InstallError::InvalidName(name));
    }
    let _serialized = COMMIT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let mut lock = read_lock(root)?;
    let was_locked = lock.skills.remove(&name).is_some();
    let target = root.join(&name);
    let exists = fs::symlink_metadata(&target).is_ok();
    if !was_locked && !exists {
        return Err(InstallError::NotInstalled {
            name,
            root: root.to_path_buf(),
        });
    }
    let aside = if exists {
        let aside = root.join(format!(".removing-{name}-{}", unique_suffix()));
        rename(&target, &aside).map_err(|err| io_error("move aside", &target, err))?;
        Some(aside)
    } else {
        None
    };
    if was_locked && let Err(err) = write_lock(root, &lock, rename) {
        let restored = restore(aside.as_deref(), &target, rename);
        return Err(io_error(
            "record the removal in",
            &super::lock::lock_path(root),
            format!("{err}{restored}"),
        ));
    }
    let warning = aside.and_then(|aside| {
        remove_any(&aside).err().map(|err| {
            format!(
                "the skill is removed, but {} could not be deleted: {err}",
                aside.display()
            )
        })
    });
    Ok(Removed {
        name,
        dir_removed: exists,
        was_locked,
        warning,
    })
}

#[cfg(test)]
#[path = "install_tests.rs"]
mod tests;
