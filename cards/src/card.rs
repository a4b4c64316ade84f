//! The agent card and everything inside it: interfaces, capabilities, skills, security schemes, signatures.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::message::Metadata;
use crate::serde_util::{is_default, null_as_default};
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

/// A self-describing manifest of an agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    /// Human-readable name.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub name: String,
    /// What the agent does.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// Where and how to reach the agent, preferred first.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[serde(alias = "supported_interfaces")]
    pub supported_interfaces: Vec<AgentInterface>,
    /// Who provides the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<AgentProvider>,
    /// The agent's own version.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub version: String,
    /// Documentation for humans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(alias = "documentation_url")]
    pub documentation_url: Option<String>,
    /// Optional protocol features the agent supports.
    #[serde(default, deserialize_with = "null_as_default")]
    pub capabilities: AgentCapabilities,
    /// Authentication schemes by name.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    #[serde(alias = "security_schemes")]
    pub security_schemes: BTreeMap<String, SecurityScheme>,
    /// Which schemes a caller must satisfy (any one entry).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[serde(alias = "security_requirements")]
    pub security_requirements: Vec<SecurityRequirement>,
    /// Media types accepted by default.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[serde(alias = "default_input_modes")]
    pub default_input_modes: Vec<String>,
    /// Media types produced by default.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[serde(alias = "default_output_modes")]
    pub default_output_modes: Vec<String>,
    /// What the agent is good at.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub skills: Vec<AgentSkill>,
    /// JWS signatures over the card.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub signatures: Vec<AgentCardSignature>,
    /// An icon for the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(alias = "icon_url")]
    pub icon_url: Option<String>,
}

/// One way to reach an agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    /// Absolute URL of the interface.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub url: String,
    /// `JSONRPC`, `HTTP+JSON` or `GRPC` (open-ended).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "protocol_binding")]
    pub protocol_binding: String,
    /// Tenant to put in requests to this interface.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tenant: String,
    /// The A2A version this interface speaks, e.g. `1.0`.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "protocol_version")]
    pub protocol_version: String,
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

/// The organisation behind an agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentProvider {
    /// The provider's website.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub url: String,
    /// The provider's name.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub organization: String,
}

/// Optional protocol features.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// Streaming sends and subscriptions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    /// Push notifications to webhooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(alias = "push_notifications")]
    pub push_notifications: Option<bool>,
    /// Protocol extensions.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub extensions: Vec<AgentExtension>,
    /// An extended card for authenticated callers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(alias = "extended_agent_card")]
    pub extended_agent_card: Option<bool>,
}

/// A protocol extension the agent supports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentExtension {
    /// The extension's URI.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub uri: String,
    /// How the agent uses it.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// Clients must understand it.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub required: bool,
    /// Extension-specific settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Metadata>,
}

/// Something an agent can do.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    /// Unique within the card.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub id: String,
    /// Human-readable name.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub name: String,
    /// What the skill does.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// Keywords.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tags: Vec<String>,
    /// Example prompts.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub examples: Vec<String>,
    /// Accepted media types, overriding the card's defaults.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[serde(alias = "input_modes")]
    pub input_modes: Vec<String>,
    /// Produced media types, overriding the card's defaults.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[serde(alias = "output_modes")]
    pub output_modes: Vec<String>,
    /// Security needed for this skill.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[serde(alias = "security_requirements")]
    pub security_requirements: Vec<SecurityRequirement>,
}

/// A JWS (RFC 7515, JSON serialization) over the card.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCardSignature {
    /// The base64url protected header.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub protected: String,
    /// The base64url signature.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub signature: String,
    /// The unprotected header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<Metadata>,
}

/// A list of strings (proto `StringList`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StringList {
    /// The strings.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub list: Vec<String>,
}

/// Scheme names mapped to the scopes they need; all must be satisfied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityRequirement {
    /// Scheme name to required scopes.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub schemes: BTreeMap<String, StringList>,
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

/// An API key scheme.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeySecurityScheme {
    /// For humans.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// `header`, `query` or `cookie`.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub location: String,
    /// The header, parameter or cookie name.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub name: String,
}

/// An HTTP authentication scheme.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpAuthSecurityScheme {
    /// For humans.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// The scheme name, e.g. `Bearer`.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub scheme: String,
    /// A hint such as `JWT`.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "bearer_format")]
    pub bearer_format: String,
}

/// An OAuth 2.0 scheme.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OAuth2SecurityScheme {
    /// For humans.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// The supported flow.
    pub flows: OAuthFlows,
    /// RFC 8414 metadata URL.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "oauth2_metadata_url")]
    pub oauth2_metadata_url: String,
}

/// An OpenID Connect scheme.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenIdConnectSecurityScheme {
    /// For humans.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// The discovery URL.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "open_id_connect_url")]
    pub open_id_connect_url: String,
}

/// A mutual TLS scheme.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MutualTlsSecurityScheme {
    /// For humans.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
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

/// The settings of one OAuth 2.0 flow; each flow kind uses the fields it defines.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OAuthFlow {
    /// Authorization endpoint (authorization code, implicit).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "authorization_url")]
    pub authorization_url: String,
    /// Device authorization endpoint (device code).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "device_authorization_url")]
    pub device_authorization_url: String,
    /// Token endpoint.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "token_url")]
    pub token_url: String,
    /// Refresh endpoint.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[serde(alias = "refresh_url")]
    pub refresh_url: String,
    /// Scope name to description.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub scopes: BTreeMap<String, String>,
    /// PKCE is required (authorization code).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    #[serde(alias = "pkce_required")]
    pub pkce_required: bool,
}
