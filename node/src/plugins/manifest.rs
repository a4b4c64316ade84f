//! A plugin's manifest, `.claude-plugin/plugin.json`, read as Claude Code reads it.
//!
//! `name` is required: kebab-case (lowercase letters, digits and `-`), at most 64 characters;
//! it names the plugin's folder in the install root. `version`, `description`, `author`,
//! `homepage`, `repository`, `license` and `keywords` are metadata. `commands`, `agents` and
//! `skills` (a path or a list of paths) name places beside the default folders; `hooks` and
//! `mcpServers` are a path to a file, or the hooks or servers themselves, inline. Every path is
//! relative to the plugin's folder (`./` may lead it) and stays inside it. `outputStyles` and
//! `lspServers`, which Mew has no use for, and unknown keys are warnings; the plugin loads
//! without them.

use std::path::{Component as PathComponent, Path};

use serde_json::{Map, Value};

/// The manifest's path in a plugin's folder.
pub(crate) const MANIFEST: &str = ".claude-plugin/plugin.json";

/// Largest manifest read, in bytes.
const MAX_MANIFEST_BYTES: u64 = 256 * 1024;

/// Longest plugin name.
const MAX_NAME_CHARS: usize = 64;

/// Where a plugin's hooks or MCP servers are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Component {
    /// In this file, relative to the plugin's folder.
    File(String),
    /// In the manifest itself.
    Inline,
}

/// A parsed manifest.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Manifest {
    /// The plugin's name.
    pub(crate) name: String,
    /// Its version, as written.
    pub(crate) version: Option<String>,
    /// What it is for.
    pub(crate) description: Option<String>,
    /// More places with commands.
    pub(crate) commands: Vec<String>,
    /// More places with agents.
    pub(crate) agents: Vec<String>,
    /// More places with skills.
    pub(crate) skills: Vec<String>,
    /// Its hooks, when not in `hooks/hooks.json`.
    pub(crate) hooks: Option<Component>,
    /// Its MCP servers, when not in `.mcp.json`.
    pub(crate) mcp_servers: Option<Component>,
}

/// A manifest that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{MANIFEST}: {0}")]
pub(crate) struct ManifestError(pub(crate) String);

/// Whether `name` is a plugin name (see the module docs).
pub(crate) fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Reads the manifest of the plugin in `dir`, with its warnings. Blocking.
pub(crate) fn read(dir: &Path) -> Result<(Manifest, Vec<String>), ManifestError> {
    let path = dir.join(MANIFEST);
    let text = crate::user_file::read_text(&path, MAX_MANIFEST_BYTES).map_err(|err| {
        ManifestError(match err {
            crate::user_file::ReadError::NotFound => {
                "missing: a plugin needs a manifest".to_owned()
            }
            other => other.to_string(),
        })
    })?;
    parse(&text)
}

/// Parses a manifest's text, with its warnings.
pub(crate) fn parse(text: &str) -> Result<(Manifest, Vec<String>), ManifestError> {
    mew_cards::check_nesting(text, mew_cards::MAX_NESTING)
        .map_err(|deep| ManifestError(format!("invalid JSON: {deep}")))?;
    let value: Value =
        serde_json::from_str(text).map_err(|err| ManifestError(format!("invalid JSON: {err}")))?;
    let Value::Object(map) = value else {
        return Err(ManifestError("must hold a JSON object".to_owned()));
    };
    let mut warnings = Vec::new();
    let name = match map.get("name") {
        Some(Value::String(name)) if is_valid_name(name) => name.clone(),
        Some(Value::String(name)) => {
            return Err(ManifestError(format!(
                "`name: {name}` is not a plugin name (kebab-case: lowercase letters, digits \
                 and -, at most {MAX_NAME_CHARS} characters)"
            )));
        }
        Some(_) => return Err(ManifestError("`name` must be a string".to_owned())),
        None => return Err(ManifestError("`name` is required".to_owned())),
    };
    let manifest = Manifest {
        name,
        version: text_field(&map, "version")?,
        description: text_field(&map, "description")?,
        commands: paths(&map, "commands")?,
        agents: paths(&map, "agents")?,
        skills: paths(&map, "skills")?,
        hooks: component(&map, "hooks")?,
        mcp_servers: component(&map, "mcpServers")?,
    };
    for (key, _) in &map {
        match key.as_str() {
            "name" | "version" | "description" | "commands" | "agents" | "skills" | "hooks"
            | "mcpServers" | "author" | "homepage" | "repository" | "license" | "keywords"
            | "$schema" => {}
            "outputStyles" => {
                warnings.push("`outputStyles` ignored: Mew has no output styles".to_owned());
            }
            "lspServers" => {
                warnings.push("`lspServers` ignored: Mew runs no language servers".to_owned());
            }
            other => warnings.push(format!("unknown key `{other}` ignored")),
        }
    }
    Ok((manifest, warnings))
}

fn text_field(map: &Map<String, Value>, key: &str) -> Result<Option<String>, ManifestError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(ManifestError(format!("`{key}` must be a string"))),
    }
}

/// `key` as a list of paths: one path or a list of them.
fn paths(map: &Map<String, Value>, key: &str) -> Result<Vec<String>, ManifestError> {
    let list = match map.get(key) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(path)) => vec![path.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(path) => Ok(path.clone()),
                _ => Err(ManifestError(format!("`{key}` must list paths (strings)"))),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ManifestError(format!(
                "`{key}` must be a path or a list of paths"
            )));
        }
    };
    list.iter().map(|path| inside(key, path)).collect()
}

/// `key` as a file or inline content.
fn component(map: &Map<String, Value>, key: &str) -> Result<Option<Component>, ManifestError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(path)) => Ok(Some(Component::File(inside(key, path)?))),
        Some(Value::Object(_)) => Ok(Some(Component::Inline)),
        Some(_) => Err(ManifestError(format!(
            "`{key}` must be a path or an object"
        ))),
    }
}

/// `path` as a path inside the plugin's folder (`./` dropped), or an error.
fn inside(key: &str, path: &str) -> Result<String, ManifestError> {
    let relative = Path::new(path);
    let escapes = relative.is_absolute()
        || relative
            .components()
            .any(|part| !matches!(part, PathComponent::Normal(_) | PathComponent::CurDir));
    if escapes || path.trim().is_empty() {
        return Err(ManifestError(format!(
            "`{key}`: `{path}` must be a path inside the plugin's folder (such as ./{key})"
        )));
    }
    Ok(path.strip_prefix("./").unwrap_or(path).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_manifest_reads_with_its_paths_and_warnings() {
        let (manifest, warnings) = parse(
            r#"{"name": "review-kit", "version": "1.2.0", "description": "Reviews",
                "author": {"name": "A"}, "keywords": ["x"],
                "commands": ["./extra/cmd.md", "./more"], "agents": "./team",
                "hooks": "./config/hooks.json", "mcpServers": {"db": {"command": "db"}},
                "outputStyles": "./styles", "color": "blue"}"#,
        )
        .unwrap();
        assert_eq!(manifest.name, "review-kit");
        assert_eq!(manifest.version.as_deref(), Some("1.2.0"));
        assert_eq!(manifest.commands, ["extra/cmd.md", "more"]);
        assert_eq!(manifest.agents, ["team"]);
        assert_eq!(
            manifest.hooks,
            Some(Component::File("config/hooks.json".to_owned()))
        );
        assert_eq!(manifest.mcp_servers, Some(Component::Inline));
        assert_eq!(
            warnings,
            [
                "unknown key `color` ignored",
                "`outputStyles` ignored: Mew has no output styles"
            ]
        );
    }

    #[test]
    fn bad_manifests_say_what_is_wrong() {
        let error = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(
            error("{}"),
            ".claude-plugin/plugin.json: `name` is required"
        );
        assert!(error(r#"{"name": "Review Kit"}"#).contains("is not a plugin name"));
        assert!(
            error(r#"{"name": "k", "agents": "../elsewhere"}"#)
                .contains("`agents`: `../elsewhere` must be a path inside the plugin's folder")
        );
        assert!(error(r#"{"name": "k", "hooks": "/etc/hooks.json"}"#).contains("inside"));
        assert!(error(r#"{"name": "k", "hooks": 3}"#).contains("a path or an object"));
        assert!(error("[1]").contains("must hold a JSON object"));
        assert!(error("{").contains("invalid JSON"));
    }
}
