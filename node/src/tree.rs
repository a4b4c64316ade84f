//! The delegation tree of a task: the task, every task it delegated to on this node and
//! others, and the model usage of each, rolled up from children to parents.
//!
//! A Mew task records its delegation in its metadata (the Mew extension, `mew_cards::mew`): a
//! delegated task has `parentTask`, `depth` and `description`; every task that used a model has
//! its own `usage`; a task that delegated has `children`, whose `agent` is a role of the
//! parent's node by name or the URL of an A2A agent. [`build_tree`] follows those links level by
//! level, fetching through a function it is given, so the walk and the roll-up run without a
//! network in tests; `mew tasks tree` gives it one that asks the nodes.

use std::collections::{HashMap, HashSet};
use std::future::Future;

use futures_util::StreamExt as _;
use mew_cards::mew::{ChildLink, MewMetadata, Usage};
use mew_cards::{Task, is_valid_role_name};

/// How many tasks are fetched at once.
const CONCURRENCY: usize = 8;

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

/// The role an agent of a child link names: itself when it is a role name, `role` of
/// `peer/role` and of a URL `{node}/agents/{role}` (or of its card's URL); `None` for any other
/// agent.
fn role_named(agent: &str) -> Option<&str> {
    if agent.starts_with("http://") || agent.starts_with("https://") {
        let url = agent
            .strip_suffix("/.well-known/agent-card.json")
            .unwrap_or(agent)
            .trim_end_matches('/');
        let (_, role) = url.rsplit_once("/agents/")?;
        return is_valid_role_name(role).then_some(role);
    }
    if is_valid_role_name(agent) {
        return Some(agent);
    }
    let (_, role) = agent.split_once('/')?;
    is_valid_role_name(role).then_some(role)
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
    /// The base URL of the node it runs on (the agent's URL when that is no node's role; the
    /// parent's node when the link could not be followed).
    pub(crate) node: String,
    /// The role that runs it: as the task records it (`mew.role`), else as the parent's link
    /// names it; `None` when neither says (an agent that is no Mew role, say).
    pub(crate) role: Option<String>,
    /// The parent's link to it; `None` for the root.
    pub(crate) link: Option<ChildLink>,
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
            let links = MewMetadata::child_links(task.metadata.as_ref());
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
                                        if walk.max_depth == 1 {
                                            "level"
                                        } else {
                                            "levels"
                                        }
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
    node.node = entry.place.node;
    node.children = entry
        .children
        .iter()
        .map(|&child| assemble(slots, child))
        .collect();
    let mew = node
        .task
        .as_ref()
        .map(|task| MewMetadata::read(task.metadata.as_ref()))
        .unwrap_or_default();
    node.own = mew.usage;
    node.role = mew
        .role
        .or_else(|| role_named(&node.agent).map(str::to_owned));
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

/// Tasks and trees for the tests of the walk and of its rendering.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::collections::HashMap;
    use std::sync::Mutex as StdMutex;

    use mew_cards::{Message, Task, TaskState, TaskStatus};
    use serde_json::{Value, json};

    use super::{Place, TreeNode, Walk, build_tree};

    pub(crate) const NODE: &str = "http://n1:7777";
    pub(crate) const OTHER: &str = "http://n2:7777";

    /// A task with `mew` metadata `mew`, and a first message.
    pub(crate) fn task(id: &str, state: TaskState, mew: Value) -> Task {
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

    pub(crate) fn usage(input: u64, output: u64, calls: u64) -> Value {
        json!({"inputTokens": input, "outputTokens": output, "modelCalls": calls, "toolCalls": 1})
    }

    pub(crate) fn link(id: &str, agent: &str, description: &str) -> Value {
        json!({"taskId": id, "agent": agent, "description": description, "background": false})
    }

    /// Tasks by (url, id); the fetches made are recorded.
    pub(crate) struct Fake {
        pub(crate) tasks: HashMap<(String, String), Task>,
        pub(crate) fetched: StdMutex<Vec<(String, String)>>,
    }

    impl Fake {
        pub(crate) fn new(tasks: Vec<(&str, Task)>) -> Self {
            Self {
                tasks: tasks
                    .into_iter()
                    .map(|(url, task)| ((url.to_owned(), task.id.to_string()), task))
                    .collect(),
                fetched: StdMutex::new(Vec::new()),
            }
        }

        pub(crate) async fn fetch(&self, place: Place, id: String) -> Result<Task, String> {
            self.fetched
                .lock()
                .unwrap()
                .push((place.url.clone(), id.clone()));
            self.tasks
                .get(&(place.url.clone(), id.clone()))
                .cloned()
                .ok_or_else(|| format!("task {id} not found at {}", place.url))
        }

        pub(crate) async fn tree(&self, id: &str, max_depth: u32) -> TreeNode {
            let walk = Walk {
                max_depth,
                peers: HashMap::from([("lab".to_owned(), OTHER.to_owned())]),
            };
            build_tree(id, NODE, NODE, &walk, |place, id| self.fetch(place, id)).await
        }
    }

    /// root (own 100/10) -> a (local, 50/5) -> c (remote, 7/1); root -> b (remote, 20/2).
    /// Every task records its role but c, whose role only its link's URL names.
    pub(crate) fn three_levels() -> Fake {
        let remote = format!("{OTHER}/agents/reviewer");
        Fake::new(vec![
            (
                NODE,
                task(
                    "root",
                    TaskState::Completed,
                    json!({
                        "role": "boss",
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
                        "role": "Explore", "usage": usage(50, 5, 1),
                        "children": [link("c", &format!("{OTHER}/agents/helper"), "help")],
                    }),
                ),
            ),
            (
                &remote,
                task(
                    "b",
                    TaskState::Completed,
                    json!({
                        "parentTask": "root", "depth": 1, "role": "reviewer",
                        "usage": usage(20, 2, 1),
                    }),
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
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use mew_cards::TaskState;
    use serde_json::json;

    use super::fixtures::{Fake, NODE, OTHER, link, task, three_levels, usage};
    use super::*;

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

    #[test]
    fn a_link_names_a_role_by_name_peer_or_url() {
        assert_eq!(role_named("Explore"), Some("Explore"));
        assert_eq!(role_named("lab/reviewer"), Some("reviewer"));
        assert_eq!(
            role_named(&format!("{OTHER}/agents/reviewer/")),
            Some("reviewer")
        );
        assert_eq!(
            role_named(&format!(
                "{OTHER}/agents/reviewer/.well-known/agent-card.json"
            )),
            Some("reviewer")
        );
        assert_eq!(role_named("http://sdk:9000/a2a"), None);
        assert_eq!(role_named(NODE), None);
        assert_eq!(role_named("not a role"), None);
        assert_eq!(role_named("lab/not a role"), None);
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
        assert_eq!(
            (root.role.as_deref(), root.node.as_str()),
            (Some("boss"), NODE)
        );
        let a = &root.children[0];
        assert_eq!((a.task_id.as_str(), a.agent.as_str()), ("a", "Explore"));
        let c = &a.children[0];
        assert_eq!(
            (c.role.as_deref(), c.node.as_str()),
            (Some("helper"), OTHER)
        );
        let b = &root.children[1];
        assert_eq!(
            (b.role.as_deref(), b.node.as_str()),
            (Some("reviewer"), OTHER)
        );
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
}
