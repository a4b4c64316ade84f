//! The tool registry: tools by name in a fixed order, and the five-layer filter for child agents.
//!
//! The order is the names' byte order, so the tool list a model sees (part of the cached prompt
//! prefix) is byte-identical from turn to turn and run to run.
//!
//! # Tool names in allow and deny lists
//!
//! Role files written for Claude Code name tools its way. [`ALIASES`] maps those names to
//! Mew's, once, for every list the filter reads:
//!
//! | In a list                  | Mew tool       |
//! |----------------------------|----------------|
//! | `Read`                     | `read_file`    |
//! | `Write`                    | `write_file`   |
//! | `Edit`                     | `edit_file`    |
//! | `MultiEdit`                | `multi_edit`   |
//! | `LS`                       | `ls`           |
//! | `Glob`                     | `glob`         |
//! | `Grep`                     | `grep`         |
//! | `Bash`                     | `bash`         |
//! | `WebFetch`                 | `web_fetch`    |
//! | `WebSearch`                | `web_search`   |
//! | `Task` (Claude Code's old name for `Agent`) | `Agent` |
//! | `load_skill`, `install_skill` (the seed's spelling) | `LoadSkill`, `InstallSkill` |
//!
//! Mew's own names work as they are. An entry ending in `*` matches every tool whose name starts
//! with what precedes it (`mcp__github__*`), and `mcp__server` alone matches all of that MCP
//! server's tools, as in Claude Code. Anything else matches one name exactly; an entry with an
//! argument pattern such as `Bash(git:*)` names no tool here (argument rules belong to the
//! permission policy).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::Tool;
use super::bash::Bash;
use super::edit_file::EditFile;
use super::glob::Glob;
use super::grep::Grep;
use super::ls::Ls;
use super::multi_edit::MultiEdit;
use super::read_file::ReadFile;
use super::web::WebConfig;
use super::web_fetch::WebFetch;
use super::web_search::WebSearch;
use super::write_file::WriteFile;
use crate::conversation::ToolSpec;

/// Claude Code's tool names (and the seed's spellings) and the Mew tools they mean.
pub(crate) const ALIASES: &[(&str, &str)] = &[
    ("Read", "read_file"),
    ("Write", "write_file"),
    ("Edit", "edit_file"),
    ("MultiEdit", "multi_edit"),
    ("LS", "ls"),
    ("Glob", "glob"),
    ("Grep", "grep"),
    ("Bash", "bash"),
    ("WebFetch", "web_fetch"),
    ("WebSearch", "web_search"),
    ("Task", "Agent"),
    ("load_skill", "LoadSkill"),
    ("install_skill", "InstallSkill"),
];

/// Tools no child agent gets unless nesting allows its depth: the runtime puts them in
/// [`FilterLayers::withhold`]. `Agent` would let children fork without bound, and the task
/// tools only manage tasks an agent delegated.
pub(crate) const ALL_AGENT_DISALLOWED_TOOLS: &[&str] =
    &["Agent", "SendMessage", "TaskGet", "TaskList", "TaskStop"];

/// The only tools a background agent keeps (plus every MCP tool): atomic file and shell work
/// and skills, none of the task-management or agent tools.
pub(crate) const ASYNC_AGENT_ALLOWED_TOOLS: &[&str] = &[
    "read_file",
    "write_file",
    "edit_file",
    "multi_edit",
    "ls",
    "glob",
    "grep",
    "bash",
    "web_fetch",
    "web_search",
    "TodoWrite",
    "LoadSkill",
    "InstallSkill",
];

/// The prefix of every MCP tool's name (`mcp__server__tool`).
pub(crate) const MCP_PREFIX: &str = "mcp__";

/// Mew's name for `name`: the alias target if [`ALIASES`] has one, else `name` itself.
pub(crate) fn canonical_name(name: &str) -> &str {
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, canonical)| canonical)
}

/// The tools the agent runtime adds to a model role's registry besides the built-ins and the
/// MCP tools: delegation, skills, task management and the plan (each tool's `name()`).
pub(crate) const AGENT_TOOLS: &[&str] = &[
    "Agent",
    "InstallSkill",
    "LoadSkill",
    "SendMessage",
    "TaskGet",
    "TaskList",
    "TaskStop",
    "TodoWrite",
];

/// The entries of a role's `tools` list that name no tool Mew provides (Claude Code's
/// `NotebookEdit`, a misspelt name), as written, in order. MCP names, patterns ending in `*`
/// and argument rules (`Bash(git:*)`, checked by the name before the parenthesis) are not
/// judged: which MCP tools exist is known only once the servers answer.
pub(crate) fn unknown_tools(entries: &[String]) -> Vec<&str> {
    let builtin = ToolRegistry::builtin();
    entries
        .iter()
        .map(String::as_str)
        .filter(|entry| {
            let name = entry
                .split_once('(')
                .map_or(*entry, |(name, _)| name)
                .trim();
            let name = canonical_name(name);
            !(name.starts_with(MCP_PREFIX)
                || name.ends_with('*')
                || AGENT_TOOLS.contains(&name)
                || builtin.get(name).is_some())
        })
        .collect()
}

/// What narrows a registry for a child agent, applied by [`ToolRegistry::filter`] in this
/// order after starting from every tool of the parent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
pub(crate) struct FilterLayers {
    /// Always removed for children, e.g. [`ALL_AGENT_DISALLOWED_TOOLS`] unless nesting is on.
    pub(crate) withhold: Vec<String>,
    /// True for a background agent: keep only [`ASYNC_AGENT_ALLOWED_TOOLS`] and MCP tools.
    pub(crate) background: bool,
    /// The role's `disallowedTools`: removed.
    pub(crate) disallowed: Vec<String>,
    /// The role's `tools` allowlist: when not empty, only these are kept.
    pub(crate) allowed: Vec<String>,
    /// True for a read-only role ([`is_read_only`]): no tool that writes ([`Tool::writes`]).
    pub(crate) read_only: bool,
}

/// Whether a role with this permission mode and these `disallowedTools` is read-only: in
/// `plan` mode, or refusing both of the built-in tools that write files. Such a role is given
/// no other tool that writes either.
pub(crate) fn is_read_only(mode: mew_cards::PermissionMode, disallowed: &[String]) -> bool {
    mode == mew_cards::PermissionMode::Plan
        || ["write_file", "edit_file"].iter().all(|tool| {
            disallowed
                .iter()
                .any(|name| canonical_name(name.trim()) == *tool)
        })
}

/// One entry of an allow or deny list, resolved.
#[derive(Debug, PartialEq, Eq)]
enum Entry<'a> {
    /// One tool.
    Exact(&'a str),
    /// Every tool whose name starts with this.
    Prefix(String),
}

impl<'a> Entry<'a> {
    /// Resolves a list entry (see the module docs).
    fn parse(entry: &'a str) -> Self {
        let entry = entry.trim();
        if let Some(prefix) = entry.strip_suffix('*') {
            return Entry::Prefix(prefix.to_owned());
        }
        if let Some(server) = entry.strip_prefix(MCP_PREFIX)
            && !server.is_empty()
            && !server.contains("__")
        {
            return Entry::Prefix(format!("{entry}__"));
        }
        Entry::Exact(canonical_name(entry))
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Entry::Exact(exact) => *exact == name,
            Entry::Prefix(prefix) => name.starts_with(prefix.as_str()),
        }
    }
}

/// Resolves every entry of an allow or deny list.
fn parse_list(list: &[String]) -> Vec<Entry<'_>> {
    list.iter().map(|entry| Entry::parse(entry)).collect()
}

/// True when any entry of `list` matches `name`.
fn listed(list: &[Entry<'_>], name: &str) -> bool {
    list.iter().any(|entry| entry.matches(name))
}

/// True when a background agent may keep the tool `name`.
fn async_allowed(name: &str) -> bool {
    ASYNC_AGENT_ALLOWED_TOOLS.contains(&name) || name.starts_with(MCP_PREFIX)
}

/// Tools by name, in byte order of their names.
#[derive(Clone, Default)]
pub(crate) struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

#[cfg_attr(not(test), allow(dead_code))] // wired by the agent runtime
impl ToolRegistry {
    /// A registry without tools.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The built-in tools: `bash`, `edit_file`, `glob`, `grep`, `ls`, `multi_edit`,
    /// `read_file`, `web_fetch`, `web_search`, `write_file`, the web tools as the default
    /// `web:` section sets them (no address the SSRF guard refuses, no search service).
    pub(crate) fn builtin() -> Self {
        Self::builtin_with(&WebConfig::default(), mew_transport::TlsOptions::default())
    }

    /// The built-in tools, the web tools set by `web` and trusting the extra roots of `tls`.
    pub(crate) fn builtin_with(web: &WebConfig, tls: mew_transport::TlsOptions) -> Self {
        let mut registry = Self::new();
        let tools: [Arc<dyn Tool>; 10] = [
            Arc::new(ReadFile),
            Arc::new(WriteFile),
            Arc::new(EditFile),
            Arc::new(MultiEdit),
            Arc::new(Ls),
            Arc::new(Glob),
            Arc::new(Grep),
            Arc::new(Bash),
            Arc::new(WebFetch::new(web, tls)),
            Arc::new(WebSearch::new(web)),
        ];
        for tool in tools {
            registry.register(tool);
        }
        registry
    }

    /// Adds `tool` under its name; returns the tool it replaced, if one had that name.
    pub(crate) fn register(&mut self, tool: Arc<dyn Tool>) -> Option<Arc<dyn Tool>> {
        self.tools.insert(tool.name().to_owned(), tool)
    }

    /// The tool called `name` (Mew's name, exactly as the model calls it).
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The tools' names, in order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// How many tools there are.
    pub(crate) fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when there are no tools.
    pub(crate) fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The specs the model sees, in order.
    pub(crate) fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|tool| tool.spec()).collect()
    }

    /// The tools a child agent gets, by the seed's five layers: ① start from every tool here;
    /// ② remove `withhold`; ③ for a background agent keep only [`ASYNC_AGENT_ALLOWED_TOOLS`]
    /// and MCP tools; ④ remove `disallowed`; ⑤ if `allowed` is not empty, keep only what it
    /// names. Layers only remove: no later layer brings back what an earlier one took.
    pub(crate) fn filter(&self, layers: &FilterLayers) -> ToolRegistry {
        let withhold = parse_list(&layers.withhold);
        let disallowed = parse_list(&layers.disallowed);
        let allowed = parse_list(&layers.allowed);
        let tools = self
            .tools
            .iter()
            .filter(|(name, _)| !listed(&withhold, name))
            .filter(|(name, _)| !layers.background || async_allowed(name))
            .filter(|(name, _)| !listed(&disallowed, name))
            .filter(|(name, _)| allowed.is_empty() || listed(&allowed, name))
            .filter(|(_, tool)| !layers.read_only || !tool.writes())
            .map(|(name, tool)| (name.clone(), Arc::clone(tool)))
            .collect();
        ToolRegistry { tools }
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::{Value, json};

    use super::*;
    use crate::tools::{Category, ToolContext, ToolOutput};

    /// A tool that only has a name.
    struct Named(&'static str, &'static str);

    #[async_trait]
    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> String {
            self.1.to_owned()
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn category(&self) -> Category {
            Category::Exec
        }
        async fn call(&self, _input: Value, _ctx: &ToolContext) -> ToolOutput {
            ToolOutput::text(self.0)
        }
    }

    /// The built-ins plus an agent tool, skill tools, task tools and MCP tools of two servers.
    fn full() -> ToolRegistry {
        let mut registry = ToolRegistry::builtin();
        for name in [
            "Agent",
            "LoadSkill",
            "InstallSkill",
            "TaskStop",
            "SendMessage",
            "mcp__github__create_issue",
            "mcp__github__list_issues",
            "mcp__fs__read",
        ] {
            registry.register(Arc::new(Named(name, "")));
        }
        registry
    }

    fn names(registry: &ToolRegistry) -> Vec<&str> {
        registry.names().collect()
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn builtin_has_the_ten_tools_in_name_order() {
        let registry = ToolRegistry::builtin();
        assert_eq!(
            names(&registry),
            [
                "bash",
                "edit_file",
                "glob",
                "grep",
                "ls",
                "multi_edit",
                "read_file",
                "web_fetch",
                "web_search",
                "write_file"
            ]
        );
        let specs = registry.specs();
        let spec_names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(spec_names, names(&registry));
        assert_eq!(
            registry.get("grep").map(|tool| tool.category()),
            Some(Category::Read)
        );
        assert_eq!(
            registry.get("bash").map(|tool| tool.category()),
            Some(Category::Exec)
        );
        assert_eq!(
            registry.get("edit_file").map(|tool| tool.category()),
            Some(Category::Edit)
        );
        assert_eq!(
            registry.get("multi_edit").map(|tool| tool.category()),
            Some(Category::Edit)
        );
        assert_eq!(
            registry.get("ls").map(|tool| tool.category()),
            Some(Category::Read)
        );
        for web in ["web_fetch", "web_search"] {
            assert_eq!(
                registry
                    .get(web)
                    .map(|tool| (tool.category(), tool.writes())),
                Some((Category::Exec, false)),
                "{web}"
            );
        }
        assert!(registry.get("Read").is_none());
        // Byte-identical across builds of the registry: the prompt prefix stays cacheable.
        assert_eq!(ToolRegistry::builtin().specs(), specs);
    }

    #[test]
    fn builtin_schemas_are_closed_objects_whose_required_fields_exist() {
        for spec in ToolRegistry::builtin().specs() {
            let schema = &spec.input_schema;
            assert_eq!(schema["type"], "object", "{}", spec.name);
            assert_eq!(schema["additionalProperties"], false, "{}", spec.name);
            let required = schema["required"].as_array().map_or(&[][..], Vec::as_slice);
            for required in required {
                let field = required.as_str().unwrap();
                assert!(
                    schema["properties"].get(field).is_some(),
                    "{}.{field}",
                    spec.name
                );
            }
            assert!(spec.description.len() > 80, "{}", spec.name);
        }
    }

    #[test]
    fn register_replaces_by_name_and_keeps_the_order() {
        let mut registry = ToolRegistry::new();
        assert!(registry.is_empty());
        assert!(
            registry
                .register(Arc::new(Named("zeta", "first")))
                .is_none()
        );
        assert!(registry.register(Arc::new(Named("Alpha", ""))).is_none());
        assert!(registry.register(Arc::new(Named("beta", ""))).is_none());
        let old = registry
            .register(Arc::new(Named("zeta", "second")))
            .unwrap();
        assert_eq!(old.description(), "first");
        assert_eq!(registry.get("zeta").unwrap().description(), "second");
        assert_eq!(names(&registry), ["Alpha", "beta", "zeta"]);
        assert_eq!(registry.len(), 3);
        assert_eq!(format!("{registry:?}"), r#"["Alpha", "beta", "zeta"]"#);
    }

    #[test]
    fn the_alias_table_maps_claude_code_names() {
        assert_eq!(canonical_name("Read"), "read_file");
        assert_eq!(canonical_name("Write"), "write_file");
        assert_eq!(canonical_name("Edit"), "edit_file");
        assert_eq!(canonical_name("Glob"), "glob");
        assert_eq!(canonical_name("Grep"), "grep");
        assert_eq!(canonical_name("Bash"), "bash");
        assert_eq!(canonical_name("MultiEdit"), "multi_edit");
        assert_eq!(canonical_name("LS"), "ls");
        assert_eq!(canonical_name("WebFetch"), "web_fetch");
        assert_eq!(canonical_name("WebSearch"), "web_search");
        assert_eq!(canonical_name("Task"), "Agent");
        assert_eq!(canonical_name("load_skill"), "LoadSkill");
        assert_eq!(canonical_name("read_file"), "read_file");
        assert_eq!(canonical_name("read"), "read");
        let builtin = ToolRegistry::builtin();
        for (alias, _) in &ALIASES[..10] {
            assert!(builtin.get(canonical_name(alias)).is_some(), "{alias}");
        }
    }

    #[test]
    fn no_layers_keep_everything() {
        let registry = full();
        assert_eq!(
            names(&registry.filter(&FilterLayers::default())),
            names(&registry)
        );
    }

    #[test]
    fn layer_two_withholds() {
        let layers = FilterLayers {
            withhold: strings(ALL_AGENT_DISALLOWED_TOOLS),
            ..Default::default()
        };
        let filtered = full().filter(&layers);
        for tool in ["Agent", "SendMessage", "TaskStop"] {
            assert!(filtered.get(tool).is_none(), "{tool} kept");
        }
        assert_eq!(filtered.len(), full().len() - 3);
    }

    #[test]
    fn layer_three_keeps_async_tools_and_mcp_for_background_agents() {
        let layers = FilterLayers {
            background: true,
            ..Default::default()
        };
        assert_eq!(
            names(&full().filter(&layers)),
            [
                "InstallSkill",
                "LoadSkill",
                "bash",
                "edit_file",
                "glob",
                "grep",
                "ls",
                "mcp__fs__read",
                "mcp__github__create_issue",
                "mcp__github__list_issues",
                "multi_edit",
                "read_file",
                "web_fetch",
                "web_search",
                "write_file",
            ]
        );
    }

    #[test]
    fn layer_four_removes_disallowed_by_any_spelling() {
        let layers = FilterLayers {
            disallowed: strings(&["Write", "edit_file", "mcp__github__*", "Task"]),
            ..Default::default()
        };
        assert_eq!(
            names(&full().filter(&layers)),
            [
                "InstallSkill",
                "LoadSkill",
                "SendMessage",
                "TaskStop",
                "bash",
                "glob",
                "grep",
                "ls",
                "mcp__fs__read",
                "multi_edit",
                "read_file",
                "web_fetch",
                "web_search",
            ]
        );
    }

    #[test]
    fn layer_five_keeps_only_allowed() {
        let layers = FilterLayers {
            allowed: strings(&["Read", "Grep", "mcp__github__create*", "NoSuchTool"]),
            ..Default::default()
        };
        assert_eq!(
            names(&full().filter(&layers)),
            ["grep", "mcp__github__create_issue", "read_file"]
        );
        // A bare server name stands for all of that server's tools.
        let layers = FilterLayers {
            allowed: strings(&["mcp__github"]),
            ..Default::default()
        };
        assert_eq!(
            names(&full().filter(&layers)),
            ["mcp__github__create_issue", "mcp__github__list_issues"]
        );
    }

    #[test]
    fn layers_apply_in_order_and_only_remove() {
        let layers = FilterLayers {
            withhold: strings(&["Agent"]),
            background: true,
            disallowed: strings(&["Bash", "mcp__fs"]),
            // Agent and TaskStop are asked for, but earlier layers removed them.
            allowed: strings(&[
                "Agent",
                "TaskStop",
                "Bash",
                "Read",
                "glob",
                "mcp__*",
                "LoadSkill",
            ]),
            read_only: false,
        };
        assert_eq!(
            names(&full().filter(&layers)),
            [
                "LoadSkill",
                "glob",
                "mcp__github__create_issue",
                "mcp__github__list_issues",
                "read_file",
            ]
        );
    }

    #[test]
    fn a_read_only_role_gets_no_tool_that_writes() {
        use mew_cards::PermissionMode;
        assert!(is_read_only(PermissionMode::Plan, &[]));
        assert!(is_read_only(
            PermissionMode::Default,
            &strings(&["Write", "edit_file"])
        ));
        assert!(!is_read_only(
            PermissionMode::Default,
            &strings(&["write_file"])
        ));
        let layers = FilterLayers {
            read_only: true,
            ..Default::default()
        };
        let filtered = ToolRegistry::builtin().filter(&layers);
        let kept = names(&filtered);
        assert!(
            !kept.contains(&"write_file")
                && !kept.contains(&"edit_file")
                && !kept.contains(&"multi_edit"),
            "{kept:?}"
        );
        assert!(
            kept.contains(&"read_file") && kept.contains(&"bash"),
            "{kept:?}"
        );
    }

    #[test]
    fn list_entries_resolve() {
        assert_eq!(Entry::parse("Read"), Entry::Exact("read_file"));
        assert_eq!(Entry::parse(" Bash "), Entry::Exact("bash"));
        assert_eq!(Entry::parse("Bash(git:*)"), Entry::Exact("Bash(git:*)"));
        assert_eq!(
            Entry::parse("mcp__github__*"),
            Entry::Prefix("mcp__github__".to_owned())
        );
        assert_eq!(
            Entry::parse("mcp__github"),
            Entry::Prefix("mcp__github__".to_owned())
        );
        assert_eq!(
            Entry::parse("mcp__github__list"),
            Entry::Exact("mcp__github__list")
        );
        assert_eq!(Entry::parse("mcp__"), Entry::Exact("mcp__"));
    }
}
