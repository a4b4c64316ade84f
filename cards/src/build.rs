//! Building agent cards from role definitions: one card per role, and the node's front card.
//!
//! A node publishes each role R at `{node}/agents/R` (see [`role_base_url`]) with the card from
//! [`role_card`], and its front card ([`front_card`]) at the node's root, whose skills list every
//! published role. Both serve JSON-RPC and HTTP+JSON at the same URL.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::card::{
    AgentCapabilities, AgentCard, AgentInterface, AgentProvider, AgentSkill, SecurityRequirement,
    SecurityScheme, binding,
};
use crate::message::Metadata;
use crate::role::RoleDefinition;

/// Media types every Mew card accepts and produces by default.
const DEFAULT_MODES: [&str; 2] = ["text/plain", "application/json"];

/// Node-wide settings that go into every card the node publishes.
#[derive(Clone, Debug, PartialEq)]
pub struct CardOptions {
    /// The node's name: the front card's `name`.
    pub node_name: String,
    /// The `version` of every card.
    pub version: String,
    /// Who runs the node.
    pub provider: Option<AgentProvider>,
    /// Documentation for humans.
    pub documentation_url: Option<String>,
    /// Whether the node serves streaming sends and subscriptions.
    pub streaming: bool,
    /// Whether the node delivers push notifications.
    pub push_notifications: bool,
    /// Whether the node serves an extended card to authenticated callers.
    pub extended_agent_card: bool,
    /// The skills (instruction packages) model-driven roles can activate, as name and
    /// description: listed on their cards so that peers see them.
    pub skills: Vec<(String, String)>,
    /// How callers authenticate, by scheme name (empty: no authentication).
    pub security_schemes: BTreeMap<String, SecurityScheme>,
    /// The schemes a caller must satisfy: any one of the requirements.
    pub security_requirements: Vec<SecurityRequirement>,
    /// The node's gRPC endpoint, when it serves one: every card lists a `GRPC` interface
    /// there, with the role's name as its `tenant` (the front card's is empty), since gRPC
    /// addresses one service per endpoint rather than a path per agent.
    pub grpc_url: Option<String>,
}

impl Default for CardOptions {
    /// Node `mew`, this crate's version, streaming on, everything else off.
    fn default() -> Self {
        Self {
            node_name: "mew".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            provider: None,
            documentation_url: None,
            streaming: true,
            push_notifications: false,
            extended_agent_card: false,
            skills: Vec::new(),
            security_schemes: BTreeMap::new(),
            security_requirements: Vec::new(),
            grpc_url: None,
        }
    }
}

/// The base URL of role `role` on the node at `node_base`: `{node_base}/agents/{role}`.
///
/// A trailing slash on `node_base` is ignored, so the result never holds `//`.
pub fn role_base_url(node_base: &str, role: &str) -> String {
    format!("{}/agents/{role}", trim_base(node_base))
}

/// The card of one role, served at `base_url` (usually [`role_base_url`]).
///
/// Its first skill has the role's name as id and name, the role's description, tags and
/// examples; a role without tags gets `["mew", "command"]`, `["mew", "remote"]` or
/// `["mew", "llm"]`. A model-driven role's card then lists the node's skills it can activate
/// ([`CardOptions::skills`]), with ids `skill/<name>` and the tag `mew-skill`.
pub fn role_card(role: &RoleDefinition, base_url: &str, options: &CardOptions) -> AgentCard {
    let mut skills = vec![role_skill(role)];
    if !role.is_command() && !role.is_remote() {
        skills.extend(options.skills.iter().map(|(name, description)| AgentSkill {
            id: format!("skill/{name}"),
            name: name.clone(),
            description: description.clone(),
            tags: vec!["mew-skill".to_owned()],
            ..AgentSkill::default()
        }));
    }
    AgentCard {
        name: role.name.clone(),
        description: role.description.clone(),
        skills,
        ..card_shell(base_url, &role.name, options)
    }
}

/// The node's front card, served at `base_url` (the node's root).
///
/// Messages sent to its interfaces run `default_role`; its skills are the published roles
/// (`publish: true`), one per role name, sorted by name. Each role also has its own card,
/// under [`role_base_url`].
pub fn front_card(
    roles: &[&RoleDefinition],
    base_url: &str,
    default_role: &str,
    options: &CardOptions,
) -> AgentCard {
    let mut published: Vec<&RoleDefinition> =
        roles.iter().copied().filter(|role| role.publish).collect();
    published.sort_by(|a, b| a.name.cmp(&b.name));
    published.dedup_by(|a, b| a.name == b.name);
    let description = format!(
        "Mew node {name}: messages sent here run the role {default_role}, and each role listed \
         as a skill has its own agent card under {base}/agents/{{role}}/.",
        name = options.node_name,
        base = trim_base(base_url),
    );
    AgentCard {
        name: options.node_name.clone(),
        description,
        skills: published.into_iter().map(role_skill).collect(),
        ..card_shell(base_url, "", options)
    }
}

/// Everything a role card and the front card share: interfaces, version, capabilities, modes.
/// `tenant` is the card's tenant on the gRPC endpoint.
fn card_shell(base_url: &str, tenant: &str, options: &CardOptions) -> AgentCard {
    let url = trim_base(base_url);
    let mut supported_interfaces = vec![
        AgentInterface::new(url, binding::JSONRPC),
        AgentInterface::new(url, binding::HTTP_JSON),
    ];
    if let Some(grpc) = &options.grpc_url {
        supported_interfaces.push(AgentInterface {
            tenant: tenant.to_owned(),
            ..AgentInterface::new(trim_base(grpc), binding::GRPC)
        });
    }
    AgentCard {
        supported_interfaces,
        provider: options.provider.clone(),
        version: options.version.clone(),
        documentation_url: options.documentation_url.clone(),
        capabilities: AgentCapabilities {
            streaming: Some(options.streaming),
            push_notifications: Some(options.push_notifications),
            // What Mew adds to the metadata of its tasks, declared so others may ignore it.
            extensions: vec![crate::mew::extension()],
            extended_agent_card: Some(options.extended_agent_card),
        },
        default_input_modes: DEFAULT_MODES.map(str::to_owned).to_vec(),
        default_output_modes: DEFAULT_MODES.map(str::to_owned).to_vec(),
        security_schemes: options.security_schemes.clone(),
        security_requirements: options.security_requirements.clone(),
        ..AgentCard::default()
    }
}

/// The skill that stands for `role`, on its own card and on the front card.
fn role_skill(role: &RoleDefinition) -> AgentSkill {
    let tags = if !role.tags.is_empty() {
        role.tags.clone()
    } else if role.is_command() {
        vec!["mew".to_owned(), "command".to_owned()]
    } else if role.is_remote() {
        vec!["mew".to_owned(), "remote".to_owned()]
    } else {
        vec!["mew".to_owned(), "llm".to_owned()]
    };
    AgentSkill {
        id: role.name.clone(),
        name: role.name.clone(),
        description: role.description.clone(),
        tags,
        examples: role.examples.clone(),
        ..AgentSkill::default()
    }
}

fn trim_base(url: &str) -> &str {
    url.trim_end_matches('/')
}

/// The AgentCard fields an extended card may set (their JSON names).
const CARD_FIELDS: [&str; 13] = [
    "name",
    "description",
    "supportedInterfaces",
    "provider",
    "version",
    "documentationUrl",
    "capabilities",
    "securitySchemes",
    "securityRequirements",
    "defaultInputModes",
    "defaultOutputModes",
    "skills",
    "iconUrl",
];

/// The extended card of the public `card` (what `GetExtendedAgentCard` serves): `card` with
/// `extra` applied, `skills` appended and every other field replaced. Fails (saying why) when a
/// key is not a card field or the result is not a valid AgentCard.
pub fn extended_card(card: &AgentCard, extra: &Metadata) -> Result<AgentCard, String> {
    let mut value = serde_json::to_value(card).map_err(|e| e.to_string())?;
    let Value::Object(fields) = &mut value else {
        return Err("the card is not a JSON object".to_owned());
    };
    for (key, extra) in extra {
        if !CARD_FIELDS.contains(&key.as_str()) {
            return Err(format!(
                "`{key}` is not an AgentCard field that can be changed (the fields are {})",
                CARD_FIELDS.join(", ")
            ));
        }
        match (key.as_str(), extra) {
            ("skills", Value::Array(added)) => {
                match fields
                    .entry("skills")
                    .or_insert_with(|| Value::Array(Vec::new()))
                {
                    Value::Array(skills) => skills.extend(added.iter().cloned()),
                    other => *other = Value::Array(added.clone()),
                }
            }
            ("skills", _) => return Err("`skills` must be a list of skills".to_owned()),
            _ => {
                fields.insert(key.clone(), extra.clone());
            }
        }
    }
    let card: AgentCard = serde_json::from_value(value).map_err(|e| e.to_string())?;
    for skill in &card.skills {
        if skill.id.is_empty() || skill.name.is_empty() {
            return Err("every skill needs an `id` and a `name`".to_owned());
        }
    }
    Ok(card)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::card::PROTOCOL_VERSION;
    use crate::role::{RoleSource, parse_role};

    fn role(frontmatter: &str) -> RoleDefinition {
        let text = format!("---\n{frontmatter}---\nYou help.\n");
        match parse_role(&text, "test.md", RoleSource::Project) {
            Ok(parsed) => parsed.definition,
            Err(err) => panic!("bad test role: {err}"),
        }
    }

    fn llm(name: &str) -> RoleDefinition {
        role(&format!("name: {name}\ndescription: The {name} role.\n"))
    }

    fn urls_and_bindings(card: &AgentCard) -> Vec<(&str, &str, &str)> {
        card.supported_interfaces
            .iter()
            .map(|i| {
                (
                    i.url.as_str(),
                    i.protocol_binding.as_str(),
                    i.protocol_version.as_str(),
                )
            })
            .collect()
    }

    #[test]
    fn default_options() {
        let options = CardOptions::default();
        assert_eq!(options.node_name, "mew");
        assert_eq!(options.version, env!("CARGO_PKG_VERSION"));
        assert!(options.streaming);
        assert!(!options.push_notifications);
        assert!(!options.extended_agent_card);
        assert_eq!(options.provider, None);
        assert_eq!(options.documentation_url, None);
    }

    #[test]
    fn role_base_url_appends_agents_and_role() {
        assert_eq!(
            role_base_url("http://h:8080", "Explore"),
            "http://h:8080/agents/Explore"
        );
        assert_eq!(
            role_base_url("http://h:8080/", "Plan"),
            "http://h:8080/agents/Plan"
        );
    }

    #[test]
    fn role_card_describes_the_role() {
        let reviewer = role(
            "name: reviewer\ndescription: Reviews code.\ntags: [review, rust]\n\
             examples: [\"Review src/lib.rs\"]\n",
        );
        let options = CardOptions {
            version: "9.9.9".to_owned(),
            provider: Some(AgentProvider {
                url: "https://example.com".to_owned(),
                organization: "Example".to_owned(),
            }),
            documentation_url: Some("https://example.com/docs".to_owned()),
            push_notifications: true,
            ..CardOptions::default()
        };
        let card = role_card(&reviewer, "http://h/agents/reviewer/", &options);
        assert_eq!(card.name, "reviewer");
        assert_eq!(card.description, "Reviews code.");
        assert_eq!(card.version, "9.9.9");
        assert_eq!(card.provider, options.provider);
        assert_eq!(
            card.documentation_url.as_deref(),
            Some("https://example.com/docs")
        );
        assert_eq!(
            urls_and_bindings(&card),
            [
                ("http://h/agents/reviewer", "JSONRPC", PROTOCOL_VERSION),
                ("http://h/agents/reviewer", "HTTP+JSON", PROTOCOL_VERSION),
            ]
        );
        assert_eq!(card.default_input_modes, ["text/plain", "application/json"]);
        assert_eq!(
            card.default_output_modes,
            ["text/plain", "application/json"]
        );
        assert_eq!(card.capabilities.streaming, Some(true));
        assert_eq!(card.capabilities.push_notifications, Some(true));
        assert_eq!(card.capabilities.extended_agent_card, Some(false));
        let [skill] = card.skills.as_slice() else {
            panic!("one skill expected, got {:?}", card.skills);
        };
        assert_eq!(skill.id, "reviewer");
        assert_eq!(skill.name, "reviewer");
        assert_eq!(skill.description, "Reviews code.");
        assert_eq!(skill.tags, ["review", "rust"]);
        assert_eq!(skill.examples, ["Review src/lib.rs"]);
        assert!(card.signatures.is_empty());
    }

    #[test]
    fn untagged_roles_get_kind_tags() {
        let options = CardOptions::default();
        let command = role("name: wrap\ndescription: Wraps a CLI.\ncommand: echo hi\n");
        let card = role_card(&command, "http://h", &options);
        assert_eq!(card.skills[0].tags, ["mew", "command"]);
        let card = role_card(&llm("plain"), "http://h", &options);
        assert_eq!(card.skills[0].tags, ["mew", "llm"]);
        let remote = role("name: fwd\ndescription: Forwards.\nremote: bob/echo\n");
        let card = role_card(&remote, "http://h", &options);
        assert_eq!(card.skills[0].tags, ["mew", "remote"]);
    }

    #[test]
    fn role_card_serializes_as_protojson() {
        let card = role_card(
            &llm("Plan"),
            "http://h/agents/Plan",
            &CardOptions::default(),
        );
        let json = serde_json::to_value(&card).unwrap();
        assert_eq!(
            json["supportedInterfaces"][0],
            serde_json::json!({
                "url": "http://h/agents/Plan",
                "protocolBinding": "JSONRPC",
                "protocolVersion": "1.0",
            })
        );
        assert_eq!(json["skills"][0]["id"], "Plan");
        assert_eq!(json["capabilities"]["streaming"], true);
        assert!(json.get("provider").is_none());
        assert!(json.get("signatures").is_none());
        let back: AgentCard = serde_json::from_value(json).unwrap();
        assert_eq!(back, card);
    }

    #[test]
    fn front_card_lists_published_roles_by_name() {
        let plan = llm("Plan");
        let explore = llm("Explore");
        let general = llm("general-purpose");
        let hidden = role("name: hidden\ndescription: Internal.\npublish: false\n");
        let options = CardOptions {
            node_name: "alpha".to_owned(),
            ..CardOptions::default()
        };
        let card = front_card(
            &[&plan, &hidden, &general, &explore, &plan],
            "http://h:1/",
            "general-purpose",
            &options,
        );
        assert_eq!(card.name, "alpha");
        let ids: Vec<&str> = card.skills.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["Explore", "Plan", "general-purpose"]);
        assert_eq!(card.skills[1].description, "The Plan role.");
        assert_eq!(
            urls_and_bindings(&card),
            [
                ("http://h:1", "JSONRPC", PROTOCOL_VERSION),
                ("http://h:1", "HTTP+JSON", PROTOCOL_VERSION),
            ]
        );
        assert_eq!(
            card.description,
            "Mew node alpha: messages sent here run the role general-purpose, and each role \
             listed as a skill has its own agent card under http://h:1/agents/{role}/."
        );
        assert_eq!(card.version, env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn front_card_without_roles_has_no_skills() {
        let card = front_card(&[], "http://h", "general-purpose", &CardOptions::default());
        assert!(card.skills.is_empty());
        assert_eq!(card.supported_interfaces.len(), 2);
    }

    #[test]
    fn a_node_serving_grpc_lists_it_on_every_card_with_the_role_as_tenant() {
        let options = CardOptions {
            grpc_url: Some("http://h:1/".to_owned()),
            ..CardOptions::default()
        };
        let grpc = |card: &AgentCard| {
            card.supported_interfaces
                .iter()
                .find(|i| i.protocol_binding == binding::GRPC)
                .map(|i| (i.url.clone(), i.tenant.clone(), i.protocol_version.clone()))
        };
        let plan = llm("Plan");
        let card = role_card(&plan, "http://h:1/agents/Plan", &options);
        assert_eq!(
            grpc(&card),
            Some(("http://h:1".into(), "Plan".into(), PROTOCOL_VERSION.into()))
        );
        // The HTTP bindings come first: a client that takes the first interface keeps them.
        assert_eq!(
            card.supported_interfaces[0].protocol_binding,
            binding::JSONRPC
        );
        let front = front_card(&[&plan], "http://h:1", "Plan", &options);
        assert_eq!(
            grpc(&front),
            Some(("http://h:1".into(), String::new(), PROTOCOL_VERSION.into()))
        );
    }
}
