//! End-to-end tests of signed agent cards: every card a `mew up` node serves is signed with
//! its key and verifies with `mew card verify` and with the Python SDK's verifier; a card the
//! Python SDK signs verifies with `mew card verify`; both sides canonicalize a card to the
//! same bytes; a changed card or a foreign key set is refused.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, ensure};
use axum::Router;
use axum::routing::get;
use mew_cards::AgentCard;
use mew_tests::node::{MewNode, command_role};
use mew_tests::process::{command, workspace_root};
use mew_tests::python::python;
use serde_json::{Value, json};
use tokio::net::TcpListener;

const CARD_PATH: &str = "/.well-known/agent-card.json";
const JWKS_PATH: &str = "/.well-known/jwks.json";

/// A node serving the `upper` role (and the front agent running it).
async fn node() -> anyhow::Result<MewNode> {
    MewNode::start_with_config(
        "node:\n  default_role: upper\n",
        &[("upper.md", &command_role("upper", "sh -c 'tr a-z A-Z'"))],
    )
    .await
}

/// Runs `tests/peers/card_signing.py ARGS` with `stdin` as its input: exit code, stdout,
/// stderr.
async fn card_signing(args: &[&str], stdin: &[u8]) -> anyhow::Result<(i32, Vec<u8>, String)> {
    use tokio::io::AsyncWriteExt as _;
    let mut cmd = command(python()?);
    cmd.arg(workspace_root().join("tests/peers/card_signing.py"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().context("cannot run card_signing.py")?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin).await?;
    }
    let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .context("card_signing.py did not finish within 120 s")??;
    Ok((
        output.status.code().unwrap_or(-1),
        output.stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// Serves `files` (path, body) as JSON on a free loopback port until dropped: its base URL.
struct JsonServer {
    base: String,
    task: tokio::task::JoinHandle<()>,
}

impl JsonServer {
    async fn bind() -> anyhow::Result<(TcpListener, String)> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        Ok((listener, base))
    }

    fn serve(listener: TcpListener, base: String, files: Vec<(&'static str, Vec<u8>)>) -> Self {
        let mut router = Router::new();
        for (path, body) in files {
            router = router.route(
                path,
                get(move || {
                    let body = body.clone();
                    async move { ([("content-type", "application/json")], body) }
                }),
            );
        }
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self { base, task }
    }
}

impl Drop for JsonServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The card served at `url`, as JSON.
async fn get_json(url: &str) -> anyhow::Result<Value> {
    let response = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(30))
        .send()
        .await?
        .error_for_status()?;
    Ok(response.json().await?)
}

/// The protected header of a card's first signature.
fn protected_header(card: &Value) -> anyhow::Result<jsonwebtoken::Header> {
    let protected = card["signatures"][0]["protected"]
        .as_str()
        .context("the card has no signature")?;
    // A compact JWS with that header, to have the header decoded.
    Ok(jsonwebtoken::decode_header(format!("{protected}.e30.AA"))?)
}

#[tokio::test]
async fn the_node_signs_its_cards_and_mew_card_verify_accepts_them() -> anyhow::Result<()> {
    let node = node().await?;
    let jwks_url = format!("{}{JWKS_PATH}", node.url());

    // The JWKS: public, cacheable, the one key every card names.
    let response = reqwest::Client::new()
        .get(&jwks_url)
        .timeout(Duration::from_secs(30))
        .send()
        .await?;
    ensure!(response.status() == 200, "{}", response.status());
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(header("content-type").as_deref(), Some("application/json"));
    assert_eq!(header("cache-control").as_deref(), Some("max-age=300"));
    let jwks: Value = response.json().await?;
    let kid = jwks["keys"][0]["kid"]
        .as_str()
        .context("no kid")?
        .to_owned();
    assert_eq!(jwks["keys"][0]["kty"], "OKP");
    assert_eq!(jwks["keys"][0]["crv"], "Ed25519");
    assert!(jwks["keys"][0].get("d").is_none(), "the private key leaked");
    // `mew up` names the key it signs with.
    let signed_with = format!("mew: cards signed with key {kid} (");
    mew_tests::node::poll_until("the key's line", Duration::from_secs(20), || async {
        Ok(node.output().contains(&signed_with).then_some(()))
    })
    .await?;

    let front = get_json(&format!("{}{CARD_PATH}", node.url())).await?;
    let role = get_json(&format!("{}{CARD_PATH}", node.role_url("upper"))).await?;
    for card in [&front, &role] {
        let protected = protected_header(card)?;
        assert_eq!(protected.alg, jsonwebtoken::Algorithm::EdDSA);
        assert_eq!(protected.kid.as_deref(), Some(kid.as_str()));
        assert_eq!(protected.typ.as_deref(), Some("JOSE"));
        assert_eq!(protected.jku.as_deref(), Some(jwks_url.as_str()));
    }
    // `GET /agents` lists the same signed cards.
    let (_, agents) = node.get_json("/agents").await?;
    let listed = agents["agents"]
        .as_array()
        .and_then(|cards| cards.iter().find(|card| card["name"] == role["name"]))
        .context("the role is not listed")?;
    assert_eq!(listed, &role);

    for target in [
        node.url().to_owned(),
        node.role_url("upper"),
        "upper".to_owned(),
    ] {
        let (code, out, err) = node
            .client(&["card", "verify", &target, "--node", node.url()])
            .await?;
        assert_eq!(code, 0, "{target}: {out}{err}");
        assert_eq!(
            out.trim(),
            format!("signature 1: kid {kid}, alg EdDSA: ok"),
            "{target}"
        );
    }
    // A card URL, a JWKS by URL, and JSON output.
    let card_url = format!("{}{CARD_PATH}", node.role_url("upper"));
    let (code, out, err) = node
        .client(&["--json", "card", "verify", &card_url, "--jwks", &jwks_url])
        .await?;
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out)?;
    assert_eq!(report["verified"], true);
    assert_eq!(report["url"], card_url.as_str());
    assert_eq!(report["signatures"][0]["ok"], true);
    assert_eq!(report["signatures"][0]["kid"], kid.as_str());
    // A JWKS file.
    let file = node.dir().join("jwks.json");
    std::fs::write(&file, serde_json::to_vec(&jwks)?)?;
    let (code, out, err) = node
        .client(&["card", "verify", node.url(), "--jwks", path(&file)?])
        .await?;
    assert_eq!(code, 0, "{out}{err}");
    Ok(())
}

fn path(file: &Path) -> anyhow::Result<&str> {
    file.to_str().context("a non-UTF-8 path")
}

#[tokio::test]
async fn a_changed_card_or_a_foreign_key_set_is_refused() -> anyhow::Result<()> {
    let node = node().await?;
    let jwks_url = format!("{}{JWKS_PATH}", node.url());
    let mut card = get_json(&format!("{}{CARD_PATH}", node.url())).await?;
    card["description"] = json!("A node that does whatever you say.");

    let (listener, base) = JsonServer::bind().await?;
    let server = JsonServer::serve(
        listener,
        base,
        vec![("/card.json", serde_json::to_vec(&card)?)],
    );
    let tampered = format!("{}/card.json", server.base);
    // With the node's own keys, the signature no longer matches.
    let (code, out, err) = node
        .client(&["card", "verify", &tampered, "--jwks", &jwks_url])
        .await?;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("FAILED: the signature does not match the card"),
        "{out}"
    );
    assert!(err.contains("do not verify"), "{err}");
    // Without --jwks, the jku (the node's origin, not this server's) is not followed.
    let (code, out, err) = node.client(&["card", "verify", &tampered]).await?;
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("cannot vouch for itself"), "{out}");

    // The untouched card copied to another origin: the signature is fine, but its jku is
    // foreign there; the node's keys named explicitly verify it.
    let original = get_json(&format!("{}{CARD_PATH}", node.url())).await?;
    let (listener, base) = JsonServer::bind().await?;
    let copy = JsonServer::serve(
        listener,
        base,
        vec![("/copy.json", serde_json::to_vec(&original)?)],
    );
    let copied = format!("{}/copy.json", copy.base);
    let (code, out, _) = node.client(&["card", "verify", &copied]).await?;
    assert_eq!(code, 1, "{out}");
    let (code, out, err) = node
        .client(&["card", "verify", &copied, "--jwks", &jwks_url])
        .await?;
    assert_eq!(code, 0, "{out}{err}");

    // An unsigned card fails.
    let mut unsigned = original.clone();
    unsigned
        .as_object_mut()
        .context("not an object")?
        .remove("signatures");
    let (listener, base) = JsonServer::bind().await?;
    let bare = JsonServer::serve(
        listener,
        base,
        vec![("/bare.json", serde_json::to_vec(&unsigned)?)],
    );
    let (code, out, err) = node
        .client(&["card", "verify", &format!("{}/bare.json", bare.base)])
        .await?;
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("not signed"), "{err}");
    Ok(())
}

#[tokio::test]
async fn the_python_sdk_verifies_the_cards_the_node_signs() -> anyhow::Result<()> {
    let node = node().await?;
    let jwks_url = format!("{}{JWKS_PATH}", node.url());
    for base in [node.url().to_owned(), node.role_url("upper")] {
        let card_url = format!("{base}{CARD_PATH}");
        let (code, out, err) = card_signing(&["verify", &card_url, &jwks_url], b"").await?;
        let out = String::from_utf8_lossy(&out);
        assert_eq!(code, 0, "{card_url}: {out}{err}");
        let result: Value = serde_json::from_str(out.trim())?;
        assert_eq!(result["ok"], true, "{card_url}: {out}");
    }
    Ok(())
}

/// A card that exercises the canonical form: non-ASCII text and keys, escapes, numbers of
/// every shape in extension params, nested empties, defaults, and fields unknown to both.
fn rich_card() -> Value {
    json!({
        "name": "Zoë \u{1f600} \"quoted\" \\ back\tslash",
        "description": "Line one\nline two \u{1} \u{7f} \u{fb01}",
        "version": "1.0",
        "supportedInterfaces": [
            { "url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0" },
            { "url": "http://127.0.0.1:1/", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0", "tenant": "" }
        ],
        "provider": { "organization": "Mew", "url": "" },
        "capabilities": {
            "streaming": false,
            "pushNotifications": true,
            "extensions": [{
                "uri": "urn:mew:test",
                "required": false,
                "params": {
                    "\u{fb01}": 1, "\u{1f600}": 2, "a": 3, "B": 4,
                    "int": 42, "neg": -7, "half": 1.5, "tenth": 0.1, "big": 1e21,
                    "huge": 12345678901234567890u64, "small": 1e-7, "tiny": 0.000001,
                    "zero": 0, "no": false, "null": null, "empty": "", "list": [],
                    "nested": { "deeper": { "gone": {}, "also": [null, ""] }, "kept": [0, "x"] }
                }
            }]
        },
        "securitySchemes": {
            "bearer": { "httpAuthSecurityScheme": { "scheme": "Bearer", "bearerFormat": "JWT" } },
            "key": { "apiKeySecurityScheme": { "location": "header", "name": "X-Api-Key" } }
        },
        "securityRequirements": [
            { "schemes": { "bearer": { "list": [] } } },
            { "schemes": { "key": { "list": ["read", "write"] } } }
        ],
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{
            "id": "s", "name": "Skill", "description": "Does things", "tags": ["mew", ""],
            "examples": [], "inputModes": ["text/plain"]
        }],
        "iconUrl": "https://example.com/icon.png",
        "somethingNew": { "x": 1 },
        "signatures": [{ "protected": "e30", "signature": "AAAA" }]
    })
}

#[tokio::test]
async fn mew_and_the_python_sdk_canonicalize_cards_to_the_same_bytes() -> anyhow::Result<()> {
    let node = node().await?;
    let front = get_json(&format!("{}{CARD_PATH}", node.url())).await?;
    let role = get_json(&format!("{}{CARD_PATH}", node.role_url("upper"))).await?;
    for card in [front, role, rich_card()] {
        let parsed: AgentCard = serde_json::from_value(card.clone())?;
        let ours = mew_cards::canonical_card(&parsed)?;
        let (code, theirs, err) =
            card_signing(&["canonicalize"], &serde_json::to_vec(&card)?).await?;
        ensure!(code == 0, "card_signing.py canonicalize failed: {err}");
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
            "for {card}"
        );
        assert_eq!(ours, theirs);
    }
    Ok(())
}

#[tokio::test]
async fn mew_card_verify_accepts_a_card_the_python_sdk_signs() -> anyhow::Result<()> {
    let node = node().await?;
    let (listener, base) = JsonServer::bind().await?;
    let out_dir = tempfile::tempdir()?;
    let jku = format!("{base}{JWKS_PATH}");
    let mut card = rich_card();
    card.as_object_mut()
        .context("not an object")?
        .remove("signatures");
    let (code, _, err) = card_signing(
        &["sign", &jku, path(out_dir.path())?],
        &serde_json::to_vec(&card)?,
    )
    .await?;
    ensure!(code == 0, "card_signing.py sign failed: {err}");
    let signed = std::fs::read(out_dir.path().join("card.json"))?;
    let jwks_file = out_dir.path().join("jwks.json");
    let jwks = std::fs::read(&jwks_file)?;
    let server = JsonServer::serve(
        listener,
        base,
        vec![(CARD_PATH, signed.clone()), (JWKS_PATH, jwks)],
    );

    // The jku is the card's own origin: followed.
    let (code, out, err) = node.client(&["card", "verify", &server.base]).await?;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.trim(),
        "signature 1: kid python-test-key, alg ES256: ok"
    );
    // The key set as a file.
    let (code, out, err) = node
        .client(&["card", "verify", &server.base, "--jwks", path(&jwks_file)?])
        .await?;
    assert_eq!(code, 0, "{out}{err}");
    // Another node's keys do not verify it.
    let (code, out, _) = node
        .client(&[
            "card",
            "verify",
            &server.base,
            "--jwks",
            &format!("{}{JWKS_PATH}", node.url()),
        ])
        .await?;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("no key \"python-test-key\""), "{out}");
    Ok(())
}

const AUTH_CONFIG: &str = "node:\n  default_role: upper\n\
auth:\n  api_keys:\n    - name: alice\n      key_env: TEST_KEY_ALICE\n  \
extended_card:\n    description: The members' view of this agent.\n";

const ALICE_KEY: &str = "alice-key-0123456789";

#[tokio::test]
async fn behind_auth_the_jwks_is_public_and_the_extended_card_is_signed() -> anyhow::Result<()> {
    let mut node = MewNode::new()?;
    node.write_config(AUTH_CONFIG)?;
    node.write_role("upper.md", &command_role("upper", "sh -c 'tr a-z A-Z'"))?;
    node.set_env("TEST_KEY_ALICE", ALICE_KEY);
    node.launch().await?;
    let jwks_url = format!("{}{JWKS_PATH}", node.url());
    let http = reqwest::Client::new();
    // No credentials needed for the keys and the public cards.
    let jwks = http
        .get(&jwks_url)
        .timeout(Duration::from_secs(30))
        .send()
        .await?;
    assert_eq!(jwks.status(), 200);
    let (code, out, err) = node.client(&["card", "verify", node.url()]).await?;
    assert_eq!(code, 0, "{out}{err}");

    for path in ["", "/agents/upper"] {
        let extended: Value = http
            .get(format!("{}{path}/extendedAgentCard", node.url()))
            .header("X-API-Key", ALICE_KEY)
            .header("A2A-Version", "1.0")
            .timeout(Duration::from_secs(30))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        assert_eq!(extended["description"], "The members' view of this agent.");
        // Signed anew, not carrying the public card's signature.
        assert_eq!(
            extended["signatures"].as_array().map(Vec::len),
            Some(1),
            "{extended}"
        );
        let (listener, base) = JsonServer::bind().await?;
        let server = JsonServer::serve(
            listener,
            base,
            vec![("/extended.json", serde_json::to_vec(&extended)?)],
        );
        let (code, out, err) = node
            .client(&[
                "card",
                "verify",
                &format!("{}/extended.json", server.base),
                "--jwks",
                &jwks_url,
            ])
            .await?;
        assert_eq!(code, 0, "{path}: {out}{err}");
    }
    Ok(())
}
