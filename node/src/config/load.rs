//! Loading: read the configuration files, the environment and the flags, check each layer, and merge them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

use super::check::{check_layer, line_of};
use super::mcp_entries::{Dialect, Environment, McpSources, read_mcp_json};
use super::merge::{merge, singleton};
use super::schema::Settings;
use super::{Config, ConfigError, LogFormat, Origin};

/// Everything the configuration is loaded from. The process environment is passed in as a map,
/// so tests and embedders never touch the real one. Debug-prints the names of the environment
/// variables, not their values.
#[derive(Clone, Default)]
pub struct Sources {
    /// The user's home directory: `~/.mew/config.yaml` is read from it and `~` expands to it.
    pub home: Option<PathBuf>,
    /// The project directory: `.mew/config.yaml` is read from it and relative paths are
    /// resolved against it. Should be absolute (it is made absolute against the current
    /// directory when resolving).
    pub project: PathBuf,
    /// An explicit configuration file (`--config`), one more layer above the project's. Unlike
    /// the user and project files, it must exist.
    pub config_file: Option<PathBuf>,
    /// Environment variables. `MEW_HOST`, `MEW_PORT`, `MEW_DATA_DIR`, `MEW_LOG_LEVEL` and
    /// `MEW_LOG_FORMAT` set configuration keys (an empty value counts as unset); besides them,
    /// only the variables that `${VAR}` refers to in the `env` and `headers` of
    /// `mcp_servers` entries are read, and those that are missing expand to empty text.
    pub env: HashMap<String, String>,
    /// Command-line flags, the highest layer.
    pub flags: FlagOverrides,
    /// The MCP server files of installed Claude Code plugins (`.mcp.json`'s shape), each with
    /// its plugin's folder, which `${CLAUDE_PLUGIN_ROOT}` in it names. Read as `.mcp.json`
    /// is, below it, so the project's own entries win.
    pub plugin_mcp: Vec<(PathBuf, PathBuf)>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.env.keys().collect();
        names.sort();
        f.debug_struct("Sources")
            .field("home", &self.home)
            .field("project", &self.project)
            .field("config_file", &self.config_file)
            .field("env", &names)
            .field("flags", &self.flags)
            .finish()
    }
}

impl Sources {
    /// Sources with only a project directory: no home, no `--config`, no environment, no flags.
    #[cfg(test)]
    pub fn new(project: impl Into<PathBuf>) -> Self {
        Self {
            project: project.into(),
            ..Self::default()
        }
    }

    /// The user's configuration file, `~/.mew/config.yaml`, if there is a home directory.
    pub fn user_file(&self) -> Option<PathBuf> {
        self.home
            .as_ref()
            .map(|home| home.join(".mew").join("config.yaml"))
    }

    /// The project's configuration file, `<project>/.mew/config.yaml`.
    pub fn project_file(&self) -> PathBuf {
        self.project.join(".mew").join("config.yaml")
    }

    /// Claude Code's project settings, `<project>/.claude/settings.json`: only its
    /// `permissions` object is read.
    pub fn claude_settings_file(&self) -> PathBuf {
        self.project.join(".claude").join("settings.json")
    }

    /// The project's MCP servers in Claude Code's format, `<project>/.mcp.json`: only its
    /// `mcpServers` object is read.
    pub fn mcp_json_file(&self) -> PathBuf {
        self.project.join(".mcp.json")
    }
}

/// Settings given as command-line flags; `None` leaves the lower layers in charge.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlagOverrides {
    /// `--host`: `node.host`.
    pub host: Option<String>,
    /// `--port`: `node.port`.
    pub port: Option<u16>,
    /// `--data-dir`: `node.data_dir`.
    pub data_dir: Option<PathBuf>,
    /// `--log-level`: `log.level`.
    pub log_level: Option<String>,
    /// `--log-format`: `log.format`.
    pub log_format: Option<LogFormat>,
}

/// The environment variables that set configuration keys: name, dotted key, and whether the
/// value is an integer (otherwise it is taken as a string). An empty value counts as unset.
pub(crate) const ENV_VARS: &[(&str, &str, EnvKind)] = &[
    ("MEW_HOST", "node.host", EnvKind::String),
    ("MEW_PORT", "node.port", EnvKind::Integer),
    ("MEW_DATA_DIR", "node.data_dir", EnvKind::String),
    ("MEW_LOG_LEVEL", "log.level", EnvKind::String),
    ("MEW_LOG_FORMAT", "log.format", EnvKind::String),
    ("MEW_STORE_URL", "store.url", EnvKind::String),
    ("MEW_REPLICA_ID", "store.replica_id", EnvKind::String),
];

/// How an environment variable's text becomes a configuration value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EnvKind {
    /// Taken as it is.
    String,
    /// A decimal integer.
    Integer,
}

/// The merged configuration before resolution: where each key came from, and the typed
/// (unresolved) settings. Produced by [`Config::load`]; [`LoadedConfig::resolve`]
/// turns it into a [`Config`].
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub(super) origins: BTreeMap<String, Origin>,
    pub(super) settings: Settings,
    pub(super) home: Option<PathBuf>,
    pub(super) project: PathBuf,
    /// The variables `${VAR}` in MCP server entries expand from.
    pub(super) env: Environment,
    /// Where each MCP server entry was written, and the problems of `.mcp.json` as a whole.
    pub(super) mcp: McpSources,
}

impl LoadedConfig {
    /// Where the value of a dotted leaf key (`node.port`) came from.
    pub fn origin(&self, key: &str) -> Option<&Origin> {
        self.origins.get(key)
    }

    /// Every leaf key with its origin, sorted by key.
    #[cfg(test)]
    pub fn origins(&self) -> &BTreeMap<String, Origin> {
        &self.origins
    }
}

impl Config {
    /// Reads and merges the layers, lowest first: built-in defaults, `~/.mew/config.yaml`,
    /// the `permissions` of `<project>/.claude/settings.json`, the `mcpServers` of
    /// `<project>/.mcp.json`, `<project>/.mew/config.yaml`, `sources.config_file`, the `MEW_*`
    /// environment variables, the flags. Missing user and project files are skipped. Each
    /// layer is checked on its own, so errors name the file (and line), variable or flag, and
    /// the key. Nothing in `.mcp.json` and no `mcp_servers` entry fails the load: their
    /// problems are reported in [`Config::mcp_problems`] and the entries skipped.
    ///
    /// The only I/O is reading the files; call [`LoadedConfig::resolve`] next.
    pub fn load(sources: &Sources) -> Result<LoadedConfig, ConfigError> {
        let defaults =
            serde_yaml_ng::to_value(Settings::default()).map_err(|error| ConfigError::Merged {
                message: format!("the built-in defaults do not serialize: {error}"),
            })?;
        let mut tree = Value::Mapping(Default::default());
        let mut origins = BTreeMap::new();
        merge(&mut tree, &mut origins, defaults.clone(), &Origin::Default);

        let plugin_files = sources
            .plugin_mcp
            .iter()
            .map(|(path, root)| Some((path.clone(), FileKind::McpJson(Some(root.clone())))));
        let files = [
            sources
                .user_file()
                .map(|path| (path, FileKind::Yaml { required: false })),
            Some((sources.claude_settings_file(), FileKind::ClaudeSettings)),
        ]
        .into_iter()
        .chain(plugin_files)
        .chain([
            Some((sources.mcp_json_file(), FileKind::McpJson(None))),
            Some((sources.project_file(), FileKind::Yaml { required: false })),
            sources
                .config_file
                .clone()
                .map(|path| (path, FileKind::Yaml { required: true })),
        ]);
        let mut mcp = McpSources::default();
        for (path, kind) in files.flatten() {
            let layer = match kind {
                FileKind::Yaml { required } => {
                    read_file_layer(&path, required, &defaults)?.map(|(layer, text)| {
                        mcp.record(&layer, Dialect::Mew, &path, &text);
                        layer
                    })
                }
                FileKind::ClaudeSettings => read_claude_settings(&path, &defaults)?,
                FileKind::McpJson(plugin_root) => {
                    read_mcp_json(&path, plugin_root.as_deref(), &mut mcp)
                }
            };
            if let Some(layer) = layer {
                merge(&mut tree, &mut origins, layer, &Origin::File(path));
            }
        }
        for (name, key, kind) in ENV_VARS {
            let Some(text) = sources.env.get(*name).filter(|text| !text.is_empty()) else {
                continue;
            };
            let origin = Origin::Env((*name).to_owned());
            let value = match kind {
                EnvKind::String => Value::String(text.clone()),
                EnvKind::Integer => match text.trim().parse::<i64>() {
                    Ok(number) => Value::Number(number.into()),
                    Err(_) => {
                        return Err(ConfigError::BadValue {
                            origin,
                            line: None,
                            key: (*key).to_owned(),
                            message: format!("expected an integer, found `{text}`"),
                        });
                    }
                },
            };
            let layer = check_layer(leaf(key, value), &defaults, &origin, None)?;
            merge(&mut tree, &mut origins, layer, &origin);
        }
        for (flag, key, value) in flag_values(&sources.flags)? {
            let origin = Origin::Flag(flag.to_owned());
            let layer = check_layer(leaf(key, value), &defaults, &origin, None)?;
            merge(&mut tree, &mut origins, layer, &origin);
        }

        let settings = serde_yaml_ng::from_value(tree).map_err(|error| ConfigError::Merged {
            message: error.to_string(),
        })?;
        Ok(LoadedConfig {
            origins,
            settings,
            home: sources.home.clone(),
            project: sources.project.clone(),
            env: Environment::new(sources.env.clone()),
            mcp,
        })
    }
}

/// What a configuration file is, and so how it is read.
#[derive(Debug, Clone)]
enum FileKind {
    /// Mew's own YAML (the user's, the project's, `--config`).
    Yaml {
        /// Whether a missing file is an error.
        required: bool,
    },
    /// Claude Code's `.claude/settings.json`, for its `permissions`.
    ClaudeSettings,
    /// Claude Code's `.mcp.json`, for its `mcpServers`; a plugin's, with the plugin's folder.
    McpJson(Option<PathBuf>),
}

/// Reads, parses and checks one configuration file, returning it with its text; `Ok(None)`
/// if it is missing and optional, or empty.
fn read_file_layer(
    path: &Path,
    required: bool,
    schema: &Value,
) -> Result<Option<(Value, String)>, ConfigError> {
    let text = match crate::user_file::read_text(path, crate::user_file::MAX_USER_FILE_BYTES) {
        Ok(text) => text,
        Err(crate::user_file::ReadError::NotFound) if !required => return Ok(None),
        Err(error) => {
            return Err(ConfigError::Read {
                path: path.to_owned(),
                source: error.into(),
            });
        }
    };
    mew_cards::check_nesting(&text, mew_cards::MAX_NESTING).map_err(|deep| {
        ConfigError::Syntax {
            path: path.to_owned(),
            line: Some(deep.line),
            message: deep.to_string(),
        }
    })?;
    let value: Value = serde_yaml_ng::from_str(&text).map_err(|error| ConfigError::Syntax {
        path: path.to_owned(),
        line: error.location().map(|location| location.line()),
        message: error.to_string(),
    })?;
    let value = match value {
        // An empty file, or one with only comments.
        Value::Null => return Ok(None),
        Value::Mapping(_) => value,
        _ => {
            return Err(ConfigError::NotAMapping {
                path: path.to_owned(),
            });
        }
    };
    let origin = Origin::File(path.to_owned());
    let layer = check_layer(value, schema, &origin, Some(&text))?;
    Ok(Some((layer, text)))
}

/// Reads the `permissions` object of Claude Code's `.claude/settings.json` as a layer with only
/// a `permissions:` section; `Ok(None)` if the file or the object is missing. `allow`, `deny`
/// and `ask` are taken as they are, except that a file-tool rule `Tool(/path)`, which Claude
/// Code anchors at the project, becomes `Tool(path)` (`//path` stays absolute); `defaultMode`
/// becomes `mode`. Other keys are ignored. `defaultMode: dontAsk` is refused, because Claude
/// Code's `dontAsk` refuses what is not pre-approved while Mew's approves what no rule refuses.
fn read_claude_settings(path: &Path, schema: &Value) -> Result<Option<Value>, ConfigError> {
    let text = match crate::user_file::read_text(path, crate::user_file::MAX_USER_FILE_BYTES) {
        Ok(text) => text,
        Err(crate::user_file::ReadError::NotFound) => return Ok(None),
        Err(error) => {
            return Err(ConfigError::Read {
                path: path.to_owned(),
                source: error.into(),
            });
        }
    };
    mew_cards::check_nesting(&text, mew_cards::MAX_NESTING).map_err(|deep| ConfigError::Json {
        path: path.to_owned(),
        line: Some(deep.line),
        message: deep.to_string(),
    })?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|error| ConfigError::Json {
            path: path.to_owned(),
            line: Some(error.line()),
            message: error.to_string(),
        })?;
    let Some(settings) = json.as_object() else {
        return Err(ConfigError::Json {
            path: path.to_owned(),
            line: None,
            message: "expected an object at the top level".to_owned(),
        });
    };
    let origin = Origin::File(path.to_owned());
    let bad = |key: &str, message: String| {
        let keys: Vec<String> = key.split('.').map(str::to_owned).collect();
        ConfigError::BadValue {
            origin: origin.clone(),
            line: line_of(&text, &keys),
            key: key.to_owned(),
            message,
        }
    };
    let Some(permissions) = settings.get("permissions") else {
        return Ok(None);
    };
    let Some(permissions) = permissions.as_object() else {
        return Err(bad("permissions", "expected an object".to_owned()));
    };
    let mut section = serde_yaml_ng::Mapping::new();
    for (key, name) in [
        ("allow", "allow"),
        ("deny", "deny"),
        ("ask", "ask"),
        ("defaultMode", "mode"),
    ] {
        let Some(value) = permissions.get(key) else {
            continue;
        };
        if key == "defaultMode" && value.as_str() == Some("dontAsk") {
            return Err(bad(
                "permissions.defaultMode",
                "`dontAsk` refuses unapproved tools in Claude Code but approves every tool no \
                 rule refuses in Mew; set permissions.mode in .mew/config.yaml instead"
                    .to_owned(),
            ));
        }
        let value = match value {
            serde_json::Value::Array(rules) => serde_json::Value::Array(
                rules
                    .iter()
                    .map(|rule| match rule.as_str() {
                        Some(rule) => crate::permission::rules::from_claude_settings(rule).into(),
                        None => rule.clone(),
                    })
                    .collect(),
            ),
            other => other.clone(),
        };
        let value = serde_yaml_ng::to_value(&value)
            .map_err(|error| bad(&format!("permissions.{key}"), error.to_string()))?;
        section.insert(Value::String(name.to_owned()), value);
    }
    if section.is_empty() {
        return Ok(None);
    }
    let layer = leaf("permissions", Value::Mapping(section));
    check_layer(layer, schema, &origin, Some(&text))
        .map(Some)
        .map_err(|error| match error {
            ConfigError::BadValue { key, message, .. } if key == "permissions.mode" => {
                bad("permissions.defaultMode", message)
            }
            other => other,
        })
}

/// The flags that are set, as (flag name, dotted key, value).
fn flag_values(
    flags: &FlagOverrides,
) -> Result<Vec<(&'static str, &'static str, Value)>, ConfigError> {
    let mut values = Vec::new();
    if let Some(host) = &flags.host {
        values.push(("--host", "node.host", Value::String(host.clone())));
    }
    if let Some(port) = flags.port {
        values.push(("--port", "node.port", Value::Number(port.into())));
    }
    if let Some(data_dir) = &flags.data_dir {
        let Some(text) = data_dir.to_str() else {
            return Err(ConfigError::BadValue {
                origin: Origin::Flag("--data-dir".to_owned()),
                line: None,
                key: "node.data_dir".to_owned(),
                message: format!("`{}` is not valid UTF-8", data_dir.display()),
            });
        };
        values.push((
            "--data-dir",
            "node.data_dir",
            Value::String(text.to_owned()),
        ));
    }
    if let Some(level) = &flags.log_level {
        values.push(("--log-level", "log.level", Value::String(level.clone())));
    }
    if let Some(format) = flags.log_format {
        values.push((
            "--log-format",
            "log.format",
            Value::String(format.to_string()),
        ));
    }
    Ok(values)
}

/// A layer that sets only the dotted `key`.
fn leaf(key: &str, value: Value) -> Value {
    let path: Vec<String> = key.split('.').map(str::to_owned).collect();
    singleton(&path, value)
}
