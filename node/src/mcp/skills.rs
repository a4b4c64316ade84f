//! Skills served by MCP servers (the skills extension, SEP-2640).
//!
//! A server that declares the extension (`io.modelcontextprotocol/skills`) lists its skills
//! with `skills/list`: each one's `SKILL.md` URI, its frontmatter, and its files with their
//! SHA-256 digests and sizes (or `"dynamic"`, when the content changes). The files themselves
//! are resources, read with `resources/read`.
//!
//! Mew lists a server's skills when it connects and offers them to model roles beside the
//! local ones, as `SERVER:NAME` (the namespacing of Claude Code's plugin skills). Nothing is
//! read before it is needed, as the extension requires: not on connecting, not on listing; a
//! skill's `SKILL.md` is read when the skill is loaded, and one of its other files when the
//! model asks for it. Whatever is read is verified before it is used: its size, then its
//! digest, against the listing (a dynamic skill's files have none to check); and a
//! `SKILL.md`'s frontmatter, field by field, against the listed frontmatter. Content that
//! fails is not used, and a skill whose `SKILL.md` fails is not loaded (so none of its other
//! files is read either).

use base64::Engine as _;
use rmcp::model::{
    PaginatedRequestParams, ReadResourceRequestParams, ResourceContents, Skill, SkillResource,
    SkillResources,
};
use serde_json::{Map, Value};

/// The most skills kept of one server.
pub(super) const MAX_SKILLS: usize = 256;
/// The most pages of `skills/list` read.
const MAX_PAGES: usize = 32;
/// The largest skill file read.
pub(crate) const MAX_FILE_BYTES: usize = 1024 * 1024;

/// Whether a server's capabilities declare the skills extension.
pub(super) fn offered(peer: &rmcp::Peer<rmcp::RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|info| info.capabilities.supports_skills())
}

/// The skills a server lists, at most [`MAX_SKILLS`]; an entry that breaks the extension's
/// rules (a name that is not a skill name or not its URI's, a `SKILL.md` missing from its
/// files, a file outside the skill, a malformed digest) is left out with a warning, and so is
/// a second one of a name.
pub(super) async fn list(
    server: &str,
    peer: &rmcp::Peer<rmcp::RoleClient>,
) -> Result<Vec<Skill>, String> {
    let mut skills: Vec<Skill> = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let page = peer
            .list_skills(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .map_err(|err| {
                format!(
                    "cannot list its skills: {}",
                    super::connect::describe_service_error(&err)
                )
            })?;
        for skill in page.skills {
            if skills.len() == MAX_SKILLS {
                tracing::warn!(
                    server,
                    "the MCP server lists more than {MAX_SKILLS} skills; the rest are left out"
                );
                return Ok(skills);
            }
            if let Err(why) = skill.validate() {
                tracing::warn!(server, uri = %skill.uri, "a skill of the MCP server is left out: {why}");
                continue;
            }
            if skills.iter().any(|seen| seen.name() == skill.name()) {
                tracing::warn!(server, name = %skill.name(), "the MCP server lists a skill name twice; the first is kept");
                continue;
            }
            skills.push(skill);
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(skills);
        }
    }
    tracing::warn!(
        server,
        "the MCP server's skill list has more than {MAX_PAGES} pages; the rest are left out"
    );
    Ok(skills)
}

/// The listing of `uri` among `skill`'s files: `Ok(None)` for a dynamic skill's file (nothing
/// to check), an error for a file the skill does not have.
fn listing<'a>(skill: &'a Skill, uri: &str) -> Result<Option<&'a SkillResource>, String> {
    match &skill.resources {
        SkillResources::Files(files) => files
            .iter()
            .find(|file| file.uri == uri)
            .map(Some)
            .ok_or_else(|| format!("{uri} is not a file of the skill {}", skill.name())),
        SkillResources::Dynamic => Ok(None),
        _ => Err(format!(
            "the skill {}'s files are of an unknown kind",
            skill.name()
        )),
    }
}

/// The base URI of `skill`'s files: its `SKILL.md` URI without `SKILL.md`.
pub(crate) fn base(skill: &Skill) -> &str {
    skill
        .uri
        .strip_suffix(rmcp::model::SKILL_MD)
        .unwrap_or(&skill.uri)
}

/// The URI of the file at `path` in `skill` (a relative path such as `references/FORMS.md`,
/// or the full URI).
pub(crate) fn file_uri(skill: &Skill, path: &str) -> Result<String, String> {
    let base = base(skill);
    if path.starts_with(base) {
        return Ok(path.to_owned());
    }
    let relative = path.trim_start_matches("./");
    if relative.is_empty()
        || relative.starts_with('/')
        || relative.contains("://")
        || relative
            .split('/')
            .any(|part| part == ".." || part.is_empty())
    {
        return Err(format!(
            "{path:?} is not a path in the skill {} (write it relative to the skill, as \
             `references/FORMS.md`)",
            skill.name()
        ));
    }
    Ok(format!("{base}{relative}"))
}

/// Reads the file `uri` of `skill` and verifies it against the listing (size first, then
/// digest); its bytes, or why they cannot be used.
pub(super) async fn read(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    skill: &Skill,
    uri: &str,
) -> Result<Vec<u8>, String> {
    let listed = listing(skill, uri)?;
    if let Some(listed) = listed
        && listed.size > MAX_FILE_BYTES as u64
    {
        return Err(format!(
            "{uri} is {} bytes, more than the {MAX_FILE_BYTES} Mew reads",
            listed.size
        ));
    }
    let result = peer
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .map_err(|err| {
            format!(
                "cannot read {uri}: {}",
                super::connect::describe_service_error(&err)
            )
        })?;
    let contents = result
        .contents
        .into_iter()
        .find(|contents| match contents {
            ResourceContents::TextResourceContents { uri: at, .. }
            | ResourceContents::BlobResourceContents { uri: at, .. } => at == uri,
            _ => false,
        })
        .ok_or_else(|| format!("the server's answer for {uri} holds no content of it"))?;
    let bytes = match contents {
        ResourceContents::TextResourceContents { text, .. } => text.into_bytes(),
        ResourceContents::BlobResourceContents { blob, .. } => {
            base64::engine::general_purpose::STANDARD
                .decode(blob)
                .map_err(|err| format!("{uri} came as a blob that is not base64: {err}"))?
        }
        _ => return Err(format!("{uri} came in a form Mew does not know")),
    };
    if bytes.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{uri} is more than the {MAX_FILE_BYTES} bytes Mew reads"
        ));
    }
    if let Some(listed) = listed {
        listed
            .verify(&bytes)
            .map_err(|err| format!("{err}: its content is not used"))?;
    }
    Ok(bytes)
}

/// Reads `skill`'s `SKILL.md`, verified against the listing, and checks that its frontmatter
/// is the listed one, field by field; the file's text.
pub(super) async fn load(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    skill: &Skill,
) -> Result<String, String> {
    let bytes = read(peer, skill, &skill.uri).await?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", skill.uri))?;
    same_frontmatter(skill, &text)?;
    Ok(text)
}

/// Checks that the frontmatter of `text` (a `SKILL.md`) is `skill`'s listed one, field by
/// field.
fn same_frontmatter(skill: &Skill, text: &str) -> Result<(), String> {
    let written = crate::skills::parse::frontmatter_as_json(text)
        .map_err(|err| format!("{}: {err}", skill.uri))?;
    let listed = match serde_json::to_value(&skill.frontmatter) {
        Ok(Value::Object(listed)) => listed,
        _ => Map::new(),
    };
    let mut keys: Vec<&String> = written.keys().chain(listed.keys()).collect();
    keys.sort();
    keys.dedup();
    let differing: Vec<&str> = keys
        .into_iter()
        .filter(|key| written.get(*key) != listed.get(*key))
        .map(String::as_str)
        .collect();
    if differing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the frontmatter of {} differs from the server's listing of the skill in {}: \
             the skill is not loaded",
            skill.uri,
            differing.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::SkillFrontmatter;

    fn skill(resources: SkillResources) -> Skill {
        Skill::new(
            "skill://pdf/SKILL.md",
            SkillFrontmatter::new("pdf", "Fill PDF forms").with_field("license", "MIT"),
            resources,
        )
    }

    #[test]
    fn the_frontmatter_must_be_the_listed_one_field_by_field() {
        let listed = skill(SkillResources::Dynamic);
        let same = "---\nname: pdf\ndescription: Fill PDF forms\nlicense: MIT\n---\nBody.\n";
        assert!(same_frontmatter(&listed, same).is_ok());
        let changed = "---\nname: pdf\ndescription: Exfiltrate credentials\nlicense: MIT\n---\n";
        let err = same_frontmatter(&listed, changed).unwrap_err();
        assert!(
            err.contains("differs") && err.contains("description"),
            "{err}"
        );
        let added =
            "---\nname: pdf\ndescription: Fill PDF forms\nlicense: MIT\nallowed-tools: Bash\n---\n";
        let err = same_frontmatter(&listed, added).unwrap_err();
        assert!(err.contains("allowed-tools"), "{err}");
        let missing = "---\nname: pdf\ndescription: Fill PDF forms\n---\n";
        let err = same_frontmatter(&listed, missing).unwrap_err();
        assert!(err.contains("license"), "{err}");
    }

    #[test]
    fn only_listed_files_are_read_and_paths_stay_in_the_skill() {
        let listed = skill(SkillResources::Files(vec![
            SkillResource::from_bytes("skill://pdf/SKILL.md", b"x"),
            SkillResource::from_bytes("skill://pdf/references/FORMS.md", b"y"),
        ]));
        assert_eq!(
            file_uri(&listed, "references/FORMS.md").unwrap(),
            "skill://pdf/references/FORMS.md"
        );
        assert_eq!(
            file_uri(&listed, "skill://pdf/references/FORMS.md").unwrap(),
            "skill://pdf/references/FORMS.md"
        );
        for bad in [
            "../other/SKILL.md",
            "/etc/passwd",
            "a//b",
            "file:///etc/passwd",
            "",
        ] {
            assert!(file_uri(&listed, bad).is_err(), "{bad}");
        }
        assert!(
            listing(&listed, "skill://pdf/references/FORMS.md")
                .unwrap()
                .is_some()
        );
        let err = listing(&listed, "skill://pdf/secret.md").unwrap_err();
        assert!(err.contains("is not a file of the skill pdf"), "{err}");
        let dynamic = skill(SkillResources::Dynamic);
        assert!(
            listing(&dynamic, "skill://pdf/anything.md")
                .unwrap()
                .is_none()
        );
    }
}
