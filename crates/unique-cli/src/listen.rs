//! `unique listen-kicks`: a real kick receiver (`unique-kickrecv`'s `KickService`, verifying
//! signatures with `--signing-keys`) for a node that holds no session, which prints every kick
//! it accepts as one JSON line. For trying a server out: log a user in with this receiver's
//! URL as the owner endpoint, log them in again elsewhere, and watch the kick arrive.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;
use unique_client::{KickHandler, KickOptions};
use unique_core::BoxError;
use unique_kick_signature::SigningKeys;
use unique_kickrecv::{KickReceiver, KickService};
use unique_wire::{BodyError, MAX_KICK_BODY_BYTES, decode_kick, encode_kick, read_body};

use crate::cli::ListenKicksArgs;
use crate::exit::{Failure, INVALID};

/// Listens until Ctrl-C or SIGTERM; announces its URL on stderr, prints kicks on stdout.
pub(crate) async fn listen(args: &ListenKicksArgs) -> Result<(), Failure> {
    // No session here: every valid kick finds nothing older to end, and is answered 200.
    let handler = KickHandler::new(|_| None, |_, _| async {}, KickOptions::default());
    let mut builder = KickReceiver::builder(handler);
    if let Some(path) = &args.signing_keys {
        let keys = SigningKeys::from_file(path)
            .map_err(|e| Failure::file(format!("--signing-keys: {e}")))?;
        builder = builder.signing_keys(keys);
    }
    if args.insecure_unsigned {
        builder = builder.insecure_unsigned_kicks();
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Failure::new(INVALID, format!("cannot listen on {}: {e}", args.listen)))?;
    let receiver = builder
        .spawn_layered(listener, |kicks| Printing { kicks })
        .map_err(|e| {
            Failure::new(
                INVALID,
                format!("{e} (here: --signing-keys FILE or --insecure-unsigned)"),
            )
        })?;
    let signed = if args.signing_keys.is_some() {
        "verifying signatures"
    } else {
        "unsigned kicks taken"
    };
    eprintln!(
        "unique: listening for kicks on http://{}/kick ({signed}); Ctrl-C stops",
        receiver.local_addr()
    );
    stopped().await;
    receiver.close().await;
    Ok(())
}

/// Ctrl-C, or SIGTERM on Unix.
async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// The kick service, and a line on stdout for every kick it answers 200.
#[derive(Clone)]
struct Printing {
    kicks: KickService,
}

impl<B> tower_service::Service<Request<B>> for Printing
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let kicks = self.kicks.clone();
        Box::pin(async move { Ok(answer(&kicks, request).await) })
    }
}

/// Reads the body (the kick service's own limit), lets the service answer it, and prints
/// the kick when the answer is 200: a valid kick, its signature checked when verifying.
async fn answer<B>(kicks: &KickService, request: Request<B>) -> Response<Full<Bytes>>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let (parts, body) = request.into_parts();
    let body = match read_body(body, MAX_KICK_BODY_BYTES).await {
        Ok(body) => body,
        // One byte over the limit: the service answers its own 413.
        Err(BodyError::TooLarge) => Bytes::from(vec![b' '; MAX_KICK_BODY_BYTES + 1]),
        Err(BodyError::Unreadable(_)) => Bytes::new(),
    };
    let answer = kicks
        .respond(Request::from_parts(parts, Full::new(body.clone())))
        .await;
    if answer.status() == StatusCode::OK
        && let Ok(kick) = decode_kick(&body)
    {
        println!("{}", String::from_utf8_lossy(&encode_kick(&kick)));
    }
    answer
}
