//! The `skills:` section: where skills are found besides the standard places, and how
//! `mew skills install` fetches them.
//!
//! ```yaml
//! skills:
//!   roots: [team/skills, ~/shared/skills]  # extra skill roots, after the standard ones (a later
//!                                          # root wins by name); relative to the project
//!   github_api: https://api.github.com     # the GitHub contents API installs go through
//!                                          # (GitHub Enterprise: https://HOST/api/v3)
//!   token_env: GITHUB_TOKEN                # the variable holding a token sent to github_api;
//!                                          # default: GITHUB_TOKEN for api.github.com only
//!   install_timeout: 60s                   # the limit on each request of an install
//!   max_file_bytes: 1048576                # the largest file of a skill, in bytes
//!   max_total_bytes: 8388608               # the largest skill, all files together, in bytes
//!   max_files: 64                          # the most files in one skill
//!   max_depth: 4                           # directories nested below the skill's own
//! ```
//!
//! Sizes are whole numbers of bytes, as `limits.max_body_bytes` is. The token itself is never
//! in a file, only the name of the variable that holds it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::{ConfigError, LoadedConfig};
use crate::duration;
use crate::skills::install::{
    DEFAULT_API_BASE, DEFAULT_MAX_DEPTH, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_FILES,
    DEFAULT_MAX_TOTAL_BYTES, DEFAULT_TIMEOUT, InstallOptions,
};

/// The variable a GitHub token is read from when `github_api` is GitHub's own API and
/// `token_env` is not set.
pub const DEFAULT_TOKEN_ENV: &str = "GITHUB_TOKEN";

/// `skills:` — where skills are found besides the standard places, and the limits of
/// installing them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkillsConfig {
    /// Extra skill roots, absolute, in the order configured. They come after the standard
    /// roots (`~/.claude/skills`, `~/.mew/skills`, the project's `.agents/skills`,
    /// `.claude/skills` and `.mew/skills`), so their skills win by name.
    pub roots: Vec<PathBuf>,
    /// The base URL of the GitHub REST API that serves the contents of repositories, without
    /// a trailing slash: `https://api.github.com`, or `https://HOST/api/v3` for GitHub
    /// Enterprise.
    pub github_api: String,
    /// The environment variable that holds a GitHub token, sent to `github_api` only (never
    /// to download hosts); `None` sends no token. Defaults to `GITHUB_TOKEN` when
    /// `github_api` is GitHub's own API, and to none for any other.
    pub token_env: Option<String>,
    /// The limit on each HTTP request of an installation.
    #[serde(serialize_with = "duration::serialize")]
    pub install_timeout: Duration,
    /// The largest file a skill may have, in bytes.
    pub max_file_bytes: u64,
    /// The largest skill, all its files together, in bytes.
    pub max_total_bytes: u64,
    /// The most files one skill may have.
    pub max_files: usize,
    /// How deep directories may nest below the skill's own directory (0: files at its top
    /// level only).
    pub max_depth: usize,
}

impl SkillsConfig {
    /// The options `crate::skills::install::install` runs with; `env` looks up the token
    /// variable (an empty value counts as unset).
    pub(crate) fn install_options(&self, env: impl Fn(&str) -> Option<String>) -> InstallOptions {
        InstallOptions {
            api_base: self.github_api.clone(),
            max_file_bytes: self.max_file_bytes,
            max_total_bytes: self.max_total_bytes,
            max_files: self.max_files,
            max_depth: self.max_depth,
            timeout: self.install_timeout,
            token: self
                .token_env
                .as_deref()
                .and_then(env)
                .filter(|token| !token.trim().is_empty()),
        }
    }
}

// ---- As written in files ----

/// `skills:` as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SkillsSettings {
    #[serde(deserialize_with = "roots")]
    pub(crate) roots: Vec<PathBuf>,
    #[serde(deserialize_with = "api_url")]
    pub(crate) github_api: String,
    #[serde(deserialize_with = "variable_name")]
    pub(crate) token_env: Option<String>,
    #[serde(serialize_with = "duration::serialize", deserialize_with = "positive")]
    pub(crate) install_timeout: Duration,
    #[serde(deserialize_with = "byte_count")]
    pub(crate) max_file_bytes: u64,
    #[serde(deserialize_with = "byte_count")]
    pub(crate) max_total_bytes: u64,
    #[serde(deserialize_with = "file_count")]
    pub(crate) max_files: usize,
    #[serde(deserialize_with = "depth")]
    pub(crate) max_depth: usize,
}

impl Default for SkillsSettings {
    fn default() -> Self {
        Self {
            roots: Vec::new(),
            github_api: DEFAULT_API_BASE.to_owned(),
            token_env: None,
            install_timeout: DEFAULT_TIMEOUT,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
            max_files: DEFAULT_MAX_FILES,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

fn roots<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<PathBuf>, D::Error> {
    let roots = Vec::<PathBuf>::deserialize(deserializer)?;
    if roots.iter().any(|root| root.as_os_str().is_empty()) {
        return Err(serde::de::Error::custom(
            "a root must not be empty: give a directory (`.` for the project itself)",
        ));
    }
    Ok(roots)
}

fn api_url<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let Some(url) = super::schema::http_url(deserializer)? else {
        return Err(serde::de::Error::custom(
            "must be the API's base URL, like https://api.github.com",
        ));
    };
    match reqwest::Url::parse(&url) {
        Ok(parsed) if parsed.query().is_none() && parsed.fragment().is_none() => Ok(url),
        Ok(_) => Err(serde::de::Error::custom(format!(
            "`{url}` must be a base URL, without a query or fragment"
        ))),
        Err(error) => Err(serde::de::Error::custom(format!(
            "`{url}` is not a valid URL: {error}"
        ))),
    }
}

fn variable_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let name = Option::<String>::deserialize(deserializer)?;
    if let Some(name) = &name
        && (name.is_empty()
            || name.contains('=')
            || name.contains('\0')
            || name.chars().any(char::is_whitespace))
    {
        return Err(serde::de::Error::custom(format!(
            "`{name}` is not an environment variable name (give the variable's name, such as \
             GITHUB_TOKEN, never the token itself)"
        )));
    }
    Ok(name)
}

fn positive<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let value = duration::deserialize(deserializer)?;
    if value.is_zero() {
        return Err(serde::de::Error::custom("must be longer than zero"));
    }
    Ok(value)
}

/// A whole number of at least `min`; anything else is an error saying what `what` is.
fn whole<'de, D: Deserializer<'de>>(
    deserializer: D,
    min: u64,
    what: &str,
) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Whole {
        Number(u64),
        Other(serde_yaml_ng::Value),
    }
    match Whole::deserialize(deserializer)? {
        Whole::Number(value) if value >= min => Ok(value),
        Whole::Number(value) => Err(serde::de::Error::custom(format!(
            "{value} is too small: must be at least {min}"
        ))),
        Whole::Other(value) => {
            let shown = serde_json::to_string(&value).unwrap_or_else(|_| format!("{value:?}"));
            Err(serde::de::Error::custom(format!(
                "expected {what}, not {shown}"
            )))
        }
    }
}

fn byte_count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    whole(deserializer, 1, "a whole number of bytes, such as 1048576")
}

fn file_count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    let value = whole(deserializer, 1, "a whole number of files")?;
    usize::try_from(value).map_err(|_| serde::de::Error::custom(format!("{value} is too large")))
}

fn depth<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    let value = whole(
        deserializer,
        0,
        "a whole number of directory levels (0: files at the top only)",
    )?;
    usize::try_from(value).map_err(|_| serde::de::Error::custom(format!("{value} is too large")))
}

// ---- Resolution ----

impl LoadedConfig {
    /// `skills:`, with the roots made absolute (`~` expanded, relative ones joined to the
    /// project), the API URL without a trailing slash and the token variable's default.
    pub(super) fn resolve_skills(
        &self,
        home: Option<&Path>,
        project: &Path,
    ) -> Result<SkillsConfig, ConfigError> {
        let skills = &self.settings.skills;
        let roots = skills
            .roots
            .iter()
            .map(|root| self.path("skills.roots", root, home, project))
            .collect::<Result<_, _>>()?;
        let github_api = skills.github_api.trim_end_matches('/').to_owned();
        let token_env = skills
            .token_env
            .clone()
            .or_else(|| (github_api == DEFAULT_API_BASE).then(|| DEFAULT_TOKEN_ENV.to_owned()));
        Ok(SkillsConfig {
            roots,
            github_api,
            token_env,
            install_timeout: skills.install_timeout,
            max_file_bytes: skills.max_file_bytes,
            max_total_bytes: skills.max_total_bytes,
            max_files: skills.max_files,
            max_depth: skills.max_depth,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::{Config, Origin, Sources};

    use crate::config::test_project as project;

    fn load(text: &str) -> Config {
        let (_dir, _file, sources) = project(text);
        Config::load(&sources).unwrap().resolve().unwrap()
    }

    /// The error's message, and the file it should name.
    fn error(text: &str) -> (ConfigError, PathBuf) {
        let (_dir, file, sources) = project(text);
        let error = Config::load(&sources)
            .and_then(|loaded| loaded.resolve())
            .unwrap_err();
        (error, file)
    }

    #[test]
    fn defaults_are_the_installers() {
        let config = load("");
        assert_eq!(
            config.skills,
            SkillsConfig {
                roots: Vec::new(),
                github_api: "https://api.github.com".to_owned(),
                token_env: Some("GITHUB_TOKEN".to_owned()),
                install_timeout: Duration::from_secs(60),
                max_file_bytes: 1 << 20,
                max_total_bytes: 8 << 20,
                max_files: 64,
                max_depth: 4,
            }
        );
        let defaults = InstallOptions::default();
        let options = config.skills.install_options(|_| None);
        assert_eq!(options, defaults);
    }

    #[test]
    fn reads_every_key_and_resolves_the_roots() {
        let (dir, _file, sources) = project(
            "skills:\n  roots: [team/skills, ~/shared, /abs/skills]\n\
             \x20 github_api: http://127.0.0.1:9/api/v3/\n  install_timeout: 5s\n\
             \x20 max_file_bytes: 1000\n  max_total_bytes: 5000\n  max_files: 3\n\
             \x20 max_depth: 0\n",
        );
        let loaded = Config::load(&sources).unwrap();
        let config = loaded.resolve().unwrap();
        let skills = &config.skills;
        assert_eq!(
            skills.roots,
            [
                dir.path().join("team/skills"),
                dir.path().join("home/shared"),
                PathBuf::from("/abs/skills"),
            ]
        );
        assert_eq!(skills.github_api, "http://127.0.0.1:9/api/v3");
        // Another API gets no token unless one is named.
        assert_eq!(skills.token_env, None);
        assert_eq!(skills.install_timeout, Duration::from_secs(5));
        assert_eq!(
            (
                skills.max_file_bytes,
                skills.max_total_bytes,
                skills.max_files,
                skills.max_depth
            ),
            (1000, 5000, 3, 0)
        );
        let env = HashMap::from([("GITHUB_TOKEN".to_owned(), "secret".to_owned())]);
        let options = skills.install_options(|name| env.get(name).cloned());
        assert_eq!(
            options,
            InstallOptions {
                api_base: "http://127.0.0.1:9/api/v3".to_owned(),
                max_file_bytes: 1000,
                max_total_bytes: 5000,
                max_files: 3,
                max_depth: 0,
                timeout: Duration::from_secs(5),
                token: None,
            }
        );
        assert!(matches!(
            loaded.entries(&config).unwrap().iter().find(|e| e.key == "skills.max_files"),
            Some(entry) if matches!(&entry.origin, Origin::File(_))
        ));
    }

    #[test]
    fn the_token_comes_from_the_named_variable_only() {
        let config =
            load("skills:\n  token_env: GHE_TOKEN\n  github_api: https://ghe.example/api/v3\n");
        assert_eq!(config.skills.token_env.as_deref(), Some("GHE_TOKEN"));
        let env = HashMap::from([
            ("GITHUB_TOKEN".to_owned(), "public".to_owned()),
            ("GHE_TOKEN".to_owned(), "enterprise".to_owned()),
        ]);
        let token = |env: &HashMap<String, String>| {
            config
                .skills
                .install_options(|name| env.get(name).cloned())
                .token
        };
        assert_eq!(token(&env).as_deref(), Some("enterprise"));
        let empty = HashMap::from([("GHE_TOKEN".to_owned(), " ".to_owned())]);
        assert_eq!(token(&empty), None);

        let config = load("");
        let options = config.skills.install_options(|name| env.get(name).cloned());
        assert_eq!(options.token.as_deref(), Some("public"));
    }

    #[test]
    fn bad_values_name_the_file_line_and_key() {
        for (text, key, message) in [
            (
                "skills:\n  max_file_bytes: 1MiB\n",
                "skills.max_file_bytes",
                "expected a whole number of bytes, such as 1048576, not \"1MiB\"",
            ),
            (
                "skills:\n  max_total_bytes: 0\n",
                "skills.max_total_bytes",
                "0 is too small: must be at least 1",
            ),
            (
                "skills:\n  max_files: -1\n",
                "skills.max_files",
                "expected a whole number of files, not -1",
            ),
            (
                "skills:\n  max_depth: deep\n",
                "skills.max_depth",
                "expected a whole number of directory levels",
            ),
            (
                "skills:\n  install_timeout: 0\n",
                "skills.install_timeout",
                "must be longer than zero",
            ),
            (
                "skills:\n  install_timeout: soon\n",
                "skills.install_timeout",
                "invalid duration `soon`",
            ),
            (
                "skills:\n  github_api: api.github.com\n",
                "skills.github_api",
                "`api.github.com` is not an http:// or https:// URL with a host",
            ),
            (
                "skills:\n  github_api: https://ghe.example/api?x=1\n",
                "skills.github_api",
                "without a query or fragment",
            ),
            (
                "skills:\n  token_env: ghp_abc def\n",
                "skills.token_env",
                "is not an environment variable name",
            ),
            (
                "skills:\n  roots: ['']\n",
                "skills.roots",
                "a root must not be empty",
            ),
            ("skills:\n  roots: skills\n", "skills.roots", "invalid type"),
        ] {
            let (error, file) = error(text);
            let ConfigError::BadValue { key: bad, line, .. } = &error else {
                panic!("{text}: expected a bad value, got {error:?}");
            };
            assert_eq!(bad, key, "{text}");
            assert_eq!(*line, Some(2), "{text}");
            let shown = error.to_string();
            let prefix = format!("{}:2: bad value for {key}: ", file.display());
            assert!(shown.starts_with(&prefix), "{shown}");
            assert!(shown.contains(message), "{text}: {shown}");
        }
    }

    #[test]
    fn an_unknown_key_is_an_error_with_a_suggestion() {
        let (error, _file) = error("skills:\n  max_file_size: 10\n");
        let shown = error.to_string();
        assert!(
            shown.contains("unknown key skills.max_file_size (did you mean max_file_bytes?)"),
            "{shown}"
        );
    }

    #[test]
    fn a_tilde_root_without_a_home_is_an_error() {
        let (_dir, _file, sources) = project("skills:\n  roots: [~/skills]\n  token_env: X\n");
        let sources = Sources {
            home: None,
            env: HashMap::from([("MEW_DATA_DIR".to_owned(), "/tmp/data".to_owned())]),
            ..sources
        };
        let error = Config::load(&sources).unwrap().resolve().unwrap_err();
        assert!(
            matches!(&error, ConfigError::Resolve { key, .. } if key == "skills.roots"),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("`~/skills` starts with ~"),
            "{error}"
        );
    }

    #[test]
    fn config_show_prints_the_section_and_it_reads_back() {
        let config = load("skills:\n  roots: [extra]\n  install_timeout: 90s\n");
        let yaml = serde_yaml_ng::to_string(&config.skills).unwrap();
        assert!(yaml.contains("install_timeout: 90s\n"), "{yaml}");
        assert!(
            yaml.contains("github_api: https://api.github.com\n"),
            "{yaml}"
        );
        assert!(yaml.contains("token_env: GITHUB_TOKEN\n"), "{yaml}");
        assert!(yaml.contains("max_file_bytes: 1048576\n"), "{yaml}");
        let reread = load(&format!(
            "skills:\n{}",
            yaml.lines()
                .map(|line| format!("  {line}\n"))
                .collect::<String>()
        ));
        assert_eq!(reread.skills, config.skills);
    }
}
