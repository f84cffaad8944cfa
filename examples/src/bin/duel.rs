//! The two-client duel: a server and two nodes in one process, over real HTTP on
//! loopback, telling the story of one user's key as it happens.
//!
//! The server is `unique_sessions::server::ArbiterService` over an `Arbiter` on the in-memory store
//! with the HTTP kicker, which signs every kick; each node is a `unique_sessions::node::Node` runtime
//! with its own kick receiver (verifying kicks) and heartbeat (every 300 ms). The story checks itself as it goes and exits non-zero if anything
//! deviates from the specification.
//!
//! Run: `cargo run -p unique-examples --bin duel`

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use unique_examples::events::{Report, detail_name};
use unique_examples::node::{EventSink, Node, NodeConfig};
use unique_sessions::node::{Login, NodeLoginError};
use unique_sessions::server::{ArbiterService, HttpKicker, SigningKeys, serve};
use unique_sessions::store::MemoryStore;
use unique_sessions::{Arbiter, EvictReason, Key, KickDetail};

const HEARTBEAT: Duration = Duration::from_millis(300);
const KICK_TIMEOUT: Duration = Duration::from_secs(1);
/// The bound on every wait: a deviation ends the story instead of hanging it.
const WAIT: Duration = Duration::from_secs(10);

/// The key the server signs kicks with and the nodes verify them with. A demo only: a real
/// deployment reads its keys from a file (`SigningKeys::from_file`) and keeps them secret.
fn kick_keys() -> SigningKeys {
    SigningKeys::new(["duel-demo-key-not-a-secret-0123456789abcdef"]).expect("a 43-byte key")
}

#[tokio::main]
async fn main() -> ExitCode {
    match duel().await {
        Ok(()) => {
            println!("\nThe duel went as the specification says.");
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("\nDEVIATION: {why}");
            ExitCode::FAILURE
        }
    }
}

async fn duel() -> Result<(), String> {
    let (url, stop_server, served) = start_server().await?;
    println!(
        "server listening on {url} (in-memory store, HTTP kicker signing kicks, kick timeout {KICK_TIMEOUT:?})"
    );
    let started = Instant::now();
    let (tx, rx) = mpsc::unbounded_channel();
    let mut story = Story {
        rx,
        seen: Vec::new(),
    };
    let key = Key::new("game", "prod", 42);
    let mut node_a = start_node("A", &url, &key, tx.clone(), started).await?;
    let mut node_b = start_node("B", &url, &key, tx, started).await?;

    the_kick(&mut node_a, &mut node_b, &mut story).await?;
    heartbeat_and_logout(&mut node_b, &mut story).await?;
    the_unreachable_receiver(&mut node_a, &mut node_b, &mut story).await?;

    act("the end: B holds gen 4, A is offline");
    node_a.shutdown().await;
    node_b.shutdown().await;
    let _ = stop_server.send(());
    let _ = served.await;
    Ok(())
}

/// Acts 1–2: A logs in; B logs in and A is kicked before B's claim returns.
async fn the_kick(node_a: &mut Node, node_b: &mut Node, story: &mut Story) -> Result<(), String> {
    act("1. A logs in on the phone");
    let login_a = logged_in(node_a.login().await)?;
    check(
        login_a.generation() == 1 && !login_a.outcome.has_prev,
        "A's first login must get gen 1 with no previous session",
    )?;

    act("2. B logs in on the tablet: the server kicks A first, then writes gen 2");
    let login_b = logged_in(node_b.login().await)?;
    let outcome = &login_b.outcome;
    check(
        outcome.generation == 2
            && outcome.kicked
            && outcome.kick_detail.is_none()
            && outcome.prev_generation == 1,
        "B must get gen 2 with A's kick confirmed",
    )?;
    story.drain();
    let kick = story.find(0, "A", |e| {
        matches!(e, Report::Kick { generation: Some(2), status: 200, ack } if ack == "destroyed")
    });
    let destroyed = story.find(0, "A", |e| {
        matches!(
            e,
            Report::Destroyed {
                local_generation: 1
            }
        )
    });
    let returned = story.find(0, "B", |e| {
        matches!(e, Report::LoggedIn { generation: 2, .. })
    });
    check(
        kick.is_some(),
        "A's receiver must have answered a kick for gen 2 with 200",
    )?;
    check(
        matches!((destroyed, returned), (Some(d), Some(r)) if d < r),
        "A must destroy its session before B's claim returns",
    )?;
    check(
        node_a.local_generation().is_none(),
        "A must hold no session any more",
    )?;
    note("A's session was gone before B's claim returned; its heartbeat stopped with it");
    Ok(())
}

/// Acts 3–4: B's heartbeat keeps it; B logs out, which ends its session and heartbeat.
async fn heartbeat_and_logout(node_b: &mut Node, story: &mut Story) -> Result<(), String> {
    act("3. B's heartbeat keeps confirming gen 2");
    let mark = story.seen.len();
    let mut from = mark;
    for _ in 0..2 {
        let at = story
            .wait_for(from, "B", "a heartbeat check that keeps gen 2", |e| {
                matches!(e, Report::Check { view: Ok(v) } if v.generation == 2 && v.owner.is_some())
            })
            .await?;
        from = at + 1;
    }

    act("4. B logs out: its session ends, and the record becomes a tombstone at gen 2");
    check(
        matches!(node_b.logout().await, Ok(true)),
        "B's release of gen 2 must take effect",
    )?;
    story.drain();
    check(
        story
            .find(mark, "B", |e| {
                matches!(
                    e,
                    Report::LoggedOut {
                        generation: 2,
                        released: true
                    }
                )
            })
            .is_some(),
        "B must report its logout of gen 2",
    )?;
    check(
        node_b.local_generation().is_none(),
        "B must hold no session after its logout",
    )?;
    note("B's heartbeat stopped with its logout: nothing is left to evict");
    Ok(())
}

/// Acts 5–6: gens go on after the tombstone; a kick that cannot connect leaves the old
/// session to its heartbeat, which evicts it.
async fn the_unreachable_receiver(
    node_a: &mut Node,
    node_b: &mut Node,
    story: &mut Story,
) -> Result<(), String> {
    act("5. A logs in again: gen 3 (gens are never reset), nothing to kick on a tombstone");
    let again = logged_in(node_a.login().await)?;
    let outcome = &again.outcome;
    check(
        outcome.generation == 3
            && outcome.prev_generation == 2
            && !outcome.has_prev
            && !outcome.kicked
            && outcome.kick_detail.is_none(),
        "A's second login must get gen 3 after the tombstone, without a kick",
    )?;

    act("6. A's kick receiver goes down; B logs in again");
    node_a.close_receiver().await;
    let mark = story.seen.len();
    let last = logged_in(node_b.login().await)?;
    let outcome = &last.outcome;
    check(
        outcome.generation == 4
            && !outcome.kicked
            && outcome.kick_detail == Some(KickDetail::ConnectError),
        "B must get gen 4 with the kick reported as connect-error",
    )?;
    note("the kick could not connect: A is presumed offline, and its heartbeat must notice");
    story
        .wait_for(mark, "A", "eviction with gen-mismatch", |e| {
            matches!(
                e,
                Report::Evicted {
                    local_generation: 3,
                    reason: EvictReason::GenMismatch
                }
            )
        })
        .await?;
    story.drain();
    let evictions_of_a = story
        .seen
        .iter()
        .filter(|(who, e)| *who == "A" && matches!(e, Report::Evicted { .. }))
        .count();
    check(
        evictions_of_a == 1,
        "A's heartbeat must have stopped when its first session was destroyed",
    )?;

    Ok(())
}

/// Starts the arbitration server on a free loopback port.
async fn start_server() -> Result<(String, oneshot::Sender<()>, tokio::task::JoinHandle<()>), String>
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot listen: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    let arbiter = Arbiter::builder(MemoryStore::new())
        .kicker(
            HttpKicker::builder()
                .signing_keys(kick_keys())
                .build()
                .map_err(|e| format!("cannot build the kicker: {e}"))?,
        )
        .kick_timeout(KICK_TIMEOUT)
        .build();
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(serve(listener, ArbiterService::new(arbiter), async {
        let _ = stopped.await;
    }));
    Ok((format!("http://{addr}"), stop, served))
}

async fn start_node(
    name: &'static str,
    server: &str,
    key: &Key,
    tx: mpsc::UnboundedSender<(&'static str, Report)>,
    started: Instant,
) -> Result<Node, String> {
    let config = NodeConfig {
        server: server.to_owned(),
        key: key.clone(),
        region: "eu".into(),
        cluster: name.to_lowercase(),
        kick_listen: ([127, 0, 0, 1], 0).into(),
        heartbeat_interval: HEARTBEAT,
        kick_signing_keys: Some(kick_keys()),
    };
    let sink: EventSink = Arc::new(move |event: Report| {
        println!(
            "  {:>5} ms  [{name}] {}",
            started.elapsed().as_millis(),
            tell(&event)
        );
        let _ = tx.send((name, event));
    });
    Node::start(config, sink).await
}

/// The story line for an event.
fn tell(event: &Report) -> String {
    match event {
        Report::Listening { endpoint, .. } => format!("kick receiver at {endpoint}"),
        Report::LoggedIn {
            generation,
            prev_generation,
            has_prev,
            kicked,
            kick_detail,
            replayed,
            ..
        } => format!(
            "logged in: gen {generation} (prev gen {prev_generation}, has_prev {has_prev}, kicked {kicked}, kick_detail {}, replayed {replayed})",
            detail_name(*kick_detail)
        ),
        Report::LoginFailed { error, .. } => format!("login failed: {error}"),
        Report::Kick {
            generation,
            status,
            ack,
        } => format!(
            "kick received for gen {} -> answered {status} ({ack})",
            generation.map_or_else(|| "?".to_owned(), |g| g.to_string())
        ),
        Report::Destroyed { local_generation } => {
            format!("session gen {local_generation} destroyed by the kick")
        }
        Report::Check { view: Ok(view) } => format!(
            "heartbeat: server has gen {} ({})",
            view.generation,
            if view.owner.is_some() {
                "online"
            } else {
                "no owner"
            }
        ),
        Report::Check {
            view: Err(error), ..
        } => format!("heartbeat check failed (session kept): {error}"),
        Report::Evicted {
            local_generation,
            reason,
        } => format!("heartbeat evicted session gen {local_generation}: {reason}"),
        Report::LoggedOut {
            generation,
            released,
        } => format!("logged out gen {generation}: released {released}"),
        Report::LogoutFailed { error } => format!("logout failed: {error}"),
        Report::ReceiverClosed => "kick receiver closed".to_owned(),
    }
}

fn act(title: &str) {
    println!("\n{title}");
}

fn note(text: &str) {
    println!("            -> {text}");
}

fn check(condition: bool, what: &str) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        Err(what.to_owned())
    }
}

fn logged_in(result: Result<Login, NodeLoginError>) -> Result<Login, String> {
    result.map_err(|e| format!("login failed: {e}"))
}

/// Every event of both nodes, in the order they were reported.
struct Story {
    rx: mpsc::UnboundedReceiver<(&'static str, Report)>,
    seen: Vec<(&'static str, Report)>,
}

impl Story {
    /// Takes in every event reported so far.
    fn drain(&mut self) {
        while let Ok(event) = self.rx.try_recv() {
            self.seen.push(event);
        }
    }

    /// The index of the first event of `who` at or after `from` matching `what`.
    fn find(&self, from: usize, who: &str, what: impl Fn(&Report) -> bool) -> Option<usize> {
        self.seen
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, (w, e))| *w == who && what(e))
            .map(|(at, _)| at)
    }

    /// Like [`find`](Self::find), waiting for the event (at most [`WAIT`]).
    async fn wait_for(
        &mut self,
        from: usize,
        who: &str,
        description: &str,
        what: impl Fn(&Report) -> bool,
    ) -> Result<usize, String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            self.drain();
            if let Some(at) = self.find(from, who, &what) {
                return Ok(at);
            }
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(event)) => self.seen.push(event),
                Ok(None) | Err(_) => {
                    return Err(format!("{who}: no {description} within {WAIT:?}"));
                }
            }
        }
    }
}
