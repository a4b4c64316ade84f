//! Skills in a running agent: `LoadSkill`, `InstallSkill`, `/name args` commands, and the
//! skills a task has active.
//!
//! An inline skill is activated in the current conversation: its rendered instructions ride in
//! the environment block of every following request, in first-activation order, and carry on
//! to later tasks of the same context (a session), until a new context. A fork skill runs in a
//! child task of the same role, for real: its `allowed-tools` is a hard filter there, its
//! `fork_context` decides how much of the parent's conversation the child sees (none, the
//! recent turns, or all of it), its `model` picks the child's model, and the child's final text
//! is the result.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::delegate::{Directory, fork_for_skill};
use super::session::{Session, close_dangling_calls};
use crate::conversation::{Block, ChatMessage, Speaker};
use crate::mcp::{McpManager, McpSkill};
use crate::skills::catalog::{SkillCatalog, SkillKind, SkillSource};
use crate::skills::install::{InstallOptions, InstallScope, install, install_root};
use crate::skills::parse::{ForkContext, SkillMode, parse_skill};
use crate::skills::render::{ActiveSkills, render_body};
use crate::tools::{Category, Tool, ToolContext, ToolOutput};

/// How a fork skill's child runs, kept in its private state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SkillFork {
    /// The skill.
    pub(crate) name: String,
    /// Only these tools (plus `LoadSkill`); empty: the role's tools.
    pub(crate) allowed_tools: Vec<String>,
    /// The model to run on, if the skill names one.
    pub(crate) model: Option<String>,
}

/// The skills of one turn: the catalog, the skills of MCP servers, and the task's active
/// skills.
#[derive(Debug)]
pub(crate) struct SkillState {
    pub(crate) catalog: Arc<SkillCatalog>,
    /// The MCP servers, whose skills the role may load too, and the principal whose sessions
    /// the task uses.
    mcp: Option<(Arc<McpManager>, Option<String>)>,
    active: Mutex<ActiveSkills>,
}

impl SkillState {
    /// The state of a turn that starts with `active`, with the skills of `mcp`'s servers as
    /// the tasks of the principal see them.
    pub(crate) fn new(
        catalog: Arc<SkillCatalog>,
        active: ActiveSkills,
        mcp: Option<(Arc<McpManager>, Option<String>)>,
    ) -> Self {
        Self {
            catalog,
            mcp,
            active: Mutex::new(active),
        }
    }

    /// The skill `name`: the catalog's, else an MCP server's (`SERVER:NAME`) as listed (its
    /// `SKILL.md` unread).
    pub(crate) fn get(&self, name: &str) -> Option<Arc<crate::skills::catalog::Skill>> {
        self.catalog.get(name).or_else(|| {
            self.mcp_skills()
                .into_iter()
                .find(|skill| skill.name() == name)
                .map(Arc::new)
        })
    }

    /// The skills of the MCP servers, as listed: the names (`SERVER:NAME`) and settings of
    /// their frontmatter.
    pub(crate) fn mcp_skills(&self) -> Vec<crate::skills::catalog::Skill> {
        let Some((mcp, principal)) = &self.mcp else {
            return Vec::new();
        };
        mcp.skills_for(principal.as_deref())
            .iter()
            .filter_map(listed_skill)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActiveSkills> {
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The active skills now.
    pub(crate) fn active(&self) -> ActiveSkills {
        self.lock().clone()
    }

    /// The "Active Skills" block for the environment, if any skill is active.
    pub(crate) fn block(&self) -> Option<String> {
        self.lock().render()
    }

    fn activate(&self, name: &str, body: String) {
        self.lock().activate(name, body);
    }
}

/// Activates skill `name` with `args`: inline, it joins the active skills and the answer says
/// so; fork, it runs in a child task and its answer is the child's.
pub(crate) async fn run_skill(
    directory: &Directory,
    ctx: &ToolContext,
    name: &str,
    args: &str,
) -> ToolOutput {
    let Some(skills) = super::scope::skills(ctx) else {
        return ToolOutput::error("skills are not available here");
    };
    let catalog = skills.catalog.clone();
    let wanted = name.trim().trim_start_matches('/').to_owned();
    let from_mcp = catalog.get(&wanted).is_none()
        && skills
            .mcp_skills()
            .iter()
            .any(|skill| skill.name() == wanted);
    let (skill, header) = if from_mcp {
        match load_mcp_skill(skills, &wanted, ctx).await {
            Ok(loaded) => loaded,
            Err(why) => return ToolOutput::error(why),
        }
    } else {
        // Activation reads SKILL.md again: off the async runtime.
        let activation = match tokio::task::spawn_blocking(move || catalog.activate(&wanted)).await
        {
            Ok(Ok(activation)) => activation,
            Ok(Err(e)) => return ToolOutput::error(e.to_string()),
            Err(e) => return ToolOutput::error(format!("cannot read the skill: {e}")),
        };
        if let Some(warning) = &activation.warning {
            tracing::warn!(skill = %activation.skill.name(), "{warning}");
        }
        (activation.skill, String::new())
    };
    let body = format!("{header}{}", render_body(&skill, args));
    match skill.meta.mode {
        SkillMode::Inline => {
            skills.activate(skill.name(), body);
            ToolOutput::text(format!(
                "Skill {} is active: its instructions are in the Active Skills section of the \
                 environment. Follow them now.",
                skill.name()
            ))
        }
        SkillMode::Fork => {
            let Some(children) = super::scope::children(ctx) else {
                return ToolOutput::error(format!(
                    "skill {} runs in a child agent, which needs a task",
                    skill.name()
                ));
            };
            let messages = forked_context(children.fork_source(), skill.meta.fork_context);
            let fork = SkillFork {
                name: skill.name().to_owned(),
                allowed_tools: skill.meta.allowed_tools.clone(),
                model: skill.meta.model.clone(),
            };
            let private = json!({
                "session": Session { messages, ..Session::default() },
                "skill_fork": fork,
            });
            let role = children.role.clone();
            fork_for_skill(
                directory,
                ctx,
                &role,
                &format!("skill {}", skill.name()),
                body,
                private,
            )
            .await
        }
    }
}

/// An MCP server's skill as listed (`SERVER:NAME`): the settings its listed frontmatter
/// gives, read as a `SKILL.md` with that frontmatter would be; no body. `None` for a listing
/// Mew cannot read as a skill.
fn listed_skill(listed: &McpSkill) -> Option<crate::skills::catalog::Skill> {
    let frontmatter = serde_yaml_ng::to_string(&listed.frontmatter()).ok()?;
    let parsed = parse_skill(&format!("---\n{frontmatter}---\n"), None).ok()?;
    Some(mcp_skill(listed, parsed.meta, String::new()))
}

/// The skill `listed` with `meta` and `body`, named `SERVER:NAME`.
fn mcp_skill(
    listed: &McpSkill,
    mut meta: crate::skills::parse::SkillMeta,
    body: String,
) -> crate::skills::catalog::Skill {
    meta.name = listed.name();
    crate::skills::catalog::Skill {
        meta,
        body,
        dir: PathBuf::from(listed.base()),
        file: PathBuf::from(listed.uri()),
        source: SkillSource::Mcp,
        kind: SkillKind::Skill,
    }
}

/// Reads the MCP server's skill `name` (`SERVER:NAME`), verified (see [`crate::mcp::skills`]):
/// the skill, and the paragraph that says where its files are.
async fn load_mcp_skill(
    skills: &SkillState,
    name: &str,
    ctx: &ToolContext,
) -> Result<(crate::skills::catalog::Skill, String), String> {
    let (mcp, principal) = skills
        .mcp
        .as_ref()
        .ok_or("no MCP server offers skills here")?;
    let (server, skill_name) = name
        .split_once(':')
        .ok_or_else(|| format!("{name} is not the name of an MCP server's skill"))?;
    let principal = ctx.principal.as_deref().or(principal.as_deref());
    let (listed, bytes) = mcp
        .skill_file(server, skill_name, None, principal, &ctx.cancel)
        .await?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{name}'s SKILL.md is not text"))?;
    let parsed =
        parse_skill(&text, Some(skill_name)).map_err(|err| format!("{name}'s SKILL.md: {err}"))?;
    for warning in &parsed.warnings {
        tracing::warn!(skill = %name, "{warning}");
    }
    let files = match listed.files() {
        Some(files) if files.is_empty() => "It has no other files.".to_owned(),
        Some(files) => format!(
            "Its files: {}.",
            files
                .iter()
                .map(|(path, size)| format!("{path} ({size} bytes)"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => {
            "Its files are not listed (the server makes them as they are asked for).".to_owned()
        }
    };
    let header = format!(
        "This skill is served by the MCP server {server}; its files are not on this \
         machine. {files} Relative paths in these instructions are files of the skill: read \
         one with LoadSkill {{\"name\": \"{name}\", \"file\": \"PATH\"}}; run nothing from \
         them.\n\n"
    );
    Ok((mcp_skill(&listed, parsed.meta, parsed.body), header))
}

/// How many of the parent's latest user turns a `recent` fork sees.
const RECENT_TURNS: usize = 3;

/// The part of the parent's conversation a fork skill's child starts from.
fn forked_context(messages: Vec<ChatMessage>, context: ForkContext) -> Vec<ChatMessage> {
    let messages = match context {
        ForkContext::None => return Vec::new(),
        ForkContext::Full => messages,
        ForkContext::Recent => {
            // Start at a user turn of the person (not one of tool results), so that no tool
            // result is cut from its call.
            let starts: Vec<usize> = messages
                .iter()
                .enumerate()
                .filter(|(_, m)| {
                    m.speaker == Speaker::User
                        && !m
                            .content
                            .iter()
                            .any(|b| matches!(b, Block::ToolResult { .. }))
                })
                .map(|(i, _)| i)
                .collect();
            let from = starts
                .len()
                .checked_sub(RECENT_TURNS)
                .and_then(|i| starts.get(i))
                .or_else(|| starts.first())
                .copied()
                .unwrap_or(messages.len());
            messages.into_iter().skip(from).collect()
        }
    };
    let mut session = Session {
        messages,
        ..Session::default()
    };
    close_dangling_calls(&mut session);
    session.messages
}

/// `LoadSkill`.
pub(crate) struct LoadSkill {
    pub(crate) directory: Arc<Directory>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadInput {
    name: String,
    #[serde(default)]
    args: String,
    /// A file of an MCP server's skill, read instead of loading the skill.
    #[serde(default)]
    file: Option<String>,
}

#[async_trait]
impl Tool for LoadSkill {
    fn name(&self) -> &str {
        "LoadSkill"
    }

    fn description(&self) -> String {
        "Activates a skill from the list of available skills in the system prompt. An inline \
         skill's instructions join the environment of every following turn; a fork skill runs \
         on its own in a child agent and returns its result. args is passed to the skill. \
         With file, reads that file of a skill an MCP server serves (SERVER:NAME) instead."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The skill's name."},
                "args": {"type": "string", "description": "What to do with it, if the skill takes arguments."},
                "file": {"type": "string", "description": "A file of an MCP server's skill to read, by its path in the skill (references/FORMS.md)."}
            },
            "required": ["name"],
            "additionalProperties": false
        })
    }

    fn category(&self) -> Category {
        Category::Read
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolOutput {
        let input: LoadInput = match serde_json::from_value(input) {
            Ok(input) => input,
            Err(e) => return ToolOutput::error(format!("invalid input for LoadSkill: {e}")),
        };
        if let Some(file) = &input.file {
            return read_mcp_skill_file(ctx, &input.name, file).await;
        }
        // Claude Code's `disable-model-invocation`: the user's `/name` only.
        if let Some(skills) = super::scope::skills(ctx)
            && let Some(skill) = skills.get(&input.name)
            && skill.meta.disable_model_invocation
        {
            return ToolOutput::error(format!(
                "the {} {} runs only when a user types /{}: it sets disable-model-invocation",
                skill.kind.as_str(),
                skill.name(),
                skill.name()
            ));
        }
        run_skill(&self.directory, ctx, &input.name, &input.args).await
    }
}

/// `LoadSkill` with `file`: the file `path` of the MCP server's skill `name`, verified.
async fn read_mcp_skill_file(ctx: &ToolContext, name: &str, path: &str) -> ToolOutput {
    let Some(skills) = super::scope::skills(ctx) else {
        return ToolOutput::error("skills are not available here");
    };
    let Some((mcp, principal)) = &skills.mcp else {
        return ToolOutput::error("no MCP server offers skills here");
    };
    let Some((server, skill)) = name
        .split_once(':')
        .filter(|_| skills.catalog.get(name).is_none())
    else {
        return ToolOutput::error(format!(
            "file is for the skills of MCP servers (SERVER:NAME); {name}'s files are on this \
             machine: read them with the Read tool in its base directory"
        ));
    };
    let principal = ctx.principal.as_deref().or(principal.as_deref());
    match mcp
        .skill_file(server, skill, Some(path), principal, &ctx.cancel)
        .await
    {
        Ok((_, bytes)) => match String::from_utf8(bytes) {
            Ok(text) => ToolOutput::text(text),
            Err(bytes) => ToolOutput::text(format!(
                "{path} is not text ({} bytes); it cannot be shown",
                bytes.as_bytes().len()
            )),
        },
        Err(why) => ToolOutput::error(why),
    }
}

/// `InstallSkill`: installs a skill from GitHub (tree, raw or skills.sh URL), then reloads the
/// catalog.
pub(crate) struct InstallSkill {
    pub(crate) catalog: Arc<SkillCatalog>,
    pub(crate) options: InstallOptions,
    pub(crate) home: Option<PathBuf>,
    pub(crate) project: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InstallInput {
    url: String,
    #[serde(default)]
    project: bool,
}

#[async_trait]
impl Tool for InstallSkill {
    fn name(&self) -> &str {
        "InstallSkill"
    }

    fn description(&self) -> String {
        "Installs a skill from a GitHub tree URL, a raw SKILL.md URL or a skills.sh URL into \
         the user's skills (or the project's, with project: true); it is available at once."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "Where the skill is."},
                "project": {"type": "boolean", "description": "Install into the project instead of the user's skills."}
            },
            "required": ["url"],
            "additionalProperties": false
        })
    }

    fn category(&self) -> Category {
        Category::Exec
    }

    /// It writes the skill's files into a skills directory.
    fn writes(&self) -> bool {
        true
    }

    async fn call(&self, input: Value, _ctx: &ToolContext) -> ToolOutput {
        let input: InstallInput = match serde_json::from_value(input) {
            Ok(input) => input,
            Err(e) => return ToolOutput::error(format!("invalid input for InstallSkill: {e}")),
        };
        let scope = if input.project {
            InstallScope::Project
        } else {
            InstallScope::User
        };
        let Some(root) = install_root(scope, self.home.as_deref(), &self.project) else {
            return ToolOutput::error(
                "the user's home directory is unknown: install into the project",
            );
        };
        match install(&input.url, &root, &self.options).await {
            Ok(installed) => {
                self.catalog.reload();
                let mut text = format!(
                    "Installed skill {} ({} files) into {}; it is available now.",
                    installed.name,
                    installed.entry.files.len(),
                    installed.dir.display()
                );
                for warning in &installed.warnings {
                    text.push_str(&format!("\nwarning: {warning}"));
                }
                ToolOutput::text(text)
            }
            Err(e) => ToolOutput::error(format!("cannot install {}: {e}", input.url)),
        }
    }
}
