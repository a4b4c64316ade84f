//! `mew card [TARGET]`: fetch an agent card, check it, and print a summary (or the card's JSON).

use std::collections::HashSet;
use std::io::Write;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use mew_cards::{AgentCard, PROTOCOL_VERSION, binding};

use super::Context;
use super::output::write_json;
use super::remote::{NodeUrlArgs, Target, card_error, http_url, parse_target};

/// How long fetching a card may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// `mew card`.
#[derive(Debug, Args)]
pub(crate) struct CardArgs {
    /// The agent: its base URL or its card's URL (ending in .json), a role of the node, or `-`
    /// for the node's front agent [default: -]
    #[arg(value_parser = parse_target)]
    pub(crate) target: Option<Target>,
    #[command(flatten)]
    pub(crate) node: NodeUrlArgs,
}

/// Fetches the card, prints it, then its problems as `problem: ...` lines on stderr; fails if
/// there are any.
pub(crate) async fn card(args: CardArgs, context: &Context) -> anyhow::Result<()> {
    let target = args.target.unwrap_or(Target::Front);
    let url = target.url(&args.node.url(&context.config));
    let options = mew_transport::ClientOptions {
        request_timeout: FETCH_TIMEOUT,
        ..Default::default()
    };
    let card = mew_transport::fetch_card(&url, &options)
        .await
        .map_err(|error| card_error(error, &target, &args.node))?;
    let mut out = std::io::stdout();
    if context.json {
        write_json(&mut out, &card)?;
    } else {
        out.write_all(render_card(&card).as_bytes())?;
    }
    out.flush()?;
    let problems = validate(&card);
    for problem in &problems {
        eprintln!("problem: {problem}");
    }
    match problems.len() {
        0 => Ok(()),
        1 => bail!("the card at {url} has a problem"),
        n => bail!("the card at {url} has {n} problems"),
    }
}

/// What is wrong with a card: missing name, description or version; no interface speaking
/// A2A 1.0 over a known binding; interface URLs that are not absolute; skills without id,
/// name, description or tags, or with the id of another skill.
pub(crate) fn validate(card: &AgentCard) -> Vec<String> {
    let mut problems = Vec::new();
    for (field, value) in [
        ("name", &card.name),
        ("description", &card.description),
        ("version", &card.version),
    ] {
        if value.trim().is_empty() {
            problems.push(format!("the card has no {field}"));
        }
    }
    let known = [binding::JSONRPC, binding::HTTP_JSON, binding::GRPC];
    for (i, interface) in card.supported_interfaces.iter().enumerate() {
        let which = format!("supportedInterfaces[{i}]");
        if !known.contains(&interface.protocol_binding.as_str()) {
            problems.push(format!(
                "{which}: unknown protocolBinding {:?} (known: {})",
                interface.protocol_binding,
                known.join(", ")
            ));
        }
        if http_url(&interface.url).is_err() {
            problems.push(format!(
                "{which}: url {:?} is not an absolute http(s) URL",
                interface.url
            ));
        }
    }
    let speaks_1_0 = card.supported_interfaces.iter().any(|interface| {
        interface.protocol_version == PROTOCOL_VERSION
            && known.contains(&interface.protocol_binding.as_str())
    });
    if !speaks_1_0 {
        problems.push(format!(
            "no supportedInterface has protocolVersion {PROTOCOL_VERSION:?} and a known binding"
        ));
    }
    let mut ids = HashSet::new();
    for (i, skill) in card.skills.iter().enumerate() {
        let which = if skill.id.is_empty() {
            format!("skills[{i}]")
        } else {
            format!("skills[{i}] ({})", skill.id)
        };
        for (field, missing) in [
            ("id", skill.id.trim().is_empty()),
            ("name", skill.name.trim().is_empty()),
            ("description", skill.description.trim().is_empty()),
            ("tags", skill.tags.is_empty()),
        ] {
            if missing {
                problems.push(format!("{which}: no {field}"));
            }
        }
        if !skill.id.is_empty() && !ids.insert(skill.id.as_str()) {
            problems.push(format!("{which}: another skill has the same id"));
        }
    }
    problems
}

/// A card for humans: name, description, version, interfaces, capabilities, skills.
pub(crate) fn render_card(card: &AgentCard) -> String {
    let mut out = String::new();
    out.push_str(&format!("name:         {}\n", card.name));
    out.push_str(&format!("description:  {}\n", card.description));
    out.push_str(&format!("version:      {}\n", card.version));
    let capabilities = &card.capabilities;
    let mut features = Vec::new();
    for (name, on) in [
        ("streaming", capabilities.streaming),
        ("push notifications", capabilities.push_notifications),
        ("extended card", capabilities.extended_agent_card),
    ] {
        if on == Some(true) {
            features.push(name.to_owned());
        }
    }
    for extension in &capabilities.extensions {
        let required = if extension.required {
            " (required)"
        } else {
            ""
        };
        features.push(format!("extension {}{required}", extension.uri));
    }
    let features = if features.is_empty() {
        "none".to_owned()
    } else {
        features.join(", ")
    };
    out.push_str(&format!("capabilities: {features}\n"));
    out.push_str(if card.supported_interfaces.is_empty() {
        "interfaces:   none\n"
    } else {
        "interfaces:\n"
    });
    let width = card
        .supported_interfaces
        .iter()
        .map(|interface| interface.protocol_binding.chars().count())
        .max()
        .unwrap_or(0);
    for interface in &card.supported_interfaces {
        let tenant = if interface.tenant.is_empty() {
            String::new()
        } else {
            format!("  tenant {}", interface.tenant)
        };
        out.push_str(&format!(
            "  {:<width$}  {}  {}{tenant}\n",
            interface.protocol_binding, interface.protocol_version, interface.url
        ));
    }
    out.push_str(if card.skills.is_empty() {
        "skills:       none\n"
    } else {
        "skills:\n"
    });
    for skill in &card.skills {
        out.push_str(&format!("  {}  [{}]\n", skill.id, skill.tags.join(", ")));
        if skill.name != skill.id {
            out.push_str(&format!("    {}\n", skill.name));
        }
        if !skill.description.is_empty() {
            out.push_str(&format!("    {}\n", skill.description));
        }
    }
    out
}
