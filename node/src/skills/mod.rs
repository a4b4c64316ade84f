//! Skills: directories of instructions (a `SKILL.md` and any files it refers to) that an agent
//! activates when a request calls for them, and Claude Code's custom commands
//! (`.claude/commands/NAME.md`), which are skills of one file.
//!
//! - [`parse`]: `SKILL.md` and command files (YAML frontmatter and Markdown body) into a
//!   [`parse::SkillMeta`] and body, with the name rules and the fallbacks, warnings returned
//!   as data.
//! - [`catalog`]: the skills of every root (commands, user, project, configured), later roots
//!   winning; broken skills are problems, never fatal. Snapshots are immutable and swapped whole on
//!   reload; activation re-reads `SKILL.md` and hands out an owned copy.
//! - [`render`]: the disclosure for the system prompt, a skill's rendered instructions, the
//!   per-task [`render::ActiveSkills`] and its "Active Skills" environment block, and
//!   `/name args` commands.
//! - [`install`]: installing from GitHub (tree, raw and skills.sh URLs) with quotas, staged next
//!   to the target and swapped in atomically, and removal.
//! - [`lock`]: the install root's lock file (source, commit, SHA-256 of every file) and
//!   [`lock::verify`], which finds drift.

pub(crate) mod catalog;
pub(crate) mod install;
pub(crate) mod lock;
pub(crate) mod parse;
pub(crate) mod render;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static UNIQUE: AtomicU64 = AtomicU64::new(0);

/// A suffix for temporary names that no other name of this process uses: pid, time and a
/// counter.
pub(crate) fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    )
}
