//! Tests of installing and removing, against a local server speaking the GitHub contents API.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::net::TcpListener;

use super::super::lock::{FileHash, LOCK_FILE, LockFile, list, verify};
use super::*;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// A fake GitHub: one repository (any owner and name) whose files are `files`, by path.
#[derive(Default)]
struct Repo {
    base: String,
    files: BTreeMap<String, Vec<u8>>,
    /// Symlink entries to list: (directory, name).
    symlinks: Vec<(String, String)>,
    /// Extra raw entries to list: (directory, JSON entry).
    raw_entries: Vec<(String, serde_json::Value)>,
    /// Downloads of these paths answer 500.
    failing: HashSet<String>,
    /// Listings report every file's size as 1.
    lie_about_sizes: bool,
    /// Every request hangs.
    hang: bool,
    /// The commit `commits/<ref>` answers, if any.
    commit: Option<String>,
    /// Listings answer this status instead.
    listing_status: Option<StatusCode>,
    /// Every request's path and query.
    requests: Mutex<Vec<String>>,
}

impl Repo {
    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

async fn handle(State(repo): State<Arc<Repo>>, uri: Uri) -> Response {
    repo.requests.lock().unwrap().push(
        uri.path_and_query()
            .map_or(uri.path().to_owned(), |pq| pq.to_string()),
    );
    if repo.hang {
        std::future::pending::<()>().await;
    }
    let path = uri.path();
    if let Some(file) = path.strip_prefix("/download/") {
        if repo.failing.contains(file) {
            return (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response();
        }
        return match repo.files.get(file) {
            Some(data) => data.clone().into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        };
    }
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    match parts.as_slice() {
        ["repos", _, _, "commits", _] => match &repo.commit {
            Some(sha) => sha.clone().into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        },
        ["repos", _, _, "contents"] => listing(&repo, ""),
        ["repos", _, _, "contents", dir] => listing(&repo, dir),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

fn listing(repo: &Repo, dir: &str) -> Response {
    if let Some(status) = repo.listing_status {
        return (status, "API rate limit exceeded for 127.0.0.1").into_response();
    }
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    if let Some(data) = repo.files.get(dir) {
        return axum::Json(json!({"type": "file", "name": dir, "size": data.len()}))
            .into_response();
    }
    let mut entries = Vec::new();
    let mut dirs = Vec::new();
    for (path, data) in &repo.files {
        let Some(rest) = path.strip_prefix(&prefix) else {
            continue;
        };
        match rest.split_once('/') {
            None => entries.push(json!({
                "name": rest,
                "path": path,
                "type": "file",
                "size": if repo.lie_about_sizes { 1 } else { data.len() },
                "download_url": format!("{}/download/{path}", repo.base),
                "sha": FileHash::of(data).sha256[..40].to_owned(),
            })),
            Some((sub, _)) if !dirs.contains(&sub.to_owned()) => {
                dirs.push(sub.to_owned());
                entries.push(json!({
                    "name": sub,
                    "path": format!("{prefix}{sub}"),
                    "type": "dir",
                    "size": 0,
                    "download_url": null,
                    "sha": "0000000000000000000000000000000000000000",
                }));
            }
            Some(_) => {}
        }
    }
    for (link_dir, name) in &repo.symlinks {
        if link_dir == dir {
            entries.push(json!({
                "name": name, "path": format!("{prefix}{name}"), "type": "symlink",
                "size": 10, "download_url": format!("{}/download/{prefix}{name}", repo.base),
                "sha": "1111111111111111111111111111111111111111",
            }));
        }
    }
    for (raw_dir, entry) in &repo.raw_entries {
        if raw_dir == dir {
            entries.push(entry.clone());
        }
    }
    if entries.is_empty() {
        return StatusCode::NOT_FOUND.into_response();
    }
    axum::Json(entries).into_response()
}

/// Serves `repo` on a free loopback port; returns it with its base URL set.
async fn serve(mut repo: Repo) -> Arc<Repo> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    repo.base = format!("http://{}", listener.local_addr().unwrap());
    let repo = Arc::new(repo);
    let app = Router::new().fallback(handle).with_state(Arc::clone(&repo));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    repo
}

fn options(repo: &Repo) -> InstallOptions {
    InstallOptions {
        api_base: repo.base.clone(),
        ..InstallOptions::default()
    }
}

fn skill_md(name: &str, body: &str) -> Vec<u8> {
    format!("---\nname: {name}\ndescription: The {name} skill\n---\n{body}\n").into_bytes()
}

/// A repository with `skills/pdf` (SKILL.md, a script, a nested reference) and the given
/// version text in its SKILL.md.
fn pdf_repo(version: &str) -> Repo {
    let mut repo = Repo::default();
    repo.files
        .insert("skills/pdf/SKILL.md".to_owned(), skill_md("pdf", version));
    repo.files.insert(
        "skills/pdf/scripts/fill.py".to_owned(),
        b"print('fill')\n".to_vec(),
    );
    repo.files.insert(
        "skills/pdf/reference/forms/fields.md".to_owned(),
        b"# Fields\n".to_vec(),
    );
    repo.files
        .insert("README.md".to_owned(), b"not part of the skill".to_vec());
    repo
}

const PDF_URL: &str = "https://github.com/acme/skills/tree/main/skills/pdf";

/// Every entry of `dir`, recursively, as relative paths with their contents.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let kind = entry.file_type().unwrap();
            assert!(!kind.is_symlink(), "symlink {rel}");
            if kind.is_dir() {
                walk(&entry.path(), &rel, out);
            } else {
                out.insert(rel, fs::read(entry.path()).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, "", &mut out);
    out
}

/// The names in `root` (one level).
fn entries(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn parses_github_tree_urls() {
    let url = parse_skill_url("https://github.com/acme/skills/tree/main/skills/pdf").unwrap();
    assert_eq!(
        url,
        SkillUrl {
            kind: UrlKind::GitHubTree,
            owner: "acme".to_owned(),
            repo: "skills".to_owned(),
            path: "skills/pdf".to_owned(),
            git_ref: Some("main".to_owned()),
            dir_name: "pdf".to_owned(),
        }
    );
    let url =
        parse_skill_url("https://github.com/acme/skills/blob/v1/skills/pdf/SKILL.md").unwrap();
    assert_eq!(
        (url.path.as_str(), url.git_ref.as_deref()),
        ("skills/pdf", Some("v1"))
    );
    let url = parse_skill_url("https://www.github.com/acme/pdf-skill.git").unwrap();
    assert_eq!(
        (
            url.repo.as_str(),
            url.path.as_str(),
            url.git_ref,
            url.dir_name.as_str()
        ),
        ("pdf-skill", "", None, "pdf-skill")
    );
    let url = parse_skill_url("https://github.com/acme/skills/tree/main/my%20dir/").unwrap();
    assert_eq!(url.path, "my dir");
}

#[test]
fn parses_raw_and_skills_sh_urls() {
    let url =
        parse_skill_url("https://raw.githubusercontent.com/acme/skills/main/skills/pdf/SKILL.md")
            .unwrap();
    assert_eq!(
        (
            url.kind,
            url.path.as_str(),
            url.git_ref.as_deref(),
            url.dir_name.as_str()
        ),
        (UrlKind::RawGitHub, "skills/pdf", Some("main"), "pdf")
    );
    let url = parse_skill_url(
        "https://raw.githubusercontent.com/acme/skills/refs/heads/dev/pdf/SKILL.md",
    )
    .unwrap();
    assert_eq!(
        (url.path.as_str(), url.git_ref.as_deref()),
        ("pdf", Some("dev"))
    );
    let url = parse_skill_url("https://raw.githubusercontent.com/acme/pdf/v2/SKILL.md").unwrap();
    assert_eq!((url.path.as_str(), url.dir_name.as_str()), ("", "pdf"));

    let url = parse_skill_url("https://skills.sh/acme/pdf").unwrap();
    assert_eq!(
        url,
        SkillUrl {
            kind: UrlKind::SkillsSh,
            owner: "acme".to_owned(),
            repo: "pdf".to_owned(),
            path: "skills/pdf".to_owned(),
            git_ref: None,
            dir_name: "pdf".to_owned(),
        }
    );
    let url = parse_skill_url("https://www.skills.sh/acme/pdf/1.2.0").unwrap();
    assert_eq!(url.git_ref.as_deref(), Some("1.2.0"));
}

#[test]
fn dot_segments_are_resolved_by_url_parsing() {
    // `..` (even percent-encoded) never reaches the path: URL parsing resolves it.
    let url = parse_skill_url("https://github.com/a/b/tree/main/skills/%2e%2E/x").unwrap();
    assert_eq!(
        (url.git_ref.as_deref(), url.path.as_str()),
        (Some("main"), "x")
    );
}

#[test]
fn rejects_other_urls() {
    for (url, reason) in [
        ("not a url", "not a URL"),
        ("ftp://github.com/a/b", "only https URLs"),
        ("https://gitlab.com/a/b/tree/main/x", "only github.com"),
        ("https://github.com/a", "expected https://github.com/"),
        (
            "https://github.com/a/b/commits/main",
            "expected https://github.com/",
        ),
        (
            "https://github.com/a/b/blob/main/README.md",
            "a blob URL must name a SKILL.md",
        ),
        (
            "https://raw.githubusercontent.com/a/b/main/x/README.md",
            "must name a SKILL.md",
        ),
        (
            "https://raw.githubusercontent.com/a/b",
            "expected https://raw.",
        ),
        ("https://skills.sh/acme", "expected https://skills.sh/"),
        ("https://skills.sh/a/b/c/d", "expected https://skills.sh/"),
        (
            "https://github.com/a/b/tree/main/x%2Fy",
            "not a plain path segment",
        ),
        ("https://github.com/a/b/tree/main/%ff", "not valid UTF-8"),
        ("https://github.com/a%20b/c", "owner or repository name"),
    ] {
        let err = parse_skill_url(url).unwrap_err();
        assert!(
            matches!(err, InstallError::UnsupportedUrl { .. }),
            "{url}: {err:?}"
        );
        assert!(err.to_string().contains(reason), "{url}: {err}");
    }
}

#[test]
fn install_roots() {
    let home = Path::new("/home/u");
    let project = Path::new("/p");
    assert_eq!(
        install_root(InstallScope::User, Some(home), project),
        Some(PathBuf::from("/home/u/.mew/skills"))
    );
    assert_eq!(
        install_root(InstallScope::Project, None, project),
        Some(PathBuf::from("/p/.mew/skills"))
    );
    assert_eq!(install_root(InstallScope::User, None, project), None);
}

#[tokio::test]
async fn installs_a_skill_with_a_lock_entry() {
    let mut repo = pdf_repo("Version one.");
    repo.commit = Some(SHA.to_owned());
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("skills");
    let installed = install(PDF_URL, &root, &options(&repo)).await.unwrap();
    assert_eq!(installed.name, "pdf");
    assert_eq!(installed.dir, root.join("pdf"));
    assert!(!installed.replaced);
    assert_eq!(installed.warnings, Vec::<String>::new());
    assert_eq!(installed.file_count(), 3);

    let expected: BTreeMap<String, Vec<u8>> = repo
        .files
        .iter()
        .filter_map(|(path, data)| {
            path.strip_prefix("skills/pdf/")
                .map(|rel| (rel.to_owned(), data.clone()))
        })
        .collect();
    assert_eq!(tree(&root.join("pdf")), expected);
    assert_eq!(
        installed.total_bytes(),
        expected.values().map(|d| d.len() as u64).sum::<u64>()
    );
    // Only the skill and the lock file: no staging directory is left.
    assert_eq!(entries(&root), ["pdf", LOCK_FILE]);

    // The ref was resolved to a commit, and the files fetched at that commit.
    let requests = repo.requests();
    assert_eq!(requests[0], "/repos/acme/skills/commits/main");
    assert_eq!(
        requests[1],
        format!("/repos/acme/skills/contents/skills/pdf?ref={SHA}")
    );

    let lock: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(root.join(LOCK_FILE)).unwrap()).unwrap();
    let entry = &lock["skills"]["pdf"];
    assert_eq!(lock["version"], 1);
    assert_eq!(entry["source"], PDF_URL);
    assert_eq!(entry["repository"], "acme/skills");
    assert_eq!(entry["path"], "skills/pdf");
    assert_eq!(entry["ref"], "main");
    assert_eq!(entry["resolvedRef"], SHA);
    let installed_at = entry["installedAt"].as_str().unwrap();
    assert!(installed_at.parse::<Timestamp>().is_ok(), "{installed_at}");
    let files: BTreeMap<String, serde_json::Value> =
        serde_json::from_value(entry["files"].clone()).unwrap();
    let expected_files: BTreeMap<String, serde_json::Value> = expected
        .iter()
        .map(|(path, data)| {
            (
                path.clone(),
                json!({"sha256": FileHash::of(data).sha256, "size": data.len()}),
            )
        })
        .collect();
    assert_eq!(files, expected_files);
    assert_eq!(
        list(&root).unwrap(),
        vec![("pdf".to_owned(), installed.entry.clone())]
    );
    assert!(verify(&root).unwrap().is_clean());
}

#[tokio::test]
async fn unresolved_ref_is_recorded_as_given() {
    let repo = serve(pdf_repo("v")).await;
    let tmp = tempfile::tempdir().unwrap();
    let installed = install(PDF_URL, tmp.path(), &options(&repo)).await.unwrap();
    assert_eq!(installed.entry.resolved_ref, "main");
    assert_eq!(
        repo.requests()[1],
        "/repos/acme/skills/contents/skills/pdf?ref=main"
    );
}

#[tokio::test]
async fn installs_from_raw_and_skills_sh_urls() {
    let repo = serve(pdf_repo("v")).await;
    let tmp = tempfile::tempdir().unwrap();
    let installed = install(
        "https://raw.githubusercontent.com/acme/skills/main/skills/pdf/SKILL.md",
        tmp.path(),
        &options(&repo),
    )
    .await
    .unwrap();
    assert_eq!(installed.file_count(), 3);

    let other = tempfile::tempdir().unwrap();
    let installed = install("https://skills.sh/acme/pdf", other.path(), &options(&repo))
        .await
        .unwrap();
    assert_eq!(installed.entry.git_ref, None);
    assert_eq!(installed.entry.resolved_ref, "HEAD");
    assert_eq!(installed.entry.repository, "acme/pdf");
    let requests = repo.requests();
    assert!(requests.contains(&"/repos/acme/pdf/commits/HEAD".to_owned()));
    assert!(requests.contains(&"/repos/acme/pdf/contents/skills/pdf".to_owned()));
}

#[tokio::test]
async fn replaces_an_installed_version() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = serve(pdf_repo("Version one.")).await;
    install(PDF_URL, tmp.path(), &options(&repo)).await.unwrap();
    fs::write(tmp.path().join("pdf/local-notes.md"), "mine").unwrap();

    let mut second = pdf_repo("Version two.");
    second.files.remove("skills/pdf/scripts/fill.py");
    let repo = serve(second).await;
    let installed = install(PDF_URL, tmp.path(), &options(&repo)).await.unwrap();
    assert!(installed.replaced);
    let files = tree(&tmp.path().join("pdf"));
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        ["SKILL.md", "reference/forms/fields.md"]
    );
    assert_eq!(files["SKILL.md"], skill_md("pdf", "Version two."));
    assert_eq!(entries(tmp.path()), ["pdf", LOCK_FILE]);
    assert!(verify(tmp.path()).unwrap().is_clean());
}

/// Installs version one, then checks that a failed install of version two leaves version one
/// and its lock file exactly as they were, and nothing else behind.
async fn assert_failure_keeps_previous(second: Repo, rename: RenameFn) -> InstallError {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let first = serve(pdf_repo("Version one.")).await;
    install(PDF_URL, root, &options(&first)).await.unwrap();
    let before = tree(&root.join("pdf"));
    let lock_before = fs::read(root.join(LOCK_FILE)).unwrap();

    let second = serve(second).await;
    let err = install_with(PDF_URL, root, &options(&second), rename)
        .await
        .unwrap_err();
    assert_eq!(tree(&root.join("pdf")), before, "{err}");
    assert_eq!(fs::read(root.join(LOCK_FILE)).unwrap(), lock_before);
    assert_eq!(entries(root), ["pdf", LOCK_FILE], "{err}");
    assert!(verify(root).unwrap().is_clean());
    err
}

#[tokio::test]
async fn download_failure_on_the_last_file_keeps_the_previous_version() {
    let mut second = pdf_repo("Version two.");
    // Files are fetched breadth first, in name order: scripts/fill.py comes last.
    second
        .failing
        .insert("skills/pdf/scripts/fill.py".to_owned());
    let err = assert_failure_keeps_previous(second, std_rename).await;
    assert!(
        matches!(err, InstallError::Http { status: 500, ref url } if url.ends_with("scripts/fill.py")),
        "{err:?}"
    );
}

#[tokio::test]
async fn failing_final_rename_keeps_the_previous_version() {
    fn fail_moving_in(from: &Path, to: &Path) -> io::Result<()> {
        let from_name = from.file_name().unwrap().to_string_lossy();
        if from_name.starts_with(".install-") && to.ends_with("pdf") {
            return Err(io::Error::other("injected failure"));
        }
        fs::rename(from, to)
    }
    let err = assert_failure_keeps_previous(pdf_repo("Version two."), fail_moving_in).await;
    let message = err.to_string();
    assert!(
        message.starts_with("cannot move the new version into"),
        "{message}"
    );
    assert!(
        message.ends_with("injected failure; the previous version is in place"),
        "{message}"
    );
}

#[tokio::test]
async fn failing_lock_write_keeps_the_previous_version() {
    fn fail_lock(from: &Path, to: &Path) -> io::Result<()> {
        if to.ends_with(LOCK_FILE) {
            return Err(io::Error::other("injected lock failure"));
        }
        fs::rename(from, to)
    }
    let err = assert_failure_keeps_previous(pdf_repo("Version two."), fail_lock).await;
    let message = err.to_string();
    assert!(
        message.starts_with("cannot record the install in"),
        "{message}"
    );
    assert!(message.contains("injected lock failure"), "{message}");
    assert!(
        message.ends_with("the previous version is in place"),
        "{message}"
    );
}

#[tokio::test]
async fn failing_first_install_leaves_nothing() {
    fn fail_moving_in(from: &Path, to: &Path) -> io::Result<()> {
        if to.ends_with("pdf") {
            return Err(io::Error::other("injected failure"));
        }
        fs::rename(from, to)
    }
    let repo = serve(pdf_repo("v")).await;
    let tmp = tempfile::tempdir().unwrap();
    install_with(PDF_URL, tmp.path(), &options(&repo), fail_moving_in)
        .await
        .unwrap_err();
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}

#[tokio::test]
async fn quota_file_size() {
    let mut repo = pdf_repo("v");
    repo.files
        .insert("skills/pdf/big.bin".to_owned(), vec![0; 101]);
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let options = InstallOptions {
        max_file_bytes: 100,
        ..options(&repo)
    };
    let err = install(PDF_URL, tmp.path(), &options).await.unwrap_err();
    assert!(
        matches!(err, InstallError::FileTooLarge { ref path, limit: 100 } if path == "big.bin"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "big.bin is larger than the limit of 100 bytes per file"
    );
    // The listing's size was checked: the file was never downloaded.
    assert!(!repo.requests().iter().any(|r| r.ends_with("big.bin")));
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}

#[tokio::test]
async fn quota_file_size_is_checked_while_downloading() {
    let mut repo = pdf_repo("v");
    repo.files
        .insert("skills/pdf/big.bin".to_owned(), vec![0; 5000]);
    repo.lie_about_sizes = true;
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let options = InstallOptions {
        max_file_bytes: 4096,
        ..options(&repo)
    };
    let err = install(PDF_URL, tmp.path(), &options).await.unwrap_err();
    assert!(
        matches!(err, InstallError::FileTooLarge { ref path, limit: 4096 } if path == "big.bin"),
        "{err:?}"
    );
    assert!(repo.requests().iter().any(|r| r.ends_with("big.bin")));
}

#[tokio::test]
async fn quota_total_size() {
    let mut repo = pdf_repo("v");
    for i in 0..4 {
        repo.files
            .insert(format!("skills/pdf/data/{i}.bin"), vec![0; 60]);
    }
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let options = InstallOptions {
        max_file_bytes: 100,
        max_total_bytes: 200,
        ..options(&repo)
    };
    let err = install(PDF_URL, tmp.path(), &options).await.unwrap_err();
    assert!(
        matches!(err, InstallError::TotalTooLarge { limit: 200 }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "the skill is larger than the limit of 200 bytes in all"
    );

    // Sizes hidden by the listing are caught while downloading.
    let mut lying = pdf_repo("v");
    for i in 0..4 {
        lying
            .files
            .insert(format!("skills/pdf/data/{i}.bin"), vec![0; 60]);
    }
    lying.lie_about_sizes = true;
    let lying = serve(lying).await;
    let options = InstallOptions {
        api_base: lying.base.clone(),
        ..options
    };
    let err = install(PDF_URL, tmp.path(), &options).await.unwrap_err();
    assert!(
        matches!(err, InstallError::TotalTooLarge { limit: 200 }),
        "{err:?}"
    );
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}

#[tokio::test]
async fn quota_file_count() {
    let mut repo = pdf_repo("v");
    for i in 0..3 {
        repo.files
            .insert(format!("skills/pdf/extra-{i}.md"), b"x".to_vec());
    }
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let options = InstallOptions {
        max_files: 5,
        ..options(&repo)
    };
    let err = install(PDF_URL, tmp.path(), &options).await.unwrap_err();
    assert!(
        matches!(err, InstallError::TooManyFiles { limit: 5 }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "the skill has more than the limit of 5 files"
    );
    // Exactly at the limit is fine.
    let options = InstallOptions {
        max_files: 6,
        ..options
    };
    assert_eq!(
        install(PDF_URL, tmp.path(), &options)
            .await
            .unwrap()
            .file_count(),
        6
    );
}

#[tokio::test]
async fn quota_depth() {
    let mut repo = pdf_repo("v");
    repo.files
        .insert("skills/pdf/a/b/c/file.md".to_owned(), b"deep".to_vec());
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let options = InstallOptions {
        max_depth: 2,
        ..options(&repo)
    };
    let err = install(PDF_URL, tmp.path(), &options).await.unwrap_err();
    assert!(
        matches!(err, InstallError::TooDeep { ref path, limit: 2 } if path == "a/b/c"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "a/b/c is nested deeper than the limit of 2 directories"
    );
    let options = InstallOptions {
        max_depth: 3,
        ..options
    };
    install(PDF_URL, tmp.path(), &options).await.unwrap();
}

#[tokio::test]
async fn quota_timeout() {
    let mut repo = pdf_repo("v");
    repo.hang = true;
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let options = InstallOptions {
        timeout: Duration::from_millis(200),
        ..options(&repo)
    };
    let err = install(PDF_URL, tmp.path(), &options).await.unwrap_err();
    assert!(
        matches!(err, InstallError::Timeout { ref url, limit } if url.contains("/contents/") && limit == Duration::from_millis(200)),
        "{err:?}"
    );
    assert!(
        err.to_string().ends_with("did not answer within 0.2 s"),
        "{err}"
    );
}

#[tokio::test]
async fn refuses_content_without_skill_md() {
    let mut repo = Repo::default();
    repo.files
        .insert("skills/pdf/README.md".to_owned(), b"hello".to_vec());
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let err = install(PDF_URL, tmp.path(), &options(&repo))
        .await
        .unwrap_err();
    assert!(matches!(err, InstallError::MissingSkillMd), "{err:?}");
    assert_eq!(entries(tmp.path()), Vec::<String>::new());

    // A SKILL.md in a subdirectory does not count.
    let mut nested = Repo::default();
    nested
        .files
        .insert("skills/pdf/inner/SKILL.md".to_owned(), skill_md("pdf", "x"));
    let nested = serve(nested).await;
    let err = install(PDF_URL, tmp.path(), &options(&nested))
        .await
        .unwrap_err();
    assert!(matches!(err, InstallError::MissingSkillMd), "{err:?}");
}

#[tokio::test]
async fn refuses_bad_frontmatter() {
    for (text, reason) in [
        (
            "---\nname: pdf\ndescription: x\n",
            "frontmatter is not closed",
        ),
        ("---\nname: [pdf\n---\n", "invalid YAML in frontmatter"),
        ("# no frontmatter\n", "it has no frontmatter"),
        (
            "---\ndescription: no name\n---\n",
            "its frontmatter has no name",
        ),
        ("---\nname: [two, words]\n---\n", "name must be a string"),
    ] {
        let mut repo = Repo::default();
        repo.files
            .insert("skills/pdf/SKILL.md".to_owned(), text.as_bytes().to_vec());
        let repo = serve(repo).await;
        let tmp = tempfile::tempdir().unwrap();
        let err = install(PDF_URL, tmp.path(), &options(&repo))
            .await
            .unwrap_err();
        assert!(matches!(err, InstallError::InvalidSkillMd(_)), "{err:?}");
        assert!(err.to_string().contains(reason), "{text:?}: {err}");
        assert_eq!(entries(tmp.path()), Vec::<String>::new());
    }
    let mut repo = Repo::default();
    repo.files
        .insert("skills/pdf/SKILL.md".to_owned(), vec![b'-', 0xff]);
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let err = install(PDF_URL, tmp.path(), &options(&repo))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "SKILL.md is invalid: it is not UTF-8 text");
}

#[tokio::test]
async fn installs_under_the_frontmatter_name() {
    let mut repo = Repo::default();
    repo.files
        .insert("skills/pdf/SKILL.md".to_owned(), skill_md("Pdf-Forms", "x"));
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let installed = install(PDF_URL, tmp.path(), &options(&repo)).await.unwrap();
    assert_eq!(installed.name, "pdf-forms");
    assert_eq!(
        installed.warnings,
        [
            "SKILL.md: name \"Pdf-Forms\" is not lowercase; using \"pdf-forms\"",
            "SKILL.md: name \"pdf-forms\" differs from the directory name \"pdf\"; using \
             \"pdf-forms\"",
        ]
    );
    assert_eq!(entries(tmp.path()), ["pdf-forms", LOCK_FILE]);
}

#[tokio::test]
async fn symlinks_are_skipped_never_created() {
    let mut repo = pdf_repo("v");
    repo.symlinks
        .push(("skills/pdf".to_owned(), "passwd".to_owned()));
    repo.files
        .insert("skills/pdf/passwd".to_owned(), b"would be a link".to_vec());
    repo.files.remove("skills/pdf/passwd");
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let installed = install(PDF_URL, tmp.path(), &options(&repo)).await.unwrap();
    assert_eq!(
        installed.warnings,
        ["passwd is a symlink and was not installed: links are never followed"]
    );
    // `tree` fails on any symlink.
    assert!(!tree(&tmp.path().join("pdf")).contains_key("passwd"));
    assert!(!repo.requests().iter().any(|r| r.contains("passwd")));
}

#[tokio::test]
async fn refuses_traversal_and_duplicate_names() {
    for name in ["..", "../evil", "a/b", "a\\b", ".", "", "nul\u{0}"] {
        let mut repo = pdf_repo("v");
        repo.raw_entries.push((
            "skills/pdf".to_owned(),
            json!({"name": name, "path": "x", "type": "file", "size": 1,
                   "download_url": format!("{}/download/x", "http://127.0.0.1:9")}),
        ));
        let repo = serve(repo).await;
        let tmp = tempfile::tempdir().unwrap();
        let err = install(PDF_URL, tmp.path(), &options(&repo))
            .await
            .unwrap_err();
        assert!(
            matches!(err, InstallError::UnsafeName { name: ref n } if n == name),
            "{name:?}: {err:?}"
        );
        assert_eq!(entries(tmp.path()), Vec::<String>::new());
        assert!(!tmp.path().parent().unwrap().join("evil").exists());
    }
    let mut repo = pdf_repo("v");
    repo.raw_entries.push((
        "skills/pdf".to_owned(),
        json!({"name": "skill.md", "path": "x", "type": "file", "size": 1,
               "download_url": "http://127.0.0.1:9/x"}),
    ));
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let err = install(PDF_URL, tmp.path(), &options(&repo))
        .await
        .unwrap_err();
    assert!(matches!(err, InstallError::Duplicate { .. }), "{err:?}");
}

#[tokio::test]
async fn api_errors_are_clear() {
    let mut repo = pdf_repo("v");
    repo.listing_status = Some(StatusCode::FORBIDDEN);
    let repo = serve(repo).await;
    let tmp = tempfile::tempdir().unwrap();
    let err = install(PDF_URL, tmp.path(), &options(&repo))
        .await
        .unwrap_err();
    assert!(
        matches!(err, InstallError::RateLimited { status: 403, ref body, .. } if body == "API rate limit exceeded for 127.0.0.1"),
        "{err:?}"
    );
    let err = install(
        "https://github.com/acme/skills/tree/main/skills/missing",
        tmp.path(),
        &options(&*serve(pdf_repo("v")).await),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, InstallError::NotFound { .. }), "{err:?}");
    let err = install(
        "https://github.com/acme/skills/tree/main/skills/pdf/scripts/fill.py",
        tmp.path(),
        &options(&*serve(pdf_repo("v")).await),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, InstallError::NotADirectory { .. }), "{err:?}");
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}

#[tokio::test]
async fn corrupt_lock_file_stops_the_install() {
    let repo = serve(pdf_repo("v")).await;
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join(LOCK_FILE), "garbage").unwrap();
    let err = install(PDF_URL, tmp.path(), &options(&repo))
        .await
        .unwrap_err();
    assert!(
        matches!(err, InstallError::Lock(LockError::Corrupt { .. })),
        "{err:?}"
    );
    assert_eq!(entries(tmp.path()), [LOCK_FILE]);
    assert_eq!(
        fs::read_to_string(tmp.path().join(LOCK_FILE)).unwrap(),
        "garbage"
    );
}

#[tokio::test]
async fn verify_detects_drift_after_install() {
    let repo = serve(pdf_repo("v")).await;
    let tmp = tempfile::tempdir().unwrap();
    install(PDF_URL, tmp.path(), &options(&repo)).await.unwrap();
    let dir = tmp.path().join("pdf");
    fs::write(dir.join("SKILL.md"), "tampered").unwrap();
    fs::remove_file(dir.join("scripts/fill.py")).unwrap();
    fs::write(dir.join("scripts/evil.sh"), "rm -rf ~").unwrap();
    let report = verify(tmp.path()).unwrap();
    assert!(!report.is_clean());
    let drift = &report.skills[0];
    assert_eq!(drift.name, "pdf");
    assert_eq!(drift.changed, ["SKILL.md"]);
    assert_eq!(drift.missing, ["scripts/fill.py"]);
    assert_eq!(drift.extra, ["scripts/evil.sh"]);
}

#[tokio::test]
async fn remove_deletes_the_directory_and_the_lock_entry() {
    let repo = serve(pdf_repo("v")).await;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    install(PDF_URL, root, &options(&repo)).await.unwrap();
    fs::create_dir_all(root.join("handmade")).unwrap();

    let removed = remove(root, "PDF").unwrap();
    assert_eq!(
        removed,
        Removed {
            name: "pdf".to_owned(),
            dir_removed: true,
            was_locked: true,
            warning: None,
        }
    );
    assert_eq!(entries(root), ["handmade", LOCK_FILE]);
    assert_eq!(read_lock(root).unwrap(), LockFile::default());
    assert!(matches!(
        remove(root, "pdf").unwrap_err(),
        InstallError::NotInstalled { .. }
    ));
    // A directory the lock file does not know is removed too.
    let removed = remove(root, "handmade").unwrap();
    assert!(removed.dir_removed && !removed.was_locked);
    for bad in ["../x", "a/b", "", "a b"] {
        assert!(matches!(
            remove(root, bad).unwrap_err(),
            InstallError::InvalidName(_)
        ));
    }
}

#[tokio::test]
async fn failing_remove_keeps_the_skill() {
    fn fail_lock(from: &Path, to: &Path) -> io::Result<()> {
        if to.ends_with(LOCK_FILE) {
            return Err(io::Error::other("injected"));
        }
        fs::rename(from, to)
    }
    let repo = serve(pdf_repo("v")).await;
    let tmp = tempfile::tempdir().unwrap();
    install(PDF_URL, tmp.path(), &options(&repo)).await.unwrap();
    let err = remove_with(tmp.path(), "pdf", fail_lock).unwrap_err();
    assert!(err.to_string().contains("injected"), "{err}");
    assert_eq!(entries(tmp.path()), ["pdf", LOCK_FILE]);
    assert!(verify(tmp.path()).unwrap().is_clean());
}
