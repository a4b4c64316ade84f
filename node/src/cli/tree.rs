//! `mew tasks tree ID`: a task and every task it delegated to, on this node and others, with
//! the model usage of each and the usage rolled up from children to parents.
//!
//! A Mew task records its delegation in its A2A metadata, under `mew`: a delegated task has
//! `parentTask`, `depth` and `description`; every task that used a model has its own `usage`;
//! a task that delegated has `children`, links of `{taskId, agent, name?, description,
//! background}`, where `agent` is a role of the parent's node by name or the URL of an A2A
//! agent. [`build_tree`] follows those links level by level, fetching through a function it is
//! given, so that the walk and the roll-up run without a network in tests.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::future::Future;
use std::io::Write;
use std::sync::Arc;

use clap::Args;
use futures_util::StreamExt as _;
use mew_cards::{GetTaskRequest, Task, TaskId, TaskState, Timestamp, is_valid_role_name};
use mew_transport::{AgentTransport as _, Binding, CallContext, ClientOptions, RemoteAgent};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{Mutex, OnceCell};

use super::output::{state_name, status_text, write_json};
use super::remote::remote_error;
use super::tasks::first_message;

/// How deep `mew tasks tree` follows children unless told otherwise.
const DEFAULT_MAX_DEPTH: u32 = 16;

/// How many tasks are fetched at once.
const CONCURRENCY: usize = 8;

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

/// Model use, as a task records its own in `metadata.mew.usage`; a missing field counts 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Usage {
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) cache_read_tokens: u64,
    pub(crate) cache_write_tokens: u64,
    pub(crate) model_calls: u64,
    pub(crate) tool_calls: u64,
    /// Model calls whose service reported no usage: the token counts leave them out.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) unreported_model_calls: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Adds `other` to this, saturating.
    pub(crate) fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.model_calls = self.model_calls.saturating_add(other.model_calls);
        self.tool_calls = self.tool_calls.saturating_add(other.tool_calls);
        self.unreported_model_calls = self
            .unreported_model_calls
            .saturating_add(other.unreported_model_calls);
    }

    /// One line: `1,200 in / 340 out tokens (cache: 50 read, 10 written); 3 model calls, 5
    /// tool calls` (the cache part only when not 0).
    pub(crate) fn summary(&self) -> String {
        // Tokens a service did not report are unknown, not zero: say so.
        let unreported = self.unreported_model_calls;
        let mut text = if unreported > 0 && unreported >= self.model_calls {
            "tokens not reported by the server".to_owned()
        } else {
            format!(
                "{} in / {} out tokens",
                thousands(self.input_tokens),
                thousands(self.output_tokens)
            )
        };
        if unreported > 0 && unreported < self.model_calls {
            let _ = write!(
                text,
                " (and {} model {} whose tokens the server did not report)",
                thousands(unreported),
                plural(unreported, "call", "calls"),
            );
        }
        let mut cache = Vec::new();
        if self.cache_read_tokens > 0 {
            cache.push(format!("{} read", thousands(self.cache_read_tokens)));
        }
        if self.cache_write_tokens > 0 {
            cache.push(format!("{} written", thousands(self.cache_write_tokens)));
        }
        if !cache.is_empty() {
            let _ = write!(text, " (cache: {})", cache.join(", "));
        }
        let _ = write!(
            text,
            "; {} model {}, {} tool {}",
            thousands(self.model_calls),
            plural(self.model_calls, "call", "calls"),
            thousands(self.tool_calls),
            plural(self.tool_calls, "call", "calls"),
        );
        text
    }
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

fn plural<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// One delegation as the parent records it in `metadata.mew.children`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Link {
    /// The child's task id, on the agent that runs it.
    pub(crate) task_id: String,
    /// A role of the parent's node by name, or an agent's URL.
    pub(crate) agent: String,
    /// The name the delegating model gave the child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    /// What the child was asked to do.
    #[serde(default)]
    pub(crate) description: String,
    /// True when the child ran in the background.
    #[serde(default)]
    pub(crate) background: bool,
}

/// Where a task is fetched from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Place {
    /// The agent to ask: a node's front agent (which sees all the node's tasks) or an agent's
    /// URL.
    pub(crate) url: String,
    /// The base URL of the node the task runs on: the roles its own children name are there.
    pub(crate) node: String,
}

/// Where the child `agent` of a task on the node `node` is fetched from: a role name is a role
/// of that node, whose tasks its front agent shows; a URL is fetched there; `peer/role` is a
/// role of a peer in `peers` (name to base URL).
pub(crate) fn locate(
    agent: &str,
    node: &str,
    peers: &HashMap<String, String>,
) -> Result<Place, String> {
    if agent.starts_with("http://") || agent.starts_with("https://") {
        let url = agent.trim_end_matches('/').to_owned();
        return Ok(Place {
            node: node_of(&url),
            url,
        });
    }
    if is_valid_role_name(agent) {
        return Ok(Place {
            url: node.to_owned(),
            node: node.to_owned(),
        });
    }
    if let Some((peer, role)) = agent.split_once('/')
        && is_valid_role_name(role)
        && let Some(base) = peers.get(peer)
    {
        let base = base.trim_end_matches('/').to_owned();
        return Ok(Place {
            url: mew_cards::role_base_url(&base, role),
            node: base,
        });
    }
    Err(format!(
        "cannot tell where the agent {agent:?} is: not a role name, a URL or a known peer's role"
    ))
}

/// The node an agent URL belongs to: `{node}` of `{node}/agents/{role}` (or of its card's
/// URL), else the URL itself.
fn node_of(url: &str) -> String {
    let url = url
        .strip_suffix("/.well-known/agent-card.json")
        .unwrap_or(url)
        .trim_end_matches('/');
    match url.rsplit_once("/agents/") {
        Some((base, role)) if !role.is_empty() && !role.contains('/') => base.to_owned(),
        _ => url.to_owned(),
    }
}

/// The `mew` object of a task's metadata.
fn mew_metadata(task: &Task) -> Option<&serde_json::Map<String, Value>> {
    task.metadata.as_ref()?.get("mew")?.as_object()
}

/// The task's own usage (`mew.usage`), if it records one.
pub(crate) fn own_usage(task: &Task) -> Option<Usage> {
    serde_json::from_value(mew_metadata(task)?.get("usage")?.clone()).ok()
}

/// The task's links to its children (`mew.children`), each parsed on its own: a malformed
/// one is an error that names it.
pub(crate) fn child_links(task: &Task) -> Vec<Result<Link, String>> {
    let Some(children) = mew_metadata(task)
        .and_then(|mew| mew.get("children"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    children
        .iter()
        .map(|value| {
            serde_json::from_value::<Link>(value.clone())
                .map_err(|e| format!("a malformed child link {value}: {e}"))
        })
        .collect()
}

/// A string field of the task's `mew` metadata.
fn mew_string(task: &Task, key: &str) -> Option<String> {
    mew_metadata(task)?.get(key)?.as_str().map(str::to_owned)
}

/// One task of the tree, with what was found of its children.
#[derive(Debug, Clone, Default)]
pub(crate) struct TreeNode {
    /// The task's id.
    pub(crate) task_id: String,
    /// Who runs it: the role or URL the parent's link names (the node's URL for the root).
    pub(crate) agent: String,
    /// Where it was (or would have been) fetched from.
    pub(crate) url: String,
    /// The parent's link to it; `None` for the root.
    pub(crate) link: Option<Link>,
    /// The task, when it could be fetched.
    pub(crate) task: Option<Task>,
    /// Why the task is not here: unreachable, not found, too deep, a malformed link.
    pub(crate) error: Option<String>,
    /// The task appears earlier in the tree (a cycle or a shared child): not followed or
    /// counted again.
    pub(crate) repeated: bool,
    /// The task's own usage, if it records one.
    pub(crate) own: Option<Usage>,
    /// Its own usage plus that of every descendant found.
    pub(crate) total: Usage,
    /// Descendants that could not be fetched: `total` leaves them out.
    pub(crate) missing: usize,
    /// Tasks counted in `total`: this one and its fetched descendants.
    pub(crate) tasks: usize,
    pub(crate) children: Vec<TreeNode>,
}

impl TreeNode {
    /// True when `total` leaves out some descendant.
    pub(crate) fn partial(&self) -> bool {
        self.missing > 0
    }

    /// What the task is about: the parent's description, the task's own, or its first
    /// message.
    fn description(&self) -> String {
        let recorded = self
            .link
            .as_ref()
            .map(|link| link.description.clone())
            .filter(|d| !d.is_empty())
            .or_else(|| {
                self.task
                    .as_ref()
                    .and_then(|t| mew_string(t, "description"))
            })
            .filter(|d| !d.is_empty());
        recorded
            .or_else(|| self.task.as_ref().map(first_message))
            .unwrap_or_default()
    }
}

/// Limits of the walk.
#[derive(Debug, Clone)]
pub(crate) struct Walk {
    /// Children deeper than this (the root is 0) are listed, not fetched.
    pub(crate) max_depth: u32,
    /// Peers' base URLs by name, for `peer/role` agents.
    pub(crate) peers: HashMap<String, String>,
}

/// One task of the walk, before the tree is put together.
struct Entry {
    node: TreeNode,
    place: Place,
    fetch: bool,
    children: Vec<usize>,
}

/// Fetches the task `id` on the node `node` (labelled `agent`) and, level by level, every task
/// it delegated to, through `fetch(place, task_id)`; the tasks of one level are fetched
/// concurrently. A task reached twice is fetched once (the later place is marked repeated),
/// so cycles end; children deeper than `walk.max_depth` are listed with an error. Usage is
/// rolled up from children to parents.
pub(crate) async fn build_tree<F, Fut>(
    id: &str,
    agent: &str,
    node: &str,
    walk: &Walk,
    fetch: F,
) -> TreeNode
where
    F: Fn(Place, String) -> Fut,
    Fut: Future<Output = Result<Task, String>>,
{
    let place = Place {
        url: node.to_owned(),
        node: node.to_owned(),
    };
    let mut seen = HashSet::from([(place.node.clone(), id.to_owned())]);
    let mut arena = vec![Entry {
        node: TreeNode {
            task_id: id.to_owned(),
            agent: agent.to_owned(),
            url: place.url.clone(),
            ..TreeNode::default()
        },
        place,
        fetch: true,
        children: Vec::new(),
    }];
    let mut level = vec![0];
    let mut depth = 0;
    while !level.is_empty() {
        let wanted: Vec<usize> = level.iter().copied().filter(|&i| arena[i].fetch).collect();
        let requests: Vec<_> = wanted
            .iter()
            .map(|&i| fetch(arena[i].place.clone(), arena[i].node.task_id.clone()))
            .collect();
        let answers: Vec<Result<Task, String>> = futures_util::stream::iter(requests)
            .buffered(CONCURRENCY)
            .collect()
            .await;
        for (&i, answer) in wanted.iter().zip(answers) {
            match answer {
                Ok(task) => arena[i].node.task = Some(task),
                Err(error) => arena[i].node.error = Some(error),
            }
        }
        depth += 1;
        let mut next = Vec::new();
        for parent in level {
            let Some(task) = arena[parent].node.task.as_ref() else {
                continue;
            };
            let links = child_links(task);
            let parent_node = arena[parent].place.node.clone();
            for link in links {
                let mut node = TreeNode::default();
                let mut fetch = false;
                let place = match link {
                    Err(error) => {
                        node.error = Some(error);
                        None
                    }
                    Ok(link) => {
                        node.task_id.clone_from(&link.task_id);
                        node.agent.clone_from(&link.agent);
                        let place = match locate(&link.agent, &parent_node, &walk.peers) {
                            Err(error) => {
                                node.error = Some(error);
                                None
                            }
                            Ok(place) => {
                                node.url.clone_from(&place.url);
                                if !seen.insert((place.node.clone(), link.task_id.clone())) {
                                    node.repeated = true;
                                } else if depth > walk.max_depth {
                                    node.error = Some(format!(
                                        "not followed: more than {} {} down (--max-depth)",
                                        walk.max_depth,
                                        plural(u64::from(walk.max_depth), "level", "levels")
                                    ));
                                } else {
                                    fetch = true;
                                }
                                Some(place)
                            }
                        };
                        node.link = Some(link);
                        place
                    }
                };
                let index = arena.len();
                arena.push(Entry {
                    node,
                    place: place.unwrap_or_else(|| Place {
                        url: String::new(),
                        node: parent_node.clone(),
                    }),
                    fetch,
                    children: Vec::new(),
                });
                arena[parent].children.push(index);
                if fetch {
                    next.push(index);
                }
            }
        }
        level = next;
    }
    let mut slots: Vec<Option<Entry>> = arena.into_iter().map(Some).collect();
    assemble(&mut slots, 0)
}

/// Takes entry `index` out of `slots` with its children, and rolls their usage up into it.
fn assemble(slots: &mut [Option<Entry>], index: usize) -> TreeNode {
    let Some(entry) = slots.get_mut(index).and_then(Option::take) else {
        return TreeNode::default();
    };
    let mut node = entry.node;
    node.children = entry
        .children
        .iter()
        .map(|&child| assemble(slots, child))
        .collect();
    node.own = node.task.as_ref().and_then(own_usage);
    node.total = node.own.unwrap_or_default();
    node.tasks = usize::from(node.task.is_some());
    node.missing = 0;
    for child in &node.children {
        node.total.add(&child.total);
        node.tasks += child.tasks;
        node.missing += child.missing;
        if child.error.is_some() {
            node.missing += 1;
        }
    }
    node
}

/// The tree as terminal lines: each task on a line (`id  agent  state  description`), its
/// usage on the lines under it, children drawn with `├─`, `│` and `└─`.
pub(crate) fn render_tree(root: &TreeNode) -> String {
    let mut out = String::new();
    render_node(&mut out, root, "", "");
    out
}

fn render_node(out: &mut String, node: &TreeNode, first: &str, rest: &str) {
    let mut head = vec![if node.task_id.is_empty() {
        "?".to_owned()
    } else {
        node.task_id.clone()
    }];
    if !node.agent.is_empty() {
        head.push(node.agent.clone());
    }
    if node.repeated {
        head.push("(repeated: shown above)".to_owned());
    } else if let Some(task) = &node.task {
        head.push(state_name(task.status.state).to_owned());
    } else {
        head.push("unavailable".to_owned());
    }
    let mut description = node.description();
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
            && let Some(parent) = mew_string(task, "parentTask")
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
            Some(usage) => format!("usage: {}", usage.summary()),
            None => "usage: none recorded".to_owned(),
        });
    }
    if !node.children.is_empty() {
        details.push(format!(
            "total: {} over {} {}",
            node.total.summary(),
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
            &format!("{rest}{branch}"),
            &format!("{rest}{under}"),
        );
    }
}

/// `text` on one line, at most `width` characters (the last one `…` when cut).
fn one_line(text: &str, width: usize) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() <= width {
        return text;
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A task of the tree as `--json` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonNode {
    task_id: String,
    agent: String,
    url: String,
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
    depth: Option<u64>,
}

impl From<&TreeNode> for JsonNode {
    fn from(node: &TreeNode) -> Self {
        let task = node.task.as_ref().map(|task| JsonTask {
            id: task.id.to_string(),
            context_id: task.context_id.to_string(),
            state: task.status.state,
            timestamp: task.status.timestamp,
            status_message: status_text(task),
            parent_task: mew_string(task, "parentTask"),
            depth: mew_metadata(task)
                .and_then(|mew| mew.get("depth"))
                .and_then(Value::as_u64),
        });
        JsonNode {
            task_id: node.task_id.clone(),
            agent: node.agent.clone(),
            url: node.url.clone(),
            name: node.link.as_ref().and_then(|link| link.name.clone()),
            description: node.description(),
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
        let options = ClientOptions {
            binding: self.binding.filter(|_| place.node == self.root),
            tls: self.tls.clone(),
            headers: if place.node == self.root {
                self.headers.clone()
            } else {
                http::HeaderMap::new()
            },
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

/// Runs `mew tasks tree` on the node at `node`, whose front agent is `front`, with `options`
/// (their binding only for the agents of `node`). Fails (exit 1) when the task itself cannot
/// be fetched; children that cannot be are shown with their error and noted on stderr.
pub(crate) async fn tree(
    args: &TreeArgs,
    front: RemoteAgent,
    node: &str,
    options: ClientOptions,
    peers: HashMap<String, String>,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let agents = Agents {
        binding: options.binding,
        tls: options.tls,
        headers: options.headers,
        root: node.to_owned(),
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
    use std::sync::Mutex as StdMutex;

    use mew_cards::{Message, TaskStatus};
    use serde_json::json;

    use super::*;

    const NODE: &str = "http://n1:7777";
    const OTHER: &str = "http://n2:7777";

    /// A task with `mew` metadata `mew`, and a first message.
    fn task(id: &str, state: TaskState, mew: Value) -> Task {
        Task {
            id: id.into(),
            context_id: "c1".into(),
            status: TaskStatus {
                state,
                ..TaskStatus::default()
            },
            history: vec![Message::user_text(format!("do {id}"))],
            metadata: Some(serde_json::Map::from_iter([("mew".to_owned(), mew)])),
            ..Task::default()
        }
    }

    /// The tree as the JSON `--json` prints.
    fn tree_json(root: &TreeNode) -> Value {
        serde_json::to_value(JsonNode::from(root)).unwrap()
    }

    fn usage(input: u64, output: u64, calls: u64) -> Value {
        json!({"inputTokens": input, "outputTokens": output, "modelCalls": calls, "toolCalls": 1})
    }

    fn link(id: &str, agent: &str, description: &str) -> Value {
        json!({"taskId": id, "agent": agent, "description": description, "background": false})
    }

    /// Tasks by (url, id); the fetches made are recorded.
    struct Fake {
        tasks: HashMap<(String, String), Task>,
        fetched: StdMutex<Vec<(String, String)>>,
    }

    impl Fake {
        fn new(tasks: Vec<(&str, Task)>) -> Self {
            Self {
                tasks: tasks
                    .into_iter()
                    .map(|(url, task)| ((url.to_owned(), task.id.to_string()), task))
                    .collect(),
                fetched: StdMutex::new(Vec::new()),
            }
        }

        async fn fetch(&self, place: Place, id: String) -> Result<Task, String> {
            self.fetched
                .lock()
                .unwrap()
                .push((place.url.clone(), id.clone()));
            self.tasks
                .get(&(place.url.clone(), id.clone()))
                .cloned()
                .ok_or_else(|| format!("task {id} not found at {}", place.url))
        }

        async fn tree(&self, id: &str, max_depth: u32) -> TreeNode {
            let walk = Walk {
                max_depth,
                peers: HashMap::from([("lab".to_owned(), OTHER.to_owned())]),
            };
            build_tree(id, NODE, NODE, &walk, |place, id| self.fetch(place, id)).await
        }
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
        total.add(&own_usage(&t).unwrap());
        total.add(&own_usage(&t).unwrap());
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
        assert_eq!(own_usage(&task("b", TaskState::Completed, json!({}))), None);
        // A server that reported no usage: unknown, never shown as zero.
        let silent = Usage {
            model_calls: 2,
            unreported_model_calls: 2,
            ..Usage::default()
        };
        assert_eq!(
            silent.summary(),
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
            mixed.summary(),
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

    #[test]
    fn children_are_located_on_the_parents_node() {
        let peers = HashMap::from([("lab".to_owned(), format!("{OTHER}/"))]);
        let front = Place {
            url: NODE.into(),
            node: NODE.into(),
        };
        assert_eq!(locate("Explore", NODE, &peers), Ok(front));
        assert_eq!(
            locate(&format!("{OTHER}/agents/reviewer/"), NODE, &peers),
            Ok(Place {
                url: format!("{OTHER}/agents/reviewer"),
                node: OTHER.into(),
            })
        );
        assert_eq!(
            locate(
                &format!("{OTHER}/agents/reviewer/.well-known/agent-card.json"),
                NODE,
                &peers
            )
            .map(|p| p.node),
            Ok(OTHER.into())
        );
        assert_eq!(
            locate("http://sdk:9000/a2a", NODE, &peers).map(|p| p.node),
            Ok("http://sdk:9000/a2a".into())
        );
        assert_eq!(
            locate("lab/reviewer", NODE, &peers),
            Ok(Place {
                url: format!("{OTHER}/agents/reviewer"),
                node: OTHER.into(),
            })
        );
        assert!(locate("nowhere/reviewer", NODE, &peers).is_err());
        assert!(locate("not a role", NODE, &peers).is_err());
    }

    /// root (own 100/10) -> a (local, 50/5) -> c (remote, 7/1); root -> b (remote, 20/2).
    fn three_levels() -> Fake {
        let remote = format!("{OTHER}/agents/reviewer");
        Fake::new(vec![
            (
                NODE,
                task(
                    "root",
                    TaskState::Completed,
                    json!({
                        "usage": {"inputTokens": 100, "outputTokens": 10, "cacheReadTokens": 40,
                                  "modelCalls": 2, "toolCalls": 1},
                        "children": [link("a", "Explore", "look around"), link("b", &remote, "review")],
                    }),
                ),
            ),
            (
                NODE,
                task(
                    "a",
                    TaskState::Completed,
                    json!({
                        "parentTask": "root", "depth": 1, "description": "look around",
                        "usage": usage(50, 5, 1),
                        "children": [link("c", &format!("{OTHER}/agents/helper"), "help")],
                    }),
                ),
            ),
            (
                &remote,
                task(
                    "b",
                    TaskState::Completed,
                    json!({"parentTask": "root", "depth": 1, "usage": usage(20, 2, 1)}),
                ),
            ),
            (
                &format!("{OTHER}/agents/helper"),
                task(
                    "c",
                    TaskState::Completed,
                    json!({"parentTask": "a", "depth": 2, "usage": usage(7, 1, 1)}),
                ),
            ),
        ])
    }

    #[tokio::test]
    async fn usage_rolls_up_across_levels() {
        let fake = three_levels();
        let root = fake.tree("root", 16).await;
        assert_eq!(root.error, None);
        assert_eq!(root.own.unwrap().input_tokens, 100);
        assert_eq!(root.total.input_tokens, 177);
        assert_eq!(root.total.output_tokens, 18);
        assert_eq!(root.total.model_calls, 5);
        assert_eq!(root.total.tool_calls, 4);
        assert_eq!((root.tasks, root.missing), (4, 0));
        assert!(!root.partial());
        let a = &root.children[0];
        assert_eq!((a.task_id.as_str(), a.agent.as_str()), ("a", "Explore"));
        assert_eq!(a.total.input_tokens, 57);
        assert_eq!(a.children[0].total.input_tokens, 7);
        assert_eq!(root.children[1].total.input_tokens, 20);
        assert!(root.children[1].children.is_empty());
    }

    #[tokio::test]
    async fn a_task_without_usage_counts_as_zero() {
        let fake = Fake::new(vec![
            (
                NODE,
                task(
                    "root",
                    TaskState::Completed,
                    json!({"children": [link("a", "wc", "count")]}),
                ),
            ),
            (
                NODE,
                task("a", TaskState::Completed, json!({"usage": usage(3, 4, 1)})),
            ),
        ]);
        let root = fake.tree("root", 16).await;
        assert_eq!(root.own, None);
        assert_eq!(root.total.input_tokens, 3);
        assert_eq!(root.tasks, 2);
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
    async fn the_root_that_cannot_be_fetched_is_an_error() {
        let fake = Fake::new(vec![]);
        let root = fake.tree("nope", 16).await;
        assert!(root.task.is_none());
        assert_eq!(
            root.error.as_deref(),
            Some("task nope not found at http://n1:7777")
        );
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
    async fn an_endless_chain_stops_at_the_depth_limit() {
        // Every task delegates to a new one; the walk fetches max_depth + 1 of them.
        let fetched = StdMutex::new(0);
        let fetch = |_: Place, id: String| {
            *fetched.lock().unwrap() += 1;
            let next = format!("{id}+");
            async move {
                Ok(task(
                    &id,
                    TaskState::Working,
                    json!({"children": [link(&next, "Plan", "deeper")]}),
                ))
            }
        };
        let walk = Walk {
            max_depth: 3,
            peers: HashMap::new(),
        };
        let root = build_tree("t", NODE, NODE, &walk, fetch).await;
        assert_eq!(*fetched.lock().unwrap(), 4);
        assert_eq!((root.tasks, root.missing), (4, 1));
        let mut deepest = &root;
        while let Some(child) = deepest.children.first() {
            deepest = child;
        }
        assert_eq!(deepest.task_id, "t++++");
        assert!(deepest.error.as_deref().unwrap().contains("--max-depth"));
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
        let remote = format!("{OTHER}/agents/reviewer");
        let helper = format!("{OTHER}/agents/helper");
        let expected = format!(
            "root  {NODE}  completed  do root
│  usage: 100 in / 10 out tokens (cache: 40 read); 2 model calls, 1 tool call
│  total: 177 in / 18 out tokens (cache: 40 read); 5 model calls, 4 tool calls over 4 tasks
├─ a  Explore  completed  look around
│  │  usage: 50 in / 5 out tokens; 1 model call, 1 tool call
│  │  total: 57 in / 6 out tokens; 2 model calls, 2 tool calls over 2 tasks
│  └─ c  {helper}  completed  help
│        usage: 7 in / 1 out tokens; 1 model call, 1 tool call
└─ b  {remote}  failed  review [name: rev] [background]
      status: the reviewer gave up
      usage: 20 in / 2 out tokens; 1 model call, 1 tool call
"
        );
        assert_eq!(render_tree(&root), expected);
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
