//! The `auth:` section: how callers of the node's A2A operations authenticate.
//!
//! ```yaml
//! auth:
//!   api_keys:                      # X-API-Key or Authorization: Bearer; the principal is `name`
//!     - name: alice
//!       key_env: MEW_KEY_ALICE     # the key itself is in this environment variable
//!   jwt:                           # Authorization: Bearer <JWT>; the principal is `sub`
//!     secret_env: MEW_JWT_SECRET   # the HS256 shared secret is in this environment variable
//!     issuer: https://issuer.example
//!     audience: mew
//!     algorithms: [HS256]
//!   allow_unauthenticated: false   # serve a non-loopback address without any scheme
//! ```
//!
//! Only environment variable names are written here, never secrets, so `mew config show`
//! prints the section as it is.

use serde::{Deserialize, Deserializer, Serialize};

use super::{ConfigError, LoadedConfig};

/// `auth:` — the schemes callers authenticate with; none configured means no authentication.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct AuthConfig {
    /// Static API keys, each naming the principal it authenticates.
    pub api_keys: Vec<ApiKeyConfig>,
    /// JWT bearer tokens signed with a shared secret.
    pub jwt: Option<JwtConfig>,
    /// Whether `mew up` may serve a non-loopback address with no scheme configured.
    pub allow_unauthenticated: bool,
}

impl AuthConfig {
    /// Whether any scheme is configured.
    pub fn is_enabled(&self) -> bool {
        !self.api_keys.is_empty() || self.jwt.is_some()
    }
}

/// One API key: the principal's name and the environment variable holding the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// The principal this key authenticates.
    #[serde(deserialize_with = "principal_name")]
    pub name: String,
    /// The environment variable that holds the key.
    #[serde(deserialize_with = "variable_name")]
    pub key_env: String,
}

/// JWT bearer tokens: the secret's environment variable and the claims checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JwtConfig {
    /// The environment variable that holds the HS256 shared secret.
    pub secret_env: String,
    /// The required `iss` claim.
    pub issuer: String,
    /// The required `aud` claim.
    pub audience: String,
    /// The accepted signing algorithms.
    pub algorithms: Vec<String>,
}

/// The algorithms `auth.jwt.algorithms` accepts.
pub const JWT_ALGORITHMS: [&str; 1] = ["HS256"];

impl LoadedConfig {
    pub(super) fn resolve_auth(&self) -> Result<AuthConfig, ConfigError> {
        let settings = &self.settings.auth;
        let mut names: Vec<&str> = Vec::new();
        for key in &settings.api_keys {
            if names.contains(&key.name.as_str()) {
                return Err(self.auth_error(
                    "auth.api_keys",
                    format!("the name `{}` is given to two keys", key.name),
                ));
            }
            names.push(&key.name);
        }
        let jwt = match &settings.jwt {
            None => None,
            Some(jwt) => {
                let required = |value: &Option<String>, key: &str, what: &str| {
                    value
                        .clone()
                        .ok_or_else(|| self.auth_error(&format!("auth.jwt.{key}"), what.to_owned()))
                };
                Some(JwtConfig {
                    secret_env: required(
                        &jwt.secret_env,
                        "secret_env",
                        "missing: name the environment variable that holds the HS256 secret",
                    )?,
                    issuer: required(
                        &jwt.issuer,
                        "issuer",
                        "missing: give the `iss` that tokens must carry",
                    )?,
                    audience: required(
                        &jwt.audience,
                        "audience",
                        "missing: give the `aud` that tokens must carry",
                    )?,
                    algorithms: if jwt.algorithms.is_empty() {
                        vec!["HS256".to_owned()]
                    } else {
                        jwt.algorithms.clone()
                    },
                })
            }
        };
        Ok(AuthConfig {
            api_keys: settings.api_keys.clone(),
            jwt,
            allow_unauthenticated: settings.allow_unauthenticated,
        })
    }

    fn auth_error(&self, key: &str, message: String) -> ConfigError {
        let below = format!("{key}.");
        let find = |matches: &dyn Fn(&str) -> bool| {
            self.origins
                .iter()
                .find(|(k, _)| matches(k))
                .map(|(_, origin)| origin.clone())
        };
        let origin = find(&|k| k == key || k.starts_with(&below))
            .or_else(|| find(&|k| k.starts_with("auth.")))
            .unwrap_or(super::Origin::Default);
        ConfigError::Resolve {
            origin,
            key: key.to_owned(),
            message,
        }
    }
}

// ---- As written in files ----

/// `auth:` as written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct AuthSettings {
    pub(crate) api_keys: Vec<ApiKeyConfig>,
    pub(crate) jwt: Option<JwtSettings>,
    pub(crate) allow_unauthenticated: bool,
}

/// `auth.jwt:` as written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct JwtSettings {
    #[serde(deserialize_with = "optional_variable_name")]
    pub(crate) secret_env: Option<String>,
    #[serde(deserialize_with = "optional_non_empty")]
    pub(crate) issuer: Option<String>,
    #[serde(deserialize_with = "optional_non_empty")]
    pub(crate) audience: Option<String>,
    #[serde(deserialize_with = "algorithms")]
    pub(crate) algorithms: Vec<String>,
}

/// Whether `name` can name an environment variable: letters, digits and `_`, not starting
/// with a digit.
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn check_variable_name<E: serde::de::Error>(name: String) -> Result<String, E> {
    if is_variable_name(&name) {
        Ok(name)
    } else {
        Err(E::custom(format!(
            "`{name}` is not an environment variable name (letters, digits and _, not starting \
             with a digit; give the variable's name, never the secret itself)"
        )))
    }
}

fn variable_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    check_variable_name(String::deserialize(deserializer)?)
}

fn optional_variable_name<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(deserializer)?
        .map(check_variable_name)
        .transpose()
}

fn optional_non_empty<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    match Option::<String>::deserialize(deserializer)? {
        Some(value) if value.trim().is_empty() => {
            Err(serde::de::Error::custom("must not be empty"))
        }
        value => Ok(value),
    }
}

fn principal_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    if name.trim().is_empty() || name.chars().any(char::is_control) {
        return Err(serde::de::Error::custom(
            "a key's name is the principal it authenticates: give a non-empty name",
        ));
    }
    Ok(name)
}

fn algorithms<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(deserializer)?;
    if let Some(bad) = names.iter().find(|n| !JWT_ALGORITHMS.contains(&n.as_str())) {
        return Err(serde::de::Error::custom(format!(
            "`{bad}` is not a supported algorithm (supported: {})",
            JWT_ALGORITHMS.join(", ")
        )));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tempfile::TempDir;

    use super::*;
    use crate::config::{Config, Sources};

    /// A project (with a home inside it) whose `.mew/config.yaml` is `text`.
    fn project(text: &str) -> (TempDir, PathBuf, Sources) {
        let dir = TempDir::new().unwrap();
        let file = dir.path().join(".mew/config.yaml");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
        let sources = Sources {
            home: Some(dir.path().join("home")),
            ..Sources::new(dir.path())
        };
        (dir, file, sources)
    }

    fn load(text: &str) -> Result<Config, ConfigError> {
        let (_dir, _file, sources) = project(text);
        Config::load(&sources).and_then(|loaded| loaded.resolve())
    }

    const FULL: &str = "auth:\n  api_keys:\n    - name: alice\n      key_env: KEY_ALICE\n    \
                        - name: bob\n      key_env: KEY_BOB\n  jwt:\n    secret_env: JWT_SECRET\n    \
                        issuer: https://issuer.example\n    audience: mew\n    \
                        algorithms: [HS256]\n";

    #[test]
    fn no_scheme_by_default() {
        let config = load("").unwrap();
        assert_eq!(config.auth, AuthConfig::default());
        assert!(!config.auth.is_enabled());
        assert!(!config.auth.allow_unauthenticated);
    }

    #[test]
    fn reads_keys_and_jwt() {
        let auth = load(FULL).unwrap().auth;
        assert!(auth.is_enabled());
        assert_eq!(
            auth.api_keys,
            [
                ApiKeyConfig {
                    name: "alice".to_owned(),
                    key_env: "KEY_ALICE".to_owned()
                },
                ApiKeyConfig {
                    name: "bob".to_owned(),
                    key_env: "KEY_BOB".to_owned()
                },
            ]
        );
        assert_eq!(
            auth.jwt,
            Some(JwtConfig {
                secret_env: "JWT_SECRET".to_owned(),
                issuer: "https://issuer.example".to_owned(),
                audience: "mew".to_owned(),
                algorithms: vec!["HS256".to_owned()],
            })
        );
    }

    #[test]
    fn algorithms_default_to_hs256() {
        let auth = load("auth:\n  jwt:\n    secret_env: S\n    issuer: i\n    audience: a\n")
            .unwrap()
            .auth;
        assert_eq!(auth.jwt.unwrap().algorithms, ["HS256"]);
    }

    #[test]
    fn allow_unauthenticated_is_read() {
        let auth = load("auth:\n  allow_unauthenticated: true\n").unwrap().auth;
        assert!(auth.allow_unauthenticated);
        assert!(!auth.is_enabled());
    }

    #[test]
    fn bad_values_are_errors_naming_the_key() {
        for (text, key, message) in [
            (
                "auth:\n  api_keys:\n    - name: a\n      key_env: 'sk-123 secret'\n",
                "auth.api_keys",
                "is not an environment variable name",
            ),
            (
                "auth:\n  api_keys:\n    - name: ''\n      key_env: K\n",
                "auth.api_keys",
                "give a non-empty name",
            ),
            (
                "auth:\n  jwt:\n    secret_env: S\n    issuer: i\n    audience: a\n    \
                 algorithms: [none]\n",
                "auth.jwt.algorithms",
                "`none` is not a supported algorithm",
            ),
            (
                "auth:\n  jwt:\n    secret_env: S\n    issuer: i\n    audience: a\n    \
                 algorithms: [RS256]\n",
                "auth.jwt.algorithms",
                "`RS256` is not a supported algorithm",
            ),
            (
                "auth:\n  jwt:\n    secret_env: S\n    issuer: ''\n    audience: a\n",
                "auth.jwt.issuer",
                "must not be empty",
            ),
        ] {
            let error = load(text).unwrap_err();
            let shown = error.to_string();
            assert!(shown.contains(key), "{text}: {shown}");
            assert!(shown.contains(message), "{text}: {shown}");
        }
    }

    #[test]
    fn missing_or_duplicate_entries_are_errors() {
        for (text, key, message) in [
            (
                "auth:\n  jwt:\n    issuer: i\n    audience: a\n",
                "auth.jwt.secret_env",
                "missing: name the environment variable",
            ),
            (
                "auth:\n  jwt:\n    secret_env: S\n    audience: a\n",
                "auth.jwt.issuer",
                "missing",
            ),
            (
                "auth:\n  jwt:\n    secret_env: S\n    issuer: i\n",
                "auth.jwt.audience",
                "missing",
            ),
            (
                "auth:\n  api_keys:\n    - name: a\n      key_env: K1\n    - name: a\n      \
                 key_env: K2\n",
                "auth.api_keys",
                "the name `a` is given to two keys",
            ),
        ] {
            let error = load(text).unwrap_err();
            let ConfigError::Resolve {
                key: got,
                message: said,
                ..
            } = &error
            else {
                panic!("{text}: expected a resolve error, got {error:?}");
            };
            assert_eq!(got, key, "{text}");
            assert!(said.contains(message), "{text}: {said}");
        }
    }

    #[test]
    fn an_unknown_key_is_an_error() {
        let error = load("auth:\n  api_key: []\n").unwrap_err();
        assert!(
            error.to_string().contains("unknown key auth.api_key"),
            "{error}"
        );
    }

    #[test]
    fn config_show_prints_only_names_and_reads_back() {
        let config = load(FULL).unwrap();
        let section = serde_yaml_ng::to_string(&config.auth).unwrap();
        assert!(section.contains("key_env: KEY_ALICE"), "{section}");
        assert!(section.contains("secret_env: JWT_SECRET"), "{section}");
        let reread = load(&format!(
            "auth:\n{}",
            section
                .lines()
                .map(|line| format!("  {line}\n"))
                .collect::<String>()
        ))
        .unwrap();
        assert_eq!(reread.auth, config.auth);
    }
}
