//! The reference client (`unique-client` over `unique-client-http`) against this server over
//! loopback, with real kicks (`unique-kick-http` to `unique-kickrecv` receivers) and the memory
//! store: a retry whose login was replaced in flight (C9, I4), and a heartbeat after a gen
//! rollback (another owner at the session's gen).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::time::timeout;
use unique_arbiter_http::{ArbiterService, serve};
use unique_client::{
    ClaimInput, ClaimOutcome, Claimer, ClaimerOptions, HeartbeatOptions, Jitter, KickHandler,
    KickOptions, Node, NodeEvent, NodeEvents, NodeLoginError, Transport, async_trait,
};
use unique_client_http::HttpTransport;
use unique_core::{Arbiter, BoxError, CurrentView, Error, EvictReason, Key, Owner};
use unique_kick_http::HttpKicker;
use unique_kickrecv::{KickReceiver, KickService, ServeOptions};
use unique_store_memory::MemoryStore;

const HEARTBEAT: Duration = Duration::from_millis(50);
/// The bound on waiting for an event that must come.
const WAIT: Duration = Duration::from_secs(10);

/// The server on a loopback port, kicking over HTTP; its base URL and its store.
async fn server() -> (String, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let arbiter = Arbiter::builder(Arc::clone(&store))
        .kicker(HttpKicker::builder().build().unwrap())
        .kick_timeout(Duration::from_secs(2))
        .build();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(
        listener,
        ArbiterService::new(arbiter),
        std::future::pending(),
    ));
    (format!("http://{addr}"), store)
}

fn key() -> Key {
    Key::new("game", "prod", 42)
}

/// A kick service that counts the requests reaching it.
#[derive(Clone)]
struct Counted {
    service: KickService,
    kicks: Arc<AtomicUsize>,
}

impl<B> tower_service::Service<Request<B>> for Counted
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.kicks.fetch_add(1, Ordering::SeqCst);
        let service = self.service.clone();
        Box::pin(async move { Ok(service.respond(request).await) })
    }
}

/// A loopback listener for a kick receiver, and the endpoint that names it.
async fn bind() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/kick", listener.local_addr().unwrap());
    (listener, endpoint)
}

/// Serves `handler` on `listener`: the receiver (dropping it stops it) and the count of
/// kicks that reached it.
fn serve_kicks(listener: TcpListener, handler: KickHandler) -> (KickReceiver, Arc<AtomicUsize>) {
    let kicks = Arc::new(AtomicUsize::new(0));
    let service = Counted {
        service: KickService::new(handler),
        kicks: Arc::clone(&kicks),
    };
    let receiver = KickReceiver::spawn(listener, service, ServeOptions::default()).unwrap();
    (receiver, kicks)
}

struct Running<T> {
    node: Node<T>,
    events: NodeEvents,
    owner: Owner,
    kicks: Arc<AtomicUsize>,
    _receiver: KickReceiver,
}

/// A node over `transport` with its kick receiver, as an application wires it.
async fn node<T: Transport + Clone>(transport: T, name: &str) -> Running<T> {
    let (listener, endpoint) = bind().await;
    let owner = Owner::new("eu", name, endpoint);
    let (node, events) = Node::builder(transport, owner.clone())
        .claimer_options(fast_retries())
        .heartbeat_options(HeartbeatOptions::default().interval(HEARTBEAT))
        .build();
    let (receiver, kicks) = serve_kicks(listener, node.kick_handler().clone());
    Running {
        node,
        events,
        owner,
        kicks,
        _receiver: receiver,
    }
}

fn fast_retries() -> ClaimerOptions {
    ClaimerOptions::default()
        .initial_backoff(Duration::from_millis(1))
        .jitter(Jitter::none())
}

async fn next(events: &mut NodeEvents) -> NodeEvent {
    timeout(WAIT, events.recv())
        .await
        .expect("an event within the bound")
        .expect("the node is alive")
}

/// HTTP, except that the answer to the first claim is lost: the server applies the claim,
/// the test is told what it answered, and only when the test says so does the caller see a
/// reset connection (a retryable `Unavailable`, which the claimer retries with the same
/// claim_id). Later calls pass through.
#[derive(Clone)]
struct LosesFirstAnswer {
    http: HttpTransport,
    first: Arc<Mutex<Option<FirstClaim>>>,
}

/// Where the first claim's answer goes, and the switch that lets its caller see the reset.
type FirstClaim = (oneshot::Sender<ClaimOutcome>, oneshot::Receiver<()>);

impl LosesFirstAnswer {
    /// The transport, where the lost answer arrives, and the switch that lets the caller
    /// see the reset.
    fn new(url: &str) -> (Self, oneshot::Receiver<ClaimOutcome>, oneshot::Sender<()>) {
        let (applied, applied_rx) = oneshot::channel();
        let (reset_tx, reset) = oneshot::channel();
        let this = Self {
            http: HttpTransport::new(url).unwrap(),
            first: Arc::new(Mutex::new(Some((applied, reset)))),
        };
        (this, applied_rx, reset_tx)
    }
}

#[async_trait]
impl Transport for LosesFirstAnswer {
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
        let first = self.first.lock().unwrap().take();
        let answer = self.http.claim(request).await;
        let Some((applied, reset)) = first else {
            return answer;
        };
        applied
            .send(answer.expect("the first claim is applied"))
            .unwrap();
        reset.await.unwrap();
        Err(Error::unavailable(
            "claim: request failed: connection reset",
        ))
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.http.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.http.release(key, generation).await
    }
    async fn current_batch(&self, keys: &[Key]) -> Result<Vec<Result<CurrentView, Error>>, Error> {
        self.http.current_batch(keys).await
    }
}

/// Issue 22's headline: claim cA wins gen 1 but its answer is lost; cB logs in (gen 2,
/// kicking A's receiver, which confirms); then cA's retry must not win gen 3 and kick B. It
/// is answered 409 `superseded` — `Superseded(1, 2)` through the claimer, which stops there
/// — no kick reaches B's receiver, and B is still online at gen 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_whose_login_was_replaced_is_superseded_and_kicks_nobody() {
    let (url, _store) = server().await;
    // A's receiver: no session there (its login's answer never arrived), so it confirms.
    let nobody = KickHandler::new(|_: &Key| None, |_: Key, _| async {}, KickOptions::default());
    let (listener, a_endpoint) = bind().await;
    let (_a_receiver, a_kicks) = serve_kicks(listener, nobody);
    let (lossy, applied, reset) = LosesFirstAnswer::new(&url);
    let claimer = Claimer::with_options(lossy, fast_retries());
    let a_owner = Owner::new("eu", "a", a_endpoint);
    let login_a = tokio::spawn(async move { claimer.login(key(), a_owner).await });
    let won = timeout(WAIT, applied).await.unwrap().unwrap();
    assert_eq!(won.generation, 1, "cA won gen 1; its answer is lost");

    let mut b = node(HttpTransport::new(&url).unwrap(), "b").await;
    let login_b = b.node.login(key()).await.unwrap();
    assert_eq!(login_b.generation(), 2);
    assert!(login_b.login().outcome.kicked, "A's receiver confirmed");
    assert_eq!(a_kicks.load(Ordering::SeqCst), 1);
    assert!(matches!(
        next(&mut b.events).await,
        NodeEvent::LoggedIn { .. }
    ));

    reset.send(()).unwrap();
    let failed = match timeout(WAIT, login_a).await.unwrap().unwrap() {
        Ok(login) => panic!(
            "cA's retry won gen {} (kicked: {}) and took the key from B: {:?}",
            login.generation(),
            login.outcome.kicked,
            login.outcome
        ),
        Err(failed) => failed,
    };

    assert!(
        matches!(
            failed.error,
            Error::Superseded {
                generation: 1,
                current: 2
            }
        ),
        "cA's retry must be superseded, not a new gen: {failed}"
    );
    assert_eq!(failed.attempts, 2, "the claimer stopped at the 409");
    assert_eq!(b.kicks.load(Ordering::SeqCst), 0, "no kick reached B");
    assert_eq!(b.node.generation(&key()), Some(2));
    let view = HttpTransport::new(&url)
        .unwrap()
        .current(&key())
        .await
        .unwrap();
    assert_eq!((view.generation, view.owner), (2, Some(b.owner.clone())));
    // B's heartbeat agrees over several checks: nothing happens to it.
    let quiet = timeout(HEARTBEAT * 6, b.events.recv()).await;
    assert!(quiet.is_err(), "B must stay online: {quiet:?}");
    assert_eq!(b.node.generation(&key()), Some(2));
}

/// The same race through a node: its login returns the `Superseded` claim error, nothing goes
/// online there and nothing is reported, and the newer session keeps the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_login_was_replaced_in_flight_never_goes_online() {
    let (url, _store) = server().await;
    let (lossy, applied, reset) = LosesFirstAnswer::new(&url);
    let mut a = node(lossy, "a").await;
    let a_node = a.node.clone();
    let login_a = tokio::spawn(async move { a_node.login(key()).await });
    assert_eq!(timeout(WAIT, applied).await.unwrap().unwrap().generation, 1);

    let mut b = node(HttpTransport::new(&url).unwrap(), "b").await;
    assert_eq!(b.node.login(key()).await.unwrap().generation(), 2);
    // B's kick found no session on A yet (its answer is still "on its way").
    assert_eq!(a.kicks.load(Ordering::SeqCst), 1);

    reset.send(()).unwrap();
    let err = match timeout(WAIT, login_a).await.unwrap().unwrap() {
        Ok(login) => panic!(
            "A's retry won gen {} (kicked: {}) and went online over B: {:?}",
            login.generation(),
            login.login().outcome.kicked,
            login.login().outcome
        ),
        Err(err) => err,
    };

    let NodeLoginError::Claim(failed) = &err else {
        panic!("expected the claim's error, got {err}");
    };
    assert!(
        matches!(
            failed.error,
            Error::Superseded {
                generation: 1,
                current: 2
            }
        ),
        "{err}"
    );
    assert!(err.was_replaced());
    assert_eq!(a.node.generation(&key()), None);
    assert!(a.events.try_recv().is_err(), "A reports nothing");
    assert_eq!(b.kicks.load(Ordering::SeqCst), 0);
    assert!(matches!(
        next(&mut b.events).await,
        NodeEvent::LoggedIn { .. }
    ));
    let quiet = timeout(HEARTBEAT * 6, b.events.recv()).await;
    assert!(quiet.is_err(), "B must stay online: {quiet:?}");
    assert_eq!(b.node.generation(&key()), Some(2));
}

/// Issue 22 item 3: after a gen rollback a new login can hold the gen an online session
/// already has. The rollback is simulated by rewriting the record at A's gen: with A's own
/// owner nothing happens; with another owner A's heartbeat evicts it with `owner-changed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_evicts_a_session_whose_gen_another_owner_holds() {
    let (url, store) = server().await;
    let mut a = node(HttpTransport::new(&url).unwrap(), "a").await;
    assert_eq!(a.node.login(key()).await.unwrap().generation(), 1);
    assert!(matches!(
        next(&mut a.events).await,
        NodeEvent::LoggedIn { .. }
    ));

    // The same gen and the same owner, under another claim_id: still this session's record.
    let mine = serde_json::to_string(&a.owner).unwrap();
    store.put_raw(&key(), 1, Some(&mine), Some("restored"), None);
    let quiet = timeout(HEARTBEAT * 6, a.events.recv()).await;
    assert!(quiet.is_err(), "same owner, same gen: kept ({quiet:?})");

    // A new login after the rollback got gen 1 too, for another node.
    let other = Owner::new("eu", "b", "http://127.0.0.1:9/kick");
    let theirs = serde_json::to_string(&other).unwrap();
    store.put_raw(&key(), 1, Some(&theirs), Some("cB"), None);

    assert_eq!(
        next(&mut a.events).await,
        NodeEvent::Evicted {
            key: key(),
            generation: 1,
            reason: EvictReason::OwnerChanged
        }
    );
    assert_eq!(a.node.generation(&key()), None);
    assert_eq!(a.kicks.load(Ordering::SeqCst), 0, "an eviction, not a kick");
}
