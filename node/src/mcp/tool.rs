//! An MCP server's tools as Mew tools: names, descriptions, schemas, categories, filters.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::client::McpClient;
use crate::config::mcp::McpServerConfig;
use crate::tools::registry::MCP_PREFIX;
use crate::tools::{Category, Tool, ToolContext, ToolOutput};

/// The longest tool name the model providers accept.
pub(super) const MAX_TOOL_NAME: usize = 64;

/// True when `name` matches `^[A-Za-z0-9_-]+$`.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Why `name` cannot name a server, if it cannot.
pub(super) fn server_name_problem(name: &str) -> Option<String> {
    if !valid_name(name) {
        return Some(format!(
            "the server name {name:?} does not match ^[A-Za-z0-9_-]+$"
        ));
    }
    if name.contains("__") {
        return Some(format!(
            "the server name {name:?} holds \"__\", which separates the parts of mcp__<server>__<tool>"
        ));
    }
    None
}

/// `mcp__<server>__<tool>`.
pub(super) fn full_name(server: &str, tool: &str) -> String {
    format!("{MCP_PREFIX}{server}__{tool}")
}

/// One tool of an MCP server.
pub(super) struct McpTool {
    server: Weak<McpClient>,
    server_name: String,
    /// `mcp__<server>__<tool>`.
    name: String,
    /// The name on the server.
    remote: String,
    description: String,
    schema: Value,
    category: Category,
}

/// The tools of `server` from its `tools/list` answer, filtered by its configuration, and the
/// names that were skipped (with a warning) for breaking the naming rules.
pub(super) fn adapt(
    server: &Weak<McpClient>,
    server_name: &str,
    config: &McpServerConfig,
    listed: Vec<rmcp::model::Tool>,
) -> (Vec<Arc<dyn Tool>>, Vec<String>) {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = BTreeSet::new();
    for listed in listed {
        let remote = listed.name.to_string();
        if !valid_name(&remote) {
            tracing::warn!(
                server = server_name,
                "skipped the MCP tool {remote:?}: its name does not match ^[A-Za-z0-9_-]+$"
            );
            skipped.push(remote);
            continue;
        }
        let name = full_name(server_name, &remote);
        if name.len() > MAX_TOOL_NAME {
            tracing::warn!(
                server = server_name,
                "skipped the MCP tool {remote:?}: {name} is longer than {MAX_TOOL_NAME} characters"
            );
            skipped.push(remote);
            continue;
        }
        if !config.allow_tools.is_empty() && !config.allow_tools.contains(&remote) {
            continue;
        }
        if config.deny_tools.contains(&remote) {
            continue;
        }
        if !seen.insert(remote.clone()) {
            tracing::warn!(
                server = server_name,
                "skipped a second MCP tool called {remote:?}"
            );
            skipped.push(remote);
            continue;
        }
        let description = listed
            .description
            .as_deref()
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map_or_else(
                || format!("The tool {remote} of the MCP server {server_name}."),
                str::to_owned,
            );
        let read_only = listed
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.read_only_hint)
            == Some(true);
        tools.push(Arc::new(McpTool {
            server: server.clone(),
            server_name: server_name.to_owned(),
            name,
            remote,
            description,
            schema: schema(&listed.input_schema),
            category: if read_only {
                Category::Read
            } else {
                Category::Exec
            },
        }));
    }
    tools.sort_by(|a, b| a.name().cmp(b.name()));
    (tools, skipped)
}

/// The server's input schema, passed through; `{"type":"object"}` when it is empty, and
/// `"type": "object"` added when it has no type (providers require one).
fn schema(input: &Map<String, Value>) -> Value {
    let mut schema = input.clone();
    if !schema.contains_key("type") {
        schema.insert("type".to_owned(), Value::String("object".to_owned()));
    }
    Value::Object(schema)
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> String {
        self.description.clone()
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn category(&self) -> Category {
        self.category
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput {
        let server = match client(&self.server, &self.name, &self.server_name, ctx).await {
            Ok(server) => server,
            Err(output) => return output,
        };
        server
            .call(&self.name, &self.remote, input, None, ctx)
            .await
    }

    /// The user's reply to the question the server asked during the call (`relay` keeps the
    /// call): the call is made again with it, or the call still waiting for it goes on.
    async fn answer(&self, relay: &str, reply: &str, ctx: &ToolContext) -> ToolOutput {
        let server = match client(&self.server, &self.name, &self.server_name, ctx).await {
            Ok(server) => server,
            Err(output) => return output,
        };
        let waiting: super::client::Waiting = match serde_json::from_str(relay) {
            Ok(waiting) => waiting,
            Err(e) => {
                return ToolOutput::error(format!(
                    "{} cannot take the reply: its question is not one of an MCP call ({e})",
                    self.name
                ));
            }
        };
        let input = waiting.arguments.map_or(Value::Null, Value::Object);
        if waiting.sign_in {
            // The call waited for a sign-in: it is made again, with the new tokens.
            return server
                .call(&self.name, &self.remote, input, None, ctx)
                .await;
        }
        let mut answer = super::client::elicitation_answer(reply, &waiting.schema);
        if let Some(params) = &waiting.sampling {
            // The user was asked whether the task's model may answer the server: a yes
            // answers it now, and the call is made again with the model's answer.
            if !super::connect::sampling_allowed(&answer) {
                return ToolOutput::error(format!(
                    "{} failed: the task's caller did not let the MCP server {} use the task's \
                     model",
                    self.name, self.server_name
                ));
            }
            let sampled = async {
                let params = serde_json::from_value(params.clone())
                    .map_err(|e| format!("a kept request Mew cannot read: {e}"))?;
                let request = super::connect::sample_request(params)
                    .map_err(|e| format!("a model call Mew cannot make: {}", e.message))?;
                let answer = super::client::sample(ctx, request).await?;
                serde_json::to_value(super::connect::sample_result(answer))
                    .map_err(|e| format!("an answer Mew cannot encode: {e}"))
            };
            answer = match sampled.await {
                Ok(answer) => answer,
                Err(why) => {
                    return ToolOutput::error(format!(
                        "{} failed: the MCP server {} asked for {why}",
                        self.name, self.server_name
                    ));
                }
            };
        }
        let resumed = match waiting.parked {
            Some(parked) => super::client::Resumed::Parked { parked, answer },
            None => {
                let mut input_responses = waiting.answered;
                input_responses.insert(waiting.key, answer);
                super::client::Resumed::Again {
                    input_responses,
                    request_state: waiting.request_state,
                }
            }
        };
        server
            .call(&self.name, &self.remote, input, Some(resumed), ctx)
            .await
    }
}

/// The name of the tool that signs in to a server that asks for authorization.
pub(super) const SIGN_IN_TOOL: &str = "sign_in";

/// `mcp__<server>__sign_in`: offered for an HTTP server that asks for authorization, when the
/// node takes sign-ins. It asks the task's caller to sign in (the task waits in
/// AUTH_REQUIRED), and once the node's callback got the tokens, the server connects and its
/// tools are offered.
pub(super) struct SignInTool {
    pub(super) server: Weak<McpClient>,
    pub(super) server_name: String,
    pub(super) name: String,
}

#[async_trait]
impl Tool for SignInTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> String {
        format!(
            "The MCP server {} asks for authorization. This asks the user to sign in to it \
             (the task waits until they have); its tools are offered once they did.",
            self.server_name
        )
    }

    fn input_schema(&self) -> Value {
        serde_json::json!({"type": "object", "properties": {}})
    }

    fn category(&self) -> Category {
        // It changes nothing: the user signs in, or does not.
        Category::Read
    }

    async fn call(&self, _input: Value, ctx: &ToolContext) -> ToolOutput {
        match client(&self.server, &self.name, &self.server_name, ctx).await {
            Ok(server) => server.sign_in(&self.name, None, ctx).await,
            Err(output) => output,
        }
    }

    /// The sign-in completed (the node's callback continues the task), or the user replied
    /// before it did: the server's state says which.
    async fn answer(&self, _relay: &str, _reply: &str, ctx: &ToolContext) -> ToolOutput {
        match client(&self.server, &self.name, &self.server_name, ctx).await {
            Ok(server) => server.sign_in(&self.name, None, ctx).await,
            Err(output) => output,
        }
    }
}

/// The client a call of the tool `name` in `ctx` goes through (see
/// [`McpClient::for_caller`]), or the error result that says why there is none.
async fn client(
    server: &Weak<McpClient>,
    name: &str,
    server_name: &str,
    ctx: &ToolContext,
) -> Result<Arc<McpClient>, ToolOutput> {
    let Some(server) = server.upgrade() else {
        return Err(ToolOutput::error(format!(
            "{name} cannot run: the MCP server {server_name} is shut down"
        )));
    };
    server
        .for_caller(ctx)
        .await
        .map_err(|why| ToolOutput::error(format!("{name} cannot run: {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("get_issue-2"));
        assert!(!valid_name(""));
        assert!(!valid_name("bad.name"));
        assert!(!valid_name("has space"));
        assert!(!valid_name("ünï"));
        assert_eq!(full_name("gh", "list"), "mcp__gh__list");
        assert_eq!(server_name_problem("github"), None);
        assert!(server_name_problem("a__b").unwrap().contains("\"__\""));
        assert!(
            server_name_problem("a.b")
                .unwrap()
                .contains("does not match")
        );
    }

    #[test]
    fn schemas_get_an_object_type() {
        assert_eq!(schema(&Map::new()), serde_json::json!({"type": "object"}));
        let Value::Object(given) = serde_json::json!({"properties": {"a": {"type": "string"}}})
        else {
            unreachable!()
        };
        assert_eq!(
            schema(&given),
            serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}})
        );
    }
}
