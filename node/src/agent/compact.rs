//! Compaction: when the conversation nears the model's context window, the model summarizes
//! its older part and the summary takes that part's place.
//!
//! The loop calls [`compact_if_needed`] before every model call. It estimates the size of the
//! next request: the tokens the provider reported for the last call (its whole request and its
//! answer, see [`record_usage`]) plus one token per four bytes of what was appended since.
//! Without a usable measurement (a new or restored conversation, a provider that reports no
//! usage, or right after a compaction) the whole request (system prompt, tool definitions and
//! messages) is estimated at four bytes a token. Images count [`IMAGE_TOKENS`] each.
//!
//! When the estimate reaches `compact_at × context_window`, the conversation is cut in two:
//!
//! - the recent part is kept verbatim: the longest tail that fits in a quarter of that
//!   threshold, or, when not even the newest exchange fits, the shortest tail there is. A tail
//!   starts at a model answer or at a user message without tool results, never between a tool
//!   call (in a model answer) and its result (in the next message), so no call loses its result;
//! - the older part, at least a user message and the model's answer to it, goes to the same
//!   model as a transcript (long tool inputs and results clipped in the middle), with the same
//!   system prompt, no tools offered (so the model cannot call any) and the instruction to
//!   summarize goals, decisions, files touched, findings and open work.
//!
//! The summary, marked as a summary of the earlier conversation, becomes the first user message
//! (merged into the first kept message when that is a user message, so user and model still
//! take turns). With nothing old enough to summarize, nothing happens and the call goes ahead.
//!
//! The summary call's tokens are added to the session's usage, but the call is not a turn: it
//! does not count in `model_calls`, so compacting never brings a run closer to its `max_turns`.
//! [`WindowUse::compactions`] counts compactions instead.
//!
//! Hooks see a compaction: `PreCompact` (trigger `auto`, the estimate before) just before the
//! summary request, and `PostCompact` (the estimates before and after) once the summary took its
//! place. Neither can stop it; their errors are only logged. The additional context of a
//! `PreCompact` hook joins the summary instruction as extra guidance.
//!
//! A failed summary call fails the run with the provider's error, whatever the error, and leaves
//! the conversation as it was. Going on uncompacted would not help: the summary request is
//! smaller than the request it was to make room for, so a model that finds the summary request
//! too long refuses the next one too, and a service that is down or refuses the key fails it
//! the same way. An empty summary is refused as an unreadable answer rather than dropping the
//! older part unsummarized.

use std::borrow::Cow;

use tokio_util::sync::CancellationToken;

use super::session::{AgentError, AgentSettings, Session, WindowUse};
use crate::conversation::{Block, ChatMessage, ModelRequest, ResultPart, Speaker, ToolSpec, Usage};
use crate::hooks::{HookOutcome, Payload, RunHooks};
use crate::provider::{Provider, ProviderError};

/// Bytes of text per token in the estimate of what the provider has not counted.
const BYTES_PER_TOKEN: u64 = 4;
/// Tokens counted for an image (about what a large image costs).
const IMAGE_TOKENS: u64 = 1_600;
/// The share of the threshold the messages kept verbatim may take.
const KEEP_SHARE: f64 = 0.25;
/// The fewest messages a compaction summarizes: a user message and the model's answer.
const MIN_SUMMARIZED: usize = 2;
/// Characters of one tool input or result shown to the summarizer; longer ones lose their middle.
const CLIP_CHARS: usize = 8_000;

/// Opens the summary message that replaces the older part of the conversation.
const SUMMARY_HEADER: &str = "[Summary of the earlier conversation] The earlier part of this \
conversation was compacted to save context: its messages were replaced by this summary. \
Continue the work from it and from the messages that follow.";

/// Asks the model for the summary, after the transcript.
const SUMMARY_INSTRUCTION: &str = "The transcript above is the earlier part of this \
conversation. It is about to be removed from your context to make room, and your summary will \
take its place, so write what you need to carry on the work without it:\n\
1. The user's goals and requests, with their exact constraints and wording where it matters.\n\
2. Decisions made, and why.\n\
3. Files read, created or changed (with their paths), and what changed in them.\n\
4. Findings, errors met and how they were resolved.\n\
5. Work still open, and the next step.\n\
Be concise but complete. Answer with the summary only; no tools are available.";

/// The trigger of compactions the loop starts on its own (Claude Code's value).
const TRIGGER: &str = "auto";

/// Introduces the guidance `PreCompact` hooks added to the summary instruction.
const GUIDANCE_HEADER: &str = "\n\nAdditional guidance for this summary:";

/// What [`compact_if_needed`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compaction {
    /// Nothing: the next request fits, or there is nothing to summarize.
    Skipped,
    /// The older part was summarized.
    Compacted,
    /// The request's fixed part (`fixed` tokens: system prompt and tools) alone reaches the
    /// `threshold`: the model's context window is too small for this role's tools. Reported
    /// once per session; compaction is off after it.
    WindowTooSmall { fixed: u64, threshold: u64 },
}

/// Records the usage of a model call whose answer is the conversation's last message.
pub(crate) fn record_usage(session: &mut Session, usage: Usage) {
    session.window.tokens = usage.input + usage.cache_read + usage.cache_write + usage.output;
    session.window.messages = session.messages.len();
}

/// The estimated size of the next request, in tokens (see the module documentation).
pub(crate) fn estimate(settings: &AgentSettings, tools: &[ToolSpec], session: &Session) -> u64 {
    let measured = session.window.messages;
    if session.window.tokens > 0 && measured > 0 && measured <= session.messages.len() {
        return session.window.tokens + messages_tokens(&session.messages[measured..]);
    }
    fixed_tokens(settings, tools) + messages_tokens(&session.messages)
}

/// The estimated size of what every request holds whatever the conversation: the system
/// prompt and the tool definitions.
fn fixed_tokens(settings: &AgentSettings, tools: &[ToolSpec]) -> u64 {
    let tools: u64 = tools
        .iter()
        .map(|spec| {
            text_tokens(&spec.name)
                + text_tokens(&spec.description)
                + json_tokens(&spec.input_schema)
        })
        .sum();
    text_tokens(&settings.system) + tools
}

/// The size, in tokens, at which the conversation is compacted; 0 turns compaction off.
fn threshold(settings: &AgentSettings) -> u64 {
    if settings.context_window == 0 || settings.compact_at.is_nan() || settings.compact_at <= 0.0 {
        return 0;
    }
    (settings.context_window as f64 * settings.compact_at) as u64
}

/// Compacts the conversation if the next request would reach the threshold; tells whether it did.
///
/// With `hooks`, `PreCompact` is dispatched before the summary request and `PostCompact` after
/// the compaction (trigger `auto`); neither blocks.
///
/// The summary call's usage is added to `session.usage`; `session.model_calls` is left alone,
/// so a compaction never counts against the run's `max_turns`.
///
/// # Errors
/// The summary call's error ([`AgentError::Provider`]), an empty summary (a
/// [`ProviderError::Protocol`]), or [`AgentError::Canceled`]; the conversation is then unchanged.
///
/// # Cancel safety
/// Cancel safe: the conversation changes only after the summary has arrived.
pub(crate) async fn compact_if_needed(
    provider: &dyn Provider,
    settings: &AgentSettings,
    tools: &[ToolSpec],
    session: &mut Session,
    cancel: &CancellationToken,
    hooks: Option<&RunHooks>,
) -> Result<Compaction, AgentError> {
    let threshold = threshold(settings);
    if threshold == 0 || session.window.too_small {
        return Ok(Compaction::Skipped);
    }
    let before = estimate(settings, tools, session);
    if before < threshold {
        return Ok(Compaction::Skipped);
    }
    // Summarizing shrinks only the conversation: when the rest alone reaches the threshold,
    // every turn would compact again without ever getting under it.
    let fixed = fixed_tokens(settings, tools);
    if fixed >= threshold {
        session.window.too_small = true;
        return Ok(Compaction::WindowTooSmall { fixed, threshold });
    }
    let keep_budget = (threshold as f64 * KEEP_SHARE) as u64;
    let Some(cut) = cut(&session.messages, keep_budget) else {
        return Ok(Compaction::Skipped);
    };
    let mut guidance = Vec::new();
    if let Some(hooks) = hooks {
        let outcome = hooks.dispatch(Payload::pre_compact(TRIGGER, before)).await;
        log_ignored_stop("PreCompact", &outcome);
        guidance = outcome.additional_context;
    }
    let mut instruction = SUMMARY_INSTRUCTION.to_owned();
    if !guidance.is_empty() {
        instruction.push_str(GUIDANCE_HEADER);
        for text in &guidance {
            instruction.push('\n');
            instruction.push_str(text.trim());
        }
    }
    let request = ModelRequest {
        model: settings.model.clone(),
        system: settings.system.clone(),
        messages: vec![ChatMessage {
            speaker: Speaker::User,
            content: vec![Block::Text {
                text: format!(
                    "<transcript>\n{}</transcript>\n\n{instruction}",
                    transcript(&session.messages[..cut])
                ),
            }],
        }],
        tools: Vec::new(),
        max_tokens: settings.max_tokens,
    };
    let response = tokio::select! {
        response = crate::provider::complete(provider, &request, &|_| {}) => response,
        () = cancel.cancelled() => return Err(AgentError::Canceled),
    };
    let response = match response {
        Ok(response) => response,
        Err(ProviderError::Canceled) => return Err(AgentError::Canceled),
        Err(error) => return Err(AgentError::Provider(error)),
    };
    match response.usage {
        Some(usage) => session.usage += usage,
        None => session.unreported_calls += 1,
    }
    let summary: String = response
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let summary = summary.trim();
    if summary.is_empty() {
        return Err(AgentError::Provider(ProviderError::Protocol {
            provider: provider.name().to_owned(),
            message: "the model gave an empty summary of the earlier conversation".to_owned(),
        }));
    }
    let block = Block::Text {
        text: format!("{SUMMARY_HEADER}\n\n<summary>\n{summary}\n</summary>"),
    };
    let summarized = cut;
    session.messages.drain(..cut);
    match session.messages.first_mut() {
        // A cut at a user message: it has no tool results, so text may come first.
        Some(first) if first.speaker == Speaker::User => first.content.insert(0, block),
        _ => session.messages.insert(
            0,
            ChatMessage {
                speaker: Speaker::User,
                content: vec![block],
            },
        ),
    }
    session.window = WindowUse {
        compactions: session.window.compactions + 1,
        too_small: session.window.too_small,
        ..WindowUse::default()
    };
    let after = estimate(settings, tools, session);
    tracing::info!(
        estimate = before,
        threshold,
        summarized,
        kept = session.messages.len(),
        after,
        "compacted the conversation"
    );
    if let Some(hooks) = hooks {
        let outcome = hooks
            .dispatch(Payload::post_compact(TRIGGER, before, after))
            .await;
        log_ignored_stop("PostCompact", &outcome);
    }
    Ok(Compaction::Compacted)
}

/// Logs a `continue: false` from a compaction hook, which stops nothing here. Hook errors (a
/// block among them: these events cannot be blocked) are logged by the hook dispatcher.
fn log_ignored_stop(event: &str, outcome: &HookOutcome) {
    if let Some(reason) = &outcome.stop {
        tracing::warn!(event, %reason, "a compaction hook cannot stop the run; ignored");
    }
}

/// Where to cut `messages`: the index of the first message kept, or `None` if there is nothing
/// old enough to summarize.
///
/// A cut may fall before a model answer or before a user message without tool results; never
/// before a message with tool results, which would part them from their calls. It is the
/// earliest such place whose tail fits in `keep_budget` tokens, or the latest one if none does,
/// with at least [`MIN_SUMMARIZED`] messages before it.
fn cut(messages: &[ChatMessage], keep_budget: u64) -> Option<usize> {
    let mut tail = 0;
    let mut best = None;
    for index in (MIN_SUMMARIZED..messages.len()).rev() {
        let message = &messages[index];
        tail += message_tokens(message);
        let allowed = message.speaker == Speaker::Assistant || !has_tool_results(message);
        if !allowed {
            continue;
        }
        if best.is_none() || tail <= keep_budget {
            best = Some(index);
        }
        if tail > keep_budget {
            break;
        }
    }
    best
}

fn has_tool_results(message: &ChatMessage) -> bool {
    message
        .content
        .iter()
        .any(|b| matches!(b, Block::ToolResult { .. }))
}

fn text_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(BYTES_PER_TOKEN)
}

fn json_tokens(value: &serde_json::Value) -> u64 {
    /// Counts the bytes of the JSON text without keeping it.
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // A `Value` always serializes, and `Count` never fails.
    let _ = serde_json::to_writer(&mut count, value);
    count.0.div_ceil(BYTES_PER_TOKEN)
}

fn message_tokens(message: &ChatMessage) -> u64 {
    message
        .content
        .iter()
        .map(|block| match block {
            Block::Text { text } => text_tokens(text),
            Block::Image { .. } => IMAGE_TOKENS,
            Block::ToolUse { id, name, input } => {
                text_tokens(id) + text_tokens(name) + json_tokens(input)
            }
            Block::ToolResult { id, content, .. } => {
                text_tokens(id)
                    + content
                        .iter()
                        .map(|part| match part {
                            ResultPart::Text { text } => text_tokens(text),
                            ResultPart::Image { .. } => IMAGE_TOKENS,
                        })
                        .sum::<u64>()
            }
        })
        .sum()
}

fn messages_tokens(messages: &[ChatMessage]) -> u64 {
    messages.iter().map(message_tokens).sum()
}

/// The messages as plain text, for the summarizer: no tool blocks, so no tools are needed.
fn transcript(messages: &[ChatMessage]) -> String {
    let mut out = String::new();
    for message in messages {
        out.push_str(match message.speaker {
            Speaker::User => "[user]\n",
            Speaker::Assistant => "[assistant]\n",
        });
        for block in &message.content {
            match block {
                Block::Text { text } => out.push_str(text),
                Block::Image { .. } => out.push_str("[an image]"),
                Block::ToolUse { id, name, input } => {
                    out.push_str(&format!(
                        "[tool call {name} ({id})] {}",
                        clip(&input.to_string())
                    ));
                }
                Block::ToolResult {
                    id,
                    content,
                    is_error,
                } => {
                    let text: Vec<&str> = content
                        .iter()
                        .map(|part| match part {
                            ResultPart::Text { text } => text.as_str(),
                            ResultPart::Image { .. } => "[an image]",
                        })
                        .collect();
                    let error = if *is_error { ", an error" } else { "" };
                    out.push_str(&format!(
                        "[tool result ({id}){error}] {}",
                        clip(&text.join("\n"))
                    ));
                }
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// `text`, or its beginning and end when it is longer than [`CLIP_CHARS`].
fn clip(text: &str) -> Cow<'_, str> {
    let chars = text.chars().count();
    if chars <= CLIP_CHARS {
        return Cow::Borrowed(text);
    }
    let half = CLIP_CHARS / 2;
    let at = |n: usize| text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
    Cow::Owned(format!(
        "{}\n[... {} characters left out ...]\n{}",
        &text[..at(half)],
        chars - 2 * half,
        &text[at(chars - half)..]
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};
    use std::sync::Arc;

    use async_trait::async_trait;
    use mew_cards::PermissionMode;
    use mew_tests::model::{ErrorKind, ScriptedModel, Step, ToolCall, Usage as Tokens};
    use serde_json::{Value, json};

    use super::*;
    use crate::agent::model_loop::{Agent, Observer, Outcome, Resume};
    use crate::config::PermissionsConfig;
    use crate::permission::PermissionPolicy;
    use crate::provider::anthropic::AnthropicProvider;
    use crate::provider::{HttpSettings, KeySource, ProviderSetup};
    use crate::tools::registry::ToolRegistry;
    use crate::tools::{Category, Tool, ToolContext, ToolOutput};

    const SYSTEM: &str = "You are a test agent.";

    /// A read-only tool answering `size` bytes (300 when not given).
    struct Echo;

    #[async_trait]
    impl Tool for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn description(&self) -> String {
            "answers size bytes".into()
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object", "properties": {"size": {"type": "integer"}}})
        }
        fn category(&self) -> Category {
            Category::Read
        }
        async fn call(&self, input: Value, _: &ToolContext) -> ToolOutput {
            let size = input["size"].as_u64().unwrap_or(300);
            ToolOutput::text("r".repeat(size as usize))
        }
    }

    struct Quiet;

    impl Observer for Quiet {
        fn text(&self, _: &str) {}
        fn tool_started(&self, _: &str, _: &str, _: &Value) {}
        fn tool_finished(&self, _: &str, _: &str, _: &ToolOutput) {}
    }

    /// An agent on the real Anthropic provider, with a window of 1000 tokens compacted at 80%:
    /// compaction starts at 800 tokens and keeps a tail of at most 200.
    fn agent(model: &ScriptedModel) -> Agent {
        let setup = ProviderSetup {
            name: "scripted".into(),
            base_url: model.base_url().to_owned(),
            api_key: Some("test-key".into()),
            key_source: KeySource::Env {
                var: "ANTHROPIC_API_KEY".into(),
                named_by: None,
            },
            models: BTreeMap::new(),
            http: HttpSettings {
                max_retries: 0,
                ..HttpSettings::default()
            },
        };
        let dir = std::env::temp_dir();
        let permissions = PermissionPolicy::new(&PermissionsConfig::default(), &dir, None).unwrap();
        let mut tools = ToolRegistry::new();
        tools.register(Arc::new(Echo));
        Agent {
            provider: Arc::new(AnthropicProvider::new(setup).unwrap()),
            tools,
            tool_source: None,
            permissions: Arc::new(permissions),
            settings: AgentSettings {
                system: SYSTEM.into(),
                model: "test-model".into(),
                max_turns: 10,
                max_tokens: 1024,
                context_window: 1000,
                compact_at: 0.8,
                unknown_tool_limit: 3,
                mode: PermissionMode::BypassPermissions,
            },
            context: ToolContext {
                cwd: dir,
                env: Arc::default(),
                cancel: CancellationToken::new(),
                task_id: None,
                depth: 0,
                scope: None,
                call_id: None,
                news: None,
                sampler: None,
                can_ask_user: false,
                principal: None,
            },
        }
    }

    fn session(text: &str) -> Session {
        Session {
            messages: vec![ChatMessage::user(text)],
            ..Session::default()
        }
    }

    fn echo(id: &str) -> Step {
        Step::tool_call(id, "echo", json!({}))
    }

    fn tool_use(id: &str) -> Block {
        Block::ToolUse {
            id: id.into(),
            name: "echo".into(),
            input: json!({}),
        }
    }

    fn tool_result(id: &str, text: &str) -> Block {
        Block::ToolResult {
            id: id.into(),
            content: vec![ResultPart::Text { text: text.into() }],
            is_error: false,
        }
    }

    fn message(speaker: Speaker, content: Vec<Block>) -> ChatMessage {
        ChatMessage { speaker, content }
    }

    /// The request's messages, as JSON.
    fn messages(request: &mew_tests::model::Recorded) -> Vec<Value> {
        request.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Checks what a compacted conversation must be: it starts with a user message, user and
    /// model take turns, and every tool call has its result in the next message and no other.
    fn assert_well_formed(messages: &[ChatMessage]) {
        assert_eq!(messages[0].speaker, Speaker::User, "{messages:?}");
        for pair in messages.windows(2) {
            assert_ne!(pair[0].speaker, pair[1].speaker, "{messages:?}");
        }
        for (i, m) in messages.iter().enumerate() {
            let calls: HashSet<&str> = m.tool_uses().map(|(id, _, _)| id).collect();
            let results: HashSet<&str> = messages
                .get(i + 1)
                .map(|next| {
                    next.content
                        .iter()
                        .filter_map(|b| match b {
                            Block::ToolResult { id, .. } => Some(id.as_str()),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            if m.speaker == Speaker::Assistant {
                assert_eq!(calls, results, "message {i} of {messages:?}");
            } else if i == 0 {
                assert!(!has_tool_results(m), "{messages:?}");
            }
        }
    }

    #[tokio::test]
    async fn below_the_threshold_nothing_is_summarized() {
        let model = ScriptedModel::start(vec![
            echo("c1").with_usage(Tokens::new(600, 10)),
            Step::text("done")
                .expect_tool_results(["c1"])
                .expect_tools_include(["echo"])
                .with_usage(Tokens::new(700, 5)),
        ])
        .unwrap();
        let mut agent = agent(&model);
        let mut s = session("task");
        let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
        assert_eq!(outcome, Outcome::Answered("done".into()));
        model.assert_done();
        assert_eq!(model.requests().len(), 2);
        assert_eq!(s.messages.len(), 4);
        assert_eq!(s.messages[0].text(), "task");
        assert_eq!(s.window.compactions, 0);
        // The estimate before the second call: the first call's 610 tokens and the result since.
        assert_eq!(s.window.tokens, 705);
        assert_eq!(s.window.messages, 4);
    }

    /// Records warnings.
    #[derive(Default)]
    struct Warnings(std::sync::Mutex<Vec<String>>);

    impl Observer for Warnings {
        fn text(&self, _: &str) {}
        fn tool_started(&self, _: &str, _: &str, _: &Value) {}
        fn tool_finished(&self, _: &str, _: &str, _: &ToolOutput) {}
        fn warning(&self, text: &str) {
            self.0.lock().unwrap().push(text.to_owned());
        }
    }

    #[tokio::test]
    async fn a_window_too_small_for_the_tools_is_said_once_and_never_compacted() {
        // Every call comes back over the threshold; a system prompt of about 900 tokens alone
        // is past it, so no summary could help: three turns, no summary request.
        let model = ScriptedModel::start(vec![
            echo("c1").with_usage(Tokens::new(950, 10)),
            echo("c2")
                .expect_tool_results(["c1"])
                .with_usage(Tokens::new(960, 10)),
            Step::text("done")
                .expect_tool_results(["c2"])
                .with_usage(Tokens::new(970, 5)),
        ])
        .unwrap();
        let mut agent = agent(&model);
        agent.settings.system = "x".repeat(3600);
        let mut s = session("task");
        let warnings = Warnings::default();
        let outcome = agent
            .run(&mut s, Resume::Fresh, "", &warnings)
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::Answered("done".into()));
        model.assert_done();
        assert_eq!(s.window.compactions, 0);
        assert!(s.window.too_small);
        let warnings = warnings.0.lock().unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("context window (1000 tokens) is too small"),
            "{}",
            warnings[0]
        );
    }

    #[tokio::test]
    async fn above_the_threshold_the_older_part_is_summarized_and_the_recent_part_kept() {
        let model = ScriptedModel::start(vec![
            echo("c1").with_usage(Tokens::new(100, 10)),
            echo("c2").with_usage(Tokens::new(300, 10)),
            // 800 tokens with its answer: the next request would reach the threshold.
            echo("c3").with_usage(Tokens::new(780, 20)),
            Step::text("SUMMARY: the user wants three echoes; c1 is done.")
                .expect_last_user("[tool call echo (c1)]")
                .with_usage(Tokens::new(50, 20)),
            Step::text("finished")
                .expect_tool_results(["c2", "c3"])
                .expect_tools_include(["echo"])
                .with_usage(Tokens::new(20, 5)),
        ])
        .unwrap();
        let mut agent = agent(&model);
        let mut s = session("task: echo three times");
        let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
        assert_eq!(outcome, Outcome::Answered("finished".into()));
        model.assert_done();
        let requests = model.requests();
        assert_eq!(requests.len(), 5);

        // The summary request: the same system prompt and model, no tools, one user message
        // with the transcript of the older part only.
        let summary = &requests[3];
        assert_eq!(summary.system_text(), SYSTEM);
        assert_eq!(summary.model(), "test-model");
        assert!(summary.tool_names().is_empty());
        assert!(summary.body.get("tools").is_none(), "{}", summary.body);
        let asked = messages(summary);
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0]["role"], "user");
        let text = summary.last_user_text();
        assert!(text.contains("[user]\ntask: echo three times"), "{text}");
        assert!(text.contains("[tool result (c1)] rrr"), "{text}");
        assert!(
            !text.contains("(c2)"),
            "the recent part is not summarized: {text}"
        );
        assert!(text.contains("Work still open"), "{text}");

        // The next real request: the summary first, then the recent messages verbatim.
        let next = &requests[4];
        let sent = messages(next);
        assert_eq!(sent.len(), 5, "{sent:?}");
        assert_eq!(sent[0]["role"], "user");
        let first = sent[0].to_string();
        assert!(
            first.contains("[Summary of the earlier conversation]"),
            "{first}"
        );
        assert!(
            first.contains("SUMMARY: the user wants three echoes"),
            "{first}"
        );
        assert_eq!(sent[1]["content"][0]["id"], "c2");
        assert_eq!(sent[3]["content"][0]["id"], "c3");
        assert!(!next.body.to_string().contains("\"c1\""));
        assert_eq!(next.system_text(), SYSTEM);

        // The session: compacted once, the summary's tokens counted, but not as a turn.
        assert_eq!(s.window.compactions, 1);
        assert_eq!(s.model_calls, 4);
        assert_eq!(s.usage.input, 100 + 300 + 780 + 50 + 20);
        assert_eq!(s.usage.output, 10 + 10 + 20 + 20 + 5);
        assert_eq!(s.messages.len(), 6);
        assert_well_formed(&s.messages);
        assert_eq!(s.messages[5].text(), "finished");
    }

    #[tokio::test]
    async fn a_call_keeps_its_result_even_when_the_newest_exchange_is_too_big_to_keep() {
        let model = ScriptedModel::start(vec![
            echo("c1").with_usage(Tokens::new(100, 10)),
            // Two parallel calls, one with a result far over the 200 tokens kept verbatim.
            Step::tool_calls(vec![
                ToolCall::new("c2", "echo", json!({"size": 2000})),
                ToolCall::new("c3", "echo", json!({"size": 10})),
            ])
            .with_usage(Tokens::new(300, 10)),
            Step::text("summary of c1"),
            // The Anthropic server refuses a call without its result, or a stray result.
            Step::text("done").expect_tool_results(["c2", "c3"]),
        ])
        .unwrap();
        let mut agent = agent(&model);
        let mut s = session("task");
        let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
        assert_eq!(outcome, Outcome::Answered("done".into()));
        model.assert_done();
        assert_eq!(s.window.compactions, 1);
        // The summary, then the calls and their results, then the answer.
        assert_eq!(s.messages.len(), 4);
        assert_well_formed(&s.messages);
        let sent = messages(&model.requests()[3]);
        assert_eq!(sent.len(), 3, "{sent:?}");
        assert!(sent[0].to_string().contains("summary of c1"));
    }

    #[test]
    fn a_cut_never_parts_a_call_from_its_result() {
        // Plain user turns, single and parallel calls, and results of every size.
        let messages = vec![
            ChatMessage::user("first task"),
            message(Speaker::Assistant, vec![tool_use("a"), tool_use("b")]),
            message(
                Speaker::User,
                vec![tool_result("a", &"x".repeat(400)), tool_result("b", "y")],
            ),
            ChatMessage::assistant("first answer"),
            ChatMessage::user("second task"),
            message(Speaker::Assistant, vec![tool_use("c")]),
            message(Speaker::User, vec![tool_result("c", &"z".repeat(900))]),
            message(
                Speaker::Assistant,
                vec![
                    Block::Text {
                        text: "two more".into(),
                    },
                    tool_use("d"),
                    tool_use("e"),
                ],
            ),
            message(
                Speaker::User,
                vec![tool_result("d", "d"), tool_result("e", &"w".repeat(100))],
            ),
        ];
        let mut cuts = HashSet::new();
        for budget in 0..1_000 {
            let Some(at) = cut(&messages, budget) else {
                panic!("there is always something to summarize here (budget {budget})");
            };
            cuts.insert(at);
            assert!(at >= MIN_SUMMARIZED);
            let kept = &messages[at..];
            assert!(
                kept[0].speaker == Speaker::Assistant || !has_tool_results(&kept[0]),
                "budget {budget}: cut at {at}"
            );
            // The kept part behind a summary message is a well-formed conversation.
            let mut compacted = vec![ChatMessage::user("summary")];
            if kept[0].speaker == Speaker::User {
                compacted[0].content.extend(kept[0].content.clone());
                compacted.extend_from_slice(&kept[1..]);
            } else {
                compacted.extend_from_slice(kept);
            }
            assert_well_formed(&compacted);
            // The longest tail that fits, or the shortest there is.
            let tail = messages_tokens(kept);
            assert!(tail <= budget || at == 7, "budget {budget}: cut at {at}");
        }
        assert_eq!(
            cuts,
            HashSet::from([3, 4, 5, 7]),
            "only model answers and plain user turns"
        );
        // Nothing to summarize: a single exchange, or only results after the first answer.
        assert_eq!(cut(&messages[..2], 0), None);
        assert_eq!(cut(&messages[..3], 0), None);
    }

    #[tokio::test]
    async fn nothing_old_enough_means_no_summary() {
        // Over the threshold at once, but the conversation is one task, one call and its result.
        let model = ScriptedModel::start(vec![
            echo("c1").with_usage(Tokens::new(900, 10)),
            Step::text("done")
                .expect_tool_results(["c1"])
                .expect_tools_include(["echo"]),
        ])
        .unwrap();
        let mut agent = agent(&model);
        let mut s = session("task");
        let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
        assert_eq!(outcome, Outcome::Answered("done".into()));
        model.assert_done();
        assert_eq!(s.window.compactions, 0);
        assert_eq!(s.messages.len(), 4);
    }

    #[tokio::test]
    async fn a_restored_conversation_is_estimated_from_its_text_and_the_summary_joins_the_new_turn()
    {
        // Restored from history: no call measured it; its text alone is over the threshold.
        let model = ScriptedModel::start(vec![
            Step::text("they asked for a long answer and got it")
                .expect_last_user("first question"),
            Step::text("second answer").expect_last_user("second question"),
        ])
        .unwrap();
        let mut agent = agent(&model);
        let mut s = Session {
            messages: vec![
                ChatMessage::user("first question"),
                ChatMessage::assistant("a".repeat(4_000)),
                ChatMessage::user("second question"),
            ],
            ..Session::default()
        };
        assert!(estimate(&agent.settings, &agent.tools.specs(), &s) > 1_000);
        let outcome = agent.run(&mut s, Resume::Fresh, "", &Quiet).await.unwrap();
        assert_eq!(outcome, Outcome::Answered("second answer".into()));
        model.assert_done();
        // The summary and the new question share the first (user) message, summary first.
        assert_eq!(s.messages.len(), 2);
        assert_well_formed(&s.messages);
        let first = &s.messages[0];
        assert_eq!(first.content.len(), 2);
        assert!(
            first
                .text()
                .starts_with("[Summary of the earlier conversation]")
        );
        assert!(first.text().contains("they asked for a long answer"));
        assert!(first.text().ends_with("second question"));
        let sent = messages(&model.requests()[1]);
        assert_eq!(sent.len(), 1, "{sent:?}");
    }

    #[tokio::test]
    async fn a_failed_summary_fails_the_run_and_leaves_the_conversation() {
        let model = ScriptedModel::start(vec![
            echo("c1").with_usage(Tokens::new(100, 10)),
            echo("c2").with_usage(Tokens::new(900, 10)),
            Step::error(400, ErrorKind::InvalidRequestError, "prompt is too long"),
        ])
        .unwrap();
        let mut agent = agent(&model);
        let mut s = session("task");
        match agent.run(&mut s, Resume::Fresh, "", &Quiet).await {
            Err(AgentError::Provider(ProviderError::BadRequest { message, .. })) => {
                assert!(message.contains("prompt is too long"), "{message}");
            }
            other => panic!("expected the summary call's error, got {other:?}"),
        }
        model.assert_done();
        assert_eq!(s.messages.len(), 5);
        assert_eq!(s.messages[0].text(), "task");
        assert_eq!(s.window.compactions, 0);
        assert_eq!(s.model_calls, 2);
    }

    #[tokio::test]
    async fn an_empty_summary_is_an_error() {
        let model = ScriptedModel::start(vec![
            echo("c1").with_usage(Tokens::new(100, 10)),
            echo("c2").with_usage(Tokens::new(900, 10)),
            Step::text("  ").with_usage(Tokens::new(40, 1)),
        ])
        .unwrap();
        let mut agent = agent(&model);
        let mut s = session("task");
        match agent.run(&mut s, Resume::Fresh, "", &Quiet).await {
            Err(AgentError::Provider(ProviderError::Protocol { message, .. })) => {
                assert!(message.contains("empty summary"), "{message}");
            }
            other => panic!("expected an empty summary to fail, got {other:?}"),
        }
        model.assert_done();
        assert_eq!(s.messages.len(), 5);
        assert_eq!(
            s.usage.input,
            100 + 900 + 40,
            "the summary call's tokens still count"
        );
    }

    #[test]
    fn the_estimate_adds_what_came_since_the_last_measured_call() {
        let mut s = session("task");
        s.messages
            .push(message(Speaker::Assistant, vec![tool_use("c1")]));
        record_usage(
            &mut s,
            Usage {
                input: 100,
                output: 10,
                cache_read: 1_000,
                cache_write: 50,
            },
        );
        assert_eq!(s.window.messages, 2);
        let settings = AgentSettings {
            system: "s".repeat(400),
            model: "m".into(),
            max_turns: 1,
            max_tokens: 1,
            context_window: 1_000,
            compact_at: 0.5,
            unknown_tool_limit: 1,
            mode: PermissionMode::Default,
        };
        assert_eq!(estimate(&settings, &[], &s), 1_160);
        s.messages.push(message(
            Speaker::User,
            vec![tool_result("c1", &"r".repeat(397))],
        ));
        // 397 bytes are 100 tokens (rounded up), and the id one more.
        assert_eq!(estimate(&settings, &[], &s), 1_261);
        // Unmeasured (or measured as nothing): the whole request from its text.
        s.window = WindowUse::default();
        let whole = 100 + text_tokens("task") + 3 + 101;
        assert_eq!(estimate(&settings, &[], &s), whole);
        assert_eq!(threshold(&settings), 500);
        let off = AgentSettings {
            context_window: 0,
            ..settings
        };
        assert_eq!(threshold(&off), 0);
    }

    #[test]
    fn a_session_saved_before_compaction_existed_still_loads() {
        let saved = json!({
            "messages": [{"speaker": "user", "content": [{"type": "text", "text": "hi"}]}],
            "usage": {"input": 1, "output": 2, "cache_read": 0, "cache_write": 0},
            "tool_calls": 0,
            "model_calls": 1
        });
        let s: Session = serde_json::from_value(saved).unwrap();
        assert_eq!(s.window, WindowUse::default());
        let round: Session = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(round, s);
    }

    #[test]
    fn long_tool_text_loses_its_middle_in_the_transcript() {
        let long = format!("{}{}", "é".repeat(CLIP_CHARS), "z".repeat(10));
        let clipped = clip(&long);
        assert!(clipped.starts_with(&"é".repeat(CLIP_CHARS / 2)));
        assert!(clipped.ends_with(&"z".repeat(10)));
        assert!(clipped.contains("[... 10 characters left out ...]"));
        assert_eq!(clip("short"), "short");
        let text = transcript(&[
            ChatMessage::user("do it"),
            message(
                Speaker::Assistant,
                vec![Block::Image {
                    media_type: "image/png".into(),
                    data: "AAAA".into(),
                }],
            ),
        ]);
        assert_eq!(text, "[user]\ndo it\n\n[assistant]\n[an image]\n\n");
    }
}
