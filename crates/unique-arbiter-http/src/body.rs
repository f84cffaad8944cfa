//! The response body of every answer: whole bytes, or a kick stream's lines as they come.

use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::push::StreamHandle;

/// The response body of every answer of [`ArbiterService`](crate::ArbiterService): whole
/// bytes ([`ResponseBody::new`], like `http_body_util::Full`), or the NDJSON lines of a kick
/// stream (`GET /v1/nodes/{node}/kicks`), which end only when the server ends the stream.
/// Never fails.
pub struct ResponseBody {
    kind: Kind,
}

enum Kind {
    Whole(Option<Bytes>),
    Stream(Arc<StreamHandle>),
}

impl ResponseBody {
    /// A body of `bytes`, sent whole.
    pub fn new(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        Self {
            kind: Kind::Whole((!bytes.is_empty()).then_some(bytes)),
        }
    }

    pub(crate) fn stream(handle: Arc<StreamHandle>) -> Self {
        Self {
            kind: Kind::Stream(handle),
        }
    }
}

impl Default for ResponseBody {
    /// An empty body.
    fn default() -> Self {
        Self::new(Bytes::new())
    }
}

impl fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Whole(bytes) => f.debug_tuple("ResponseBody").field(bytes).finish(),
            Kind::Stream(_) => f.write_str("ResponseBody(stream)"),
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.get_mut().kind {
            Kind::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Stream(handle) => handle
                .poll_line(cx)
                .map(|line| line.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Whole(bytes) => bytes.is_none(),
            Kind::Stream(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Kind::Stream(_) => SizeHint::default(),
        }
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        // The connection is gone (or the answer was dropped): the stream leaves the hub, and
        // kicks waiting on it fail at once.
        if let Kind::Stream(handle) = &self.kind {
            handle.body_dropped();
        }
    }
}
