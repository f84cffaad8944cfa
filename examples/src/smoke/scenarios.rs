//! S1–S6 of the specification (§7), each a function that drives the clients and checks
//! what they and the server report. Each returns a one-line summary or why it failed.
//!
//! S1–S4 and S6 continue one story on one key (A, B, C, D, E are its nodes, in order of
//! login); S5 races eight fresh nodes on a key of its own.

use std::collections::BTreeSet;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use unique_sessions::node::Transport;
use unique_sessions::{ClaimInput, Key, Owner};

use crate::events::{Line, now_micros};
use crate::smoke::harness::{Harness, WAIT};

/// The key of the S1–S4, S6 story.
pub(crate) fn story_key() -> Key {
    Key::new("smoke", "main", 1)
}

/// The key S5 races on.
pub(crate) fn race_key() -> Key {
    Key::new("smoke", "main", 5)
}

/// How many clients race in S5.
pub(crate) const RACERS: usize = 8;

/// Checks `line`'s fields against `(key, value)` pairs.
fn want(line: &Line, who: &str, expected: &[(&str, &str)]) -> Result<(), String> {
    for (key, value) in expected {
        let got = line.field(key)?;
        if got != *value {
            return Err(format!(
                "{who} {}: {key} = {got}, expected {value} (line: {})",
                line.name,
                line.raw()
            ));
        }
    }
    Ok(())
}

/// Fails with `message` unless `condition` holds.
fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(message()) }
}

/// Logs client `name` in and returns its `LOGGED_IN` line.
async fn login(h: &mut Harness, name: &str, command: &str) -> Result<Line, String> {
    let client = h.client(name)?;
    client.send(command)?;
    let line = client
        .expect_any(&["LOGGED_IN", "LOGIN_FAILED"], WAIT)
        .await?;
    ensure(line.name == "LOGGED_IN", || {
        format!("{name}'s login failed: {}", line.raw())
    })?;
    Ok(line)
}

/// Syncs with client `name` and fails if it printed any of `forbidden` since line `mark`.
async fn none_since(
    h: &mut Harness,
    name: &str,
    mark: usize,
    forbidden: &[&str],
) -> Result<(), String> {
    let client = h.client(name)?;
    client.sync(WAIT).await?;
    if let Some(line) = client.history()[mark..]
        .iter()
        .find(|l| forbidden.contains(&l.name.as_str()))
    {
        return Err(format!("{name} unexpectedly printed {}", line.raw()));
    }
    Ok(())
}

/// POSTs `body` without a signature to the kick receiver at `endpoint`
/// (`http://host:port/path`); returns the status.
async fn unsigned_kick(endpoint: &str, body: &str) -> Result<u16, String> {
    let rest = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| format!("not an http endpoint: {endpoint}"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let fail = |e: std::io::Error| format!("unsigned kick to {endpoint}: {e}");
    let mut stream = TcpStream::connect(authority).await.map_err(fail)?;
    let raw = format!(
        "POST /{path} HTTP/1.1\r\nhost: {authority}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(raw.as_bytes()).await.map_err(fail)?;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await;
    read.map_err(|_| format!("unsigned kick to {endpoint}: no answer"))?
        .map_err(fail)?;
    let answer = String::from_utf8_lossy(&answer);
    answer
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("unsigned kick to {endpoint}: garbled answer {answer:?}"))
}

/// **S1** first login → gen 1, `has_prev = false`. Kicks are signed in the smoke run, so a
/// kick without a signature is refused (401) and destroys nothing.
pub(crate) async fn s1_first_login(h: &mut Harness) -> Result<String, String> {
    let endpoint = h.spawn_client("A", &story_key()).await?;
    let a = login(h, "A", "login").await?;
    want(
        &a,
        "A",
        &[
            ("gen", "1"),
            ("prev_gen", "0"),
            ("has_prev", "false"),
            ("kicked", "false"),
            ("kick_detail", "none"),
            ("replayed", "false"),
        ],
    )?;
    let mark = h.client("A")?.history().len();
    let forged = r#"{"project":"smoke","env":"main","uid":1,"gen":99}"#;
    let status = unsigned_kick(&endpoint, forged).await?;
    ensure(status == 401, || {
        format!("an unsigned kick got {status}, expected 401")
    })?;
    let kick = h.client("A")?.expect("KICK", WAIT).await?;
    want(&kick, "A", &[("gen", "99"), ("status", "401")])?;
    none_since(h, "A", mark, &["DESTROYED", "EVICTED"]).await?;
    Ok("A logged in: gen 1, has_prev false, nothing to kick; an unsigned kick got 401".into())
}

/// **S2** a second node logs in → the first receives a kick with gen 2 and destroys its
/// session before the claim returns; response `kicked = true`, gen 2.
pub(crate) async fn s2_second_node_kicks_the_first(h: &mut Harness) -> Result<String, String> {
    h.spawn_client("B", &story_key()).await?;
    let b = login(h, "B", "login").await?;
    let a = h.client("A")?;
    let kick = a.expect("KICK", WAIT).await.map_err(|e| {
        format!("{e}: the first node never saw a kick (does the server kick over HTTP?)")
    })?;
    let destroyed = a.expect("DESTROYED", WAIT).await?;
    want(
        &kick,
        "A",
        &[("gen", "2"), ("status", "200"), ("ack", "destroyed")],
    )?;
    want(&destroyed, "A", &[("local_gen", "1")])?;
    want(
        &b,
        "B",
        &[
            ("gen", "2"),
            ("prev_gen", "1"),
            ("has_prev", "true"),
            ("kicked", "true"),
            ("kick_detail", "none"),
            ("replayed", "false"),
        ],
    )?;
    // Both processes stamp lines with the machine's wall clock; A writes DESTROYED
    // before its receiver answers, and B's claim returns only after that answer.
    ensure(destroyed.t_micros <= b.t_micros, || {
        format!(
            "A destroyed its session {} µs after B's claim returned",
            destroyed.t_micros - b.t_micros
        )
    })?;
    Ok(format!(
        "B gen 2 kicked = true; A got the kick (gen 2) and destroyed gen 1 {} µs before B's claim returned",
        b.t_micros.saturating_sub(destroyed.t_micros)
    ))
}

/// **S3** the same claim_id retried (response lost) → same gen, `replayed = true`, no
/// second kick.
pub(crate) async fn s3_retry_is_replayed(h: &mut Harness) -> Result<String, String> {
    let key = story_key();
    let first = h.last("B", "LOGGED_IN")?;
    let claim_id = first.field("claim_id")?.to_owned();
    // Synced first, so every line printed before this point is below the marks.
    h.client("A")?.sync(WAIT).await?;
    h.client("B")?.sync(WAIT).await?;
    let marks = (
        h.client("A")?.history().len(),
        h.client("B")?.history().len(),
    );

    let again = login(h, "B", "relogin-same-claim-id").await?;
    let expected = [
        ("gen", "2"),
        ("replayed", "true"),
        ("kicked", "false"),
        ("kick_detail", "none"),
        ("claim_id", claim_id.as_str()),
    ];
    want(&again, "B", &expected)?;

    // The same retry arriving from another endpoint: were it not replayed, the server
    // would kick B (the owner) and B would print it.
    let a_endpoint = h.last("A", "LISTENING")?.field("endpoint")?.to_owned();
    let retry = ClaimInput {
        key: key.clone(),
        owner: Owner::new("smoke", "runner", a_endpoint),
        claim_id,
    };
    let outcome = h
        .transport
        .claim(&retry)
        .await
        .map_err(|e| format!("the runner's retried claim failed: {e}"))?;
    ensure(
        outcome.replayed && outcome.generation == 2 && !outcome.kicked,
        || format!("the runner's retry was not a replay of gen 2: {outcome:?}"),
    )?;

    none_since(h, "A", marks.0, &["KICK", "DESTROYED"]).await?;
    none_since(h, "B", marks.1, &["KICK", "DESTROYED", "EVICTED"]).await?;
    let b_endpoint = h.last("B", "LISTENING")?.field("endpoint")?.to_owned();
    let view = h
        .transport
        .current(&key)
        .await
        .map_err(|e| format!("current failed: {e}"))?;
    ensure(
        view.generation == 2 && view.owner.is_some_and(|o| o.endpoint == b_endpoint),
        || {
            format!(
                "after the retries B must still hold gen 2, found gen {}",
                view.generation
            )
        },
    )?;
    Ok("two retries with B's claim_id: gen 2, replayed, no kick, B still online".into())
}

/// **S4** the old node's kick receiver is down → `kick_detail = connect-error`, login
/// proceeds; the old node's heartbeat self-evicts with `gen-mismatch` within one interval.
pub(crate) async fn s4_unreachable_old_node(h: &mut Harness) -> Result<String, String> {
    let key = story_key();
    // Part 1: the old node's process is gone entirely.
    h.client("B")?.kill();
    h.spawn_client("C", &key).await?;
    let c = login(h, "C", "login").await?;
    let offline = [
        ("prev_gen", "2"),
        ("has_prev", "true"),
        ("kicked", "false"),
        ("kick_detail", "connect-error"),
        ("replayed", "false"),
    ];
    want(&c, "C", &[("gen", "3")])?;
    want(&c, "C", &offline)?;

    // Part 2: C's receiver goes down but C keeps running its heartbeat.
    let client = h.client("C")?;
    client.send("close-receiver")?;
    client.expect("RECEIVER_CLOSED", WAIT).await?;
    h.spawn_client("D", &key).await?;
    // D's claim commits after this instant: the reference for C's eviction.
    let sent = now_micros();
    let d = login(h, "D", "login").await?;
    want(
        &d,
        "D",
        &[
            ("gen", "4"),
            ("prev_gen", "3"),
            ("has_prev", "true"),
            ("kicked", "false"),
            ("kick_detail", "connect-error"),
        ],
    )?;
    let client = h.client("C")?;
    let evicted = client.expect("EVICTED", WAIT).await?;
    want(
        &evicted,
        "C",
        &[("local_gen", "3"), ("reason", "gen-mismatch")],
    )?;
    // "Within one interval", counted rather than timed: from D's login on, C's heartbeat
    // reads at most one answer from before D's commit (a check in flight), and the next
    // answer it reads evicts. Failed checks (no `gen`) do not count: errors never evict.
    let window = sent..=evicted.t_micros;
    let checks: Vec<&Line> = client
        .history()
        .iter()
        .filter(|l| l.name == "CHECK" && l.get("gen").is_some() && window.contains(&l.t_micros))
        .collect();
    ensure(!checks.is_empty() && checks.len() <= 2, || {
        format!(
            "C read {} heartbeat answers from D's login to its eviction (expected 1 or 2)",
            checks.len()
        )
    })?;
    want(checks[checks.len() - 1], "C", &[("gen", "4")])?;
    let millis = evicted.t_micros.saturating_sub(sent) / 1000;
    Ok(format!(
        "killed B: C gen 3 connect-error; C's receiver closed: D gen 4 connect-error, C evicted gen-mismatch after {} check(s), {millis} ms (interval {:?})",
        checks.len(),
        h.interval()
    ))
}

/// **S5** N clients log in at once for one key → exactly one remains online at the end;
/// every gen returned is distinct; each loser is kicked or self-evicts.
pub(crate) async fn s5_racing_logins(h: &mut Harness) -> Result<String, String> {
    let key = race_key();
    let names: Vec<String> = (1..=RACERS).map(|i| format!("R{i}")).collect();
    for name in &names {
        h.spawn_client(name, &key).await?;
    }
    // All commands go out before any answer is read: the logins race on the server.
    for name in &names {
        h.client(name)?.send("login")?;
    }
    let mut gens = Vec::with_capacity(RACERS);
    let mut attempts = 0;
    for name in &names {
        let client = h.client(name)?;
        let line = client
            .expect_any(&["LOGGED_IN", "LOGIN_FAILED"], WAIT)
            .await?;
        ensure(line.name == "LOGGED_IN", || {
            format!("{name}'s login failed: {}", line.raw())
        })?;
        gens.push(line.int("gen")?);
        attempts += line.int("attempts")?;
    }
    let distinct: BTreeSet<i64> = gens.iter().copied().collect();
    ensure(distinct.len() == RACERS, || {
        format!("gens are not distinct: {gens:?}")
    })?;
    let top = *distinct.last().expect("RACERS > 0");
    let winner = names[gens.iter().position(|g| *g == top).expect("top is in gens")].clone();

    let (mut kicked, mut evicted, mut last_gone) = (0, 0, 0);
    for (name, generation) in names.iter().zip(&gens) {
        if name == &winner {
            continue;
        }
        let client = h.client(name)?;
        let gone = client
            .expect_any(&["DESTROYED", "EVICTED"], WAIT)
            .await
            .map_err(|e| format!("{e}: loser {name} (gen {generation}) is still online"))?;
        want(&gone, name, &[("local_gen", &generation.to_string())])?;
        if gone.name == "DESTROYED" {
            kicked += 1;
        } else {
            want(&gone, name, &[("reason", "gen-mismatch")])?;
            evicted += 1;
        }
        last_gone = last_gone.max(gone.t_micros);
    }

    // The winner stays: a heartbeat check made after every loser left confirms its gen,
    // and it was never destroyed or evicted.
    let top_text = top.to_string();
    let client = h.client(&winner)?;
    loop {
        let check = client.expect("CHECK", WAIT).await?;
        if check.t_micros > last_gone {
            want(&check, &winner, &[("gen", &top_text), ("owner", "true")])?;
            break;
        }
    }
    none_since(h, &winner, 0, &["DESTROYED", "EVICTED"]).await?;
    let view = h
        .transport
        .current(&key)
        .await
        .map_err(|e| format!("current failed: {e}"))?;
    let winner_endpoint = h.last(&winner, "LISTENING")?.field("endpoint")?.to_owned();
    ensure(
        view.generation == top && view.owner.is_some_and(|o| o.endpoint == winner_endpoint),
        || {
            format!(
                "the server holds gen {}, expected {winner}'s gen {top}",
                view.generation
            )
        },
    )?;
    let mut sorted = gens.clone();
    sorted.sort_unstable();
    Ok(format!(
        "{RACERS} logins, gens {sorted:?} distinct ({attempts} claim attempts); {winner} (gen {top}) online; {kicked} kicked, {evicted} self-evicted"
    ))
}

/// **S6** logout → tombstone; the released session's heartbeat evicts with `owner-empty`;
/// the next login gets the next gen (never reset); a release with a stale gen returns
/// `released = false`; a node's own logout releases without an eviction.
pub(crate) async fn s6_logout(h: &mut Harness) -> Result<String, String> {
    let key = story_key();
    let client = h.client("D")?;
    client.sync(WAIT).await?;
    let mark = client.history().len();
    // D's session is released by someone else (as an account service or an admin would):
    // D's runtime only learns of it through its heartbeat.
    let released = h
        .transport
        .release(&key, 4)
        .await
        .map_err(|e| format!("the release of gen 4 failed: {e}"))?;
    ensure(released, || "the release of gen 4 returned false".into())?;
    let evicted = h.client("D")?.expect("EVICTED", WAIT).await?;
    want(
        &evicted,
        "D",
        &[("local_gen", "4"), ("reason", "owner-empty")],
    )?;

    let view = h
        .transport
        .current(&key)
        .await
        .map_err(|e| format!("current failed: {e}"))?;
    ensure(
        view.exists && view.owner.is_none() && view.generation == 4,
        || format!("expected a tombstone at gen 4, found {view:?}"),
    )?;
    let stale = h
        .transport
        .release(&key, 3)
        .await
        .map_err(|e| format!("the stale release failed: {e}"))?;
    ensure(!stale, || {
        "a release with the stale gen 3 returned true".into()
    })?;

    h.spawn_client("E", &key).await?;
    let e = login(h, "E", "login").await?;
    want(
        &e,
        "E",
        &[
            ("gen", "5"),
            ("prev_gen", "4"),
            ("has_prev", "false"),
            ("kicked", "false"),
            ("kick_detail", "none"),
            ("replayed", "false"),
        ],
    )?;
    // A tombstone has nothing to kick.
    none_since(h, "D", mark, &["KICK"]).await?;

    // E logs itself out: released, and its heartbeat stops with it instead of evicting.
    let client = h.client("E")?;
    let mark = client.history().len();
    client.send("logout")?;
    let out = client
        .expect_any(&["LOGGED_OUT", "LOGOUT_FAILED"], WAIT)
        .await?;
    want(&out, "E", &[("gen", "5"), ("released", "true")])?;
    none_since(h, "E", mark, &["EVICTED"]).await?;
    Ok("gen 4 released: D evicted owner-empty; stale release (gen 3) false; E gen 5 after the tombstone, no kick; E logged out, released".into())
}
