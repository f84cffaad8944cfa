//! The cases. Each starts its own peers, so cases never share state and can run
//! in parallel.

#![allow(
    clippy::missing_panics_doc,
    reason = "every case panics on a contract violation; that is how a case fails"
)]

use tokio::net::TcpListener;
use unique_core::{KickDetail, KickOutcome, Kicker};

use super::{
    ANSWER_DEADLINE, Behaviour, Peer, TIMEOUT_DEADLINE, TIMEOUT_SLACK, payload, timed_kick,
};

const CONFIRMED: KickOutcome = KickOutcome::Confirmed;
const NON_2XX: KickOutcome = KickOutcome::Failed(KickDetail::Non2xx);
const TIMEOUT: KickOutcome = KickOutcome::Failed(KickDetail::Timeout);
const CONNECT_ERROR: KickOutcome = KickOutcome::Failed(KickDetail::ConnectError);

/// Kicks `endpoint` under [`ANSWER_DEADLINE`] and checks the outcome: the
/// Kicker clause's classification (2xx confirmed, other statuses `non-2xx`,
/// failures to connect or to understand the answer `connect-error`).
async fn expect(kicker: &dyn Kicker, endpoint: &str, want: KickOutcome, why: &str) {
    let (outcome, took) = timed_kick(kicker, endpoint, ANSWER_DEADLINE).await;
    ensure_eq!(
        outcome,
        want,
        "Kicker",
        "a kick must be classified by how it ended",
        "{why} (took {took:?})"
    );
}

/// A server answering `status` to every request yields `want`.
async fn expect_status(kicker: &dyn Kicker, status: u16, want: KickOutcome) {
    let peer = Peer::start(Behaviour::status(status)).await;
    expect(
        kicker,
        &peer.http_url("/kick"),
        want,
        &format!("a {status} answer"),
    )
    .await;
    ensure_eq!(
        peer.requests().len(),
        1,
        "Kicker",
        "one kick must be one request",
        "a {status} answer: requests received"
    );
}

/// A redirect is reported as `non-2xx` and never followed.
async fn expect_redirect_not_followed(kicker: &dyn Kicker, status: u16) {
    let target = Peer::start(Behaviour::status(200)).await;
    let peer = Peer::start(Behaviour::redirect(status, target.http_url("/kick"))).await;
    expect(
        kicker,
        &peer.http_url("/kick"),
        NON_2XX,
        &format!("a {status} redirect"),
    )
    .await;
    ensure_eq!(
        peer.requests().len(),
        1,
        "Kicker",
        "one kick must be one request",
        "requests the redirecting server received"
    );
    ensure_eq!(
        target.connections(),
        0,
        "Kicker",
        "a redirect must be non-2xx and never followed",
        "connections to the {status} redirect's target"
    );
}

/// `endpoint` never answers: `timeout`, not before the deadline, at most
/// [`TIMEOUT_SLACK`] after it.
async fn expect_timeout_bound(kicker: &dyn Kicker, endpoint: &str, why: &str) {
    let (outcome, took) = timed_kick(kicker, endpoint, TIMEOUT_DEADLINE).await;
    ensure_eq!(
        outcome,
        TIMEOUT,
        "Kicker",
        "no answer in time must be a timeout",
        "{why} (took {took:?})"
    );
    ensure!(
        took >= TIMEOUT_DEADLINE,
        "Kicker",
        "a timeout must not be reported before the deadline",
        "{why}: reported after {took:?}, before the {TIMEOUT_DEADLINE:?} deadline"
    );
    ensure!(
        took <= TIMEOUT_DEADLINE + TIMEOUT_SLACK,
        "Kicker",
        "a kick must respect the deadline it is given",
        "{why}: took {took:?}, over the {TIMEOUT_DEADLINE:?} deadline plus {TIMEOUT_SLACK:?}"
    );
}

/// 2xx → confirmed, and the server received exactly the kick: one `POST` to the
/// endpoint's path and query, `content-type: application/json`, and a body that
/// is exactly the payload's JSON `{"project","env","uid","gen","reason","message"}`.
pub async fn confirmed_on_200(kicker: &dyn Kicker) {
    let peer = Peer::start(Behaviour::status(200)).await;
    let target = "/kick/session-9?token=abc";
    expect(kicker, &peer.http_url(target), CONFIRMED, "a 200 answer").await;

    let requests = peer.requests();
    ensure_eq!(
        requests.len(),
        1,
        "Kicker",
        "one kick must be one request",
        "{requests:?}"
    );
    let request = &requests[0];
    ensure_eq!(
        (request.method.as_str(), request.target.as_str()),
        ("POST", target),
        "Kicker",
        "a kick must POST to the endpoint's path and query"
    );
    let content_type = request.header("content-type").unwrap_or_default();
    let media_type = content_type.split(';').next().unwrap_or_default().trim();
    ensure!(
        media_type.eq_ignore_ascii_case("application/json"),
        "Kick payload",
        "a kick must be sent as application/json",
        "content-type was {content_type:?}"
    );
    let body: serde_json::Value = match serde_json::from_slice(&request.body) {
        Ok(body) => body,
        Err(e) => crate::check::violated(
            "Kick payload",
            "a kick body must be the payload's JSON",
            format_args!(
                "not JSON ({e}): {:?}",
                String::from_utf8_lossy(&request.body)
            ),
        ),
    };
    let want = payload();
    ensure_eq!(
        body,
        serde_json::json!({
            "project": want.project,
            "env": want.env,
            "uid": want.uid,
            "gen": want.generation,
            "reason": want.reason.as_str(),
            "message": want.message,
        }),
        "Kick payload",
        "a kick body must be exactly the payload: project, env, uid, gen, reason and message"
    );
}

/// 2xx → confirmed, also for `204 No Content`.
pub async fn confirmed_on_204(kicker: &dyn Kicker) {
    expect_status(kicker, 204, CONFIRMED).await;
}

/// 404 → `non-2xx`.
pub async fn non_2xx_on_404(kicker: &dyn Kicker) {
    expect_status(kicker, 404, NON_2XX).await;
}

/// 500 → `non-2xx`.
pub async fn non_2xx_on_500(kicker: &dyn Kicker) {
    expect_status(kicker, 500, NON_2XX).await;
}

/// 503 (a kick receiver whose destroy timed out) → `non-2xx`.
pub async fn non_2xx_on_503(kicker: &dyn Kicker) {
    expect_status(kicker, 503, NON_2XX).await;
}

/// 301 → `non-2xx`; the redirect target never receives a connection.
pub async fn redirect_301_not_followed(kicker: &dyn Kicker) {
    expect_redirect_not_followed(kicker, 301).await;
}

/// 302 → `non-2xx`; the redirect target never receives a connection.
pub async fn redirect_302_not_followed(kicker: &dyn Kicker) {
    expect_redirect_not_followed(kicker, 302).await;
}

/// 307 (which would replay the POST) → `non-2xx`; the target never receives a
/// connection.
pub async fn redirect_307_not_followed(kicker: &dyn Kicker) {
    expect_redirect_not_followed(kicker, 307).await;
}

/// A server that accepts and reads but never answers → `timeout` within the
/// deadline + 100 ms.
pub async fn timeout_when_server_never_answers(kicker: &dyn Kicker) {
    let peer = Peer::start(Behaviour::NeverAnswer).await;
    expect_timeout_bound(
        kicker,
        &peer.http_url("/kick"),
        "a server that never answers",
    )
    .await;
}

/// A server that sends `200` headers and then stalls the body: the answer never
/// completes → `timeout` within the deadline + 100 ms.
pub async fn timeout_when_body_stalls(kicker: &dyn Kicker) {
    let peer = Peer::start(Behaviour::HeadersThenStall).await;
    expect_timeout_bound(
        kicker,
        &peer.http_url("/kick"),
        "a server that stalls the body after its headers",
    )
    .await;
}

/// An https endpoint whose server accepts TCP but never answers the TLS handshake
/// → `timeout` within the deadline + 100 ms: connecting is inside the deadline.
pub async fn timeout_when_tls_handshake_stalls(kicker: &dyn Kicker) {
    let peer = Peer::start(Behaviour::SilentAccept).await;
    expect_timeout_bound(
        kicker,
        &peer.https_url("/kick"),
        "a server that never answers the tls handshake",
    )
    .await;
}

/// Nothing listens on the port → `connect-error` (promptly: a timeout would be a
/// different outcome).
pub async fn connect_error_on_closed_port(kicker: &dyn Kicker) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    expect(
        kicker,
        &format!("http://{addr}/kick"),
        CONNECT_ERROR,
        "a closed port",
    )
    .await;
}

/// The server reads the request and resets the connection (RST, `SO_LINGER` 0)
/// → `connect-error`.
pub async fn connect_error_on_reset(kicker: &dyn Kicker) {
    let peer = Peer::start(Behaviour::Reset).await;
    expect(
        kicker,
        &peer.http_url("/kick"),
        CONNECT_ERROR,
        "a reset connection",
    )
    .await;
    ensure_eq!(
        peer.requests().len(),
        1,
        "Kicker",
        "one kick must be one request",
        "requests received before the reset"
    );
}

/// The server answers bytes that are not HTTP and keeps the connection open →
/// `connect-error` (recognised, not waited out).
pub async fn connect_error_on_garbled_response(kicker: &dyn Kicker) {
    let peer = Peer::start(Behaviour::Garbled).await;
    expect(
        kicker,
        &peer.http_url("/kick"),
        CONNECT_ERROR,
        "a garbled answer",
    )
    .await;
}

/// An https endpoint whose server speaks plain HTTP → `connect-error`.
pub async fn connect_error_on_https_to_plain_tcp(kicker: &dyn Kicker) {
    let peer = Peer::start(Behaviour::PlainHttpToAnything).await;
    expect(
        kicker,
        &peer.https_url("/kick"),
        CONNECT_ERROR,
        "an https endpoint served by plain http",
    )
    .await;
}

/// An https endpoint whose certificate chains to an untrusted CA →
/// `connect-error`, and the payload is never delivered.
pub async fn connect_error_on_untrusted_certificate(kicker: &dyn Kicker) {
    let peer = Peer::start_tls(Behaviour::status(200)).await;
    expect(
        kicker,
        &peer.https_url("/kick"),
        CONNECT_ERROR,
        "a certificate from an untrusted ca",
    )
    .await;
    ensure!(
        peer.requests().is_empty(),
        "Kicker",
        "a tls failure must be a connect-error with nothing sent",
        "a kick was sent over an unverified tls connection"
    );
}

/// Endpoints that are not absolute `http`/`https` URLs → `connect-error`, and
/// nothing is contacted (an `ftp://` endpoint is not spoken to as HTTP).
pub async fn connect_error_on_invalid_endpoint(kicker: &dyn Kicker) {
    let peer = Peer::start(Behaviour::status(200)).await;
    let ftp = format!("ftp://{}/kick", peer.addr());
    for endpoint in ["", "not a uri", "/kick/relative", "http://", ftp.as_str()] {
        expect(
            kicker,
            endpoint,
            CONNECT_ERROR,
            &format!("the endpoint {endpoint:?}"),
        )
        .await;
    }
    ensure_eq!(
        peer.connections(),
        0,
        "Kicker",
        "an endpoint that is not an http or https url must be a connect-error with nothing contacted",
        "connections to an ftp:// endpoint"
    );
}

/// Two kicks to the same server are carried by one TCP connection (keep-alive).
///
/// Checked on the requests, not the accept count: a pooled client may open a
/// spare connection in the background while it waits for the first one to
/// return to the pool, which is harmless as long as the kick reuses the first.
pub async fn keep_alive_reuses_the_connection(kicker: &dyn Kicker) {
    let peer = Peer::start(Behaviour::status(200)).await;
    let endpoint = peer.http_url("/kick");
    expect(kicker, &endpoint, CONFIRMED, "the first kick").await;
    expect(kicker, &endpoint, CONFIRMED, "the second kick").await;
    let requests = peer.requests();
    ensure_eq!(
        requests.len(),
        2,
        "Kicker",
        "one kick must be one request",
        "requests for two kicks"
    );
    ensure_eq!(
        requests[0].connection,
        requests[1].connection,
        "Kicker",
        "kicks must go through a pooled client that reuses a connection",
        "the second kick's connection"
    );
}
