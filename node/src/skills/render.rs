//! What the model reads about skills: the disclosure in the system prompt, a skill's rendered
//! instructions, and the "Active Skills" block of the per-turn environment.
//!
//! Disclosure is progressive. The system prompt lists only names and descriptions
//! ([`render_disclosure`]), in name order, so the cached prompt prefix stays byte-identical
//! while the skills do not change. A skill's instructions enter the conversation when it is
//! activated (the `LoadSkill` tool, or `/name args` typed by the user, see [`parse_slash`]):
//! [`render_body`] renders them, [`ActiveSkills`] keeps them for the task, and
//! [`ActiveSkills::render`] puts them in the environment block of every following turn.

use std::borrow::Borrow;

use serde::{Deserialize, Serialize};

use super::catalog::{Skill, SkillKind, SkillSource};
use super::parse::is_valid_command_name;

/// The placeholder replaced by the activation's arguments.
pub(crate) const ARGUMENTS_PLACEHOLDER: &str = "$ARGUMENTS";

/// The system prompt section listing the skills the model may load, or `None` when there are
/// none.
///
/// Skills are listed by name whatever order they come in, each with its `argument-hint`;
/// descriptions are put on one line. Those with `disable-model-invocation` are left out: only
/// a user's `/name` runs them. Takes skills, references or `Arc`s of them.
pub(crate) fn render_disclosure<S: Borrow<Skill>>(
    skills: impl IntoIterator<Item = S>,
) -> Option<String> {
    let mut skills: Vec<S> = skills
        .into_iter()
        .filter(|skill| !skill.borrow().meta.disable_model_invocation)
        .collect();
    if skills.is_empty() {
        return None;
    }
    skills.sort_by(|a, b| a.borrow().name().cmp(b.borrow().name()));
    let mut out = String::from(
        "## Skills\n\n\
         Skills are instructions for particular kinds of work. When a request matches a \
         skill's description, call the LoadSkill tool with the skill's name before you start; \
         its instructions then appear under \"Active Skills\" in the environment and take \
         precedence over general instructions.\n",
    );
    for skill in &skills {
        let skill = skill.borrow();
        out.push_str(&format!("\n- **{}**", skill.name()));
        if let Some(hint) = &skill.meta.argument_hint {
            out.push_str(&format!(" {}", one_line(hint)));
        }
        let description = one_line(&skill.meta.description);
        if !description.is_empty() {
            out.push_str(&format!(": {description}"));
        }
    }
    Some(out)
}

/// `text` with every run of whitespace (newlines included) turned into one space.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A skill's instructions for one activation with `args` (what followed `/name`, or the
/// `LoadSkill` call's arguments):
///
/// 1. a skill's first line names its directory, as Claude Code's does: most skills refer to
///    their bundled files by relative path (`read FORMS.md`, `python scripts/fill.py`), and
///    the task's working directory is the project, not the skill (a command bundles no files:
///    its relative paths are the project's);
/// 2. when the skill lists allowed tools, a paragraph asks to prefer them;
/// 3. every `$ARGUMENTS` in the body becomes `args` (trimmed); in a command, as in Claude
///    Code, `$ARGUMENTS[N]` and `$N` become its argument `N`, counted from 0 (see
///    [`split_arguments`]), or nothing when there are fewer;
/// 4. when the body has none of these and `args` is not blank, a `## User Request` section
///    with `args` ends the text.
pub(crate) fn render_body(skill: &Skill, args: &str) -> String {
    let args = args.trim();
    let mut out = match skill.kind {
        // An MCP server's skill has no directory: its caller says where its files are.
        SkillKind::Skill if skill.source == SkillSource::Mcp => String::new(),
        SkillKind::Skill => base_directory(skill),
        SkillKind::Command => String::new(),
    };
    if !skill.meta.allowed_tools.is_empty() {
        out.push_str(&format!(
            "This {} is designed to use only these tools: {}. Prefer them over other tools \
             when possible.\n\n---\n\n",
            skill.kind.as_str(),
            skill.meta.allowed_tools.join(", ")
        ));
    }
    let substituted = match skill.kind {
        SkillKind::Skill => skill
            .body
            .contains(ARGUMENTS_PLACEHOLDER)
            .then(|| skill.body.replace(ARGUMENTS_PLACEHOLDER, args)),
        SkillKind::Command => substitute_arguments(&skill.body, args),
    };
    match substituted {
        Some(body) => out.push_str(&body),
        None => {
            out.push_str(&skill.body);
            if !args.is_empty() {
                out.push_str("\n\n## User Request\n\n");
                out.push_str(args);
            }
        }
    }
    out
}

/// `body` with Claude Code's argument placeholders replaced: `$ARGUMENTS` by `args`,
/// `$ARGUMENTS[N]` and `$N` by argument `N` of [`split_arguments`] (from 0; nothing when there
/// are fewer). `None` when the body has no placeholder.
fn substitute_arguments(body: &str, args: &str) -> Option<String> {
    let split = split_arguments(args);
    let nth = |digits: &str| {
        digits
            .parse::<usize>()
            .ok()
            .and_then(|n| split.get(n))
            .map_or("", String::as_str)
    };
    let mut out = String::with_capacity(body.len() + args.len());
    let mut found = false;
    let mut rest = body;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix(ARGUMENTS_PLACEHOLDER.trim_start_matches('$')) {
            found = true;
            let index = tail
                .strip_prefix('[')
                .and_then(|inner| inner.split_once(']'))
                .filter(|(digits, _)| {
                    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
                });
            match index {
                Some((digits, tail)) => {
                    out.push_str(nth(digits));
                    rest = tail;
                }
                None => {
                    out.push_str(args);
                    rest = tail;
                }
            }
            continue;
        }
        let digits_end = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        if digits_end > 0 {
            found = true;
            out.push_str(nth(&after[..digits_end]));
            rest = &after[digits_end..];
            continue;
        }
        out.push('$');
        rest = after;
    }
    out.push_str(rest);
    found.then_some(out)
}

/// A command's arguments, split as Claude Code splits them: at whitespace, except inside
/// single or double quotes, which group words and are taken off (`"my widget" React` is
/// `my widget` and `React`). An unclosed quote runs to the end.
pub(crate) fn split_arguments(args: &str) -> Vec<String> {
    let mut split = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in args.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => current.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    split.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            None => {
                current.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        split.push(current);
    }
    split
}

/// The first lines of a rendered skill: where its files are.
fn base_directory(skill: &Skill) -> String {
    format!(
        "Base directory for this skill: {}\nRelative paths in these instructions are relative \
         to it.\n\n",
        skill.dir.display()
    )
}

/// `/name args` typed in a chat: the name (lowercase) and the arguments (trimmed, possibly
/// empty, possibly several lines). `None` when the line is not a skill command: no leading
/// `/`, or a name that no skill or command can have (so `/usr/bin/env` and `//` are not).
pub(crate) fn parse_slash(line: &str) -> Option<(String, String)> {
    let rest = line.trim_start().strip_prefix('/')?;
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let name = rest[..end].to_lowercase();
    if !is_valid_command_name(&name) {
        return None;
    }
    Some((name, rest[end..].trim().to_owned()))
}

/// One active skill: its name and rendered instructions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ActiveSkill {
    /// The skill's name.
    pub(crate) name: String,
    /// Its instructions, as [`render_body`] made them at the last activation.
    pub(crate) body: String,
}

/// The skills a task has activated, in first-activation order. Serializable, so it can live in
/// a task's private state and survive a restart; serialized as a JSON array of
/// `{"name", "body"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct ActiveSkills {
    entries: Vec<ActiveSkill>,
}

impl ActiveSkills {
    /// No active skills.
    #[cfg_attr(not(test), allow(dead_code))] // used by tests and future callers
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Activates `name` with `body`. A skill already active (any letter case) keeps its place
    /// and gets the new body; returns true when the skill was not active yet.
    pub(crate) fn activate(&mut self, name: &str, body: String) -> bool {
        match self
            .entries
            .iter_mut()
            .find(|entry| entry.name.eq_ignore_ascii_case(name))
        {
            Some(entry) => {
                entry.body = body;
                false
            }
            None => {
                self.entries.push(ActiveSkill {
                    name: name.to_owned(),
                    body,
                });
                true
            }
        }
    }

    /// Deactivates `name`; returns true when it was active.
    #[cfg_attr(not(test), allow(dead_code))] // used by tests and future callers
    pub(crate) fn deactivate(&mut self, name: &str) -> bool {
        let before = self.entries.len();
        self.entries
            .retain(|entry| !entry.name.eq_ignore_ascii_case(name));
        self.entries.len() != before
    }

    /// Deactivates every skill (a new session).
    #[cfg_attr(not(test), allow(dead_code))] // used by tests and future callers
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    /// True when no skill is active.
    #[cfg_attr(not(test), allow(dead_code))] // used by tests and future callers
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many skills are active.
    #[cfg_attr(not(test), allow(dead_code))] // used by tests and future callers
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The active skills, in first-activation order.
    pub(crate) fn entries(&self) -> &[ActiveSkill] {
        &self.entries
    }

    /// True when `name` (any letter case) is active.
    #[cfg_attr(not(test), allow(dead_code))] // used by tests and future callers
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.entries
            .iter()
            .any(|entry| entry.name.eq_ignore_ascii_case(name))
    }

    /// The "Active Skills" block for the environment, or `None` when no skill is active.
    pub(crate) fn render(&self) -> Option<String> {
        if self.entries.is_empty() {
            return None;
        }
        let mut out = String::from(
            "## Active Skills\n\n\
             These skills are active. Follow their instructions; they take precedence over \
             general instructions.",
        );
        for entry in &self.entries {
            out.push_str(&format!("\n\n### Skill: {}", entry.name));
            let body = entry.body.trim();
            if !body.is_empty() {
                out.push_str("\n\n");
                out.push_str(body);
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::json;

    use super::super::catalog::SkillSource;
    use super::super::parse::SkillMeta;
    use super::*;

    fn skill(name: &str, description: &str, tools: &[&str], body: &str) -> Skill {
        Skill {
            meta: SkillMeta {
                name: name.to_owned(),
                description: description.to_owned(),
                allowed_tools: tools.iter().map(|t| (*t).to_owned()).collect(),
                ..SkillMeta::default()
            },
            body: body.to_owned(),
            dir: PathBuf::from(name),
            file: PathBuf::from(name).join("SKILL.md"),
            source: SkillSource::Project,
            kind: SkillKind::Skill,
        }
    }

    #[test]
    fn disclosure_lists_skills_by_name() {
        let skills = [
            skill("review", "Reviews code\n  for bugs.", &[], "r"),
            skill("deploy", "Deploys the app.", &[], "d"),
            skill("notes", "", &[], "n"),
        ];
        assert_eq!(
            render_disclosure(&skills).unwrap(),
            "## Skills\n\n\
             Skills are instructions for particular kinds of work. When a request matches a \
             skill's description, call the LoadSkill tool with the skill's name before you \
             start; its instructions then appear under \"Active Skills\" in the environment \
             and take precedence over general instructions.\n\
             \n- **deploy**: Deploys the app.\
             \n- **notes**\
             \n- **review**: Reviews code for bugs."
        );
        // The order given does not matter.
        let reversed: Vec<&Skill> = skills.iter().rev().collect();
        assert_eq!(render_disclosure(reversed), render_disclosure(&skills));
        assert_eq!(render_disclosure(Vec::<Skill>::new()), None);
        let shared: Vec<std::sync::Arc<Skill>> =
            skills.iter().cloned().map(std::sync::Arc::new).collect();
        assert_eq!(render_disclosure(shared), render_disclosure(&skills));
    }

    #[test]
    fn active_block_keeps_first_activation_order() {
        let mut active = ActiveSkills::new();
        assert_eq!(active.render(), None);
        assert!(active.activate("deploy", "Deploy steps.".to_owned()));
        assert!(active.activate("review", "Review steps.".to_owned()));
        assert!(active.activate("empty", String::new()));
        assert!(!active.activate("DEPLOY", "New deploy steps.".to_owned()));
        assert_eq!(active.len(), 3);
        assert!(active.contains("Review"));
        assert_eq!(
            active.render().unwrap(),
            "## Active Skills\n\n\
             These skills are active. Follow their instructions; they take precedence over \
             general instructions.\n\n\
             ### Skill: deploy\n\nNew deploy steps.\n\n\
             ### Skill: review\n\nReview steps.\n\n\
             ### Skill: empty"
        );
        assert!(active.deactivate("review"));
        assert!(!active.deactivate("review"));
        assert_eq!(
            active
                .entries()
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>(),
            ["deploy", "empty"]
        );
        active.clear();
        assert!(active.is_empty());
        assert_eq!(active.render(), None);
    }

    #[test]
    fn active_skills_round_trip_as_json() {
        let mut active = ActiveSkills::new();
        active.activate("a", "one".to_owned());
        active.activate("b", "two".to_owned());
        let value = serde_json::to_value(&active).unwrap();
        assert_eq!(
            value,
            json!([{"name": "a", "body": "one"}, {"name": "b", "body": "two"}])
        );
        let back: ActiveSkills = serde_json::from_value(value).unwrap();
        assert_eq!(back, active);
    }

    /// What [`render_body`] puts before the instructions of [`skill`] `name`.
    fn base(name: &str) -> String {
        format!(
            "Base directory for this skill: {name}\nRelative paths in these instructions are \
             relative to it.\n\n"
        )
    }

    #[test]
    fn body_with_allowed_tools_gets_the_preamble() {
        let s = skill("s", "d", &["read_file", "Bash(git:*)"], "Do it.");
        assert_eq!(
            render_body(&s, ""),
            base("s")
                + "This skill is designed to use only these tools: read_file, Bash(git:*). \
                   Prefer them over other tools when possible.\n\n---\n\nDo it."
        );
        assert_eq!(
            render_body(&skill("s", "d", &[], "Do it."), ""),
            base("s") + "Do it."
        );
    }

    #[test]
    fn arguments_replace_every_placeholder() {
        let s = skill(
            "s",
            "d",
            &[],
            "Fix $ARGUMENTS.\nThen test $ARGUMENTS again.",
        );
        assert_eq!(
            render_body(&s, "  issue 42 \n"),
            base("s") + "Fix issue 42.\nThen test issue 42 again."
        );
        // No arguments: the placeholder goes, and no request section appears.
        assert_eq!(render_body(&s, ""), base("s") + "Fix .\nThen test  again.");
    }

    #[test]
    fn arguments_without_placeholder_become_a_user_request() {
        let s = skill("s", "d", &["bash"], "Steps.");
        assert_eq!(
            render_body(&s, "deploy to staging"),
            base("s")
                + "This skill is designed to use only these tools: bash. Prefer them over \
                   other tools when possible.\n\n---\n\nSteps.\n\n## User Request\n\n\
                   deploy to staging"
        );
        assert_eq!(
            render_body(&skill("s", "d", &[], "Steps."), "   "),
            base("s") + "Steps."
        );
    }

    #[test]
    fn slash_commands() {
        assert_eq!(
            parse_slash("/review src/main.rs"),
            Some(("review".to_owned(), "src/main.rs".to_owned()))
        );
        assert_eq!(
            parse_slash("  /Deploy   to staging\nand prod  "),
            Some(("deploy".to_owned(), "to staging\nand prod".to_owned()))
        );
        assert_eq!(
            parse_slash("/notes"),
            Some(("notes".to_owned(), String::new()))
        );
        assert_eq!(
            parse_slash("/notes\targ"),
            Some(("notes".to_owned(), "arg".to_owned()))
        );
        // Commands' names: namespaces, `_` and `.`.
        assert_eq!(
            parse_slash("/Frontend:Component Button"),
            Some(("frontend:component".to_owned(), "Button".to_owned()))
        );
        assert_eq!(
            parse_slash("/speckit.plan_v2"),
            Some(("speckit.plan_v2".to_owned(), String::new()))
        );
        for not_a_command in [
            "review",
            "/",
            "//x",
            "/usr/bin/env",
            "/a:",
            "/:a",
            "/.hidden",
            "/ x",
            "a /b",
        ] {
            assert_eq!(parse_slash(not_a_command), None, "{not_a_command}");
        }
    }

    fn command(name: &str, tools: &[&str], body: &str) -> Skill {
        Skill {
            kind: SkillKind::Command,
            file: PathBuf::from(".claude/commands").join(format!("{name}.md")),
            dir: PathBuf::from(".claude/commands"),
            ..skill(name, "d", tools, body)
        }
    }

    #[test]
    fn disclosure_shows_argument_hints_and_leaves_out_user_only_skills() {
        let mut fix = command("fix-issue", &[], "Fix $0.");
        fix.meta.argument_hint = Some("[issue-number]".to_owned());
        let mut deploy = command("deploy", &[], "Deploy.");
        deploy.meta.disable_model_invocation = true;
        let text = render_disclosure([fix, deploy.clone()]).unwrap();
        assert!(
            text.ends_with("\n- **fix-issue** [issue-number]: d"),
            "{text}"
        );
        assert!(!text.contains("deploy"), "{text}");
        assert_eq!(render_disclosure([deploy]), None);
    }

    #[test]
    fn a_command_takes_positional_arguments_from_zero_and_no_base_directory() {
        let c = command(
            "review-pr",
            &["Bash(gh:*)"],
            "Review PR #$0 ($ARGUMENTS[0]) with priority $1, assign $2; all: $ARGUMENTS; \
             missing: [$3] [$ARGUMENTS[9]]; costs $ and $x and $ARGUMENTS[x].",
        );
        assert_eq!(
            render_body(&c, " 456 high \"Ada Lovelace\" "),
            "This command is designed to use only these tools: Bash(gh:*). Prefer them over \
             other tools when possible.\n\n---\n\n\
             Review PR #456 (456) with priority high, assign Ada Lovelace; all: 456 high \
             \"Ada Lovelace\"; missing: [] []; costs $ and $x and 456 high \"Ada Lovelace\"[x]."
        );
        // Only positional placeholders still count as placing the arguments.
        assert_eq!(render_body(&command("c", &[], "Fix $0."), "42"), "Fix 42.");
        assert_eq!(
            render_body(&command("c", &[], "Fix it."), "42"),
            "Fix it.\n\n## User Request\n\n42"
        );
        // A skill keeps its own rule: `$ARGUMENTS` only.
        assert_eq!(
            render_body(&skill("s", "d", &[], "Fix $0 and $ARGUMENTS."), "42"),
            base("s") + "Fix $0 and 42."
        );
    }

    #[test]
    fn arguments_split_at_whitespace_outside_quotes() {
        assert_eq!(split_arguments(""), Vec::<String>::new());
        assert_eq!(split_arguments("  a  b\tc\n"), ["a", "b", "c"]);
        assert_eq!(
            split_arguments("\"my widget\" 'it''s' x\"y z\"w \"\""),
            ["my widget", "its", "xy zw", ""]
        );
        assert_eq!(split_arguments("a \"unclosed b"), ["a", "unclosed b"]);
    }
}
