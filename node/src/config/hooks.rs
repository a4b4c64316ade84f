//! The `hooks:` section: what shell hooks get from the node's environment.
//!
//! ```yaml
//! hooks:
//!   env: [GITHUB_TOKEN, CI]  # variables passed to shell hooks on top of the built-in
//!                            # allowlist (PATH, HOME, LANG, LC_ALL, TMPDIR, TERM, USER)
//! ```
//!
//! The hooks themselves are in `hooks.yaml` and Claude Code settings files, not here.

use serde::{Deserialize, Deserializer, Serialize};

use super::LoadedConfig;

/// `hooks:` — settings of the hook dispatcher.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct HooksConfig {
    /// The names of the environment variables shell hooks get from the node's environment
    /// on top of the built-in allowlist (`PATH`, `HOME`, `LANG`, `LC_ALL`, `TMPDIR`, `TERM`,
    /// `USER`), in the order configured, without duplicates. A variable the node does not
    /// have stays unset.
    pub env: Vec<String>,
}

impl LoadedConfig {
    pub(super) fn resolve_hooks(&self) -> HooksConfig {
        let mut env: Vec<String> = Vec::new();
        for name in &self.settings.hooks.env {
            if !env.contains(name) {
                env.push(name.clone());
            }
        }
        HooksConfig { env }
    }
}

// ---- As written in files ----

/// `hooks:` as written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct HooksSettings {
    #[serde(deserialize_with = "variable_names")]
    pub(crate) env: Vec<String>,
}

/// Whether `name` can name an environment variable: letters, digits and `_`, not starting
/// with a digit.
pub(super) fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn variable_names<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(deserializer)?;
    if let Some(bad) = names.iter().find(|name| !is_variable_name(name)) {
        return Err(serde::de::Error::custom(format!(
            "`{bad}` is not an environment variable name (letters, digits and _, not starting \
             with a digit; give the name, such as CI, never a value)"
        )));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::config::{Config, ConfigError};

    use crate::config::test_project as project;

    fn load(text: &str) -> Config {
        let (_dir, _file, sources) = project(text);
        Config::load(&sources).unwrap().resolve().unwrap()
    }

    #[test]
    fn no_extra_variables_by_default() {
        assert_eq!(load("").hooks, HooksConfig::default());
    }

    #[test]
    fn reads_the_names_in_order_without_duplicates() {
        let config = load("hooks:\n  env: [CI, _X1, GITHUB_TOKEN, CI]\n");
        assert_eq!(config.hooks.env, ["CI", "_X1", "GITHUB_TOKEN"]);
    }

    #[test]
    fn a_bad_name_is_an_error_on_its_line() {
        for bad in ["''", "'A B'", "A=1", "1X", "'X-Y'"] {
            let text = format!("hooks:\n  env: [{bad}]\n");
            let (_dir, file, sources) = project(&text);
            let error = Config::load(&sources)
                .and_then(|loaded| loaded.resolve())
                .unwrap_err();
            let ConfigError::BadValue { key, line, .. } = &error else {
                panic!("{text}: expected a bad value, got {error:?}");
            };
            assert_eq!(key, "hooks.env", "{text}");
            assert_eq!(*line, Some(2), "{text}");
            let shown = error.to_string();
            assert!(
                shown.starts_with(&format!("{}:2: bad value for hooks.env: ", file.display())),
                "{shown}"
            );
            assert!(
                shown.contains("is not an environment variable name"),
                "{shown}"
            );
        }
    }

    #[test]
    fn an_unknown_key_is_an_error() {
        let (_dir, _file, sources) = project("hooks:\n  envs: [CI]\n");
        let error = Config::load(&sources).unwrap_err();
        assert!(
            error.to_string().contains("unknown key hooks.envs"),
            "{error}"
        );
    }

    #[test]
    fn config_show_prints_the_section_and_it_reads_back() {
        let config = load("hooks:\n  env: [CI, TOKEN]\n");
        let yaml = serde_yaml_ng::to_string(&config).unwrap();
        assert!(
            yaml.contains("hooks:\n  env:\n  - CI\n  - TOKEN\n"),
            "{yaml}"
        );
        let section = serde_yaml_ng::to_string(&config.hooks).unwrap();
        let reread = load(&format!(
            "hooks:\n{}",
            section
                .lines()
                .map(|line| format!("  {line}\n"))
                .collect::<String>()
        ));
        assert_eq!(reread.hooks, config.hooks);
    }
}
