//! The pooled checker on hand-made histories: a clean one, then each doctored to break one
//! rule (the history a broken server would give), which the checker must flag.

use std::collections::BTreeMap;
use std::time::Duration;

use unique_core::PoolPolicy::{self, DenyNew, EvictOldest};

use super::pool::{PoolRule, check_pool};
use crate::pool::{KickSeen, PoolHistory, PoolOp, PoolOpKind, PoolOutcome};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn claim(claim_id: &str, policy: PoolPolicy, at: u64, outcome: PoolOutcome) -> PoolOp {
    PoolOp {
        client: 0,
        uid: 1,
        kind: PoolOpKind::Claim {
            claim_id: claim_id.to_owned(),
            policy,
            limit: 2,
            replay: false,
        },
        invoked: ms(at),
        answered: ms(at + 5),
        outcome,
    }
}

/// A place granted: free (`prev` `None`), or taken from the session at `prev` (an eviction
/// with a confirmed kick).
fn won(slot: &str, generation: i64, prev: Option<i64>) -> PoolOutcome {
    PoolOutcome::Won {
        slot: slot.to_owned(),
        generation,
        replayed: false,
        evicted: prev.is_some(),
        has_prev: prev.is_some(),
        prev_generation: prev.unwrap_or(generation - 1),
        kicked: true,
        kick_detail: None,
        prev_node: String::new(),
    }
}

fn kick(slot: &str, generation: i64, at: u64) -> KickSeen {
    KickSeen {
        uid: 1,
        slot: slot.to_owned(),
        generation,
        reason: "login-elsewhere".to_owned(),
        at: ms(at),
    }
}

fn refused(sessions: &[(&str, i64)]) -> PoolOutcome {
    PoolOutcome::LimitReached {
        limit: 2,
        sessions: sessions
            .iter()
            .map(|(s, g)| ((*s).to_owned(), *g))
            .collect(),
    }
}

/// k = 2: a takes #0, b takes #1, c (deny-new) is refused naming both, d (evict-oldest)
/// kicks a and takes #0, then a's client releases its (replaced) session.
fn clean() -> PoolHistory {
    PoolHistory {
        ops: vec![
            claim("a", EvictOldest, 0, won("#0", 1, None)),
            claim("b", DenyNew, 10, won("#1", 1, None)),
            claim("c", DenyNew, 20, refused(&[("#0", 1), ("#1", 1)])),
            claim("d", EvictOldest, 30, won("#0", 2, Some(1))),
            PoolOp {
                client: 0,
                uid: 1,
                kind: PoolOpKind::Release {
                    slot: "#0".to_owned(),
                    generation: 1,
                },
                invoked: ms(40),
                answered: ms(41),
                outcome: PoolOutcome::Released { released: false },
            },
        ],
        kicks: vec![kick("#0", 2, 32)],
        push_nodes: BTreeMap::new(),
    }
}

fn rules(history: &PoolHistory) -> Vec<PoolRule> {
    let (violations, _) = check_pool(history);
    violations.iter().map(|v| v.rule).collect()
}

#[test]
fn a_clean_pooled_history_passes() {
    assert_eq!(check_pool(&clean()), (vec![], 0));
}

#[test]
fn a_third_session_granted_a_held_place_is_k_plus_one_online() {
    let mut history = clean();
    // e takes #1 "free" while b holds it: three sessions online with k = 2.
    history
        .ops
        .push(claim("e", DenyNew, 50, won("#1", 2, None)));
    let found = rules(&history);
    assert!(found.contains(&PoolRule::AtMostK), "{found:?}");
    assert!(found.contains(&PoolRule::OnePerPlace), "{found:?}");
}

#[test]
fn an_eviction_answered_before_its_kick_arrived_is_flagged() {
    let mut history = clean();
    history.kicks[0].at = ms(36);
    let found = rules(&history);
    assert!(found.contains(&PoolRule::EvictionKicksFirst), "{found:?}");
    // a was still online when d was granted #0.
    assert!(found.contains(&PoolRule::OnePerPlace), "{found:?}");
    history.kicks.clear();
    let found = rules(&history);
    assert!(found.contains(&PoolRule::EvictionKicksFirst), "{found:?}");
    // Without the kick, a stays online beside d on #0: three online.
    assert!(found.contains(&PoolRule::AtMostK), "{found:?}");
}

#[test]
fn a_deny_new_claim_that_evicts_is_flagged() {
    let mut history = clean();
    history.ops[3] = claim("d", DenyNew, 30, won("#0", 2, Some(1)));
    assert_eq!(rules(&history), vec![PoolRule::EvictionKicksFirst]);
}

#[test]
fn a_refusal_naming_a_replaced_session_or_too_few_is_flagged() {
    let mut history = clean();
    // f is refused after d replaced gen 1 of #0, yet names it.
    history
        .ops
        .push(claim("f", DenyNew, 60, refused(&[("#0", 1), ("#1", 1)])));
    assert_eq!(rules(&history), vec![PoolRule::RefusalNamesOnline]);
    history.ops.pop();
    history
        .ops
        .push(claim("f", DenyNew, 60, refused(&[("#0", 2)])));
    assert_eq!(rules(&history), vec![PoolRule::RefusalIsFull]);
    history.ops.pop();
    // A session no answer granted cannot be judged: counted, not flagged.
    history
        .ops
        .push(claim("f", DenyNew, 60, refused(&[("#0", 2), ("#1", 7)])));
    assert_eq!(check_pool(&history), (vec![], 1));
}

#[test]
fn two_claims_granted_one_gen_or_a_place_past_k_are_flagged() {
    let mut history = clean();
    history
        .ops
        .push(claim("g", EvictOldest, 70, won("#1", 1, None)));
    assert!(rules(&history).contains(&PoolRule::OneSessionPerGen));
    let mut history = clean();
    history
        .ops
        .push(claim("h", EvictOldest, 70, won("#2", 1, None)));
    assert!(rules(&history).contains(&PoolRule::PlaceWithinLimit));
}

/// Makes `history.ops[index]` (a granted claim) the eviction of a session of `node`, its
/// kick confirmed or failed.
fn evicts(history: &mut PoolHistory, index: usize, node: &str, kicked: bool) {
    if let PoolOutcome::Won {
        kicked: k,
        kick_detail,
        prev_node,
        ..
    } = &mut history.ops[index].outcome
    {
        *k = kicked;
        *kick_detail = (!kicked).then(|| "connect-error".to_owned());
        node.clone_into(prev_node);
    }
}

/// The report counts each eviction's kick by the evicted session's stream server: `d`
/// evicts `a` (node `n0`, on stream server 0) with its kick confirmed, then `e` evicts `b`
/// (node `n1`, on stream server 1) and its kick fails (`connect-error`).
#[test]
fn the_report_counts_evictions_kicks_per_stream_server() {
    let mut history = clean();
    history.push_nodes = BTreeMap::from([("n0".to_owned(), 0), ("n1".to_owned(), 1)]);
    evicts(&mut history, 3, "n0", true);
    history
        .ops
        .push(claim("e", EvictOldest, 50, won("#1", 2, Some(1))));
    evicts(&mut history, 5, "n1", false);
    let report = super::pool::PoolReport::new("scripted", &history);
    assert_eq!(report.violations, vec![], "{report}");
    assert_eq!((report.kicks_confirmed, report.kicks_unconfirmed), (1, 1));
    let counts = |confirmed, unconfirmed| super::pool::KickCounts {
        confirmed,
        unconfirmed,
    };
    assert_eq!(
        report.stream_servers,
        BTreeMap::from([(0, counts(1, 0)), (1, counts(0, 1))])
    );
    assert!(report.unconfirmed_kicks(|server| server == 0).is_empty());
    let failed = report.unconfirmed_kicks(|server| server == 1);
    assert_eq!(failed.len(), 1, "{report}");
    assert_eq!(
        (
            failed[0].node.as_str(),
            failed[0].stream_server,
            failed[0].prev_generation
        ),
        ("n1", Some(1), 1)
    );
    assert_eq!(failed[0].detail.as_deref(), Some("connect-error"));
    report.assert_kicks_confirmed(|server| server == 0);
    let all = std::panic::catch_unwind(|| report.assert_kicks_confirmed(|_| true))
        .expect_err("an unconfirmed kick to a node on stream server 1 passed");
    let message = all.downcast_ref::<String>().expect("a formatted panic");
    assert!(
        message.contains("1 evictions' kicks to live nodes not confirmed"),
        "{message}"
    );
}

/// Two takeovers of one place whose kicks both failed, the later answered first: `c` takes
/// `#0` from `a` (gen 2, answered at 50) and `d` takes it from `c` (gen 3, answered at 45).
/// `c`'s write presumed `a` offline before `d`'s write, so before `d`'s answer: `a` is not
/// online beside `d`, though `c`'s own answer came later (issue 46: push nodes' kicks fail
/// while their stream is elsewhere or down).
#[test]
fn a_session_presumed_offline_by_a_takeover_answered_late_ends_before_later_gens() {
    let unconfirmed = |generation, at| {
        let mut outcome = won("#0", generation, Some(generation - 1));
        if let PoolOutcome::Won {
            kicked,
            kick_detail,
            ..
        } = &mut outcome
        {
            *kicked = false;
            *kick_detail = Some("connect-error".to_owned());
        }
        let mut op = claim(&format!("g{generation}"), EvictOldest, at, outcome);
        op.answered = ms(at + 25);
        op
    };
    let history = PoolHistory {
        ops: vec![
            claim("a", EvictOldest, 0, won("#0", 1, None)),
            claim("b", EvictOldest, 10, won("#1", 1, None)),
            unconfirmed(2, 25),
            unconfirmed(3, 20),
        ],
        kicks: vec![],
        push_nodes: BTreeMap::new(),
    };
    assert_eq!(check_pool(&history), (vec![], 0));
}
