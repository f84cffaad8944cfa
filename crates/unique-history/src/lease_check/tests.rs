//! The checker on scripted one-room histories: each rule broken and kept, the counts
//! and the report.

use std::time::{Duration, Instant};

use super::*;
use crate::lease::{LeaseOpKind, LeaseSeen, NodeClock};

/// A scripted history in one room, times in ms after a common origin.
struct Script {
    t0: Instant,
    ops: Vec<LeaseOp>,
}

impl Script {
    fn new() -> Self {
        Self {
            t0: Instant::now(),
            ops: Vec::new(),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    fn op(
        mut self,
        node: &str,
        (sent, arrived): (u64, u64),
        kind: LeaseOpKind,
        outcome: LeaseOutcome,
    ) -> Self {
        self.ops.push(LeaseOp {
            id: self.ops.len(),
            node: node.to_owned(),
            room: "r".to_owned(),
            kind,
            sent: self.at(sent),
            arrived: self.at(arrived),
            outcome,
        });
        self
    }

    /// `node` asked and was told `holder` holds `token` at `epoch` with `left` ms left
    /// (its deadline: the send plus that).
    fn ensure(
        self,
        node: &str,
        at: (u64, u64),
        holder: &str,
        token: &str,
        epoch: u64,
        left: u64,
    ) -> Self {
        let seen = LeaseSeen {
            node: holder.to_owned(),
            token: token.to_owned(),
            epoch,
            ttl_left: Duration::from_millis(left),
            deadline: self.at(at.0 + left),
        };
        let ttl = Duration::from_millis(left);
        self.op(
            node,
            at,
            LeaseOpKind::Ensure { ttl },
            LeaseOutcome::Lease(seen),
        )
    }

    /// `node` was granted (or renewed) `token`.
    fn holds(self, node: &str, at: (u64, u64), token: &str, epoch: u64, left: u64) -> Self {
        self.ensure(node, at, node, token, epoch, left)
    }

    /// The last operation (an ensure) asked for `ttl` ms, whatever it was told.
    fn asking(mut self, ttl: u64) -> Self {
        let last = self.ops.last_mut().expect("an operation to amend");
        last.kind = LeaseOpKind::Ensure {
            ttl: Duration::from_millis(ttl),
        };
        self
    }

    fn lost_ensure(self, node: &str, at: (u64, u64)) -> Self {
        let ttl = Duration::from_millis(10);
        self.op(
            node,
            at,
            LeaseOpKind::Ensure { ttl },
            LeaseOutcome::Indeterminate("timeout".into()),
        )
    }

    fn verify(self, node: &str, at: (u64, u64), token: &str, held: bool) -> Self {
        let kind = LeaseOpKind::Verify {
            token: token.into(),
        };
        self.op(node, at, kind, LeaseOutcome::Verified(held))
    }

    fn release(self, node: &str, at: (u64, u64), token: &str, released: bool) -> Self {
        let kind = LeaseOpKind::Release {
            token: token.into(),
        };
        self.op(node, at, kind, LeaseOutcome::Released(released))
    }

    fn freeze(self, node: &str, at: (u64, u64), token: &str) -> Self {
        let kind = LeaseOpKind::Freeze {
            token: token.into(),
        };
        self.op(node, at, kind, LeaseOutcome::Froze)
    }

    fn history(&self) -> LeaseHistory {
        let clocks = ["a", "b", "c"]
            .map(|n| (n.to_owned(), NodeClock { offset_ms: 0 }))
            .to_vec();
        LeaseHistory::new(self.ops.clone(), clocks)
    }

    fn check(&self) -> Vec<LeaseViolation> {
        check_leases(&self.history())
    }
}

fn rules(violations: &[LeaseViolation]) -> Vec<LeaseRule> {
    violations.iter().map(|v| v.rule).collect()
}

#[test]
fn a_handover_after_the_deadline_or_a_release_is_clean() {
    let expired = Script::new()
        .holds("a", (0, 1), "t1", 1, 10)
        .holds("b", (11, 12), "t2", 2, 10)
        .check();
    assert!(expired.is_empty(), "{expired:#?}");
    // The release was sent before b's grant arrived: a stopped acting when it sent it.
    let released = Script::new()
        .holds("a", (0, 1), "t1", 1, 100)
        .release("a", (5, 7), "t1", true)
        .holds("b", (6, 8), "t2", 2, 100)
        .check();
    assert!(released.is_empty(), "{released:#?}");
}

#[test]
fn two_holdings_in_force_at_once_break_the_overlap_rule() {
    let violations = Script::new()
        .holds("a", (0, 1), "t1", 1, 10)
        .holds("b", (5, 6), "t2", 2, 10)
        .check();
    assert_eq!(rules(&violations), [LeaseRule::Overlap], "{violations:#?}");
    let shown = violations[0].to_string();
    assert!(
        shown.starts_with(
            "[one holding in force at a time] r: epoch 1 (a token t1) and epoch 2 (b token t2) \
             both in force for 4.000ms"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("#0 a ensure r ttl 10ms -> held by a epoch 1 token t1"),
        "{shown}"
    );
}

#[test]
fn a_renewal_extends_the_holding_until_its_own_deadline() {
    let renewed = Script::new()
        .holds("a", (0, 1), "t1", 1, 10)
        .holds("a", (8, 9), "t1", 1, 10)
        .holds("b", (15, 16), "t2", 2, 10)
        .check();
    assert_eq!(rules(&renewed), [LeaseRule::Overlap], "{renewed:#?}");
    // A renewal arriving after the previous deadline (the store's expiry came later)
    // puts the holding in force again from its arrival, not across the gap.
    let late = Script::new()
        .holds("a", (0, 1), "t1", 1, 10)
        .holds("a", (9, 12), "t1", 1, 10)
        .holds("b", (10, 11), "t2", 2, 1)
        .check();
    assert!(late.is_empty(), "{late:#?}");
}

#[test]
fn only_the_holders_own_answers_put_a_holding_in_force() {
    // b was told a holds with more time left than a itself was (a asked for 50 ms, its
    // answer said 10 were left): a never acted on it.
    let violations = Script::new()
        .holds("a", (0, 1), "t1", 1, 10)
        .asking(50)
        .ensure("b", (2, 3), "a", "t1", 1, 50)
        .holds("c", (20, 21), "t2", 2, 10)
        .check();
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn a_frozen_holder_is_out_of_force_after_its_deadline() {
    let violations = Script::new()
        .holds("a", (0, 1), "t1", 1, 10)
        .freeze("a", (2, 40), "t1")
        .holds("b", (20, 21), "t2", 2, 10)
        .verify("a", (41, 42), "t1", false)
        .check();
    assert!(violations.is_empty(), "{violations:#?}");
    let counts = LeaseCounts::of(
        &Script::new()
            .holds("a", (0, 1), "t1", 1, 10)
            .holds("a", (5, 6), "t1", 1, 10)
            .freeze("a", (7, 40), "t1")
            .holds("b", (20, 21), "t2", 2, 10)
            .verify("a", (41, 42), "t1", false)
            .verify("b", (22, 23), "t2", true)
            .release("b", (24, 25), "t2", true)
            .holds("a", (26, 27), "t3", 3, 10)
            .history(),
    );
    assert_eq!(
        (
            counts.grants,
            counts.renewals,
            counts.takeovers,
            counts.released,
            counts.freezes
        ),
        (3, 1, 1, 1, 1),
        "{counts:?}"
    );
    assert_eq!((counts.verified_true, counts.verified_false), (1, 1));
    assert_eq!(counts.missing(), None);
    assert_eq!(counts.calls(), 7);
}

#[test]
fn a_verify_true_while_another_holding_is_in_force_is_stale() {
    let violations = Script::new()
        .holds("a", (0, 1), "t1", 1, 5)
        .holds("b", (10, 11), "t2", 2, 100)
        .verify("a", (20, 21), "t1", true)
        .check();
    assert_eq!(
        rules(&violations),
        [LeaseRule::StaleVerify],
        "{violations:#?}"
    );
    // A verify that may have been judged before the other holding was granted is not.
    let racing = Script::new()
        .holds("a", (0, 1), "t1", 1, 5)
        .verify("a", (9, 12), "t1", true)
        .holds("b", (10, 11), "t2", 2, 100)
        .check();
    assert!(racing.is_empty(), "{racing:#?}");
}

#[test]
fn a_superseded_token_is_never_answered_as_held() {
    // b's holding (epoch 2) was released; a's older token must stay dead.
    let verified = Script::new()
        .holds("a", (0, 1), "t1", 1, 5)
        .holds("b", (10, 11), "t2", 2, 100)
        .release("b", (12, 13), "t2", true)
        .verify("a", (20, 21), "t1", true)
        .check();
    assert_eq!(rules(&verified), [LeaseRule::StaleVerify], "{verified:#?}");
    assert!(
        verified[0]
            .message
            .contains("after epoch 2 (b token t2) had been seen"),
        "{}",
        verified[0]
    );
    let renewed = Script::new()
        .holds("a", (0, 1), "t1", 1, 5)
        .holds("b", (10, 11), "t2", 2, 100)
        .release("b", (12, 13), "t2", true)
        .holds("a", (20, 21), "t1", 1, 10)
        .check();
    assert_eq!(rules(&renewed), [LeaseRule::Revived], "{renewed:#?}");
    // A renewal sent before the later holding was seen may have been judged first.
    let racing = Script::new()
        .holds("a", (0, 1), "t1", 1, 5)
        .holds("a", (4, 12), "t1", 1, 10)
        .holds("b", (10, 11), "t2", 2, 5)
        .check();
    assert!(rules(&racing).contains(&LeaseRule::Overlap), "{racing:#?}");
    assert!(!rules(&racing).contains(&LeaseRule::Revived), "{racing:#?}");
}

#[test]
fn epochs_climb_in_grant_order() {
    let backwards = Script::new()
        .holds("a", (0, 1), "t1", 5, 3)
        .holds("b", (10, 11), "t2", 4, 3)
        .check();
    assert_eq!(rules(&backwards), [LeaseRule::EpochOrder], "{backwards:#?}");
    // Grants asked for at once may come out in either order.
    let concurrent = Script::new()
        .holds("a", (0, 10), "t1", 5, 1)
        .holds("b", (2, 3), "t2", 4, 1)
        .check();
    assert!(concurrent.is_empty(), "{concurrent:#?}");
    let shared = Script::new()
        .holds("a", (0, 1), "t1", 4, 3)
        .holds("b", (10, 11), "t2", 4, 3)
        .check();
    assert!(
        rules(&shared).contains(&LeaseRule::EpochOrder),
        "{shared:#?}"
    );
}

#[test]
fn a_grant_counts_from_the_holders_first_unanswered_ensure() {
    // a's first ensure went unanswered but granted t1 (epoch 1); the renewal tells a
    // later. Meanwhile b held epoch 2, seen before a's renewal was sent.
    let lost = Script::new()
        .lost_ensure("a", (0, 1))
        .holds("b", (5, 6), "t2", 2, 2)
        .holds("a", (20, 21), "t1", 1, 10)
        .check();
    assert!(lost.is_empty(), "{lost:#?}");
    let answered = Script::new()
        .holds("b", (5, 6), "t2", 2, 2)
        .holds("a", (20, 21), "t1", 1, 10)
        .check();
    assert_eq!(rules(&answered), [LeaseRule::EpochOrder], "{answered:#?}");
}

#[test]
fn no_answer_reports_more_left_than_the_ttl_granted() {
    // A step back of the store's clock: the holder asked for 1.5 s and was told 119 s.
    let holder = Script::new()
        .holds("a", (0, 1), "t1", 1, 119_000)
        .asking(1_500)
        .check();
    assert_eq!(rules(&holder), [LeaseRule::TtlLeft], "{holder:#?}");
    assert!(
        holder[0].to_string().starts_with(
            "[no more left than the ttl granted] r: a was told epoch 1 (a token t1) has \
             119s left, above the largest ttl its holder asked for (1.5s)"
        ),
        "{}",
        holder[0]
    );
    // Another node told so: the holder's ttls bound it too.
    let other = Script::new()
        .holds("a", (0, 1), "t1", 1, 100)
        .ensure("b", (10, 11), "a", "t1", 1, 118_000)
        .check();
    assert_eq!(rules(&other), [LeaseRule::TtlLeft], "{other:#?}");
    // A renewal never shortens: a renewal asking 20 ms may report the 100 ms still left.
    let renewed = Script::new()
        .holds("a", (0, 1), "t1", 1, 100)
        .holds("a", (10, 11), "t1", 1, 90)
        .asking(20)
        .ensure("b", (12, 13), "a", "t1", 1, 88)
        .check();
    assert!(renewed.is_empty(), "{renewed:#?}");
    // A ttl asked for an earlier holding does not bound a later one.
    let earlier = Script::new()
        .holds("a", (0, 1), "t1", 1, 500)
        .release("a", (2, 3), "t1", true)
        .holds("a", (10, 11), "t2", 2, 10)
        .ensure("b", (12, 13), "a", "t2", 2, 400)
        .check();
    assert_eq!(rules(&earlier), [LeaseRule::TtlLeft], "{earlier:#?}");
}

#[test]
fn a_token_belongs_to_one_holding() {
    let violations = Script::new()
        .holds("a", (0, 1), "t1", 1, 10)
        .ensure("b", (2, 3), "a", "t1", 2, 8)
        .ensure("c", (4, 5), "c", "t1", 1, 8)
        .check();
    assert_eq!(
        rules(&violations),
        [LeaseRule::OneTokenOneHolding],
        "{violations:#?}"
    );
    assert!(
        violations[0]
            .message
            .contains("as a epoch 1 in r and as a epoch 2 in r"),
        "{}",
        violations[0]
    );
}

#[test]
fn the_report_names_counts_and_violations() {
    let history = Script::new()
        .holds("a", (0, 1), "t1", 1, 10)
        .holds("b", (5, 6), "t2", 2, 10)
        .history();
    let report = LeaseReport::new("scripted", &history);
    let shown = report.to_string();
    assert!(
        shown.starts_with("lease history scripted: 2 calls in 6ms by 3 nodes"),
        "{shown}"
    );
    assert!(
        shown.contains("2 grants, 0 renewals, 1 takeovers"),
        "{shown}"
    );
    assert!(
        shown.contains("1 violations (1 × one holding in force at a time)"),
        "{shown}"
    );
    assert_eq!(report.violations_of(LeaseRule::Overlap), 1);
    assert_eq!(report.counts.missing(), Some("renewals"));
}
