//! Body limits, and reading a body up to one.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use unique_core::BoxError;

/// Largest request body the server accepts; a larger one is answered 413 `too_large`.
pub const MAX_REQUEST_BODY_BYTES: usize = 64 * 1024;

/// Largest kick body a kick receiver accepts; a kick payload is well under 300 bytes.
pub const MAX_KICK_BODY_BYTES: usize = 4 * 1024;

/// Why [`read_body`] returned no body.
#[derive(Debug)]
pub enum BodyError {
    /// The body is longer than the limit, by its announced length or while reading.
    TooLarge,
    /// The body could not be read (the connection failed mid-body, …).
    Unreadable(BoxError),
}

/// Collects at most `limit` bytes of `body`.
///
/// A body that announces more (its size hint, i.e. `Content-Length`) is refused before a byte
/// is read; one that streams more is refused when it crosses the limit. Trailers are ignored.
/// A body that arrives as one chunk is returned as that chunk, without a copy.
pub async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, BodyError>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    if body.size_hint().lower() > limit as u64 {
        return Err(BodyError::TooLarge);
    }
    let mut body = std::pin::pin!(Limited::new(body, limit));
    // A small body arrives as one chunk: keep that chunk (no copy, no list of
    // chunks); join only when there is more than one.
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) if e.is::<LengthLimitError>() => return Err(BodyError::TooLarge),
            Err(e) => return Err(BodyError::Unreadable(e)),
        };
        // Trailers carry nothing for us.
        let Ok(mut data) = frame.into_data() else {
            continue;
        };
        match &mut joined {
            Some(joined) => joined.put(data),
            None if first.is_empty() => {
                // `Bytes` hands itself over without a copy.
                first = data.copy_to_bytes(data.remaining());
            }
            None => {
                let mut both = BytesMut::with_capacity(first.len() + data.remaining());
                both.extend_from_slice(&first);
                both.put(data);
                joined = Some(both);
            }
        }
    }
    Ok(joined.map_or(first, BytesMut::freeze))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body::Frame;
    use http_body_util::{Full, StreamBody};

    use super::*;

    fn streamed(parts: &[&'static str]) -> impl Body<Data = Bytes, Error = Infallible> {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
            .collect();
        StreamBody::new(futures::stream::iter(frames))
    }

    async fn read(parts: &[&'static str]) -> Bytes {
        read_body(streamed(parts), MAX_REQUEST_BODY_BYTES)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn body_chunks_are_joined_in_order() {
        let body = read(&[r#"{"a":"#, "", "1,", r#""b":2}"#]).await;
        assert_eq!(&body[..], br#"{"a":1,"b":2}"#);
    }

    #[tokio::test]
    async fn one_chunk_and_no_chunk() {
        assert_eq!(&read(&["{}"]).await[..], b"{}");
        assert!(read(&[]).await.is_empty());
    }

    #[tokio::test]
    async fn over_the_limit_by_length_or_while_streaming() {
        let announced = Full::new(Bytes::from(vec![b'x'; 11]));
        assert!(matches!(
            read_body(announced, 10).await,
            Err(BodyError::TooLarge)
        ));
        assert!(matches!(
            read_body(streamed(&["12345", "678901"]), 10).await,
            Err(BodyError::TooLarge)
        ));
        let at_limit = read_body(streamed(&["12345", "67890"]), 10).await.unwrap();
        assert_eq!(&at_limit[..], b"1234567890");
    }
}
