//! HTTPS between real nodes: a node serving TLS with a certificate from a test CA, nodes and
//! CLI clients that trust that CA through `tls.ca_file`, and mutual TLS; gRPC over the same
//! TLS (`h2` by ALPN) from the CLI.

use std::path::Path;

use anyhow::{bail, ensure};
use mew_cards::TaskState;
use mew_tests::model::{ScriptedModel, Step};
use mew_tests::node::{MewNode, scripted_model_config, send_text, status_text};
use mew_tests::tls::TestPki;
use serde_json::json;
use tempfile::TempDir;

/// The test CA and its certificates, written to a temporary directory.
fn certificates() -> anyhow::Result<TempDir> {
    let dir = tempfile::Builder::new().prefix("mew-tls-").tempdir()?;
    TestPki::new()?.write(dir.path())?;
    Ok(dir)
}

fn command_role(name: &str, command: &str) -> String {
    format!("---\nname: {name}\ndescription: Runs {command}.\ncommand: {command}\n---\n")
}

/// `tls:` for a node serving HTTPS with the test server certificate; with `mutual`, clients
/// must present a certificate from the test CA.
fn server_tls(certs: &Path, mutual: bool) -> String {
    let mut tls = format!(
        "tls:\n  cert_file: {}\n  key_file: {}\n",
        certs.join("server.pem").display(),
        certs.join("server-key.pem").display()
    );
    if mutual {
        tls.push_str(&format!(
            "  client_ca_file: {}\n",
            certs.join("ca.pem").display()
        ));
    }
    tls
}

/// `tls:` for a client that trusts the test CA and, with `identity`, presents the test client
/// certificate.
fn client_tls(certs: &Path, identity: bool) -> String {
    let mut tls = format!("tls:\n  ca_file: {}\n", certs.join("ca.pem").display());
    if identity {
        tls.push_str(&format!(
            "  client_cert_file: {}\n  client_key_file: {}\n",
            certs.join("client.pem").display(),
            certs.join("client-key.pem").display()
        ));
    }
    tls
}

/// Node B: the `upper` role over HTTPS.
async fn https_node(certs: &Path, mutual: bool) -> anyhow::Result<MewNode> {
    let b = MewNode::start_with_config(
        &server_tls(certs, mutual),
        &[("upper.md", &command_role("upper", "[tr, a-z, A-Z]"))],
    )
    .await?;
    ensure!(
        b.url().starts_with("https://127.0.0.1:"),
        "B's URL: {}",
        b.url()
    );
    Ok(b)
}

/// A node (not started) whose project configuration is `config`, to run CLI clients in.
fn client(config: &str) -> anyhow::Result<MewNode> {
    let node = MewNode::new()?;
    node.write_config(config)?;
    Ok(node)
}

/// Node A: the `boss` role runs on `model` and may delegate; `tls` is its `tls:` section.
async fn delegating_node(model: &ScriptedModel, tls: &str, peers: &str) -> anyhow::Result<MewNode> {
    let mut a = MewNode::new()?;
    a.set_env("MEW_TEST_MODEL_KEY", "sk-test-scripted");
    a.write_config(&format!("{}{tls}{peers}", scripted_model_config(model)))?;
    a.write_role(
        "boss.md",
        "---\nname: boss\ndescription: A test role.\ntools: [Agent]\n---\nYou help with tests.\n",
    )?;
    a.launch().await?;
    Ok(a)
}

/// A's model delegates to `target` (B's role by URL or as `peer/role`) and expects its answer.
fn delegation(target: &str) -> anyhow::Result<ScriptedModel> {
    ScriptedModel::start(vec![
        Step::tool_call(
            "call_1",
            "Agent",
            json!({"prompt": "shout this", "description": "shout", "subagent_type": target}),
        ),
        Step::text("It shouted.")
            .expect_tool_results(["call_1"])
            .expect_last_user("SHOUT THIS"),
    ])
}

async fn delegate_and_check(a: &MewNode, model: &ScriptedModel) -> anyhow::Result<()> {
    let boss = send_text(a, "boss", "shout").await?;
    ensure!(
        boss.status.state == TaskState::Completed,
        "{:?}: {}\nA's log:\n{}",
        boss.status.state,
        status_text(&boss),
        a.log()
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_node_delegates_to_an_https_node_whose_ca_it_trusts() -> anyhow::Result<()> {
    let certs = certificates()?;
    let b = https_node(certs.path(), false).await?;

    // By URL.
    let model = delegation(&b.role_url("upper"))?;
    let a = delegating_node(&model, &client_tls(certs.path(), false), "").await?;
    delegate_and_check(&a, &model).await?;

    // As a configured peer: discovery and the call both go over HTTPS.
    let model = delegation("b/upper")?;
    let peers = format!("peers:\n  b:\n    url: {}\n", b.url());
    let a = delegating_node(&model, &client_tls(certs.path(), false), &peers).await?;
    delegate_and_check(&a, &model).await?;
    let (code, stdout, stderr) = a.client(&["peers"]).await?;
    ensure!(
        code == 0 && stdout.contains("upper"),
        "mew peers: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );

    // The same peer over gRPC: the call goes to B's role by its tenant, over the same TLS.
    let model = delegation("b/upper")?;
    let peers = format!("peers:\n  b:\n    url: {}\n    binding: grpc\n", b.url());
    let a = delegating_node(&model, &client_tls(certs.path(), false), &peers).await?;
    delegate_and_check(&a, &model).await?;
    Ok(())
}

#[tokio::test]
async fn the_cli_reaches_an_https_node_only_when_it_trusts_the_ca() -> anyhow::Result<()> {
    let certs = certificates()?;
    let b = https_node(certs.path(), false).await?;
    let url = b.url().to_owned();

    let trusting = client(&client_tls(certs.path(), false))?;
    let (code, stdout, stderr) = trusting
        .client(&["send", "upper", "hello", "--node", &url])
        .await?;
    ensure!(
        code == 0 && stdout.contains("HELLO"),
        "with the CA: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    // gRPC on the same port: `h2` by ALPN, the same trust.
    let (code, stdout, stderr) = trusting
        .client(&[
            "send",
            "upper",
            "hello",
            "--node",
            &url,
            "--binding",
            "grpc",
        ])
        .await?;
    ensure!(
        code == 0 && stdout.contains("HELLO"),
        "over gRPC with the CA: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    let (code, stdout, stderr) = trusting.client(&["card", "--node", &url]).await?;
    ensure!(
        code == 0 && stdout.contains(&url),
        "mew card with the CA: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    let (code, stdout, stderr) = trusting
        .client(&["tasks", "list", "--json", "--node", &url])
        .await?;
    ensure!(
        code == 0 && stdout.contains("TASK_STATE_COMPLETED"),
        "mew tasks with the CA: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );

    let stranger = client("")?;
    let (code, stdout, stderr) = stranger
        .client(&["send", "upper", "hello", "--node", &url])
        .await?;
    ensure!(
        code != 0
            && !stdout.contains("HELLO")
            && stderr.contains("invalid peer certificate: UnknownIssuer"),
        "without the CA: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    // The card is fetched over HTTPS first, so gRPC is never reached without the CA either.
    let (code, stdout, stderr) = stranger
        .client(&[
            "send",
            "upper",
            "hello",
            "--node",
            &url,
            "--binding",
            "grpc",
        ])
        .await?;
    ensure!(
        code != 0 && !stdout.contains("HELLO") && stderr.contains("UnknownIssuer"),
        "over gRPC without the CA: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn mutual_tls_admits_clients_with_a_certificate_from_the_ca() -> anyhow::Result<()> {
    let certs = certificates()?;
    let b = https_node(certs.path(), true).await?;
    let url = b.url().to_owned();

    let with_identity = client(&client_tls(certs.path(), true))?;
    let (code, stdout, stderr) = with_identity
        .client(&["send", "upper", "hello", "--node", &url])
        .await?;
    ensure!(
        code == 0 && stdout.contains("HELLO"),
        "with a client certificate: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    let (code, stdout, stderr) = with_identity
        .client(&[
            "send",
            "upper",
            "hello",
            "--node",
            &url,
            "--binding",
            "grpc",
        ])
        .await?;
    ensure!(
        code == 0 && stdout.contains("HELLO"),
        "over gRPC with a client certificate: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );

    let without = client(&client_tls(certs.path(), false))?;
    let (code, stdout, stderr) = without
        .client(&["send", "upper", "hello", "--node", &url])
        .await?;
    // In TLS 1.3 the client finishes its side of the handshake before the server checks the
    // certificate, so the refusal reaches it either as the server's `CertificateRequired`
    // alert or as a connection closed under the first request, whichever it reads first.
    ensure!(
        code != 0
            && !stdout.contains("HELLO")
            && (stderr.contains("CertificateRequired") || stderr.contains("connection")),
        "without a client certificate: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    // Whichever way it was told, the node ran nothing for the client without a certificate.
    let (code, stdout, stderr) = with_identity
        .client(&["tasks", "list", "--json", "--node", &url])
        .await?;
    let listed: serde_json::Value = serde_json::from_str(&stdout)
        .map_err(|e| anyhow::anyhow!("{e}: exit {code}\nstdout: {stdout}\nstderr: {stderr}"))?;
    let tasks = listed["tasks"].as_array().map_or(0, Vec::len);
    ensure!(tasks == 2, "the node holds {tasks} tasks, not 2: {listed}");

    // A node with the client certificate delegates to B.
    let model = delegation(&b.role_url("upper"))?;
    let a = delegating_node(&model, &client_tls(certs.path(), true), "").await?;
    delegate_and_check(&a, &model).await?;
    Ok(())
}

#[tokio::test]
async fn a_broken_certificate_file_stops_the_node_naming_it() -> anyhow::Result<()> {
    let certs = certificates()?;
    std::fs::write(certs.path().join("server-key.pem"), "not a key\n")?;
    let mut node = MewNode::new()?;
    node.write_config(&server_tls(certs.path(), false))?;
    let started = node.launch().await;
    let Err(error) = started else {
        bail!("the node started with a broken key");
    };
    let shown = format!("{error:#}");
    ensure!(shown.contains("server-key.pem"), "{shown}");
    Ok(())
}
