//! The request body a served service reads: hyper's, bounded by the body timeout.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use crate::activity::Activity;

/// The error type of [`RequestBody`]: hyper's error, or [`BodyTimeout`] (the workspace's
/// one boxed error, [`unique_core::BoxError`]).
pub(crate) use unique_core::BoxError;

/// The body of a request served by [`serve`](crate::serve): hyper's [`Incoming`], which fails
/// with [`BodyTimeout`] once the body has not arrived in full within the body timeout of the
/// request head. The connection then answers 408 whatever the service makes of the error.
pub struct RequestBody {
    incoming: Incoming,
    deadline: Instant,
    /// Made only when the body is not already there: most small bodies arrive with the head.
    timer: Option<Pin<Box<Sleep>>>,
    activity: Arc<Activity>,
    timed_out: bool,
}

impl fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestBody")
            .field("deadline", &self.deadline)
            .field("timed_out", &self.timed_out)
            .finish_non_exhaustive()
    }
}

/// A request body did not arrive within the body timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTimeout;

impl fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("request body not received within the body timeout")
    }
}

impl std::error::Error for BodyTimeout {}

impl RequestBody {
    pub(crate) fn new(incoming: Incoming, deadline: Instant, activity: Arc<Activity>) -> Self {
        Self {
            incoming,
            deadline,
            timer: None,
            activity,
            timed_out: false,
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.timed_out {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut self.incoming).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let deadline = self.deadline;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.timed_out = true;
        self.activity.body_timed_out();
        Poll::Ready(Some(Err(BodyTimeout.into())))
    }

    fn is_end_stream(&self) -> bool {
        self.timed_out || self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}
