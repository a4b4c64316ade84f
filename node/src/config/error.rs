//! `ConfigError`: every way loading or resolving the configuration fails, naming the file, variable or flag and the key.

use std::fmt;
use std::path::PathBuf;

use super::Origin;

/// Loading or resolving the configuration failed. The message names where the bad input came
/// from (file and line, environment variable, or flag) and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A configuration file exists but could not be read (or an explicit `--config` file is
    /// missing).
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A configuration file is not valid YAML.
    #[error("{}: invalid YAML: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The line of the error, 1-based, when the parser reports one.
        line: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// Claude Code's `.claude/settings.json` (read for its `permissions`) is not a JSON object.
    #[error("{}: invalid JSON: {message}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The line of the error, 1-based, when there is one.
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A configuration file's top level is not a mapping of sections.
    #[error("{}: expected a mapping of sections (node, log, limits, roles) at the top level", path.display())]
    NotAMapping {
        /// The file.
        path: PathBuf,
    },
    /// A key that the configuration does not have.
    #[error("{}: unknown key {key}{}", Place(origin, *line), Suggestion(suggestion.as_deref()))]
    UnknownKey {
        /// Where the key was written.
        origin: Origin,
        /// The line of the key, 1-based, when it came from a file.
        line: Option<usize>,
        /// The dotted key, such as `limits.max_runing_tasks`.
        key: String,
        /// A known key that is probably what was meant.
        suggestion: Option<String>,
    },
    /// A known key with a value of the wrong type or out of range.
    #[error("{}: bad value for {key}: {message}", Place(origin, *line))]
    BadValue {
        /// Where the value was written.
        origin: Origin,
        /// The line of the key, 1-based, when it came from a file.
        line: Option<usize>,
        /// The dotted key, such as `node.port`.
        key: String,
        /// What is wrong with the value.
        message: String,
    },
    /// The layers passed their checks one by one but not together. Every key is checked in
    /// its own layer, so this is a bug in Mew rather than in the user's files.
    #[error("the merged configuration is invalid: {message}")]
    Merged {
        /// What the parser said.
        message: String,
    },
    /// A value is well-formed but cannot be resolved, e.g. a path under `~` with no home
    /// directory.
    #[error("{key} (from {origin}): {message}")]
    Resolve {
        /// Where the value was set.
        origin: Origin,
        /// The dotted key.
        key: String,
        /// What is missing or wrong.
        message: String,
    },
}

/// Formats where a value was written: `path:line`, `env MEW_PORT` or `flag --port`.
struct Place<'a>(&'a Origin, Option<usize>);

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (Origin::File(path), Some(line)) => write!(f, "{}:{line}", path.display()),
            (Origin::File(path), None) => write!(f, "{}", path.display()),
            (origin, _) => write!(f, "{origin}"),
        }
    }
}

struct Suggestion<'a>(Option<&'a str>);

impl fmt::Display for Suggestion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(key) => write!(f, " (did you mean {key}?)"),
            None => Ok(()),
        }
    }
}
