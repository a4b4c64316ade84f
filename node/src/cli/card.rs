//! `mew card [TARGET]`: fetch an agent card, check it, and print a summary (or the card's JSON);
//! `mew card verify TARGET`: check the card's signatures.

use std::collections::HashSet;
use std::io::Write;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use jsonwebtoken::jwk::JwkSet;
use mew_cards::{AgentCard, PROTOCOL_VERSION, WELL_KNOWN_CARD_PATH, binding};

use super::Context;
use super::output::write_json;
use super::remote::{NodeUrlArgs, Target, card_error, http_url, parse_target};
use crate::identity::signing;

/// How long fetching a card may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// `mew card`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct CardArgs {
    #[command(subcommand)]
    pub(crate) command: Option<CardCommand>,
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
    if let Some(CardCommand::Verify(verify_args)) = args.command {
        return verify(verify_args, &args.node, context).await;
    }
    let target = args.target.unwrap_or(Target::Front);
    let url = target.url(&args.node.url(&context.config), &context.config)?;
    let options = mew_transport::ClientOptions {
        request_timeout: FETCH_TIMEOUT,
        tls: context
            .config
            .tls
            .client_options()
            .map_err(anyhow::Error::msg)?,
        ..Default::default()
    };
    let card = mew_transport::fetch_card(&url, &options)
        .await
        .map_err(|error| card_error(error, &target, &args.node, &context.config))?;
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

/// `mew card` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum CardCommand {
    /// Verify the card's signatures; exit 1 unless one verifies and none fails
    ///
    /// The keys are those of the JWKS given with --jwks, or else those of the JWKS each
    /// signature's `jku` names, followed only to the card's own origin (scheme, host, port).
    Verify(VerifyArgs),
}

/// `mew card verify`.
#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The agent: its base URL or its card's URL (ending in .json), a role of the node, or `-`
    /// for the node's front agent
    #[arg(value_parser = parse_target)]
    pub(crate) target: Target,
    /// The keys to verify with: a JWKS file or http(s) URL. Without it, each signature's
    /// `jku` is followed when it is on the card's own origin
    #[arg(long, value_name = "FILE_OR_URL")]
    pub(crate) jwks: Option<String>,
}

/// Fetches the card and checks its signatures: one line per signature (kid, alg, ok or why
/// not), or with `--json` one document; fails unless at least one verifies and none fails.
async fn verify(args: VerifyArgs, node: &NodeUrlArgs, context: &Context) -> anyhow::Result<()> {
    let base = args
        .target
        .url(&node.url(&context.config), &context.config)?;
    let url = if base.ends_with(".json") {
        base
    } else {
        format!("{}/{WELL_KNOWN_CARD_PATH}", base.trim_end_matches('/'))
    };
    let tls = context
        .config
        .tls
        .client_options()
        .map_err(anyhow::Error::msg)?;
    let client = signing::http_client(&tls)?;
    let body = signing::fetch_bytes(&client, &url, signing::CARD_MAX_BYTES)
        .await
        .map_err(|e| {
            if matches!(args.target, Target::Front | Target::Role(_)) && node.node.is_none() {
                super::remote::node_error(e, &node.url(&context.config))
            } else {
                e
            }
        })?;
    let card: AgentCard = serde_json::from_slice(&body)
        .with_context(|| format!("{url} does not hold an agent card"))?;
    let given = match &args.jwks {
        None => None,
        Some(source) => Some(load_jwks(&client, source).await?),
    };
    let reports = signing::Verifier::new(given, client)
        .verify(&card, &url)
        .await?;
    let verified = !reports.is_empty() && reports.iter().all(|report| report.ok);
    let mut out = std::io::stdout();
    if context.json {
        write_json(
            &mut out,
            &serde_json::json!({ "url": url, "verified": verified, "signatures": reports }),
        )?;
    } else {
        out.write_all(render_reports(&reports).as_bytes())?;
    }
    out.flush()?;
    if reports.is_empty() {
        bail!("the card at {url} is not signed");
    }
    if !verified {
        let failed = reports.iter().filter(|report| !report.ok).count();
        bail!(
            "{failed} of {} signatures of the card at {url} do not verify",
            reports.len()
        );
    }
    Ok(())
}

/// A JWKS from a file or an http(s) URL.
async fn load_jwks(client: &reqwest::Client, source: &str) -> anyhow::Result<JwkSet> {
    let bytes = if source.starts_with("http://") || source.starts_with("https://") {
        signing::fetch_bytes(client, source, signing::JWKS_MAX_BYTES).await?
    } else {
        std::fs::read(source).with_context(|| format!("--jwks: cannot read {source}"))?
    };
    signing::parse_jwks(&bytes).map_err(|e| anyhow::anyhow!("--jwks {source}: {e}"))
}

/// One line per signature: `signature N: kid K, alg A: ok` or `...: FAILED: why`.
fn render_reports(reports: &[signing::SignatureReport]) -> String {
    let mut out = String::new();
    for (index, report) in reports.iter().enumerate() {
        let kid = report.kid.as_deref().unwrap_or("(none)");
        let alg = report.alg.as_deref().unwrap_or("(none)");
        let outcome = match &report.error {
            None => "ok".to_owned(),
            Some(error) => format!("FAILED: {error}"),
        };
        out.push_str(&format!(
            "signature {}: kid {kid}, alg {alg}: {outcome}\n",
            index + 1
        ));
    }
    out
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
