//! `mew skills` end to end: the real binary installs a skill from a local server that speaks
//! the GitHub contents API, lists it, verifies it, notices an edit, removes it, and refuses a
//! skill whose `SKILL.md` is broken without leaving anything behind.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, ensure};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use mew_tests::node::MewNode;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The commit every ref of the fake GitHub points to.
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

const PDF_SKILL: &str =
    "---\nname: pdf\ndescription: Fills PDF\n  forms.\n---\nRun scripts/fill.py.\n";
const FILL_PY: &str = "print('fill')\n";
const FORMS_MD: &str = "# Form fields\n";

/// A fake GitHub: files by `owner/repo/path`, and every request's path and query.
struct GitHub {
    base: String,
    files: BTreeMap<String, Vec<u8>>,
    requests: Mutex<Vec<String>>,
}

impl GitHub {
    /// Serves `files` on a free loopback port.
    async fn start(files: &[(&str, &str)]) -> anyhow::Result<Arc<Self>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let github = Arc::new(GitHub {
            base: format!("http://{}", listener.local_addr()?),
            files: files
                .iter()
                .map(|(path, text)| ((*path).to_owned(), text.as_bytes().to_vec()))
                .collect(),
            requests: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&github));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(github)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// `GET /repos/O/R/commits/REF` (the commit, as `application/vnd.github.sha` text),
/// `GET /repos/O/R/contents/PATH?ref=REF` (a directory listing) and `GET /download/O/R/PATH`.
async fn handle(State(github): State<Arc<GitHub>>, uri: Uri) -> Response {
    if let Ok(mut requests) = github.requests.lock() {
        requests.push(
            uri.path_and_query()
                .map_or(uri.path(), |pq| pq.as_str())
                .to_owned(),
        );
    }
    let path = uri.path();
    if let Some(file) = path.strip_prefix("/download/") {
        return match github.files.get(file) {
            Some(data) => data.clone().into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        };
    }
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    match parts.as_slice() {
        ["repos", _, _, "commits", _] => COMMIT.into_response(),
        ["repos", owner, repo, "contents", dir] => listing(&github, owner, repo, dir),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The contents API's listing of the directory `dir` of `owner/repo`: files and
/// subdirectories, each with `name`, `path`, `type`, `size`, `download_url` and `sha`.
fn listing(github: &GitHub, owner: &str, repo: &str, dir: &str) -> Response {
    let repo_prefix = format!("{owner}/{repo}/");
    let prefix = format!("{repo_prefix}{dir}/");
    let mut entries: Vec<Value> = Vec::new();
    let mut dirs: Vec<String> = Vec::new();
    for (key, data) in &github.files {
        let Some(rest) = key.strip_prefix(&prefix) else {
            continue;
        };
        match rest.split_once('/') {
            None => entries.push(json!({
                "name": rest,
                "path": &key[repo_prefix.len()..],
                "type": "file",
                "size": data.len(),
                "download_url": format!("{}/download/{key}", github.base),
                "sha": "1111111111111111111111111111111111111111",
            })),
            Some((sub, _)) if !dirs.iter().any(|known| known == sub) => {
                dirs.push(sub.to_owned());
                entries.push(json!({
                    "name": sub,
                    "path": format!("{dir}/{sub}"),
                    "type": "dir",
                    "size": 0,
                    "download_url": null,
                    "sha": "2222222222222222222222222222222222222222",
                }));
            }
            Some(_) => {}
        }
    }
    if entries.is_empty() {
        return StatusCode::NOT_FOUND.into_response();
    }
    axum::Json(entries).into_response()
}

/// A node's directories with the fake GitHub as the skills API.
fn node(github: &GitHub) -> anyhow::Result<MewNode> {
    let node = MewNode::new()?;
    node.write_config(&format!("skills:\n  github_api: {}\n", github.base))?;
    Ok(node)
}

/// The names in `dir`, sorted (none when it does not exist).
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test]
async fn install_list_verify_drift_and_remove_a_skill() -> anyhow::Result<()> {
    let github = GitHub::start(&[
        ("acme/skills/skills/pdf/SKILL.md", PDF_SKILL),
        ("acme/skills/skills/pdf/scripts/fill.py", FILL_PY),
        ("acme/skills/skills/pdf/reference/forms.md", FORMS_MD),
        ("acme/skills/README.md", "not part of the skill\n"),
    ])
    .await?;
    let node = node(&github)?;
    let root = node.project_dir().join(".mew/skills");
    let url = "https://github.com/acme/skills/tree/main/skills/pdf";

    // Install into the project.
    let (code, out, err) = node
        .client(&["skills", "install", url, "--scope", "project"])
        .await?;
    ensure!(code == 0, "install: exit {code}: {out}{err}");
    let dir = root.join("pdf");
    ensure!(
        out.starts_with(&format!(
            "installed pdf (project scope) into {}\n",
            dir.display()
        )) && out.contains(&format!("  ref:      main at {COMMIT}\n"))
            && out.contains("  files:    3 (")
            && out.contains("    SKILL.md  (")
            && out.contains("    reference/forms.md  (")
            && out.contains("    scripts/fill.py  ("),
        "{out}"
    );
    ensure!(
        fs::read_to_string(dir.join("SKILL.md"))? == PDF_SKILL
            && fs::read_to_string(dir.join("scripts/fill.py"))? == FILL_PY
            && fs::read_to_string(dir.join("reference/forms.md"))? == FORMS_MD,
        "the installed files differ from the repository's"
    );
    ensure!(
        names(&root) == ["pdf", "skills-lock.json"],
        "{:?}",
        names(&root)
    );
    let lock: Value = serde_json::from_str(&fs::read_to_string(root.join("skills-lock.json"))?)?;
    ensure!(
        lock["skills"]["pdf"]["resolvedRef"] == COMMIT
            && lock["skills"]["pdf"]["source"] == url
            && lock["skills"]["pdf"]["files"]
                .as_object()
                .is_some_and(|files| files.len() == 3),
        "{lock}"
    );
    // The files were fetched at the commit the ref resolved to.
    let requests = github.requests();
    ensure!(
        requests.contains(&"/repos/acme/skills/commits/main".to_owned())
            && requests.contains(&format!(
                "/repos/acme/skills/contents/skills/pdf/scripts?ref={COMMIT}"
            ))
            && !requests.iter().any(|r| r.contains("README")),
        "{requests:#?}"
    );

    // The same skill for the user too: the project's copy wins, the user's is shadowed.
    let (code, out, err) = node.client(&["skills", "install", url]).await?;
    ensure!(code == 0, "user install: exit {code}: {out}{err}");
    let user_dir = node.home_dir().join(".mew/skills/pdf");
    ensure!(user_dir.join("SKILL.md").is_file(), "{out}");

    // List: the project's pdf, locked, with the user's under it.
    let (code, out, err) = node.client(&["skills", "list"]).await?;
    ensure!(code == 0, "list: exit {code}: {out}{err}");
    ensure!(
        out == format!(
            "NAME  SOURCE   MODE    LOCKED         DESCRIPTION\n\
             pdf   project  inline  yes (project)  Fills PDF forms.\n\
             \x20 shadows user {}\n",
            user_dir.display()
        ),
        "{out}"
    );
    let (code, out, err) = node.client(&["--json", "skills", "list"]).await?;
    ensure!(code == 0, "list --json: exit {code}: {out}{err}");
    let listed: Value = serde_json::from_str(&out).context("list --json")?;
    let pdf = &listed["skills"][0];
    ensure!(
        pdf["name"] == "pdf"
            && pdf["source"] == "project"
            && pdf["mode"] == "inline"
            && pdf["locked"] == true
            && pdf["installed"]["resolvedRef"] == COMMIT
            && listed["problems"] == json!([]),
        "{listed:#}"
    );

    // Verify: clean.
    let (code, out, err) = node.client(&["skills", "verify"]).await?;
    ensure!(code == 0, "verify: exit {code}: {out}{err}");
    ensure!(
        out == format!(
            "user: {}\n  pdf  ok\nproject: {}\n  pdf  ok\n",
            node.home_dir().join(".mew/skills").display(),
            root.display()
        ),
        "{out}"
    );

    // An edited file, a deleted one and a new one are drift: exit 1.
    fs::write(dir.join("scripts/fill.py"), "print('tampered')\n")?;
    fs::remove_file(dir.join("reference/forms.md"))?;
    fs::write(dir.join("notes.txt"), "mine\n")?;
    let (code, out, err) = node
        .client(&["skills", "verify", "--scope", "project"])
        .await?;
    ensure!(code == 1, "verify after an edit: exit {code}: {out}{err}");
    ensure!(
        out == format!(
            "project: {}\n  pdf  drifted\n    changed:    scripts/fill.py\n\
             \x20   missing:    reference/forms.md\n    extra:      notes.txt\n",
            root.display()
        ),
        "{out}"
    );
    ensure!(
        err.contains("mew: drift in 1 of 1 installed skills: pdf (project)"),
        "{err}"
    );
    let (code, out, _) = node
        .client(&["--json", "skills", "verify", "--scope", "project"])
        .await?;
    let report: Value = serde_json::from_str(&out).context("verify --json")?;
    ensure!(
        code == 1
            && report["clean"] == false
            && report["roots"][0]["skills"][0]["changed"] == json!(["scripts/fill.py"])
            && report["roots"][0]["skills"][0]["missing"] == json!(["reference/forms.md"])
            && report["roots"][0]["skills"][0]["extra"] == json!(["notes.txt"]),
        "exit {code}: {report:#}"
    );
    // The user's copy is untouched.
    let (code, out, err) = node
        .client(&["skills", "verify", "--scope", "user"])
        .await?;
    ensure!(code == 0, "verify --scope user: exit {code}: {out}{err}");

    // Remove: gone from disk, from the lock file and from the list.
    let (code, out, err) = node
        .client(&["skills", "remove", "pdf", "--scope", "project"])
        .await?;
    ensure!(code == 0, "remove: exit {code}: {out}{err}");
    ensure!(
        out == format!("removed pdf (project scope) from {}\n", root.display()),
        "{out}"
    );
    ensure!(names(&root) == ["skills-lock.json"], "{:?}", names(&root));
    let lock: Value = serde_json::from_str(&fs::read_to_string(root.join("skills-lock.json"))?)?;
    ensure!(lock["skills"] == json!({}), "{lock}");
    let (code, out, err) = node.client(&["skills", "list"]).await?;
    ensure!(code == 0, "list after remove: exit {code}: {out}{err}");
    ensure!(
        out.contains("pdf   user    inline  yes (user)  Fills PDF forms.")
            && !out.contains("project"),
        "{out}"
    );
    // Removing it again fails.
    let (code, out, err) = node
        .client(&["skills", "remove", "pdf", "--scope", "project"])
        .await?;
    ensure!(
        code == 1 && err.contains("no skill \"pdf\" is installed in"),
        "exit {code}: {out}{err}"
    );
    Ok(())
}

#[tokio::test]
async fn a_broken_skill_is_refused_and_leaves_nothing_behind() -> anyhow::Result<()> {
    let github = GitHub::start(&[
        (
            "acme/bad/skills/broken/SKILL.md",
            "---\nname: broken\ndescription: [unclosed\n---\nBody.\n",
        ),
        ("acme/bad/skills/broken/run.sh", "echo hi\n"),
        ("acme/bad/skills/plain/SKILL.md", "# No frontmatter\n"),
    ])
    .await?;
    let node = node(&github)?;
    let root = node.project_dir().join(".mew/skills");

    for (name, reason) in [
        ("broken", "SKILL.md is invalid: "),
        ("plain", "SKILL.md is invalid: it has no frontmatter"),
    ] {
        let url = format!("https://github.com/acme/bad/tree/main/skills/{name}");
        let (code, out, err) = node
            .client(&["skills", "install", &url, "--scope", "project"])
            .await?;
        ensure!(code == 1, "{name}: exit {code}: {out}{err}");
        ensure!(
            err.starts_with(&format!(
                "mew: cannot install {url} into {}: {reason}",
                root.display()
            )),
            "{name}: {err}"
        );
        ensure!(out.is_empty(), "{name}: {out}");
        // Nothing was written: no skill, no staging directory, no lock file.
        ensure!(names(&root).is_empty(), "{name}: {:?}", names(&root));
    }

    let (code, out, err) = node.client(&["skills", "list"]).await?;
    ensure!(
        code == 0 && out.starts_with("no skills"),
        "exit {code}: {out}{err}"
    );
    let (code, out, err) = node.client(&["skills", "verify"]).await?;
    ensure!(
        code == 0 && out.matches("  no skills installed by mew\n").count() == 2,
        "exit {code}: {out}{err}"
    );

    // A URL that is not a skill URL is a usage error.
    let (code, out, err) = node
        .client(&[
            "skills",
            "install",
            "https://example.com/x",
            "--scope",
            "project",
        ])
        .await?;
    ensure!(
        code == 2 && err.contains("unsupported skill URL"),
        "exit {code}: {out}{err}"
    );
    Ok(())
}
