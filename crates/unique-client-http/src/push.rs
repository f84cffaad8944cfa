//! The kick stream over HTTP: [`HttpTransport`] as a [`PushTransport`]
//! (`GET /v1/nodes/{node}/kicks`, `POST /v1/nodes/{node}/kicks/ack`).

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, USER_AGENT};
use http::{HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use unique_client::{KickStream, PushTransport, async_trait};
use unique_core::Error;
use unique_wire::push::{
    KickAckAnswer, KickAckBody, NDJSON_CONTENT_TYPE, node_kicks_ack_path, node_kicks_path,
};

use crate::status::classify;
use crate::transport::HttpTransport;

const OP: &str = "kick stream";

/// The stream is opened with the transport's token and bounded by its per-request timeout
/// up to the answer's headers; its body is then read for as long as the server keeps it
/// open. A refused stream is the error its status says (`classify`): 401
/// `Unauthenticated`, 403 `Forbidden`, 429 `Throttled` (the server's per-token cap), 503
/// `Unavailable` (its total cap, or shutting down), and 404 or 405 `InvalidParams` naming a
/// server without push kicks. The ack is a JSON POST like every call.
#[async_trait]
impl PushTransport for HttpTransport {
    async fn open_kick_stream(&self, node: &str) -> Result<Box<dyn KickStream>, Error> {
        unique_core::check_node_id(node)?;
        let inner = self.inner();
        let uri = inner.endpoints.at(&node_kicks_path(node))?;
        let mut request = Request::get(uri)
            .header(ACCEPT, HeaderValue::from_static(NDJSON_CONTENT_TYPE))
            .header(USER_AGENT, inner.user_agent.clone());
        if let Some(authorization) = &inner.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let request = request
            .body(Full::new(Bytes::new()))
            .map_err(|e| Error::unavailable_with(format!("{OP}: request could not be built"), e))?;
        let opened = async {
            let response = inner.client.request(request).await.map_err(|e| {
                let what = if e.is_connect() {
                    "connection failed"
                } else {
                    "request failed"
                };
                Error::unavailable_with(format!("{OP}: {what}"), e)
            })?;
            let status = response.status();
            if status == StatusCode::OK {
                return Ok(Ok(response.into_body()));
            }
            // Refused: the answer is a small error body, read whole.
            let body = Limited::new(response.into_body(), inner.max_response_body)
                .collect()
                .await
                .map_err(|e| {
                    Error::unavailable_with(format!("{OP}: response body could not be read"), e)
                })?
                .to_bytes();
            Ok::<_, Error>(Err((status, body)))
        };
        let answer = tokio::time::timeout(inner.timeout, opened)
            .await
            .map_err(|_| {
                Error::unavailable(format!("{OP}: no answer within {:?}", inner.timeout))
            })??;
        match answer {
            Ok(body) => Ok(Box::new(HttpKickStream { body })),
            Err((status, _))
                if matches!(
                    status,
                    StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED
                ) =>
            {
                Err(Error::InvalidParams(format!(
                    "{OP}: the server answered {}: it does not serve push kicks (older than \
                     the kick stream), or the base url is wrong",
                    status.as_u16()
                )))
            }
            Err((status, body)) => match classify::<serde::de::IgnoredAny>(OP, status, &body) {
                Err(error) => Err(error),
                Ok(_) => Err(Error::unavailable(format!(
                    "{OP}: unexpected status {}",
                    status.as_u16()
                ))),
            },
        }
    }

    async fn ack_kick(&self, node: &str, id: &str, status: u16) -> Result<bool, Error> {
        unique_core::check_node_id(node)?;
        let uri = self.inner().endpoints.at(&node_kicks_ack_path(node))?;
        let body = KickAckBody {
            id: id.to_owned(),
            status,
        };
        let answer: KickAckAnswer = self.post("kick ack", &uri, &body).await?;
        Ok(answer.accepted)
    }
}

/// An open kick stream's body, read frame by frame.
struct HttpKickStream {
    body: Incoming,
}

#[async_trait]
impl KickStream for HttpKickStream {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, Error> {
        loop {
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => {
                    return Err(Error::unavailable_with(
                        format!("{OP}: body could not be read"),
                        e,
                    ));
                }
                Some(Ok(frame)) => {
                    // Trailers carry nothing for the node.
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data.to_vec()));
                    }
                }
            }
        }
    }
}
