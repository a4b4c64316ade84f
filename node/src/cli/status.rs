//! `mew status`: what a running node says of itself (`GET /status`), and the replicas that
//! share its task store.

use std::io::Write;

use anyhow::Context as _;
use clap::Args;
use serde_json::Value;

use super::Context;
use super::output::write_json;
use super::remote::NodeUrlArgs;
use crate::identity::signing;

/// The most `/status` may weigh.
const STATUS_MAX_BYTES: usize = 1024 * 1024;

/// `mew status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) node: NodeUrlArgs,
}

pub(crate) async fn status(
    args: &StatusArgs,
    context: &Context,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let base = args.node.url(&context.config);
    let url = format!("{base}/status");
    let tls = context
        .config
        .tls
        .client_options()
        .map_err(anyhow::Error::msg)?;
    let client = signing::http_client(&tls)?;
    let mut request = client.get(&url);
    if let Some(token) = &args.node.token {
        request = request.bearer_auth(token);
    }
    let body = signing::fetch_with(request, &url, STATUS_MAX_BYTES)
        .await
        .map_err(|e| {
            if args.node.node.is_none() {
                super::remote::node_error(e, &base)
            } else {
                e
            }
        })?;
    let status: Value =
        serde_json::from_slice(&body).with_context(|| format!("{url} did not answer JSON"))?;
    if context.json {
        write_json(out, &status)?;
    } else {
        out.write_all(render(&status).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// The status as lines for people.
fn render(status: &Value) -> String {
    let text = |value: &Value| value.as_str().unwrap_or("?").to_owned();
    let mut out = format!(
        "node {} at {}\n",
        text(&status["name"]),
        text(&status["url"])
    );
    let roles: Vec<String> = status["roles"]
        .as_array()
        .map(|roles| roles.iter().map(text).collect())
        .unwrap_or_default();
    out.push_str(&format!("roles ({}): {}\n", roles.len(), roles.join(", ")));
    for (key, what) in [
        ("problems", "problems in role files"),
        ("hook_problems", "problems in hook files"),
        ("skill_problems", "problems in skills"),
    ] {
        let count = status[key].as_array().map_or(0, Vec::len);
        if count > 0 {
            out.push_str(&format!("{count} {what}\n"));
        }
    }
    match &status["replicas"] {
        Value::Array(replicas) => {
            let alive = replicas.iter().filter(|r| r["alive"] == true).count();
            out.push_str(&format!(
                "replicas on the shared task store ({alive} alive of {}):\n",
                replicas.len()
            ));
            let rows: Vec<[String; 5]> = replicas
                .iter()
                .map(|r| {
                    [
                        text(&r["id"]),
                        text(&r["address"]),
                        text(&r["heartbeat"]),
                        r["running"].as_u64().unwrap_or(0).to_string(),
                        if r["alive"] == true {
                            "alive"
                        } else {
                            "silent"
                        }
                        .to_owned(),
                    ]
                })
                .collect();
            let header = ["ID", "ADDRESS", "LAST HEARTBEAT", "TASKS", "STATE"].map(str::to_owned);
            let mut widths = header.clone().map(|h| h.len());
            for row in &rows {
                for (width, cell) in widths.iter_mut().zip(row) {
                    *width = (*width).max(cell.len());
                }
            }
            for row in std::iter::once(&header).chain(&rows) {
                let cells: Vec<String> = row
                    .iter()
                    .zip(widths)
                    .map(|(cell, width)| format!("{cell:<width$}"))
                    .collect();
                out.push_str(&format!("  {}\n", cells.join("  ").trim_end()));
            }
        }
        Value::Object(error) => {
            out.push_str(&format!(
                "replicas: cannot be read: {}\n",
                error.get("error").map_or("?".to_owned(), text)
            ));
        }
        _ => out.push_str("replicas: one (the task store is not shared)\n"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replicas_are_a_table_and_a_single_node_says_so() {
        let single = json!({"name": "n", "url": "http://h:1", "roles": ["a", "b"], "problems": []});
        assert_eq!(
            render(&single),
            "node n at http://h:1\nroles (2): a, b\nreplicas: one (the task store is not shared)\n"
        );
        let shared = json!({
            "name": "n", "url": "http://h:1", "roles": ["a"], "problems": [{"file": "x"}],
            "replicas": [
                {"id": "r1", "address": "http://h:1", "heartbeat": "2026-12-02T07:00:00Z", "running": 2, "alive": true},
                {"id": "r22", "address": "http://h:2", "heartbeat": "2026-12-02T06:00:00Z", "running": 0, "alive": false}
            ]
        });
        assert_eq!(
            render(&shared),
            "node n at http://h:1\nroles (1): a\n1 problems in role files\n\
             replicas on the shared task store (1 alive of 2):\n\
             \x20 ID   ADDRESS     LAST HEARTBEAT        TASKS  STATE\n\
             \x20 r1   http://h:1  2026-12-02T07:00:00Z  2      alive\n\
             \x20 r22  http://h:2  2026-12-02T06:00:00Z  0      silent\n"
        );
    }
}
