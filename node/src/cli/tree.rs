//! `mew tasks tree ID`: a task and every task it delegated to, on this node and others, with
//! the model usage of each and the usage rolled up from children to parents. The walk is
//! [`crate::tree`]; this module fetches through the nodes' agents and prints the result.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::Arc;

use clap::Args;
use mew_cards::mew::{MewMetadata, Usage};
use mew_cards::{GetTaskRequest, Task, TaskId, TaskState, Timestamp};
use mew_transport::{AgentTransport as _, Binding, CallContext, ClientOptions, RemoteAgent};
use serde::Serialize;
use tokio::sync::{Mutex, OnceCell};

use super::output::{one_line, state_name, status_text, write_json};
use super::remote::remote_error;
use super::tasks::first_message;
use crate::tree::{Place, TreeNode, Walk, build_tree};

/// How deep `mew tasks tree` follows children unless told otherwise.
const DEFAULT_MAX_DEPTH: u32 = 16;

/// How many characters of a status message a tree line shows.
const STATUS_WIDTH: usize = 80;

/// `mew tasks tree`.
#[derive(Debug, Args)]
pub(crate) struct TreeArgs {
    /// The task's id
    pub(crate) id: String,
    /// Follow delegations at most this many levels down
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_DEPTH)]
    pub(crate) max_depth: u32,
}

/// One line: `1,200 in / 340 out tokens (cache: 50 read, 10 written); 3 model calls, 5 tool
/// calls` (the cache part only when not 0).
fn summary(usage: &Usage) -> String {
    // Tokens a service did not report are unknown, not zero: say so.
    let unreported = usage.unreported_model_calls;
    let mut text = if unreported > 0 && unreported >= usage.model_calls {
        "tokens not reported by the server".to_owned()
    } else {
        format!(
            "{} in / {} out tokens",
            thousands(usage.input_tokens),
            thousands(usage.output_tokens)
        )
    };
    if unreported > 0 && unreported < usage.model_calls {
        let _ = write!(
            text,
            " (and {} model {} whose tokens the server did not report)",
            thousands(unreported),
            plural(unreported, "call", "calls"),
        );
    }
    let mut cache = Vec::new();
    if usage.cache_read_tokens > 0 {
        cache.push(format!("{} read", thousands(usage.cache_read_tokens)));
    }
    if usage.cache_write_tokens > 0 {
        cache.push(format!("{} written", thousands(usage.cache_write_tokens)));
    }
    if !cache.is_empty() {
        let _ = write!(text, " (cache: {})", cache.join(", "));
    }
    let _ = write!(
        text,
        "; {} model {}, {} tool {}",
        thousands(usage.model_calls),
        plural(usage.model_calls, "call", "calls"),
        thousands(usage.tool_calls),
        plural(usage.tool_calls, "call", "calls"),
    );
    text
}

/// What the task is about: the parent's description, the task's own, or its first message.
fn description(node: &TreeNode) -> String {
    let recorded = node
        .link
        .as_ref()
        .map(|link| link.description.clone())
        .filter(|d| !d.is_empty())
        .or_else(|| {
            node.task
                .as_ref()
                .and_then(|t| MewMetadata::read(t.metadata.as_ref()).description)
        })
        .filter(|d| !d.is_empty());
    recorded
        .or_else(|| node.task.as_ref().map(first_message))
        .unwrap_or_default()
}

/// `n` with a comma between groups of three digits.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `one` when `n` is 1, else `many`.
fn plural<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// The tree as terminal lines: each task on a line (`id  who  state  description`, `who` as
/// [`who`] says), its usage on the lines under it, children drawn with `├─`, `│` and `└─`.
pub(crate) fn render_tree(root: &TreeNode) -> String {
    let mut out = String::new();
    render_node(&mut out, root, &root.node, ("", ""), None);
    out
}

/// Who runs a task, as its tree line says: its role, followed by ` @ host:port` when it runs
/// on another node than `home` (the one the tree starts on); the agent (its URL) when no role
/// is known.
fn who(node: &TreeNode, home: &str) -> String {
    let Some(role) = &node.role else {
        return node.agent.clone();
    };
    let trim = |url: &str| url.trim_end_matches('/').to_owned();
    if trim(&node.node) == trim(home) {
        return role.clone();
    }
    let place = node
        .node
        .strip_prefix("http://")
        .or_else(|| node.node.strip_prefix("https://"))
        .unwrap_or(&node.node)
        .trim_end_matches('/');
    format!("{role} @ {place}")
}

/// Appends `node`'s lines and its children's: `first` starts its head line, `rest` each line
/// under it; `home` is the node the tree starts on. A task's trace id is shown unless it is
/// its parent's (`parent_trace`).
fn render_node(
    out: &mut String,
    node: &TreeNode,
    home: &str,
    (first, rest): (&str, &str),
    parent_trace: Option<&str>,
) {
    let trace = node
        .task
        .as_ref()
        .and_then(crate::telemetry::trace_id_of_task);
    let mut head = vec![if node.task_id.is_empty() {
        "?".to_owned()
    } else {
        node.task_id.clone()
    }];
    let who = who(node, home);
    if !who.is_empty() {
        head.push(who);
    }
    if node.repeated {
        head.push("(repeated: shown above)".to_owned());
    } else if let Some(task) = &node.task {
        head.push(state_name(task.status.state).to_owned());
    } else {
        head.push("unavailable".to_owned());
    }
    let mut description = description(node);
    if let Some(name) = node.link.as_ref().and_then(|link| link.name.as_deref()) {
        description.push_str(&format!(" [name: {name}]"));
    }
    if node.link.as_ref().is_some_and(|link| link.background) {
        description.push_str(" [background]");
    }
    let description = description.trim();
    if !description.is_empty() && !node.repeated {
        head.push(description.to_owned());
    }
    let _ = writeln!(out, "{first}{}", head.join("  "));

    let detail = format!(
        "{rest}{}",
        if node.children.is_empty() {
            "   "
        } else {
            "│  "
        }
    );
    let mut details = Vec::new();
    if let Some(error) = &node.error {
        details.push(format!("error: {}", one_line(error, usize::MAX)));
    }
    if let Some(task) = &node.task {
        if node.link.is_none()
            && let Some(parent) = MewMetadata::read(task.metadata.as_ref()).parent_task
        {
            details.push(format!("parent: {parent}"));
        }
        if !matches!(
            task.status.state,
            TaskState::Completed | TaskState::Working | TaskState::Submitted
        ) && let Some(text) = status_text(task)
        {
            details.push(format!("status: {}", one_line(&text, STATUS_WIDTH)));
        }
        details.push(match &node.own {
            Some(usage) => format!("usage: {}", summary(usage)),
            None => "usage: none recorded".to_owned(),
        });
        if let Some(trace) = trace.as_deref().filter(|t| Some(*t) != parent_trace) {
            details.push(format!("trace: {trace}"));
        }
    }
    if !node.children.is_empty() {
        details.push(format!(
            "total: {} over {} {}",
            summary(&node.total),
            node.tasks,
            plural(node.tasks as u64, "task", "tasks")
        ));
        if node.partial() {
            details.push(format!(
                "partial: {} {} missing from the total",
                node.missing,
                plural(node.missing as u64, "task", "tasks")
            ));
        }
    }
    for line in details {
        let _ = writeln!(out, "{detail}{line}");
    }
    for (i, child) in node.children.iter().enumerate() {
        let last = i + 1 == node.children.len();
        let (branch, under) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        render_node(
            out,
            child,
            home,
            (&format!("{rest}{branch}"), &format!("{rest}{under}")),
            trace.as_deref().or(parent_trace),
        );
    }
}

/// A task of the tree as `--json` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonNode {
    task_id: String,
    agent: String,
    url: String,
    /// The role that runs it, when the task or its link names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    description: String,
    background: bool,
    /// The task in short, `null` when it could not be fetched or is repeated.
    task: Option<JsonTask>,
    own_usage: Option<Usage>,
    total_usage: Usage,
    /// Tasks counted in `totalUsage`.
    tasks: usize,
    partial: bool,
    repeated: bool,
    error: Option<String>,
    children: Vec<JsonNode>,
}

/// A fetched task of the tree, in short, as `--json` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonTask {
    id: String,
    context_id: String,
    state: TaskState,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_task: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    depth: Option<u32>,
}

impl From<&TreeNode> for JsonNode {
    fn from(node: &TreeNode) -> Self {
        let task = node.task.as_ref().map(|task| {
            let mew = MewMetadata::read(task.metadata.as_ref());
            JsonTask {
                id: task.id.to_string(),
                context_id: task.context_id.to_string(),
                state: task.status.state,
                timestamp: task.status.timestamp,
                status_message: status_text(task),
                parent_task: mew.parent_task.map(|id| id.to_string()),
                depth: mew.depth,
            }
        });
        JsonNode {
            task_id: node.task_id.clone(),
            agent: node.agent.clone(),
            url: node.url.clone(),
            role: node.role.clone(),
            name: node.link.as_ref().and_then(|link| link.name.clone()),
            description: description(node),
            background: node.link.as_ref().is_some_and(|link| link.background),
            task,
            own_usage: node.own,
            total_usage: node.total,
            tasks: node.tasks,
            partial: node.partial(),
            repeated: node.repeated,
            error: node.error.clone(),
            children: node.children.iter().map(JsonNode::from).collect(),
        }
    }
}

/// An agent being connected to, or connected, or why it could not be.
type Connection = Arc<OnceCell<Result<Arc<RemoteAgent>, String>>>;

/// The agents a tree is fetched through, each connected once.
struct Agents {
    /// The binding for the agents of the node the tree starts on.
    binding: Option<Binding>,
    /// The TLS settings for every agent (`tls:` of the configuration).
    tls: mew_transport::TlsOptions,
    /// The headers for the agents of the node the tree starts on (its `--token`): credentials
    /// for one node are never sent to another.
    headers: http::HeaderMap,
    root: String,
    /// The configured peers' base URLs with the options carrying their credentials: an agent
    /// under one of them is asked with those.
    peer_credentials: Vec<(String, ClientOptions)>,
    connected: Mutex<HashMap<String, Connection>>,
}

impl Agents {
    async fn agent(&self, place: &Place) -> Result<Arc<RemoteAgent>, String> {
        let cell = self
            .connected
            .lock()
            .await
            .entry(place.url.clone())
            .or_default()
            .clone();
        let peer = self
            .peer_credentials
            .iter()
            .find(|(base, _)| under(&place.url, base))
            .map(|(_, options)| options);
        let options = ClientOptions {
            binding: self.binding.filter(|_| place.node == self.root),
            tls: self.tls.clone(),
            headers: match peer {
                _ if place.node == self.root => self.headers.clone(),
                Some(peer) => peer.headers.clone(),
                None => http::HeaderMap::new(),
            },
            credentials: peer
                .filter(|_| place.node != self.root)
                .and_then(|peer| peer.credentials.clone()),
            ..ClientOptions::default()
        };
        cell.get_or_init(|| async {
            RemoteAgent::resolve_with(&place.url, options)
                .await
                .map(Arc::new)
                .map_err(|e| format!("cannot reach {}: {:#}", place.url, remote_error(e)))
        })
        .await
        .clone()
    }

    async fn get_task(&self, place: Place, id: String) -> Result<Task, String> {
        let agent = self.agent(&place).await?;
        let request = GetTaskRequest {
            id: TaskId::from(id.as_str()),
            ..GetTaskRequest::default()
        };
        agent
            .get_task(&CallContext::anonymous(), request)
            .await
            .map_err(|e| format!("{:#}", remote_error(e)))
    }
}

/// Whether `url` is `base` or under it (at a `/`).
fn under(url: &str, base: &str) -> bool {
    url.strip_prefix(base)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Runs `mew tasks tree` on the node at `node`, whose front agent is `front`, with `options`
/// (their binding and headers only for the agents of `node`); the agents of the configured
/// `peers` (name to base URL) are asked with the peers' credentials. Fails (exit 1) when the task itself cannot
/// be fetched; children that cannot be are shown with their error and noted on stderr.
pub(crate) async fn tree(
    args: &TreeArgs,
    front: RemoteAgent,
    node: &str,
    options: ClientOptions,
    (peers, peer_credentials): (HashMap<String, String>, Vec<(String, ClientOptions)>),
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let agents = Agents {
        binding: options.binding,
        tls: options.tls,
        headers: options.headers,
        root: node.to_owned(),
        peer_credentials,
        connected: Mutex::new(HashMap::from([(
            node.to_owned(),
            Arc::new(OnceCell::new_with(Some(Ok(Arc::new(front))))),
        )])),
    };
    let walk = Walk {
        max_depth: args.max_depth,
        peers,
    };
    let root = build_tree(&args.id, node, node, &walk, |place, id| {
        agents.get_task(place, id)
    })
    .await;
    if root.task.is_none() {
        anyhow::bail!(
            "cannot fetch task {}: {}",
            args.id,
            root.error.as_deref().unwrap_or("no answer")
        );
    }
    if json {
        write_json(out, &JsonNode::from(&root))?;
    } else {
        out.write_all(render_tree(&root).as_bytes())?;
    }
    if root.partial() {
        eprintln!(
            "mew: {} {} of the tree could not be fetched; the totals leave {} out",
            root.missing,
            plural(root.missing as u64, "task", "tasks"),
            plural(root.missing as u64, "it", "them"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use mew_cards::{Message, TaskStatus};
    use serde_json::{Value, json};

    use super::*;
    use crate::tree::fixtures::{Fake, NODE, OTHER, link, task, three_levels, usage};

    /// The tree as the JSON `--json` prints.
    fn tree_json(root: &TreeNode) -> Value {
        serde_json::to_value(JsonNode::from(root)).unwrap()
    }

    #[test]
    fn tree_parses_its_flags() {
        use clap::Parser as _;

        use super::super::tasks::TasksCommand;
        use super::super::{Cli, Command};

        let parse = |args: &[&str]| {
            Cli::try_parse_from(["mew", "tasks"].iter().chain(args).copied()).map(|cli| {
                match cli.command {
                    Command::Tasks(tasks) => match tasks.command {
                        TasksCommand::Tree(tree) => {
                            (tree.id, tree.max_depth, tasks.node.node, cli.global.json)
                        }
                        other => panic!("{other:?}"),
                    },
                    other => panic!("{other:?}"),
                }
            })
        };
        assert_eq!(
            parse(&["tree", "T"]).unwrap(),
            ("T".into(), DEFAULT_MAX_DEPTH, None, false)
        );
        assert_eq!(
            parse(&[
                "tree",
                "T",
                "--max-depth",
                "2",
                "--json",
                "--node",
                "http://h:1"
            ])
            .unwrap(),
            ("T".into(), 2, Some("http://h:1".into()), true)
        );
        assert!(parse(&["tree"]).is_err());
        assert!(parse(&["tree", "T", "--max-depth", "-1"]).is_err());
    }

    #[test]
    fn usage_adds_and_reads_from_metadata() {
        let mut total = Usage::default();
        let t = task("a", TaskState::Completed, json!({"usage": usage(10, 2, 1)}));
        total.add(&MewMetadata::read(t.metadata.as_ref()).usage.unwrap());
        total.add(&MewMetadata::read(t.metadata.as_ref()).usage.unwrap());
        assert_eq!(
            total,
            Usage {
                input_tokens: 20,
                output_tokens: 4,
                model_calls: 2,
                tool_calls: 2,
                ..Usage::default()
            }
        );
        assert_eq!(
            MewMetadata::read(task("b", TaskState::Completed, json!({})).metadata.as_ref()).usage,
            None
        );
        // A server that reported no usage: unknown, never shown as zero.
        let silent = Usage {
            model_calls: 2,
            unreported_model_calls: 2,
            ..Usage::default()
        };
        assert_eq!(
            summary(&silent),
            "tokens not reported by the server; 2 model calls, 0 tool calls"
        );
        let mixed = Usage {
            input_tokens: 10,
            output_tokens: 2,
            model_calls: 3,
            unreported_model_calls: 1,
            ..Usage::default()
        };
        assert_eq!(
            summary(&mixed),
            "10 in / 2 out tokens (and 1 model call whose tokens the server did not report); \
             3 model calls, 0 tool calls"
        );
        let read: Usage =
            serde_json::from_value(json!({"modelCalls": 1, "unreportedModelCalls": 1})).unwrap();
        assert_eq!(read.unreported_model_calls, 1);
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[tokio::test]
    async fn a_missing_child_makes_the_totals_partial() {
        let fake = Fake::new(vec![
            (
                NODE,
                task(
                    "root",
                    TaskState::Completed,
                    json!({
                        "usage": usage(10, 1, 1),
                        "children": [
                            link("a", "Explore", "found"),
                            link("gone", "Explore", "lost"),
                            {"agent": 3},
                        ],
                    }),
                ),
            ),
            (
                NODE,
                task(
                    "a",
                    TaskState::Completed,
                    json!({
                        "usage": usage(5, 1, 1),
                        "children": [link("x", "http://down:1/agents/r", "far away")],
                    }),
                ),
            ),
        ]);
        let root = fake.tree("root", 16).await;
        assert_eq!(root.total.input_tokens, 15);
        assert_eq!((root.tasks, root.missing), (2, 3));
        assert!(root.partial());
        let [a, gone, bad] = root.children.as_slice() else {
            panic!("{root:?}");
        };
        assert!(a.partial() && a.missing == 1, "{a:?}");
        assert!(
            a.children[0]
                .error
                .as_deref()
                .unwrap()
                .contains("not found")
        );
        assert!(gone.error.as_deref().unwrap().contains("gone"), "{gone:?}");
        assert!(gone.task.is_none() && !gone.partial());
        assert!(
            bad.error.as_deref().unwrap().contains("malformed"),
            "{bad:?}"
        );

        let json = tree_json(&root);
        assert_eq!(json["partial"], true);
        assert_eq!(json["totalUsage"]["inputTokens"], 15);
        assert_eq!(
            json["children"][1]["error"],
            "task gone not found at http://n1:7777"
        );
        assert_eq!(json["children"][1]["task"], Value::Null);
    }

    #[tokio::test]
    async fn cycles_end_and_count_each_task_once() {
        // a -> b -> a, and b -> b: every task is fetched once.
        let fake = Fake::new(vec![
            (
                NODE,
                task(
                    "a",
                    TaskState::Completed,
                    json!({"usage": usage(1, 0, 1), "children": [link("b", "Plan", "")]}),
                ),
            ),
            (
                NODE,
                task(
                    "b",
                    TaskState::Completed,
                    json!({
                        "usage": usage(2, 0, 1),
                        "children": [link("a", "general-purpose", ""), link("b", NODE, "")],
                    }),
                ),
            ),
        ]);
        let root = fake.tree("a", 16).await;
        assert_eq!(fake.fetched.lock().unwrap().len(), 2);
        assert_eq!(root.total.input_tokens, 3);
        assert_eq!((root.tasks, root.missing), (2, 0));
        let b = &root.children[0];
        assert!(
            b.children
                .iter()
                .all(|c| c.repeated && c.children.is_empty())
        );
        assert!(render_tree(&root).contains("(repeated: shown above)"));
    }

    #[tokio::test]
    async fn a_small_tree_renders_with_glyphs() {
        let fake = three_levels();
        let mut root = fake.tree("root", 16).await;
        root.children[1].task.as_mut().unwrap().status = TaskStatus {
            state: TaskState::Failed,
            message: Some(Message::agent_text("the reviewer\ngave up")),
            timestamp: None,
        };
        if let Some(link) = root.children[1].link.as_mut() {
            link.name = Some("rev".into());
            link.background = true;
        }
        let expected = "root  boss  completed  do root
│  usage: 100 in / 10 out tokens (cache: 40 read); 2 model calls, 1 tool call
│  total: 177 in / 18 out tokens (cache: 40 read); 5 model calls, 4 tool calls over 4 tasks
├─ a  Explore  completed  look around
│  │  usage: 50 in / 5 out tokens; 1 model call, 1 tool call
│  │  total: 57 in / 6 out tokens; 2 model calls, 2 tool calls over 2 tasks
│  └─ c  helper @ n2:7777  completed  help
│        usage: 7 in / 1 out tokens; 1 model call, 1 tool call
└─ b  reviewer @ n2:7777  failed  review [name: rev] [background]
      status: the reviewer gave up
      usage: 20 in / 2 out tokens; 1 model call, 1 tool call
";
        assert_eq!(render_tree(&root), expected);
        let json = tree_json(&root);
        assert_eq!(json["role"], "boss");
        assert_eq!(json["url"], NODE);
        assert_eq!(json["children"][1]["role"], "reviewer");
        assert_eq!(
            json["children"][1]["url"],
            format!("{OTHER}/agents/reviewer")
        );
    }

    #[tokio::test]
    async fn a_partial_tree_renders_its_errors() {
        let fake = Fake::new(vec![(
            NODE,
            task(
                "root",
                TaskState::Completed,
                json!({"parentTask": "up", "children": [link("gone", "Explore", "lost")]}),
            ),
        )]);
        let root = fake.tree("root", 16).await;
        let expected = format!(
            "root  {NODE}  completed  do root
│  parent: up
│  usage: none recorded
│  total: 0 in / 0 out tokens; 0 model calls, 0 tool calls over 1 task
│  partial: 1 task missing from the total
└─ gone  Explore  unavailable  lost
      error: task gone not found at {NODE}
"
        );
        assert_eq!(render_tree(&root), expected);
    }

    #[tokio::test]
    async fn a_task_names_its_agent_when_no_role_is_known() {
        let sdk = "http://sdk:9000/a2a";
        let fake = Fake::new(vec![
            (
                NODE,
                task(
                    "root",
                    TaskState::Completed,
                    json!({"role": "boss", "children": [link("x", sdk, "ask the sdk")]}),
                ),
            ),
            (sdk, task("x", TaskState::Completed, json!({}))),
        ]);
        let root = fake.tree("root", 16).await;
        let text = render_tree(&root);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "root  boss  completed  do root");
        assert_eq!(lines[3], format!("└─ x  {sdk}  completed  ask the sdk"));
        assert_eq!(tree_json(&root)["children"][0].get("role"), None);
    }

    #[tokio::test]
    async fn a_lone_task_has_no_total() {
        let fake = Fake::new(vec![(NODE, task("t", TaskState::Completed, json!({})))]);
        let root = fake.tree("t", 16).await;
        assert_eq!(
            render_tree(&root),
            format!("t  {NODE}  completed  do t\n   usage: none recorded\n")
        );
        let json = tree_json(&root);
        assert_eq!(json["taskId"], "t");
        assert_eq!(json["task"]["state"], "TASK_STATE_COMPLETED");
        assert_eq!(json["ownUsage"], Value::Null);
        assert_eq!(json["totalUsage"]["inputTokens"], 0);
        assert_eq!(json["children"], json!([]));
        assert_eq!(json["error"], Value::Null);
        assert_eq!(json["partial"], false);
    }
}
