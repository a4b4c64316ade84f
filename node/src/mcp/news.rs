//! What an MCP server says and asks while a call runs: `notifications/progress` for the
//! call's progress token, and `notifications/message` (log messages) while calls to it run,
//! become news of the running calls (the task's progress notes); log messages also go to the
//! node's own log, under the server's name. A model call the server asks for (sampling) is
//! answered by the model of the task whose call is running, and a question it asks the user
//! (elicitation) goes to that call ([`Question`]), which waits for the user's reply.
//!
//! A server decides how much it says, so each call shows at most [`MAX_NOTES`] of them and
//! each at most [`MAX_TEXT`] characters: a chatty server cannot fill a task's history.

// 2026-07-28 deprecates log messages (SEP-2577); servers of 2025-11-25 and before send them.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::tools::{NewsReport, Sampler, ToolContext, ToolNews};

/// The most notes one call shows; one more says the rest were left out.
pub(super) const MAX_NOTES: u32 = 50;
/// The most characters of a message a note carries.
pub(super) const MAX_TEXT: usize = 2000;

/// The running calls of one server that someone follows, by progress token.
#[derive(Default)]
pub(super) struct Followers {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    calls: HashMap<ProgressToken, Follower>,
}

struct Follower {
    call_id: Option<String>,
    tool: String,
    task: Option<mew_cards::TaskId>,
    report: Option<NewsReport>,
    sampler: Option<Sampler>,
    /// Where the server's questions to the user go, when the call may ask one.
    asks: Option<mpsc::Sender<Question>>,
    notes: u32,
}

/// A question a server of 2025-11-25 or before asks the user while a call runs
/// (`elicitation/create`): its parameters, and where the answer (an elicitation result as
/// JSON) goes.
pub(super) struct Question {
    pub(super) elicitation: Value,
    pub(super) reply: oneshot::Sender<Value>,
}

/// Stops following its call when dropped.
pub(super) struct Following<'a> {
    followers: &'a Followers,
    token: ProgressToken,
}

impl Drop for Following<'_> {
    fn drop(&mut self) {
        self.followers.lock().calls.remove(&self.token);
    }
}

impl Followers {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows the call of `tool` (as the model names it) whose request carries `token`, made
    /// in `ctx`, until the guard is dropped; the server's questions to the user go to `asks`.
    pub(super) fn follow(
        &self,
        token: ProgressToken,
        tool: &str,
        ctx: &ToolContext,
        asks: Option<mpsc::Sender<Question>>,
    ) -> Following<'_> {
        let mut inner = self.lock();
        inner.calls.insert(
            token.clone(),
            Follower {
                call_id: ctx.call_id.clone(),
                tool: tool.to_owned(),
                task: ctx.task_id.clone(),
                report: ctx.news.clone(),
                sampler: ctx.sampler.clone(),
                asks,
                notes: 0,
            },
        );
        Following {
            followers: self,
            token,
        }
    }

    /// The server's progress on the call of `params.progress_token`, if it is followed.
    pub(super) fn progress(&self, params: &ProgressNotificationParam) {
        let mut detail = json!({ "progress": params.progress });
        if let Some(total) = params.total {
            detail["total"] = json!(total);
        }
        if let Some(message) = &params.message {
            detail["message"] = Value::String(cut(message));
        }
        let news = {
            let mut inner = self.lock();
            inner
                .calls
                .get_mut(&params.progress_token)
                .and_then(|follower| follower.news("progress", detail))
        };
        if let Some((report, news)) = news {
            report(news);
        }
    }

    /// Who answers the server's model call: the task whose calls to the server are running.
    /// The server's request does not say which call it is for, so when calls of several tasks
    /// run, or none that can sample, it is refused.
    pub(super) fn sampler(&self) -> Result<Sampler, String> {
        let inner = self.lock();
        let first = one_task(&inner)?;
        if first.task.is_none() {
            return Err("the call running on this server is not a task's".to_owned());
        }
        first
            .sampler
            .clone()
            .ok_or_else(|| "the running call's task has no model to ask".to_owned())
    }

    /// Where the server's question to the user goes: the call running on this server, which
    /// may ask its user. As with sampling, the request does not say which call it is for, so
    /// when calls of several tasks run, or none that may ask, it is declined.
    pub(super) fn questioner(&self) -> Result<mpsc::Sender<Question>, String> {
        let inner = self.lock();
        one_task(&inner)?;
        inner
            .calls
            .values()
            .find_map(|follower| follower.asks.clone())
            .ok_or_else(|| "the running call has no user to ask".to_owned())
    }

    /// A log message of the server: the node logs it, and every followed call shows it.
    pub(super) fn log(&self, server: &str, params: &LoggingMessageNotificationParam) {
        let text = match &params.data {
            Value::String(text) => cut(text),
            other => cut(&other.to_string()),
        };
        let logger = params.logger.as_deref().unwrap_or("");
        match params.level {
            LoggingLevel::Debug => tracing::debug!(server, logger, "{text}"),
            LoggingLevel::Info | LoggingLevel::Notice => tracing::info!(server, logger, "{text}"),
            LoggingLevel::Warning => tracing::warn!(server, logger, "{text}"),
            LoggingLevel::Error
            | LoggingLevel::Critical
            | LoggingLevel::Alert
            | LoggingLevel::Emergency => tracing::error!(server, logger, "{text}"),
        }
        let level = serde_json::to_value(params.level).unwrap_or(Value::Null);
        let mut detail = json!({ "level": level, "message": text });
        if let Some(logger) = &params.logger {
            detail["logger"] = Value::String(cut(logger));
        }
        let news: Vec<_> = {
            let mut inner = self.lock();
            inner
                .calls
                .values_mut()
                .filter_map(|follower| follower.news("log", detail.clone()))
                .collect()
        };
        for (report, news) in news {
            report(news);
        }
    }
}

/// A running call, when every running call is of one task (or of none): a server's request
/// does not say which call it is for, so it goes to that task's.
fn one_task(inner: &Inner) -> Result<&Follower, String> {
    let mut running = inner.calls.values();
    let Some(first) = running.next() else {
        return Err("no call is running on this server".to_owned());
    };
    if running.any(|other| other.task != first.task) {
        return Err(
            "calls of several tasks are running on this server, and the request does not say \
             which one it is for"
                .to_owned(),
        );
    }
    Ok(first)
}

impl Follower {
    /// The note to show, counted against the call's limit; the one past the limit says so.
    fn news(&mut self, phase: &'static str, detail: Value) -> Option<(NewsReport, ToolNews)> {
        let report = self.report.clone()?;
        self.notes = self.notes.saturating_add(1);
        let detail = match self.notes {
            n if n <= MAX_NOTES => detail,
            n if n == MAX_NOTES + 1 => json!({
                "message": format!(
                    "the server said more during this call; only its first {MAX_NOTES} \
                     messages are shown"
                )
            }),
            _ => return None,
        };
        Some((
            report,
            ToolNews {
                call_id: self.call_id.clone(),
                tool: self.tool.clone(),
                phase,
                detail,
            },
        ))
    }
}

/// At most [`MAX_TEXT`] characters of `text`, saying how many were left out.
pub(super) fn cut(text: &str) -> String {
    crate::tools::cut_chars(text, MAX_TEXT)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::NumberOrString;

    use super::*;

    /// A call's context whose news is recorded.
    fn recorder(call_id: Option<&str>) -> (ToolContext, Arc<Mutex<Vec<ToolNews>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let mut ctx = crate::tools::test_support::context(std::path::Path::new("/"));
        ctx.call_id = call_id.map(str::to_owned);
        ctx.news = Some(Arc::new(move |news| sink.lock().unwrap().push(news)));
        (ctx, seen)
    }

    fn token(n: i64) -> ProgressToken {
        ProgressToken(NumberOrString::Number(n))
    }

    fn progress(token: ProgressToken, progress: f64, message: &str) -> ProgressNotificationParam {
        let mut params = ProgressNotificationParam::new(token, progress);
        params.total = Some(2.0);
        params.message = Some(message.to_owned());
        params
    }

    #[test]
    fn progress_reaches_its_own_call_and_log_messages_every_followed_call() {
        let followers = Followers::default();
        let (first, first_seen) = recorder(Some("a"));
        let (second, second_seen) = recorder(Some("b"));
        let a = followers.follow(token(1), "mcp__s__one", &first, None);
        let b = followers.follow(token(2), "mcp__s__two", &second, None);
        followers.progress(&progress(token(1), 1.0, "half"));
        followers.progress(&progress(token(3), 1.0, "not ours"));
        followers.log(
            "s",
            &LoggingMessageNotificationParam::new(LoggingLevel::Warning, json!("disk low")),
        );
        let first_seen = first_seen.lock().unwrap().clone();
        assert_eq!(
            first_seen,
            [
                ToolNews {
                    call_id: Some("a".into()),
                    tool: "mcp__s__one".into(),
                    phase: "progress",
                    detail: json!({"progress": 1.0, "total": 2.0, "message": "half"}),
                },
                ToolNews {
                    call_id: Some("a".into()),
                    tool: "mcp__s__one".into(),
                    phase: "log",
                    detail: json!({"level": "warning", "message": "disk low"}),
                },
            ]
        );
        assert_eq!(second_seen.lock().unwrap().len(), 1);
        drop(b);
        drop(a);
        // Nobody follows now: nothing is reported, nothing is kept.
        followers.log(
            "s",
            &LoggingMessageNotificationParam::new(LoggingLevel::Info, json!({"n": 1})),
        );
        assert_eq!(second_seen.lock().unwrap().len(), 1);
        assert!(followers.lock().calls.is_empty());
    }

    #[test]
    fn a_chatty_server_is_cut_off_after_the_limit_with_one_note_saying_so() {
        let followers = Followers::default();
        let (ctx, seen) = recorder(None);
        let _call = followers.follow(token(7), "mcp__s__loud", &ctx, None);
        let long = "x".repeat(MAX_TEXT + 10);
        for n in 0..MAX_NOTES + 20 {
            followers.progress(&progress(token(7), f64::from(n), &long));
        }
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), MAX_NOTES as usize + 1);
        assert_eq!(
            seen[0].detail["message"],
            format!("{}… (10 more characters)", "x".repeat(MAX_TEXT))
        );
        assert!(
            seen[MAX_NOTES as usize].detail["message"]
                .as_str()
                .is_some_and(|m| m.contains("only its first 50")),
            "{:?}",
            seen.last()
        );
    }

    #[tokio::test]
    async fn a_model_call_goes_to_the_one_task_whose_calls_run_and_is_refused_otherwise() {
        let followers = Followers::default();
        let sampler = |answer: &'static str| -> Sampler {
            Arc::new(move |_| {
                Box::pin(async move {
                    Ok(crate::tools::SampleAnswer {
                        text: answer.to_owned(),
                        model: "m".to_owned(),
                        hit_max_tokens: false,
                    })
                })
            })
        };
        let call = |task: Option<&str>, answer: &'static str| {
            let (mut ctx, _) = recorder(None);
            ctx.task_id = task.map(|t| mew_cards::TaskId::from(t.to_owned()));
            ctx.sampler = Some(sampler(answer));
            ctx
        };
        let refused = |followers: &Followers| followers.sampler().err().unwrap_or_default();
        assert!(refused(&followers).contains("no call"));
        let first = call(Some("t1"), "one");
        let a = followers.follow(token(1), "mcp__s__a", &first, None);
        let b = followers.follow(token(2), "mcp__s__b", &call(Some("t1"), "one"), None);
        assert!(followers.sampler().is_ok());
        let c = followers.follow(token(3), "mcp__s__c", &call(Some("t2"), "two"), None);
        assert!(refused(&followers).contains("several tasks"));
        drop((a, b));
        let answer = (followers.sampler().unwrap())(crate::tools::SampleRequest {
            system: None,
            messages: Vec::new(),
            max_tokens: 10,
            model_hints: Vec::new(),
        })
        .await;
        assert_eq!(answer.map(|a| a.text), Ok("two".to_owned()));
        drop(c);
        let _outside = followers.follow(token(4), "mcp__s__d", &call(None, "none"), None);
        assert!(refused(&followers).contains("not a task's"));
    }

    #[tokio::test]
    async fn a_question_goes_to_the_one_task_whose_calls_run_when_it_may_ask() {
        let followers = Followers::default();
        let call = |task: &str| {
            let (mut ctx, _) = recorder(None);
            ctx.task_id = Some(mew_cards::TaskId::from(task.to_owned()));
            ctx
        };
        let refused = |followers: &Followers| followers.questioner().err().unwrap_or_default();
        assert!(refused(&followers).contains("no call"));
        let (asks, mut questions) = mpsc::channel(1);
        let silent = followers.follow(token(1), "mcp__s__a", &call("t1"), None);
        assert!(refused(&followers).contains("no user to ask"));
        let asking = followers.follow(token(2), "mcp__s__b", &call("t1"), Some(asks));
        let (reply, answer) = oneshot::channel();
        followers
            .questioner()
            .unwrap()
            .send(Question {
                elicitation: json!({"message": "name?"}),
                reply,
            })
            .await
            .unwrap();
        let question = questions.recv().await.unwrap();
        assert_eq!(question.elicitation["message"], "name?");
        question.reply.send(json!({"action": "decline"})).unwrap();
        assert_eq!(answer.await.unwrap(), json!({"action": "decline"}));
        let other = followers.follow(token(3), "mcp__s__c", &call("t2"), None);
        assert!(refused(&followers).contains("several tasks"));
        drop((silent, other));
        assert!(followers.questioner().is_ok());
        drop(asking);
        assert!(refused(&followers).contains("no call"));
    }
}
