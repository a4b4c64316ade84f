//! `mew peers`: fetch every configured peer now and print its state and roles.

use std::io::Write;

use anyhow::bail;
use mew_transport::ClientOptions;
use serde_json::json;

use super::Context;
use crate::peers::{PeerState, PeerStatus, Peers, one_line};

/// Fetches every peer of the configuration (in parallel, each within its timeout) and prints
/// what was found (`{"peers": [...]}` with `--json`). Fails, after printing, when a peer is
/// unreachable, so that scripts can check the exit status.
pub(crate) async fn peers(context: &Context, out: &mut dyn Write) -> anyhow::Result<()> {
    let options = ClientOptions {
        tls: context
            .config
            .tls
            .client_options()
            .map_err(anyhow::Error::msg)?,
        ..ClientOptions::default()
    };
    let peers = Peers::start(&context.config.peers, &options).await;
    let statuses = peers.list();
    if context.json {
        serde_json::to_writer_pretty(&mut *out, &json!({ "peers": peers.status_json() }))?;
        writeln!(out)?;
    } else {
        out.write_all(render_peers(&statuses).as_bytes())?;
    }
    out.flush()?;
    let unreachable: Vec<&str> = statuses
        .iter()
        .filter(|status| status.state == PeerState::Unreachable)
        .map(|status| status.name.as_str())
        .collect();
    if !unreachable.is_empty() {
        bail!(
            "{} of {} peers unreachable: {}",
            unreachable.len(),
            statuses.len(),
            unreachable.join(", ")
        );
    }
    Ok(())
}

/// Each peer as a block: its name, then `url:`, `state:`, `error:` (when unreachable) and
/// `roles:`, one role a line with its description on one line.
pub(crate) fn render_peers(statuses: &[PeerStatus]) -> String {
    if statuses.is_empty() {
        return "no peers configured (add a peers: section to .mew/config.yaml)\n".to_owned();
    }
    let mut out = String::new();
    for status in statuses {
        out.push_str(&status.name);
        out.push('\n');
        out.push_str(&format!("  url:    {}\n", status.url));
        out.push_str(&format!("  state:  {}\n", status.state.as_str()));
        if let Some(error) = &status.error {
            out.push_str(&format!("  error:  {}\n", one_line(error)));
        }
        if status.state == PeerState::Ok {
            if status.roles.is_empty() {
                out.push_str("  roles:  none\n");
            } else {
                out.push_str("  roles:\n");
                let width = status
                    .roles
                    .iter()
                    .map(|(name, _)| name.chars().count())
                    .max()
                    .unwrap_or(0);
                for (name, description) in &status.roles {
                    let line = format!("    {name:<width$}  {}", one_line(description));
                    out.push_str(line.trim_end());
                    out.push('\n');
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use mew_cards::Timestamp;
    use mew_tests::EchoAgent;
    use tempfile::TempDir;
    use tokio::net::TcpListener;

    use super::*;
    use crate::config::{Config, Sources};

    fn status(
        name: &str,
        state: PeerState,
        error: Option<&str>,
        roles: &[(&str, &str)],
    ) -> PeerStatus {
        PeerStatus {
            name: name.into(),
            url: format!("http://{name}:7777"),
            state,
            error: error.map(str::to_owned),
            roles: roles
                .iter()
                .map(|(name, description)| ((*name).to_owned(), (*description).to_owned()))
                .collect(),
            fetched_at: Timestamp::from_unix(1_700_000_000, 0),
        }
    }

    #[test]
    fn renders_each_peer_with_its_roles_or_error() {
        let text = render_peers(&[
            status(
                "box",
                PeerState::Ok,
                None,
                &[
                    ("Explore", "Explores\n  the code."),
                    ("Plan", "Plans."),
                    ("x", ""),
                ],
            ),
            status("empty", PeerState::Ok, None, &[]),
            status(
                "gone",
                PeerState::Unreachable,
                Some("connection refused"),
                &[],
            ),
        ]);
        assert_eq!(
            text,
            "box\n\
             \x20 url:    http://box:7777\n\
             \x20 state:  ok\n\
             \x20 roles:\n\
             \x20   Explore  Explores the code.\n\
             \x20   Plan     Plans.\n\
             \x20   x\n\
             empty\n\
             \x20 url:    http://empty:7777\n\
             \x20 state:  ok\n\
             \x20 roles:  none\n\
             gone\n\
             \x20 url:    http://gone:7777\n\
             \x20 state:  unreachable\n\
             \x20 error:  connection refused\n"
        );
        assert_eq!(
            render_peers(&[]),
            "no peers configured (add a peers: section to .mew/config.yaml)\n"
        );
    }

    /// A context for a project whose `.mew/config.yaml` is `yaml`.
    fn context(dir: &Path, yaml: &str, json: bool) -> Context {
        std::fs::create_dir_all(dir.join(".mew")).unwrap();
        std::fs::write(dir.join(".mew/config.yaml"), yaml).unwrap();
        let sources = Sources {
            home: Some(dir.join("home")),
            ..Sources::new(dir)
        };
        let loaded = Config::load(&sources).unwrap();
        Context {
            config: loaded.resolve().unwrap(),
            loaded,
            json,
        }
    }

    async fn echo_peer() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = mew_transport::router(Arc::new(EchoAgent::new(&base)));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        base
    }

    async fn closed_port() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        url
    }

    #[tokio::test]
    async fn mew_peers_prints_every_peer_and_succeeds_when_all_answer() {
        let base = echo_peer().await;
        let dir = TempDir::new().unwrap();
        let context = context(
            dir.path(),
            &format!("peers:\n  echo:\n    url: {base}\n"),
            false,
        );
        let mut out = Vec::new();
        peers(&context, &mut out).await.unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "echo\n  url:    {base}\n  state:  ok\n  roles:\n    \
                 echo  Echoes text; scripted commands drive task states.\n"
            )
        );
    }

    #[tokio::test]
    async fn mew_peers_fails_after_printing_when_a_peer_is_unreachable() {
        let base = echo_peer().await;
        let gone = closed_port().await;
        let dir = TempDir::new().unwrap();
        let yaml = format!("peers:\n  up:\n    url: {base}\n  gone:\n    url: {gone}\n");
        let context = context(dir.path(), &yaml, true);
        let mut out = Vec::new();
        let error = peers(&context, &mut out).await.unwrap_err();
        assert_eq!(error.to_string(), "1 of 2 peers unreachable: gone");
        let printed: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let peers = printed["peers"].as_array().unwrap();
        assert_eq!(peers.len(), 2);
        assert_eq!(peers[0]["name"], "gone");
        assert_eq!(peers[0]["url"], gone.as_str());
        assert_eq!(peers[0]["state"], "unreachable");
        assert!(
            peers[0]["error"]
                .as_str()
                .unwrap()
                .contains(&format!("{gone}/.well-known/agent-card.json")),
            "{printed}"
        );
        assert_eq!(peers[1]["name"], "up");
        assert_eq!(peers[1]["state"], "ok");
        assert_eq!(peers[1]["error"], serde_json::Value::Null);
        assert_eq!(peers[1]["roles"][0]["name"], "echo");
    }

    #[tokio::test]
    async fn mew_peers_with_none_configured_says_so() {
        let dir = TempDir::new().unwrap();
        let context = context(dir.path(), "", false);
        let mut out = Vec::new();
        peers(&context, &mut out).await.unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "no peers configured (add a peers: section to .mew/config.yaml)\n"
        );
    }
}
