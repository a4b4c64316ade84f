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

use super::catalog::Skill;
use super::parse::is_valid_skill_name;

/// The placeholder replaced by the activation's arguments.
pub(crate) const ARGUMENTS_PLACEHOLDER: &str = "$ARGUMENTS";

/// The system prompt section listing the skills, or `None` when there are none.
///
/// Skills are listed by name whatever order they come in; descriptions are put on one line.
/// Takes skills, references or `Arc`s of them.
pub(crate) fn render_disclosure<S: Borrow<Skill>>(
    skills: impl IntoIterator<Item = S>,
) -> Option<String> {
    let mut skills: Vec<S> = skills.into_iter().collect();
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
        let description = one_line(&skill.meta.description);
        if description.is_empty() {
            out.push_str(&format!("\n- **{}**", skill.name()));
        } else {
            out.push_str(&format!("\n- **{}**: {description}", skill.name()));
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
/// 1. a first line names the skill's directory, as Claude Code's does: most skills refer to
///    their bundled files by relative path (`read FORMS.md`, `python scripts/fill.py`), and
///    the task's working directory is the project, not the skill;
/// 2. when the skill lists allowed tools, a paragraph asks to prefer them;
/// 3. every `$ARGUMENTS` in the body becomes `args` (trimmed);
/// 4. when the body has no `$ARGUMENTS` and `args` is not blank, a `## User Request` section
///    with `args` ends the text.
pub(crate) fn render_body(skill: &Skill, args: &str) -> String {
    let args = args.trim();
    let mut out = base_directory(skill);
    if !skill.meta.allowed_tools.is_empty() {
        out.push_str(&format!(
            "This skill is designed to use only these tools: {}. Prefer them over other tools \
             when possible.\n\n---\n\n",
            skill.meta.allowed_tools.join(", ")
        ));
    }
    if skill.body.contains(ARGUMENTS_PLACEHOLDER) {
        out.push_str(&skill.body.replace(ARGUMENTS_PLACEHOLDER, args));
    } else {
        out.push_str(&skill.body);
        if !args.is_empty() {
            out.push_str("\n\n## User Request\n\n");
            out.push_str(args);
        }
    }
    out
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
/// `/`, or a name that breaks the skill name rule (so `/usr/bin/env` and `//` are not).
pub(crate) fn parse_slash(line: &str) -> Option<(String, String)> {
    let rest = line.trim_start().strip_prefix('/')?;
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let name = rest[..end].to_lowercase();
    if !is_valid_skill_name(&name) {
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
            source: SkillSource::Project,
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
        for not_a_command in [
            "review",
            "/",
            "//x",
            "/usr/bin/env",
            "/a_b c",
            "/ x",
            "a /b",
        ] {
            assert_eq!(parse_slash(not_a_command), None, "{not_a_command}");
        }
    }
}
