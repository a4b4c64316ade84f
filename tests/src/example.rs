//! Running the examples as their READMEs say: the shell blocks of a README, and a copy of an
//! example's project to run a node on.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::process::workspace_root;

/// `examples/<name>` in the repository.
pub fn example_dir(name: &str) -> PathBuf {
    workspace_root().join("examples").join(name)
}

/// The text of each ```` ```sh ```` block of the Markdown file `readme`, in order.
pub fn sh_blocks(readme: &Path) -> anyhow::Result<Vec<String>> {
    let text =
        fs::read_to_string(readme).with_context(|| format!("cannot read {}", readme.display()))?;
    sh_blocks_of(&text).with_context(|| readme.display().to_string())
}

/// The section of the Markdown file `readme` under the level-2 heading `heading` (the text
/// after `## {heading}` up to the next level-2 heading).
pub fn section(readme: &Path, heading: &str) -> anyhow::Result<String> {
    let text =
        fs::read_to_string(readme).with_context(|| format!("cannot read {}", readme.display()))?;
    let start = text
        .find(&format!("\n## {heading}\n"))
        .with_context(|| format!("{}: no section {heading:?}", readme.display()))?;
    let body = &text[start + heading.len() + 5..];
    Ok(body[..body.find("\n## ").unwrap_or(body.len())].to_owned())
}

/// The text of each ```` ```sh ```` block of the Markdown `text`, in order.
pub fn sh_blocks_of(text: &str) -> anyhow::Result<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), line) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    anyhow::ensure!(current.is_none(), "a block is not closed");
    Ok(blocks)
}

/// Copies the directory `from` into `to` (created), files and subdirectories, keeping the
/// files' permissions (scripts stay executable).
pub fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in fs::read_dir(from).with_context(|| format!("cannot list {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)
                .with_context(|| format!("cannot copy {}", entry.path().display()))?;
        }
    }
    Ok(())
}
