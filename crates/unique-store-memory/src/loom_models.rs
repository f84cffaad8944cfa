//! Loom models of the fenced-write primitive in `table.rs` and of the pool of
//! shared owners in `owners.rs`.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p unique-store-memory --lib loom`.
//! Each model explores every interleaving of its threads' lock acquisitions and
//! prints how many it explored (`--nocapture` shows them). The broken variants
//! (a read-then-write claim, a write-first claim that checks and writes in two
//! steps, a listing read slot by slot, an owner looked up and added in two steps)
//! prove the invariant checks can fail.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};

use loom::sync::Arc;
use loom::thread;
use unique_core::{CasOutcome, Fence, Key, Owner, OwnerState, RecentClaims, UserKey, VacantClaim};

use crate::owners::Owners;
use crate::record::{Held, OwnerAttr, Record, state_of};
use crate::table::Table;

/// The message every "exactly one winner" violation carries.
const ONE_WINNER: &str = "invariant violated: exactly one claim from one snapshot may win";

/// The message of two records of one owner holding two copies of it.
const ONE_COPY: &str = "invariant violated: the sessions of one owner share one copy of it";

/// The message of a listing that mixes records from before and after a write.
const ONE_LISTING: &str =
    "invariant violated: a listing reads all of a user's records at one point";

fn key() -> Key {
    Key::new("p", "e", 1)
}

/// The fence of a claim from `snap` (no model comes near an exhausted gen).
fn fence(snap: &OwnerState) -> Fence<'_> {
    Fence::for_snapshot(snap).expect("gen not exhausted")
}

/// The gen a claim wrote, `None` when it lost the race.
fn written(outcome: &CasOutcome) -> Option<i64> {
    match outcome {
        CasOutcome::Written { generation } => Some(*generation),
        CasOutcome::LostRace { .. } => None,
    }
}

fn owner(claim_id: &str) -> Owner {
    Owner::new("r", "c", format!("http://{claim_id}/kick"))
}

/// A session as a raw write stores it.
fn session(generation: i64, claim_id: &str) -> Record {
    Record::raw(
        generation,
        OwnerAttr::Valid(owner(claim_id)),
        Some(claim_id),
        &RecentClaims::from_wins([(claim_id, generation)]),
    )
}

/// A claim as the store makes it: the fence and the list of wins from `snap`.
fn claim(table: &Table, key: &Key, snap: &OwnerState, claim_id: &str) -> CasOutcome {
    table.claim(
        key,
        fence(snap),
        &owner(claim_id),
        claim_id,
        &snap.recent_claims,
    )
}

/// A one-shard table holding `initial` for [`key`], and the snapshot a reader sees.
fn table_with(initial: Option<Record>) -> (Arc<Table>, OwnerState) {
    let table = Table::with_shards(1);
    if let Some(record) = initial {
        table.put(&key(), record);
    }
    let snap = table.read_with(&key(), state_of);
    (Arc::new(table), snap)
}

/// Runs `body` under loom and returns how many interleavings it explored.
fn explore(name: &str, body: impl Fn() + Send + Sync + 'static) -> usize {
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&runs);
    loom::model(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        body();
    });
    let explored = runs.load(Ordering::Relaxed);
    eprintln!("loom model {name}: {explored} interleavings explored");
    explored
}

/// `n` threads claim from the same snapshot of `initial`; exactly one wins with
/// `expected` and the stored record is the winner's.
fn claimers_from_one_snapshot(n: usize, initial: Option<Record>, expected: i64) {
    let (table, snap) = table_with(initial);
    let snap = std::sync::Arc::new(snap);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let table = Arc::clone(&table);
            let snap = std::sync::Arc::clone(&snap);
            thread::spawn(move || {
                let claim_id = format!("t{i}");
                let result = claim(&table, &key(), &snap, &claim_id);
                (claim_id, result)
            })
        })
        .collect();
    let results: Vec<(String, CasOutcome)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    let winners: Vec<_> = results
        .iter()
        .filter(|(_, r)| written(r).is_some())
        .collect();
    assert_eq!(winners.len(), 1, "{ONE_WINNER}");
    let (winner, won) = winners[0];
    assert_eq!(
        written(won),
        Some(expected),
        "gen must advance by exactly one"
    );
    let stored = table.read_with(&key(), state_of);
    assert_eq!(stored.generation, expected);
    assert_eq!(stored.claim_id.as_deref(), Some(winner.as_str()));
    for (_, result) in &results {
        // Losers fail on the condition and see the winner's record.
        match result {
            CasOutcome::Written { .. } => {}
            CasOutcome::LostRace {
                current: Some(seen),
            } => assert_eq!(*seen, stored),
            other @ CasOutcome::LostRace { .. } => {
                panic!("a loser must see the lost race with the record, got {other:?}")
            }
        }
    }
}

#[test]
fn loom_two_claimers_first_login() {
    let explored = explore("two claimers, first login", || {
        claimers_from_one_snapshot(2, None, 1);
    });
    assert!(explored > 1);
}

#[test]
fn loom_three_claimers_double_pin() {
    let explored = explore("three claimers, double pin", || {
        claimers_from_one_snapshot(3, Some(session(5, "old")), 6);
    });
    assert!(explored > 2);
}

#[test]
fn loom_three_claimers_tombstone() {
    let tombstone = tombstone(9);
    let explored = explore("three claimers, tombstone", move || {
        claimers_from_one_snapshot(3, Some(tombstone.clone()), 10);
    });
    assert!(explored > 2);
}

/// A write-first claim (`vacant`, C11) races a fenced claim from the same snapshot of
/// `initial` (absent, or a tombstone at `expected - 1`): exactly one writes, at
/// `expected`, and the stored record is the winner's.
fn vacant_claim_races_a_fenced_claim(
    initial: Option<Record>,
    expected: i64,
    vacant: fn(&Table, &Key, &Owner, &str) -> VacantClaim,
) {
    let (table, snap) = table_with(initial);
    let fenced = {
        let table = Arc::clone(&table);
        thread::spawn(move || written(&claim(&table, &key(), &snap, "f")).map(|g| ("f", g)))
    };
    let first = {
        let table = Arc::clone(&table);
        thread::spawn(move || match vacant(&table, &key(), &owner("v"), "v") {
            VacantClaim::Written { generation } => Some(("v", generation)),
            VacantClaim::Occupied(seen) => {
                // Only the fenced claim can have made the record not vacant.
                assert_eq!(seen.claim_id.as_deref(), Some("f"));
                None
            }
            VacantClaim::Unread => panic!("this store always hands back the record"),
        })
    };
    let winners: Vec<_> = [fenced.join().unwrap(), first.join().unwrap()]
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(winners.len(), 1, "{ONE_WINNER}");
    let (winner, generation) = winners[0];
    assert_eq!(generation, expected, "gen must advance by exactly one");
    let stored = table.read_with(&key(), state_of);
    assert_eq!(
        (stored.generation, stored.claim_id.as_deref()),
        (expected, Some(winner))
    );
}

fn tombstone(generation: i64) -> Record {
    Record::raw(generation, OwnerAttr::Empty, None, &RecentClaims::new())
}

#[test]
fn loom_vacant_claim_races_a_fenced_claim() {
    let explored = explore("vacant claim racing a fenced claim, first login", || {
        vacant_claim_races_a_fenced_claim(None, 1, Table::claim_vacant);
    });
    assert!(explored > 1);
    let explored = explore("vacant claim racing a fenced claim, tombstone", || {
        vacant_claim_races_a_fenced_claim(Some(tombstone(4)), 5, Table::claim_vacant);
    });
    assert!(explored > 1);
}

/// **Broken on purpose**: checks the vacancy under one lock and writes under another, so
/// a fenced claim can win in between and be overwritten.
fn vacant_checked_then_written(
    table: &Table,
    key: &Key,
    _owner: &Owner,
    claim_id: &str,
) -> VacantClaim {
    let snap = table.read_with(key, state_of);
    if !VacantClaim::is_vacant(&snap, claim_id) {
        return VacantClaim::Occupied(snap);
    }
    let generation = fence(&snap).next_generation();
    table.put(key, session(generation, claim_id));
    VacantClaim::Written { generation }
}

#[test]
fn loom_rejects_a_vacant_claim_checked_then_written() {
    let message = violation_found("broken vacant check then write", || {
        vacant_claim_races_a_fenced_claim(None, 1, vacant_checked_then_written);
    });
    assert!(
        message.contains(ONE_WINNER),
        "the model failed for another reason: {message}"
    );
}

#[test]
fn loom_claim_races_release() {
    let explored = explore("claim racing release", || {
        let (table, snap) = table_with(Some(session(5, "a")));
        let release_thread = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.release(&key(), 5))
        };
        let claim_thread = {
            let table = Arc::clone(&table);
            thread::spawn(move || written(&claim(&table, &key(), &snap, "b")))
        };
        let released = release_thread.join().unwrap();
        let claimed = claim_thread.join().unwrap();
        let stored = table.read_with(&key(), state_of);
        // Both fences pin gen 5 and cid "a": whichever commits first voids the other.
        match (released, claimed) {
            (true, None) => {
                assert_eq!(
                    (stored.generation, stored.claim_id, stored.owner),
                    (5, None, None)
                );
            }
            (false, Some(6)) => {
                assert_eq!(
                    (stored.generation, stored.claim_id.as_deref()),
                    (6, Some("b"))
                );
            }
            other => panic!("claim and release must not both take effect: {other:?}"),
        }
    });
    assert!(explored > 1);
}

#[test]
fn loom_replay_races_new_claim() {
    let explored = explore("replay racing a new claim", || {
        // Session "a" already won gen 5 but its response was lost; it retries
        // (the Arbiter's steps 1-2, then 4) while "b" claims from the same record.
        let (table, snap) = table_with(Some(session(5, "a")));
        let retry = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let seen = table.read_with(&key(), state_of);
                if seen.owner.is_some() && seen.claim_id.as_deref() == Some("a") {
                    return (true, Some(seen.generation));
                }
                (false, written(&claim(&table, &key(), &seen, "a")))
            })
        };
        let newcomer = {
            let table = Arc::clone(&table);
            thread::spawn(move || written(&claim(&table, &key(), &snap, "b")))
        };
        let (replayed, retried) = retry.join().unwrap();
        let claimed = newcomer.join().unwrap();
        let stored = table.read_with(&key(), state_of);
        // The replay never writes, so the newcomer's fence always holds.
        assert_eq!(claimed, Some(6));
        if replayed {
            assert_eq!(retried, Some(5));
            assert_eq!(
                (stored.generation, stored.claim_id.as_deref()),
                (6, Some("b"))
            );
        } else {
            assert_eq!(retried, Some(7), "a retry after the takeover claims anew");
            assert_eq!(
                (stored.generation, stored.claim_id.as_deref()),
                (7, Some("a"))
            );
        }
    });
    assert!(explored > 1);
}

/// What a listing of user 1 saw: `(slot, gen)` of each session, sorted by slot.
type Listed = Vec<(String, i64)>;

/// The listing as the store makes it: one lock for the user's records and slot index.
fn list(table: &Table) -> Listed {
    let user = UserKey::new("p", "e", 1);
    let mut listed: Listed = table
        .sessions(&user)
        .expect("no corrupt owner")
        .into_iter()
        .map(|s| (s.slot, s.generation))
        .collect();
    listed.sort();
    listed
}

/// One thread logs in on a new slot `"pc"` (creating its record and its index entry),
/// then releases the default slot's session; another lists the user meanwhile. One
/// lock holds all of the user's records, so the listing sees the state before, between
/// or after the two writes, never the release without the claim before it, and the
/// listing after both sees both.
fn listing_racing_writes(list: fn(&Table) -> Listed) {
    let (table, _) = table_with(Some(session(5, "a")));
    let writer = {
        let table = Arc::clone(&table);
        thread::spawn(move || {
            let pc = key().with_slot("pc");
            let absent = OwnerState::absent();
            let won = claim(&table, &pc, &absent, "b");
            assert_eq!(written(&won), Some(1));
            assert!(table.release(&key(), 5));
        })
    };
    let lister = {
        let table = Arc::clone(&table);
        thread::spawn(move || list(&table))
    };
    writer.join().unwrap();
    let seen = lister.join().unwrap();
    let at = |states: &[(&str, i64)]| -> Listed {
        states.iter().map(|(s, g)| ((*s).to_owned(), *g)).collect()
    };
    let points = [at(&[("", 5)]), at(&[("", 5), ("pc", 1)]), at(&[("pc", 1)])];
    assert!(points.contains(&seen), "{ONE_LISTING}: saw {seen:?}");
    assert_eq!(
        list(&table),
        points[2],
        "the listing after both writes sees both"
    );
}

#[test]
fn loom_listing_races_a_new_slot_and_a_release() {
    let explored = explore("listing racing a new slot and a release", || {
        listing_racing_writes(list);
    });
    assert!(explored > 1);
}

/// A listing made of one read per slot, each under its own lock: it can read the
/// default slot after the release and slot `"pc"` before the claim that preceded it.
fn list_slot_by_slot(table: &Table) -> Listed {
    let mut listed = Listed::new();
    for slot in ["pc", ""] {
        let state = table.read_with(&key().with_slot(slot), state_of);
        if state.owner.is_some() {
            listed.push((slot.to_owned(), state.generation));
        }
    }
    listed.sort();
    listed
}

#[test]
fn loom_rejects_a_listing_in_several_locks() {
    let message = violation_found("broken listing slot by slot", || {
        listing_racing_writes(list_slot_by_slot);
    });
    assert!(
        message.contains(ONE_LISTING),
        "the model failed for another reason: {message}"
    );
}

/// Runs a model that must fail and returns the message of its violation.
fn violation_found(name: &str, body: impl Fn() + Send + Sync + 'static) -> String {
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&runs);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        loom::model(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            body();
        });
    }));
    eprintln!(
        "loom model {name}: violation found at interleaving {}",
        runs.load(Ordering::Relaxed)
    );
    let payload = outcome.expect_err("the model must find the violation of the broken variant");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// The bug the fence exists to prevent: read, then write unconditionally, in two
/// critical sections. Two claimers from one snapshot can then both "win".
fn broken_claimers_from_one_snapshot() {
    let (table, snap) = table_with(None);
    let snap = std::sync::Arc::new(snap);
    let handles: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|claim_id| {
            let table = Arc::clone(&table);
            let snap = std::sync::Arc::clone(&snap);
            thread::spawn(move || {
                let fence = fence(&snap);
                if !table.read_with(&key(), |record| fence.holds(record.map(Record::pins))) {
                    return false;
                }
                table.put(&key(), session(fence.next_generation(), claim_id));
                true
            })
        })
        .collect();
    let winners = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|won| *won)
        .count();
    assert_eq!(winners, 1, "{ONE_WINNER}");
}

#[test]
fn loom_rejects_read_then_unconditional_write() {
    let message = violation_found("broken read-then-write", broken_claimers_from_one_snapshot);
    assert!(
        message.contains(ONE_WINNER),
        "the model failed for another reason: {message}"
    );
}

/// Two first sessions of one node start at once while the node's last session
/// ends (its owner interned, then dropped). Whatever the order, the two new
/// sessions share one copy of the owner, and it is the owner.
fn sessions_of_one_owner(session: fn(&Owners, &Owner) -> std::sync::Arc<Held>) {
    let owners = Arc::new(Owners::new());
    let ending = {
        let owners = Arc::clone(&owners);
        thread::spawn(move || drop(session(&owners, &owner("a"))))
    };
    let starting: Vec<_> = (0..2)
        .map(|_| {
            let owners = Arc::clone(&owners);
            thread::spawn(move || session(&owners, &owner("a")))
        })
        .collect();
    ending.join().unwrap();
    let held: Vec<_> = starting.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(*held[0], Held::Session(owner("a")));
    assert!(std::sync::Arc::ptr_eq(&held[0], &held[1]), "{ONE_COPY}");
}

#[test]
fn loom_sessions_of_one_owner_share_it() {
    let explored = explore("sessions of one owner", || {
        sessions_of_one_owner(Owners::session);
    });
    assert!(explored > 1);
}

#[test]
fn loom_rejects_an_owner_looked_up_then_added() {
    let message = violation_found("broken owner lookup then add", || {
        sessions_of_one_owner(Owners::session_looked_up_then_added);
    });
    assert!(
        message.contains(ONE_COPY),
        "the model failed for another reason: {message}"
    );
}
