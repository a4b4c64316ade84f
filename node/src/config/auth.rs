//! The `auth:` section: how callers of the node's A2A operations authenticate, which roles
//! they may use, and what the extended agent card adds.
//!
//! ```yaml
//! auth:
//!   api_keys:                      # X-API-Key or Authorization: Bearer; the principal is `name`
//!     - name: alice
//!       key_env: MEW_KEY_ALICE     # the key itself is in this environment variable
//!   jwt:                           # Authorization: Bearer <JWT>; the principal is `sub`
//!     secret_env: MEW_JWT_SECRET   # HS256: the shared secret is in this environment variable,
//!     # jwks_file: keys/jwks.json   # or public keys from a JWKS file,
//!     # jwks_url: https://issuer.example/.well-known/jwks.json   # or fetched from a URL
//!     issuer: https://issuer.example
//!     audience: mew
//!     algorithms: [HS256]
//!   roles:                         # who may use a role; roles not listed are open to anyone
//!     reviewer: [alice, bob]       # authenticated ("*" = any authenticated caller)
//!   extended_card:                 # served by GetExtendedAgentCard to authenticated callers
//!     description: "..."           # any AgentCard field replaces the public card's;
//!     skills: [{id: s, name: S, description: d, tags: [t]}]   # skills are appended
//!   allow_unauthenticated: false   # serve a non-loopback address without any scheme
//! ```
//!
//! Only environment variable names are written here, never secrets, so `mew config show`
//! prints the section as it is.

use std::collections::BTreeMap;
use std::path::PathBuf;

use mew_cards::AgentCard;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::{ConfigError, LoadedConfig};

/// `auth:` — the schemes callers authenticate with; none configured means no authentication.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct AuthConfig {
    /// Static API keys, each naming the principal it authenticates.
    pub api_keys: Vec<ApiKeyConfig>,
    /// JWT bearer tokens, verified with a shared secret or with public keys.
    pub jwt: Option<JwtConfig>,
    /// Whether `mew up` may serve a non-loopback address with no scheme configured.
    pub allow_unauthenticated: bool,
    /// The principals each listed role admits (`*`: any authenticated caller); roles not
    /// listed admit every authenticated caller.
    pub roles: BTreeMap<String, Vec<String>>,
    /// What the extended agent card changes in a public card: AgentCard fields by their JSON
    /// names; `skills` are appended, every other field replaces the public card's.
    pub extended_card: Option<Map<String, Value>>,
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

/// JWT bearer tokens: where the verification keys come from (exactly one of `secret_env`,
/// `jwks_file`, `jwks_url`) and the claims checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JwtConfig {
    /// The environment variable that holds the HS256 shared secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// A JWKS file with the public keys (absolute).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwks_file: Option<PathBuf>,
    /// A URL serving the JWKS with the public keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwks_url: Option<String>,
    /// The required `iss` claim.
    pub issuer: String,
    /// The required `aud` claim.
    pub audience: String,
    /// The accepted signing algorithms.
    pub algorithms: Vec<String>,
}

/// The algorithms accepted with `secret_env`.
pub const SECRET_ALGORITHMS: [&str; 1] = ["HS256"];
/// The algorithms accepted with `jwks_file` or `jwks_url`; all of them by default (each key
/// further limited to its own `alg`, when it has one, and to its key type).
pub const JWKS_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

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
            Some(jwt) => Some(self.resolve_jwt(jwt)?),
        };
        let enabled = !settings.api_keys.is_empty() || jwt.is_some();
        let roles = settings.roles.clone().unwrap_or_default();
        if !roles.is_empty() && !enabled {
            return Err(self.auth_error(
                "auth.roles",
                "role access rules need a scheme to know who calls: configure `auth.api_keys` \
                 or `auth.jwt`"
                    .to_owned(),
            ));
        }
        for (role, principals) in &roles {
            if role.is_empty() || role.contains('/') || role.chars().any(char::is_control) {
                return Err(self.auth_error("auth.roles", format!("`{role}` is not a role name")));
            }
            if principals.is_empty() {
                return Err(self.auth_error(
                    &format!("auth.roles.{role}"),
                    "an empty list admits nobody: list the principals (or \"*\" for any \
                     authenticated caller), or remove the role"
                        .to_owned(),
                ));
            }
        }
        let extended_card = match &settings.extended_card {
            None => None,
            Some(_) if !enabled => {
                return Err(self.auth_error(
                    "auth.extended_card",
                    "the extended card is served to authenticated callers only: configure \
                     `auth.api_keys` or `auth.jwt`"
                        .to_owned(),
                ));
            }
            Some(extra) => {
                let sample = AgentCard {
                    name: "sample".to_owned(),
                    description: "sample".to_owned(),
                    version: "1".to_owned(),
                    ..AgentCard::default()
                };
                mew_cards::extended_card(&sample, extra)
                    .map_err(|message| self.auth_error("auth.extended_card", message))?;
                Some(extra.clone())
            }
        };
        Ok(AuthConfig {
            api_keys: settings.api_keys.clone(),
            jwt,
            allow_unauthenticated: settings.allow_unauthenticated,
            roles,
            extended_card,
        })
    }

    fn resolve_jwt(&self, jwt: &JwtSettings) -> Result<JwtConfig, ConfigError> {
        let required = |value: &Option<String>, key: &str, what: &str| {
            value
                .clone()
                .ok_or_else(|| self.auth_error(&format!("auth.jwt.{key}"), what.to_owned()))
        };
        let given: Vec<&str> = [
            ("secret_env", jwt.secret_env.is_some()),
            ("jwks_file", jwt.jwks_file.is_some()),
            ("jwks_url", jwt.jwks_url.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect();
        match given.as_slice() {
            [] => {
                return Err(self.auth_error(
                    "auth.jwt.secret_env",
                    "missing: name the environment variable that holds the HS256 secret, or \
                     give `jwks_file` or `jwks_url` for public keys"
                        .to_owned(),
                ));
            }
            [_] => {}
            [_, second, ..] => {
                return Err(self.auth_error(
                    &format!("auth.jwt.{second}"),
                    format!(
                        "give exactly one of secret_env, jwks_file and jwks_url (found {})",
                        given.join(" and ")
                    ),
                ));
            }
        }
        let jwks_file = match &jwt.jwks_file {
            None => None,
            Some(path) => {
                let project = std::path::absolute(&self.project).unwrap_or(self.project.clone());
                Some(self.path("auth.jwt.jwks_file", path, self.home.as_deref(), &project)?)
            }
        };
        if let Some(url) = &jwt.jwks_url {
            match reqwest::Url::parse(url) {
                Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
                Ok(_) => {
                    return Err(self.auth_error(
                        "auth.jwt.jwks_url",
                        format!("`{url}` is not an http or https URL"),
                    ));
                }
                Err(e) => {
                    return Err(
                        self.auth_error("auth.jwt.jwks_url", format!("`{url}` is not a URL: {e}"))
                    );
                }
            }
        }
        let public_keys = jwt.secret_env.is_none();
        let (allowed, default): (&[&str], Vec<String>) = if public_keys {
            (
                &JWKS_ALGORITHMS,
                JWKS_ALGORITHMS.map(str::to_owned).to_vec(),
            )
        } else {
            (&SECRET_ALGORITHMS, vec!["HS256".to_owned()])
        };
        if let Some(bad) = jwt
            .algorithms
            .iter()
            .find(|name| !allowed.contains(&name.as_str()))
        {
            let message = if public_keys {
                format!(
                    "`{bad}` cannot be used with public keys (jwks_file, jwks_url); supported: \
                     {}",
                    JWKS_ALGORITHMS.join(", ")
                )
            } else {
                format!(
                    "`{bad}` needs public keys (jwks_file or jwks_url); with secret_env: {}",
                    SECRET_ALGORITHMS.join(", ")
                )
            };
            return Err(self.auth_error("auth.jwt.algorithms", message));
        }
        Ok(JwtConfig {
            secret_env: jwt.secret_env.clone(),
            jwks_file,
            jwks_url: jwt.jwks_url.clone(),
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
                default
            } else {
                jwt.algorithms.clone()
            },
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
    /// `None` by default, so that the built-in defaults (the schema files are checked
    /// against) leave the role names free.
    #[serde(deserialize_with = "role_rules")]
    pub(crate) roles: Option<BTreeMap<String, Vec<String>>>,
    pub(crate) extended_card: Option<Map<String, Value>>,
}

/// `auth.jwt:` as written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct JwtSettings {
    #[serde(deserialize_with = "optional_variable_name")]
    pub(crate) secret_env: Option<String>,
    #[serde(deserialize_with = "optional_path")]
    pub(crate) jwks_file: Option<PathBuf>,
    #[serde(deserialize_with = "optional_non_empty")]
    pub(crate) jwks_url: Option<String>,
    #[serde(deserialize_with = "optional_non_empty")]
    pub(crate) issuer: Option<String>,
    #[serde(deserialize_with = "optional_non_empty")]
    pub(crate) audience: Option<String>,
    #[serde(deserialize_with = "algorithms")]
    pub(crate) algorithms: Vec<String>,
}

fn check_variable_name<E: serde::de::Error>(name: String) -> Result<String, E> {
    if super::hooks::is_variable_name(&name) {
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

/// An optional environment variable's name (never the secret itself).
pub(super) fn optional_variable_name<'de, D: Deserializer<'de>>(
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

fn optional_path<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<PathBuf>, D::Error> {
    Ok(optional_non_empty(deserializer)?.map(PathBuf::from))
}

/// Whether `name` can name a principal: not empty, no surrounding blanks, no control
/// characters.
fn is_principal_name(name: &str) -> bool {
    !name.trim().is_empty() && name.trim() == name && !name.chars().any(char::is_control)
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

fn role_rules<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, Vec<String>>>, D::Error> {
    let Some(rules) = Option::<BTreeMap<String, Vec<String>>>::deserialize(deserializer)? else {
        return Ok(None);
    };
    for (role, principals) in &rules {
        if let Some(bad) = principals.iter().find(|name| !is_principal_name(name)) {
            return Err(serde::de::Error::custom(format!(
                "role `{role}`: `{}` is not a principal name (a non-empty name without \
                 surrounding blanks or control characters, or \"*\" for any authenticated caller)",
                bad.escape_debug()
            )));
        }
    }
    Ok(Some(rules))
}

fn algorithms<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(deserializer)?;
    if let Some(bad) = names.iter().find(|n| {
        !SECRET_ALGORITHMS.contains(&n.as_str()) && !JWKS_ALGORITHMS.contains(&n.as_str())
    }) {
        return Err(serde::de::Error::custom(format!(
            "`{bad}` is not a supported algorithm (supported: {}, {})",
            SECRET_ALGORITHMS.join(", "),
            JWKS_ALGORITHMS.join(", ")
        )));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::config::Config;

    use crate::config::test_project as project;

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
                secret_env: Some("JWT_SECRET".to_owned()),
                jwks_file: None,
                jwks_url: None,
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
                 algorithms: [HS512]\n",
                "auth.jwt.algorithms",
                "`HS512` is not a supported algorithm",
            ),
            (
                "auth:\n  roles:\n    reviewer: [alice, '']\n",
                "auth.roles",
                "`` is not a principal name",
            ),
            (
                "auth:\n  roles:\n    reviewer: [' alice']\n",
                "auth.roles",
                "is not a principal name",
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
                "auth:\n  jwt:\n    secret_env: S\n    jwks_url: https://i/jwks\n    issuer: i\n    \
                 audience: a\n",
                "auth.jwt.jwks_url",
                "give exactly one of secret_env, jwks_file and jwks_url (found secret_env and \
                 jwks_url)",
            ),
            (
                "auth:\n  jwt:\n    jwks_file: k.json\n    jwks_url: https://i/jwks\n    issuer: i\n    \
                 audience: a\n",
                "auth.jwt.jwks_url",
                "give exactly one",
            ),
            (
                "auth:\n  jwt:\n    jwks_url: https://i/jwks\n    issuer: i\n    audience: a\n    \
                 algorithms: [ES256, HS256]\n",
                "auth.jwt.algorithms",
                "`HS256` cannot be used with public keys",
            ),
            (
                "auth:\n  jwt:\n    secret_env: S\n    issuer: i\n    audience: a\n    \
                 algorithms: [RS256]\n",
                "auth.jwt.algorithms",
                "`RS256` needs public keys (jwks_file or jwks_url)",
            ),
            (
                "auth:\n  jwt:\n    jwks_url: ftp://i/jwks\n    issuer: i\n    audience: a\n",
                "auth.jwt.jwks_url",
                "is not an http or https URL",
            ),
            (
                "auth:\n  jwt:\n    jwks_url: not a url\n    issuer: i\n    audience: a\n",
                "auth.jwt.jwks_url",
                "is not a URL",
            ),
            (
                "auth:\n  roles:\n    reviewer: [alice]\n",
                "auth.roles",
                "need a scheme",
            ),
            (
                "auth:\n  api_keys:\n    - name: a\n      key_env: K\n  roles:\n    reviewer: []\n",
                "auth.roles.reviewer",
                "an empty list admits nobody",
            ),
            (
                "auth:\n  extended_card:\n    description: d\n",
                "auth.extended_card",
                "authenticated callers only",
            ),
            (
                "auth:\n  api_keys:\n    - name: a\n      key_env: K\n  extended_card:\n    \
                 descripton: d\n",
                "auth.extended_card",
                "`descripton` is not an AgentCard field",
            ),
            (
                "auth:\n  api_keys:\n    - name: a\n      key_env: K\n  extended_card:\n    \
                 signatures: []\n",
                "auth.extended_card",
                "`signatures` is not an AgentCard field",
            ),
            (
                "auth:\n  api_keys:\n    - name: a\n      key_env: K\n  extended_card:\n    \
                 skills: [{name: n, description: d, tags: [t]}]\n",
                "auth.extended_card",
                "every skill needs an `id` and a `name`",
            ),
            (
                "auth:\n  api_keys:\n    - name: a\n      key_env: K\n  extended_card:\n    \
                 capabilities: {streaming: maybe}\n",
                "auth.extended_card",
                "",
            ),
            (
                "auth:\n  api_keys:\n    - name: a\n      key_env: K\n  extended_card:\n    \
                 skills: {id: s}\n",
                "auth.extended_card",
                "`skills` must be a list",
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

    const PUBLIC_KEYS: &str = "auth:\n  api_keys:\n    - name: alice\n      key_env: KEY_ALICE\n  \
                               jwt:\n    jwks_url: https://issuer.example/jwks.json\n    \
                               issuer: https://issuer.example\n    audience: mew\n  \
                               roles:\n    reviewer: [alice, bob]\n    open: ['*']\n  \
                               extended_card:\n    description: For members\n    \
                               skills:\n      - {id: secret, name: Secret, description: d, \
                               tags: [x]}\n";

    #[test]
    fn reads_public_keys_roles_and_the_extended_card() {
        let auth = load(PUBLIC_KEYS).unwrap().auth;
        let jwt = auth.jwt.clone().unwrap();
        assert_eq!(jwt.secret_env, None);
        assert_eq!(
            jwt.jwks_url.as_deref(),
            Some("https://issuer.example/jwks.json")
        );
        assert_eq!(jwt.algorithms, JWKS_ALGORITHMS);
        assert_eq!(auth.roles["reviewer"], ["alice", "bob"]);
        assert_eq!(auth.roles["open"], ["*"]);
        let card = AgentCard {
            name: "r".to_owned(),
            description: "public".to_owned(),
            version: "1".to_owned(),
            skills: vec![mew_cards::AgentSkill {
                id: "r".to_owned(),
                name: "r".to_owned(),
                ..Default::default()
            }],
            ..AgentCard::default()
        };
        let extended =
            mew_cards::extended_card(&card, auth.extended_card.as_ref().unwrap()).unwrap();
        assert_eq!(extended.description, "For members");
        assert_eq!(extended.name, "r");
        let ids: Vec<&str> = extended.skills.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["r", "secret"]);
        assert_eq!(extended.skills[1].tags, ["x"]);
    }

    #[test]
    fn a_jwks_file_is_made_absolute_against_the_project() {
        let (dir, _file, sources) = project(
            "auth:\n  jwt:\n    jwks_file: keys/jwks.json\n    issuer: i\n    audience: a\n    \
             algorithms: [ES256]\n",
        );
        let auth = Config::load(&sources)
            .and_then(|loaded| loaded.resolve())
            .unwrap()
            .auth;
        let jwt = auth.jwt.unwrap();
        let expected = std::path::absolute(dir.path().join("keys/jwks.json")).unwrap();
        assert_eq!(jwt.jwks_file, Some(expected));
        assert_eq!(jwt.algorithms, ["ES256"]);
    }

    #[test]
    fn config_show_of_public_keys_roles_and_card_reads_back() {
        let config = load(PUBLIC_KEYS).unwrap();
        let section = serde_yaml_ng::to_string(&config.auth).unwrap();
        assert!(!section.contains("secret_env"), "{section}");
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
