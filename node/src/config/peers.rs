//! The `peers:` section: other A2A agents (usually other Mew nodes) this node may delegate to.
//!
//! ```yaml
//! peers:
//!   build-box:                      # the peer's name: a letter, then up to 31 letters,
//!                                   # digits, `_` or `-`; roles are addressed `build-box/ROLE`
//!     url: http://10.0.0.7:7777     # required: the peer's base URL (http or https)
//!     binding: jsonrpc              # jsonrpc | rest | grpc; default: the first HTTP binding the card offers
//!     timeout: 30s                  # the limit on fetching the peer's cards
//!     refresh: 5m                   # how long fetched cards are used before fetching again
//!     auth:                         # the credentials this node presents to the peer (one of):
//!       api_key_env: BUILD_BOX_KEY  #   X-API-Key: the key in this environment variable
//!       bearer_env: BUILD_BOX_TOKEN #   Authorization: Bearer <the token in this variable>
//!       jwt:                        #   Authorization: Bearer <a JWT this node signs with its key>
//!         audience: build-box       #     `aud` (default: the peer's url)
//!         ttl: 5m                   #     each token's lifetime (default 5m)
//! ```
//!
//! A minted JWT carries `iss` = this node's public URL, `sub` = its name, `aud`, `iat`, `exp`
//! and `jti`, with the node key's `kid` and `jku` in its header: the peer verifies it against
//! this node's `/.well-known/jwks.json` (its `auth.jwt.jwks_url`).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::{ConfigError, LoadedConfig, Origin};
use crate::duration;

/// The longest peer name, in characters.
const MAX_NAME_LEN: usize = 32;

/// `peers.NAME:` — one remote A2A agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerConfig {
    /// The peer's base URL, without a trailing slash: its front card is at
    /// `{url}/.well-known/agent-card.json`, its roles' cards under `{url}/agents/`.
    pub url: String,
    /// The binding to speak; `None` takes the first one the card offers.
    pub binding: Option<PeerBinding>,
    /// The limit on fetching the peer's cards (the front card, the role list, a role card).
    #[serde(serialize_with = "duration::serialize")]
    pub timeout: Duration,
    /// How long fetched cards are used before they are fetched again.
    #[serde(serialize_with = "duration::serialize")]
    pub refresh: Duration,
    /// The credentials presented to the peer, if any.
    pub auth: Option<PeerAuth>,
}

/// `peers.NAME.auth:` — how this node authenticates to a peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerAuth {
    /// An API key, sent as `X-API-Key`, read from this environment variable.
    ApiKeyEnv(String),
    /// A bearer token, sent as `Authorization: Bearer`, read from this environment variable.
    BearerEnv(String),
    /// A JWT minted per call and signed with the node key.
    Jwt(PeerJwt),
}

/// `peers.NAME.auth.jwt:` — the JWTs this node mints for a peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerJwt {
    /// The `aud` claim.
    pub audience: String,
    /// How long each token is valid.
    #[serde(serialize_with = "duration::serialize", deserialize_with = "positive")]
    pub ttl: Duration,
}

/// The A2A binding used to talk to a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerBinding {
    /// JSON-RPC 2.0.
    Jsonrpc,
    /// HTTP+JSON (REST).
    Rest,
    /// gRPC, at the interface the peer's card lists for it.
    Grpc,
}

impl PeerBinding {
    /// The binding's name in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jsonrpc => "jsonrpc",
            Self::Rest => "rest",
            Self::Grpc => "grpc",
        }
    }
}

impl fmt::Display for PeerBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// True when `name` can name a peer: `^[A-Za-z][A-Za-z0-9_-]{0,31}$`.
fn is_valid_peer_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic())
        && name.len() <= MAX_NAME_LEN
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

// ---- As written in files ----

/// `peers.NAME:` as written. Every key has a default, so each can be checked on its own; `url`
/// is required (checked when resolving).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct PeerSettings {
    #[serde(deserialize_with = "super::schema::http_url")]
    pub(crate) url: Option<String>,
    pub(crate) binding: Option<PeerBinding>,
    #[serde(serialize_with = "duration::serialize", deserialize_with = "positive")]
    pub(crate) timeout: Duration,
    #[serde(serialize_with = "duration::serialize", deserialize_with = "positive")]
    pub(crate) refresh: Duration,
    pub(crate) auth: Option<PeerAuthSettings>,
}

/// `peers.NAME.auth:` as written: exactly one key.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct PeerAuthSettings {
    #[serde(deserialize_with = "super::auth::optional_variable_name")]
    pub(crate) api_key_env: Option<String>,
    #[serde(deserialize_with = "super::auth::optional_variable_name")]
    pub(crate) bearer_env: Option<String>,
    pub(crate) jwt: Option<PeerJwtSettings>,
}

/// `peers.NAME.auth.jwt:` as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct PeerJwtSettings {
    pub(crate) audience: Option<String>,
    #[serde(serialize_with = "duration::serialize", deserialize_with = "positive")]
    pub(crate) ttl: Duration,
}

impl Default for PeerJwtSettings {
    fn default() -> Self {
        Self {
            audience: None,
            ttl: DEFAULT_JWT_TTL,
        }
    }
}

/// The default lifetime of a JWT minted for a peer.
const DEFAULT_JWT_TTL: Duration = Duration::from_secs(5 * 60);

impl Default for PeerSettings {
    fn default() -> Self {
        Self {
            url: None,
            binding: None,
            timeout: Duration::from_secs(30),
            refresh: Duration::from_secs(5 * 60),
            auth: None,
        }
    }
}

/// The schema of one `peers.NAME` entry: its tree of defaults.
pub(crate) fn peer_entry_schema() -> Result<serde_yaml_ng::Value, serde_yaml_ng::Error> {
    serde_yaml_ng::to_value(PeerSettings::default())
}

fn positive<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let value = duration::deserialize(deserializer)?;
    if value.is_zero() {
        return Err(serde::de::Error::custom("must be longer than zero"));
    }
    Ok(value)
}

// ---- Resolution ----

impl LoadedConfig {
    /// `peers:`, each name checked and each URL required and trimmed of trailing slashes.
    pub(super) fn resolve_peers(&self) -> Result<BTreeMap<String, PeerConfig>, ConfigError> {
        let mut peers = BTreeMap::new();
        for (name, settings) in &self.settings.peers {
            if !is_valid_peer_name(name) {
                return Err(ConfigError::Resolve {
                    origin: self.peer_origin(name),
                    key: format!("peers.{name}"),
                    message: format!(
                        "`{name}` cannot name a peer: use a letter, then up to 31 letters, \
                         digits, `_` or `-`"
                    ),
                });
            }
            let Some(url) = &settings.url else {
                return Err(ConfigError::Resolve {
                    origin: self.peer_origin(name),
                    key: format!("peers.{name}.url"),
                    message: "missing: give the peer's base URL, like http://host:7777".to_owned(),
                });
            };
            let url = url.trim_end_matches('/').to_owned();
            let auth = match &settings.auth {
                None => None,
                Some(auth) => Some(self.resolve_peer_auth(name, &url, auth)?),
            };
            peers.insert(
                name.clone(),
                PeerConfig {
                    url,
                    binding: settings.binding,
                    timeout: settings.timeout,
                    refresh: settings.refresh,
                    auth,
                },
            );
        }
        Ok(peers)
    }

    /// `peers.NAME.auth`: exactly one way to authenticate.
    fn resolve_peer_auth(
        &self,
        name: &str,
        url: &str,
        auth: &PeerAuthSettings,
    ) -> Result<PeerAuth, ConfigError> {
        let mut given = Vec::new();
        if let Some(env) = &auth.api_key_env {
            given.push(PeerAuth::ApiKeyEnv(env.clone()));
        }
        if let Some(env) = &auth.bearer_env {
            given.push(PeerAuth::BearerEnv(env.clone()));
        }
        if let Some(jwt) = &auth.jwt {
            let audience = match jwt.audience.as_deref().map(str::trim) {
                None => url.to_owned(),
                Some("") => {
                    return Err(ConfigError::Resolve {
                        origin: self.peer_origin(name),
                        key: format!("peers.{name}.auth.jwt.audience"),
                        message: "must not be empty (leave it out to use the peer's url)"
                            .to_owned(),
                    });
                }
                Some(audience) => audience.to_owned(),
            };
            given.push(PeerAuth::Jwt(PeerJwt {
                audience,
                ttl: jwt.ttl,
            }));
        }
        if given.len() != 1 {
            return Err(ConfigError::Resolve {
                origin: self.peer_origin(name),
                key: format!("peers.{name}.auth"),
                message: "give exactly one of api_key_env, bearer_env and jwt".to_owned(),
            });
        }
        Ok(given.remove(0))
    }

    /// The origin of some key of peer `name` (for errors about the whole entry).
    fn peer_origin(&self, name: &str) -> Origin {
        let entry = format!("peers.{name}");
        let below = format!("{entry}.");
        self.origins
            .iter()
            .find(|(key, _)| **key == entry || key.starts_with(&below))
            .map(|(_, origin)| origin.clone())
            .unwrap_or(Origin::Default)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::Config;

    use crate::config::test_project as project;

    fn load(text: &str) -> Result<Config, ConfigError> {
        let (_dir, _file, sources) = project(text);
        Config::load(&sources)?.resolve()
    }

    /// The error message and the file it should name.
    fn error(text: &str) -> (String, PathBuf) {
        let (_dir, file, sources) = project(text);
        let error = Config::load(&sources)
            .and_then(|loaded| loaded.resolve())
            .unwrap_err();
        (error.to_string(), file)
    }

    #[test]
    fn peers_default_to_none() {
        assert!(load("").unwrap().peers.is_empty());
    }

    #[test]
    fn peers_parse_with_defaults_and_overrides() {
        let config = load(
            "peers:\n\
             \x20 build-box:\n    url: http://10.0.0.7:7777/\n\
             \x20 Cloud_2:\n    url: https://agents.example.com\n    binding: rest\n\
             \x20   timeout: 300ms\n    refresh: 1h\n",
        )
        .unwrap();
        assert_eq!(
            config.peers["build-box"],
            PeerConfig {
                url: "http://10.0.0.7:7777".into(),
                binding: None,
                timeout: Duration::from_secs(30),
                refresh: Duration::from_secs(300),
                auth: None,
            }
        );
        assert_eq!(
            config.peers["Cloud_2"],
            PeerConfig {
                url: "https://agents.example.com".into(),
                binding: Some(PeerBinding::Rest),
                timeout: Duration::from_millis(300),
                refresh: Duration::from_secs(3600),
                auth: None,
            }
        );
        assert_eq!(config.peers.len(), 2);
    }

    #[test]
    fn peer_credentials_name_variables_and_exactly_one_way() {
        let config = load(
            "peers:\n\
             \x20 a:\n    url: http://a.example\n    auth:\n      api_key_env: A_KEY\n\
             \x20 b:\n    url: http://b.example/\n    auth:\n      jwt: {}\n\
             \x20 c:\n    url: http://c.example\n    auth:\n      jwt:\n        audience: node-c\n        ttl: 1m\n\
             \x20 d:\n    url: http://d.example\n    auth:\n      bearer_env: D_TOKEN\n",
        )
        .unwrap();
        assert_eq!(
            config.peers["a"].auth,
            Some(PeerAuth::ApiKeyEnv("A_KEY".into()))
        );
        assert_eq!(
            config.peers["b"].auth,
            Some(PeerAuth::Jwt(PeerJwt {
                audience: "http://b.example".into(),
                ttl: Duration::from_secs(300),
            }))
        );
        assert_eq!(
            config.peers["c"].auth,
            Some(PeerAuth::Jwt(PeerJwt {
                audience: "node-c".into(),
                ttl: Duration::from_secs(60),
            }))
        );
        assert_eq!(
            config.peers["d"].auth,
            Some(PeerAuth::BearerEnv("D_TOKEN".into()))
        );

        let (message, _) = error(
            "peers:\n  a:\n    url: http://a.example\n    auth:\n      api_key_env: A\n      bearer_env: B\n",
        );
        assert!(
            message.contains("peers.a.auth") && message.contains("exactly one"),
            "{message}"
        );
        let (message, _) = error("peers:\n  a:\n    url: http://a.example\n    auth: {}\n");
        assert!(message.contains("exactly one"), "{message}");
        let (message, _) = error(
            "peers:\n  a:\n    url: http://a.example\n    auth:\n      bearer_env: sk-live-123\n",
        );
        assert!(
            message.contains("not an environment variable name"),
            "{message}"
        );
        let (message, _) =
            error("peers:\n  a:\n    url: http://a.example\n    auth:\n      token: x\n");
        assert!(message.contains("token"), "{message}");
    }

    #[test]
    fn peer_names_follow_the_pattern() {
        for good in [
            "a",
            "A1",
            "build-box",
            "x_y",
            &format!("a{}", "b".repeat(31)),
        ] {
            assert!(is_valid_peer_name(good), "{good}");
        }
        for bad in [
            "",
            "1a",
            "-a",
            "_a",
            "a b",
            "a/b",
            "é",
            &format!("a{}", "b".repeat(32)),
        ] {
            assert!(!is_valid_peer_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_bad_peer_name_names_the_file_and_key() {
        let (message, file) = error("peers:\n  9lives:\n    url: http://h:1\n");
        assert_eq!(
            message,
            format!(
                "peers.9lives (from file {}): `9lives` cannot name a peer: use a letter, then \
                 up to 31 letters, digits, `_` or `-`",
                file.display()
            )
        );
        let (message, _) = error("peers:\n  a/b:\n    url: http://h:1\n");
        assert!(message.starts_with("peers.a/b (from file "), "{message}");
    }

    #[test]
    fn a_missing_url_names_the_file_and_key() {
        let (message, file) = error("peers:\n  box:\n    timeout: 5s\n");
        assert_eq!(
            message,
            format!(
                "peers.box.url (from file {}): missing: give the peer's base URL, like \
                 http://host:7777",
                file.display()
            )
        );
        // An entry with nothing under it has no URL either.
        let (message, file) = error("peers:\n  box:\n");
        assert!(
            message.starts_with(&format!("peers.box.url (from file {})", file.display())),
            "{message}"
        );
    }

    #[test]
    fn bad_values_name_the_file_line_and_key() {
        for (text, line, key, detail) in [
            (
                "peers:\n  a:\n    url: ftp://h/\n",
                3,
                "peers.a.url",
                "`ftp://h/` is not an http:// or https:// URL with a host",
            ),
            (
                "peers:\n  a:\n    url: http://\n",
                3,
                "peers.a.url",
                "`http://` is not an http:// or https:// URL with a host",
            ),
            (
                "peers:\n  a:\n    url: http://h\n    binding: soap\n",
                4,
                "peers.a.binding",
                "unknown variant `soap`, expected one of `jsonrpc`, `rest`, `grpc`",
            ),
            (
                "peers:\n  a:\n    timeout: 0s\n",
                3,
                "peers.a.timeout",
                "must be longer than zero",
            ),
            (
                "peers:\n  a:\n    refresh: soon\n",
                3,
                "peers.a.refresh",
                "invalid duration `soon`",
            ),
        ] {
            let (message, file) = error(text);
            let prefix = format!("{}:{line}: bad value for {key}: ", file.display());
            assert!(message.starts_with(&prefix), "{text}: {message}");
            assert!(message.contains(detail), "{text}: {message}");
        }
    }

    #[test]
    fn unknown_keys_in_a_peer_are_errors_with_suggestions() {
        let (message, file) = error("peers:\n  a:\n    url: http://h\n    timout: 5s\n");
        assert_eq!(
            message,
            format!(
                "{}:4: unknown key peers.a.timout (did you mean timeout?)",
                file.display()
            )
        );
    }

    #[test]
    fn the_shown_peers_read_back_the_same() {
        let config = load(
            "peers:\n  a:\n    url: http://127.0.0.1:1\n    binding: jsonrpc\n    timeout: 1500ms\n",
        )
        .unwrap();
        let yaml = serde_yaml_ng::to_string(&config).unwrap();
        assert!(yaml.contains("    binding: jsonrpc\n"), "{yaml}");
        assert!(yaml.contains("    timeout: 1500ms\n"), "{yaml}");
        assert!(yaml.contains("    refresh: 5m\n"), "{yaml}");
        let reread = load(&yaml).unwrap();
        assert_eq!(reread.peers, config.peers);
    }
}
