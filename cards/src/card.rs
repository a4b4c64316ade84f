//! The agent card and everything inside it: interfaces, capabilities, skills, security schemes, signatures.

use std::collections::BTreeMap;

use crate::message::Metadata;
use crate::serde_util::proto_message;
use crate::task::oneof;

/// The protocol version Mew speaks, as written in cards and headers.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The path, relative to an agent's base URL, where its card is published.
pub const WELL_KNOWN_CARD_PATH: &str = ".well-known/agent-card.json";

/// Protocol binding names used in [`AgentInterface::protocol_binding`].
pub mod binding {
    /// JSON-RPC 2.0 over HTTP.
    pub const JSONRPC: &str = "JSONRPC";
    /// HTTP+JSON (REST).
    pub const HTTP_JSON: &str = "HTTP+JSON";
    /// gRPC (Mew neither serves nor calls it).
    pub const GRPC: &str = "GRPC";
}

proto_message! {
    /// A self-describing manifest of an agent.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct AgentCard {
        /// Human-readable name.
        pub name: String,
        /// What the agent does.
        pub description: String,
        /// Where and how to reach the agent, preferred first.
        #[serde(alias = "supported_interfaces")]
        pub supported_interfaces: Vec<AgentInterface>,
        /// Who provides the agent.
        pub provider: Option<AgentProvider>,
        /// The agent's own version.
        pub version: String,
        /// Documentation for humans.
        #[serde(alias = "documentation_url")]
        pub documentation_url: Option<String>,
        /// Optional protocol features the agent supports.
        pub capabilities: AgentCapabilities as always,
        /// Authentication schemes by name.
        #[serde(alias = "security_schemes")]
        pub security_schemes: BTreeMap<String, SecurityScheme>,
        /// Which schemes a caller must satisfy (any one entry).
        #[serde(alias = "security_requirements")]
        pub security_requirements: Vec<SecurityRequirement>,
        /// Media types accepted by default.
        #[serde(alias = "default_input_modes")]
        pub default_input_modes: Vec<String>,
        /// Media types produced by default.
        #[serde(alias = "default_output_modes")]
        pub default_output_modes: Vec<String>,
        /// What the agent is good at.
        pub skills: Vec<AgentSkill>,
        /// JWS signatures over the card.
        pub signatures: Vec<AgentCardSignature>,
        /// An icon for the agent.
        #[serde(alias = "icon_url")]
        pub icon_url: Option<String>,
    }
}

proto_message! {
    /// One way to reach an agent.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct AgentInterface {
        /// Absolute URL of the interface.
        pub url: String,
        /// `JSONRPC`, `HTTP+JSON` or `GRPC` (open-ended).
        #[serde(alias = "protocol_binding")]
        pub protocol_binding: String,
        /// Tenant to put in requests to this interface.
        pub tenant: String,
        /// The A2A version this interface speaks, e.g. `1.0`.
        #[serde(alias = "protocol_version")]
        pub protocol_version: String,
    }
}

impl AgentInterface {
    /// An interface speaking [`PROTOCOL_VERSION`].
    pub fn new(url: impl Into<String>, protocol_binding: &str) -> Self {
        Self {
            url: url.into(),
            protocol_binding: protocol_binding.to_owned(),
            tenant: String::new(),
            protocol_version: PROTOCOL_VERSION.to_owned(),
        }
    }
}

proto_message! {
    /// The organisation behind an agent.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct AgentProvider {
        /// The provider's website.
        pub url: String,
        /// The provider's name.
        pub organization: String,
    }
}

proto_message! {
    /// Optional protocol features.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct AgentCapabilities {
        /// Streaming sends and subscriptions.
        pub streaming: Option<bool>,
        /// Push notifications to webhooks.
        #[serde(alias = "push_notifications")]
        pub push_notifications: Option<bool>,
        /// Protocol extensions.
        pub extensions: Vec<AgentExtension>,
        /// An extended card for authenticated callers.
        #[serde(alias = "extended_agent_card")]
        pub extended_agent_card: Option<bool>,
    }
}

proto_message! {
    /// A protocol extension the agent supports.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct AgentExtension {
        /// The extension's URI.
        pub uri: String,
        /// How the agent uses it.
        pub description: String,
        /// Clients must understand it.
        pub required: bool,
        /// Extension-specific settings.
        pub params: Option<Metadata>,
    }
}

proto_message! {
    /// Something an agent can do.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct AgentSkill {
        /// Unique within the card.
        pub id: String,
        /// Human-readable name.
        pub name: String,
        /// What the skill does.
        pub description: String,
        /// Keywords.
        pub tags: Vec<String>,
        /// Example prompts.
        pub examples: Vec<String>,
        /// Accepted media types, overriding the card's defaults.
        #[serde(alias = "input_modes")]
        pub input_modes: Vec<String>,
        /// Produced media types, overriding the card's defaults.
        #[serde(alias = "output_modes")]
        pub output_modes: Vec<String>,
        /// Security needed for this skill.
        #[serde(alias = "security_requirements")]
        pub security_requirements: Vec<SecurityRequirement>,
    }
}

proto_message! {
    /// A JWS (RFC 7515, JSON serialization) over the card.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct AgentCardSignature {
        /// The base64url protected header.
        pub protected: String,
        /// The base64url signature.
        pub signature: String,
        /// The unprotected header.
        pub header: Option<Metadata>,
    }
}

proto_message! {
    /// A list of strings (proto `StringList`).
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct StringList {
        /// The strings.
        pub list: Vec<String>,
    }
}

proto_message! {
    /// Scheme names mapped to the scopes they need; all must be satisfied.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct SecurityRequirement {
        /// Scheme name to required scopes.
        pub schemes: BTreeMap<String, StringList>,
    }
}

oneof! {
    /// How callers authenticate (OpenAPI 3.2 security scheme).
    pub enum SecurityScheme: "security scheme" {
        /// An API key in a header, query parameter or cookie.
        ApiKey(ApiKeySecurityScheme) = apiKeySecurityScheme / "api_key_security_scheme",
        /// HTTP authentication (Bearer, Basic, ...).
        HttpAuth(HttpAuthSecurityScheme) = httpAuthSecurityScheme / "http_auth_security_scheme",
        /// OAuth 2.0.
        OAuth2(OAuth2SecurityScheme) = oauth2SecurityScheme / "oauth2_security_scheme",
        /// OpenID Connect.
        OpenIdConnect(OpenIdConnectSecurityScheme) = openIdConnectSecurityScheme / "open_id_connect_security_scheme",
        /// Mutual TLS.
        MutualTls(MutualTlsSecurityScheme) = mtlsSecurityScheme / "mtls_security_scheme",
    }
}

proto_message! {
    /// An API key scheme.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct ApiKeySecurityScheme {
        /// For humans.
        pub description: String,
        /// `header`, `query` or `cookie`.
        pub location: String,
        /// The header, parameter or cookie name.
        pub name: String,
    }
}

proto_message! {
    /// An HTTP authentication scheme.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct HttpAuthSecurityScheme {
        /// For humans.
        pub description: String,
        /// The scheme name, e.g. `Bearer`.
        pub scheme: String,
        /// A hint such as `JWT`.
        #[serde(alias = "bearer_format")]
        pub bearer_format: String,
    }
}

proto_message! {
    /// An OAuth 2.0 scheme.
    #[derive(Clone, Debug, PartialEq)]
    pub struct OAuth2SecurityScheme {
        /// For humans.
        pub description: String,
        /// The supported flow.
        pub flows: OAuthFlows as required,
        /// RFC 8414 metadata URL.
        #[serde(alias = "oauth2_metadata_url")]
        pub oauth2_metadata_url: String,
    }
}

proto_message! {
    /// An OpenID Connect scheme.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct OpenIdConnectSecurityScheme {
        /// For humans.
        pub description: String,
        /// The discovery URL.
        #[serde(alias = "open_id_connect_url")]
        pub open_id_connect_url: String,
    }
}

proto_message! {
    /// A mutual TLS scheme.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct MutualTlsSecurityScheme {
        /// For humans.
        pub description: String,
    }
}

oneof! {
    /// The OAuth 2.0 flow a scheme supports.
    pub enum OAuthFlows: "OAuth flows object" {
        /// Authorization code (with PKCE).
        AuthorizationCode(OAuthFlow) = authorizationCode / "authorization_code",
        /// Client credentials.
        ClientCredentials(OAuthFlow) = clientCredentials / "client_credentials",
        /// Implicit (deprecated).
        Implicit(OAuthFlow) = implicit,
        /// Password (deprecated).
        Password(OAuthFlow) = password,
        /// Device code (RFC 8628).
        DeviceCode(OAuthFlow) = deviceCode / "device_code",
    }
}

proto_message! {
    /// The settings of one OAuth 2.0 flow; each flow kind uses the fields it defines.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct OAuthFlow {
        /// Authorization endpoint (authorization code, implicit).
        #[serde(alias = "authorization_url")]
        pub authorization_url: String,
        /// Device authorization endpoint (device code).
        #[serde(alias = "device_authorization_url")]
        pub device_authorization_url: String,
        /// Token endpoint.
        #[serde(alias = "token_url")]
        pub token_url: String,
        /// Refresh endpoint.
        #[serde(alias = "refresh_url")]
        pub refresh_url: String,
        /// Scope name to description.
        pub scopes: BTreeMap<String, String>,
        /// PKCE is required (authorization code).
        #[serde(alias = "pkce_required")]
        pub pkce_required: bool,
    }
}
