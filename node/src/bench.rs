//! `mew bench`: a load generator for any A2A agent, reporting throughput and latency percentiles.
//!
//! A request is one send (blocking or streamed to its end), or with `--list` one `ListTasks`
//! page.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mew_cards::{ListTasksRequest, Message, SendMessageRequest};
use mew_transport::{AgentTransport, Binding, CallContext, ClientOptions, RemoteAgent};
use serde::Serialize;
use tokio::sync::Mutex;

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct BenchOptions {
    /// The agent's base URL (where its card is published).
    pub(crate) url: String,
    /// Force a binding instead of the card's first.
    pub(crate) binding: Option<Binding>,
    /// Requests in flight at once.
    pub(crate) concurrency: usize,
    /// Stop after this long (unless `count` comes first).
    pub(crate) duration: Option<Duration>,
    /// Stop after this many requests.
    pub(crate) count: Option<u64>,
    /// Use streaming sends (each stream read to its end).
    pub(crate) streaming: bool,
    /// List tasks instead of sending: the first `ListTasks` page of this size, every request.
    pub(crate) list: Option<i32>,
    /// The text of every message.
    pub(crate) text: String,
    /// Requests sent and discarded first, to warm connections and caches.
    pub(crate) warmup: u64,
    /// Extra trusted roots and a client certificate for HTTPS (`tls:`).
    pub(crate) tls: mew_transport::TlsOptions,
}

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct BenchReport {
    /// The agent's base URL.
    pub(crate) url: String,
    /// The binding used.
    pub(crate) binding: &'static str,
    /// `blocking`, `streaming` or `list`.
    pub(crate) mode: &'static str,
    /// Requests in flight at once.
    pub(crate) concurrency: usize,
    /// Requests that succeeded.
    pub(crate) requests: u64,
    /// Requests that failed.
    pub(crate) errors: u64,
    /// Wall time of the measured part.
    pub(crate) seconds: f64,
    /// Successful requests per second.
    pub(crate) requests_per_second: f64,
    /// Latency percentiles and extremes, in milliseconds.
    pub(crate) latency_ms: Latency,
    /// The first error seen, if any.
    pub(crate) first_error: Option<String>,
}

/// Latency summary, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Latency {
    pub(crate) mean: f64,
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

impl Latency {
    fn of(samples: &mut [Duration]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let at = |q: f64| {
            let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
            ms(samples[index.min(samples.len() - 1)])
        };
        let total: Duration = samples.iter().sum();
        Self {
            mean: ms(total) / samples.len() as f64,
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: ms(samples[samples.len() - 1]),
        }
    }
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} ({} {}, concurrency {})",
            self.url, self.binding, self.mode, self.concurrency
        )?;
        writeln!(
            f,
            "  {} requests in {:.2}s: {:.0} req/s, {} errors",
            self.requests, self.seconds, self.requests_per_second, self.errors
        )?;
        let l = &self.latency_ms;
        write!(
            f,
            "  latency ms: mean {:.2}  p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
            l.mean, l.p50, l.p90, l.p99, l.max
        )?;
        if let Some(error) = &self.first_error {
            write!(f, "\n  first error: {error}")?;
        }
        Ok(())
    }
}

/// One request, timed.
async fn one(agent: &RemoteAgent, options: &BenchOptions) -> Result<Duration, String> {
    let start = Instant::now();
    let ctx = CallContext::anonymous();
    if let Some(page_size) = options.list {
        let request = ListTasksRequest {
            page_size: Some(page_size),
            ..ListTasksRequest::default()
        };
        agent
            .list_tasks(&ctx, request)
            .await
            .map_err(|e| e.to_string())?;
        return Ok(start.elapsed());
    }
    let request = SendMessageRequest::new(Message::user_text(&options.text));
    if options.streaming {
        let mut stream = agent
            .send_streaming_message(&ctx, request)
            .await
            .map_err(|e| e.to_string())?;
        while let Some(item) = stream.next().await {
            item.map_err(|e| e.to_string())?;
        }
    } else {
        agent
            .send_message(&ctx, request)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(start.elapsed())
}

/// Runs the load; `progress` is called about once a second with (elapsed, requests, errors).
pub(crate) async fn run(
    options: &BenchOptions,
    progress: impl Fn(Duration, u64, u64) + Send + Sync + 'static,
) -> anyhow::Result<BenchReport> {
    let client = ClientOptions {
        binding: options.binding,
        tls: options.tls.clone(),
        ..ClientOptions::default()
    };
    let agent = RemoteAgent::resolve_with(&options.url, client).await?;
    for _ in 0..options.warmup {
        one(&agent, options).await.map_err(anyhow::Error::msg)?;
    }
    let concurrency = options.concurrency.max(1);
    let issued = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let start = Instant::now();
    let deadline = options.duration.map(|d| start + d);
    let limit = options.count.unwrap_or(u64::MAX);

    let ticker = {
        let (done, failed) = (done.clone(), failed.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                progress(
                    start.elapsed(),
                    done.load(Ordering::Relaxed),
                    failed.load(Ordering::Relaxed),
                );
            }
        })
    };
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let agent = agent.clone();
        let (issued, done, failed, first_error) = (
            issued.clone(),
            done.clone(),
            failed.clone(),
            first_error.clone(),
        );
        let options = options.clone();
        workers.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                if deadline.is_some_and(|d| Instant::now() >= d)
                    || issued.fetch_add(1, Ordering::Relaxed) >= limit
                {
                    break;
                }
                match one(&agent, &options).await {
                    Ok(latency) => {
                        samples.push(latency);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        first_error.lock().await.get_or_insert(error);
                    }
                }
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for worker in workers {
        samples.extend(worker.await?);
    }
    let elapsed = start.elapsed();
    ticker.abort();
    let requests = samples.len() as u64;
    let first_error = first_error.lock().await.take();
    Ok(BenchReport {
        url: options.url.clone(),
        binding: agent.binding().as_str(),
        mode: match (options.list, options.streaming) {
            (Some(_), _) => "list",
            (None, true) => "streaming",
            (None, false) => "blocking",
        },
        concurrency,
        requests,
        errors: failed.load(Ordering::Relaxed),
        seconds: elapsed.as_secs_f64(),
        requests_per_second: requests as f64 / elapsed.as_secs_f64().max(f64::EPSILON),
        latency_ms: Latency::of(&mut samples),
        first_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_right_samples() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let latency = Latency::of(&mut samples);
        assert_eq!(latency.p50, 51.0);
        assert_eq!(latency.p90, 90.0);
        assert_eq!(latency.p99, 99.0);
        assert_eq!(latency.max, 100.0);
        assert!((latency.mean - 50.5).abs() < 1e-9);
        assert_eq!(Latency::of(&mut []).max, 0.0);
    }
}
