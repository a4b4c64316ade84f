//! The request bodies of gRPC calls, held to the bounds the HTTP bindings hold theirs to: read
//! within `body_timeout`, and within the endpoint's budget of bytes being read at once.
//!
//! A gRPC request declares no length, so its body takes room in the budget as its bytes
//! arrive (waiting for room while others hold it), and gives the room back when it is dropped:
//! once the service has decoded the message. Each message is also bounded by
//! `max_body_bytes` (the service's decoding limit).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// Request bodies are budgeted in units of this many bytes.
pub(crate) const UNIT: usize = 1024;

type Acquire = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// A request body that holds its share of the budget and must arrive in time.
pub(crate) struct Budgeted {
    inner: Body,
    room: Arc<Semaphore>,
    /// The most units the budget has: no frame waits for more.
    total: u32,
    held: Option<OwnedSemaphorePermit>,
    /// A frame that arrived while its room was being waited for.
    waiting: Option<(Frame<Bytes>, Acquire)>,
    /// When the body must have arrived (none: no limit); cleared at its end.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    timeout: Duration,
}

impl Budgeted {
    pub(crate) fn new(inner: Body, room: Arc<Semaphore>, total: u32, timeout: Duration) -> Self {
        let deadline = (!timeout.is_zero()).then(|| Box::pin(tokio::time::sleep(timeout)));
        Self {
            inner,
            room,
            total,
            held: None,
            waiting: None,
            deadline,
            timeout,
        }
    }

    fn keep(&mut self, permit: OwnedSemaphorePermit) {
        match &mut self.held {
            Some(held) => held.merge(permit),
            None => self.held = Some(permit),
        }
    }

    fn too_slow(&self) -> Status {
        if self.waiting.is_some() {
            Status::unavailable(
                "the agent is reading as many request bodies as it takes at once; try again",
            )
        } else {
            Status::deadline_exceeded(format!(
                "the request body did not arrive within {} s",
                self.timeout.as_secs_f64()
            ))
        }
    }
}

impl HttpBody for Budgeted {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if let Some(deadline) = &mut this.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            this.deadline = None;
            let error = this.too_slow();
            this.waiting = None;
            return Poll::Ready(Some(Err(error)));
        }
        if let Some((_, acquire)) = &mut this.waiting {
            return match acquire.as_mut().poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Err(_)) => {
                    this.waiting = None;
                    Poll::Ready(Some(Err(Status::unavailable("the agent is stopping"))))
                }
                Poll::Ready(Ok(permit)) => {
                    this.keep(permit);
                    let frame = this.waiting.take().map(|(frame, _)| Ok(frame));
                    Poll::Ready(frame)
                }
            };
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => {
                this.deadline = None;
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Err(error))) => {
                return Poll::Ready(Some(Err(Status::from_error(Box::new(error)))));
            }
            Poll::Ready(Some(Ok(frame))) => frame,
        };
        let Some(data) = frame.data_ref() else {
            // Trailers: the end of the body.
            this.deadline = None;
            return Poll::Ready(Some(Ok(frame)));
        };
        let units = u32::try_from(data.len().div_ceil(UNIT))
            .unwrap_or(u32::MAX)
            .min(this.total);
        if units == 0 {
            return Poll::Ready(Some(Ok(frame)));
        }
        match this.room.clone().try_acquire_many_owned(units) {
            Ok(permit) => {
                this.keep(permit);
                Poll::Ready(Some(Ok(frame)))
            }
            Err(_) => {
                let acquire: Acquire = Box::pin(this.room.clone().acquire_many_owned(units));
                this.waiting = Some((frame, acquire));
                // Poll the wait at once, so that its waker is registered.
                self.poll_frame(cx)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.waiting.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
