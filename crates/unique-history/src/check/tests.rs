//! The checker on hand-made histories: each rule kept and broken, slots and listings,
//! and how a violation reads.

use std::time::{Duration, Instant};

use super::*;
use crate::history::Outcome;

/// Builds hand-made histories on the slots of one user (the default slot unless
/// [`on`](Self::on) says otherwise), with times in milliseconds from one origin.
struct Script {
    origin: Instant,
    ops: Vec<Op>,
    slot: &'static str,
}

impl Script {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            ops: Vec::new(),
            slot: "",
        }
    }

    /// The operations that follow are on `slot`.
    fn on(mut self, slot: &'static str) -> Self {
        self.slot = slot;
        self
    }

    /// A listing of the user answered with these `(slot, gen, holder)`.
    fn list(self, span: (u64, u64), sessions: &[(&str, i64, &str)]) -> Self {
        let sessions = sessions
            .iter()
            .map(|&(slot, generation, holder)| crate::history::Listed {
                slot: slot.to_owned(),
                generation,
                holder: holder.to_owned(),
            })
            .collect();
        let slot = self.slot;
        self.on("")
            .op(span, OpKind::List, Outcome::Listed { sessions })
            .on(slot)
    }

    fn op(mut self, span: (u64, u64), kind: OpKind, outcome: Outcome) -> Self {
        let at = |ms| self.origin + Duration::from_millis(ms);
        self.ops.push(Op {
            id: self.ops.len(),
            client: self.ops.len(),
            key: Key::new("p", "e", 1).with_slot(self.slot),
            kind,
            start: at(span.0),
            end: at(span.1),
            outcome,
        });
        self
    }

    fn claim(self, span: (u64, u64), claim_id: &str, generation: i64) -> Self {
        self.op(
            span,
            claim(claim_id),
            Outcome::Claimed {
                generation,
                replayed: false,
            },
        )
    }

    fn replayed(self, span: (u64, u64), claim_id: &str, generation: i64) -> Self {
        self.op(
            span,
            OpKind::Replay {
                claim_id: claim_id.into(),
            },
            Outcome::Claimed {
                generation,
                replayed: true,
            },
        )
    }

    fn read(self, span: (u64, u64), generation: i64, holder: Option<&str>) -> Self {
        self.op(
            span,
            OpKind::Read,
            Outcome::Read {
                generation,
                holder: holder.map(str::to_owned),
            },
        )
    }

    fn release(self, span: (u64, u64), generation: i64, released: bool) -> Self {
        self.op(
            span,
            OpKind::Release { generation },
            Outcome::Released { released },
        )
    }

    fn lost(self, span: (u64, u64), kind: OpKind) -> Self {
        self.op(span, kind, Outcome::Indeterminate("timeout".into()))
    }

    fn check(self) -> Vec<Violation> {
        check(&History::new(self.ops))
    }
}

fn claim(claim_id: &str) -> OpKind {
    OpKind::Claim {
        claim_id: claim_id.into(),
    }
}

fn rules(violations: &[Violation]) -> Vec<Rule> {
    violations.iter().map(|v| v.rule).collect()
}

#[test]
fn a_correct_history_has_no_violation() {
    let violations = Script::new()
        .read((0, 1), 0, None)
        .claim((2, 4), "a", 1)
        .replayed((5, 6), "a", 1)
        .read((5, 7), 1, Some("a"))
        // Two concurrent claims: either order is fine.
        .claim((8, 12), "b", 3)
        .claim((9, 11), "c", 2)
        .read((13, 14), 3, Some("b"))
        .release((15, 16), 3, true)
        .read((17, 18), 3, None)
        .release((17, 18), 2, false)
        .claim((19, 20), "d", 4)
        // A read concurrent with a claim may see either side of it.
        .claim((21, 30), "e", 5)
        .read((22, 23), 4, Some("d"))
        .read((24, 25), 5, Some("e"))
        .check();
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn a_claim_that_does_not_climb_above_a_finished_claim_breaks_a() {
    let violations = Script::new()
        .claim((0, 1), "a", 2)
        .claim((2, 3), "b", 2)
        .check();
    assert!(
        rules(&violations).contains(&Rule::ClaimAbove),
        "{violations:#?}"
    );
    // The same gen under two claim_ids also breaks (c).
    assert!(rules(&violations).contains(&Rule::OneClaimPerGen));

    let below = Script::new()
        .read((0, 1), 4, Some("x"))
        .lost((0, 0), claim("x"))
        .claim((2, 3), "b", 3)
        .check();
    assert_eq!(rules(&below), [Rule::ClaimAbove], "{below:#?}");
    assert!(below[0].message.contains("gen 4"), "{}", below[0]);
}

#[test]
fn a_read_that_goes_back_breaks_b() {
    let violations = Script::new()
        .claim((0, 1), "a", 5)
        .read((2, 3), 4, Some("z"))
        .lost((0, 0), claim("z"))
        .check();
    assert_eq!(rules(&violations), [Rule::NoGoingBack], "{violations:#?}");
    assert_eq!(violations[0].ops.len(), 2);

    // A replay that answers an older gen than one already seen goes back too.
    let replay = Script::new()
        .claim((0, 1), "a", 1)
        .read((2, 3), 2, Some("b"))
        .claim((1, 2), "b", 2)
        .replayed((4, 5), "a", 1)
        .check();
    assert!(rules(&replay).contains(&Rule::NoGoingBack), "{replay:#?}");
}

#[test]
fn two_claim_ids_at_one_gen_break_c() {
    // Concurrent, so only (c) can see it.
    let violations = Script::new()
        .claim((0, 10), "a", 1)
        .claim((1, 9), "b", 1)
        .check();
    assert_eq!(
        rules(&violations),
        [Rule::OneClaimPerGen],
        "{violations:#?}"
    );

    // A replay that answers a gen another claim_id holds.
    let replay = Script::new()
        .claim((0, 1), "a", 1)
        .claim((2, 3), "b", 2)
        .replayed((2, 9), "a", 2)
        .check();
    // The claim_id is seen at two gens too.
    assert_eq!(
        rules(&replay),
        [Rule::OneClaimPerGen, Rule::OneGenPerClaim],
        "{replay:#?}"
    );
}

#[test]
fn a_read_of_a_claim_id_nobody_could_have_written_breaks_c() {
    // Nobody sent "ghost".
    let ghost = Script::new().read((0, 1), 1, Some("ghost")).check();
    assert_eq!(rules(&ghost), [Rule::OneClaimPerGen], "{ghost:#?}");
    // "a" was sent only after the read ended.
    let early = Script::new()
        .read((0, 1), 1, Some("a"))
        .claim((2, 3), "a", 2)
        .check();
    // The claim_id is seen at two gens too.
    assert_eq!(
        rules(&early),
        [Rule::OneClaimPerGen, Rule::OneGenPerClaim],
        "{early:#?}"
    );
    // "a" answered gen 1, so it never wrote gen 3.
    let other = Script::new()
        .claim((0, 1), "a", 1)
        .read((0, 5), 3, Some("a"))
        .check();
    // The claim_id is seen at two gens too.
    assert_eq!(
        rules(&other),
        [Rule::OneClaimPerGen, Rule::OneGenPerClaim],
        "{other:#?}"
    );
}

#[test]
fn a_released_gen_read_as_held_breaks_d() {
    let violations = Script::new()
        .claim((0, 1), "a", 1)
        .release((2, 3), 1, true)
        .read((4, 5), 1, Some("a"))
        .check();
    assert_eq!(
        rules(&violations),
        [Rule::ReleasedIsTombstone],
        "{violations:#?}"
    );
    // A release that did not hold says nothing.
    let refused = Script::new()
        .claim((0, 1), "a", 1)
        .release((2, 3), 1, false)
        .read((4, 5), 1, Some("a"))
        .check();
    assert!(refused.is_empty(), "{refused:#?}");
}

#[test]
fn indeterminate_operations_constrain_nothing_but_explain_values() {
    let violations = Script::new()
        // A claim whose answer was lost wrote gen 1 after all; its claim_id is seen.
        .lost((0, 1), claim("a"))
        .read((2, 3), 1, Some("a"))
        // A lost release: its gen may or may not be a tombstone.
        .lost((4, 5), OpKind::Release { generation: 1 })
        .read((6, 7), 1, Some("a"))
        // A lost read observed nothing.
        .lost((8, 9), OpKind::Read)
        .read((10, 11), 1, Some("a"))
        // A claim retried after a lost answer is told it holds the key already.
        .replayed((12, 13), "a", 1)
        .check();
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn one_claim_that_writes_twice_breaks_e() {
    // "a" wrote gen 1 (answer lost inside the server), "b" wrote 2, and a retry of "a"
    // wrote 3: the retry kicked the newer session. C9 answers it superseded instead.
    let violations = Script::new()
        .claim((0, 10), "a", 3)
        .claim((1, 2), "b", 2)
        .read((0, 1), 1, Some("a"))
        .check();
    assert_eq!(
        rules(&violations),
        [Rule::OneGenPerClaim],
        "{violations:#?}"
    );
    assert!(
        violations[0].message.contains("gens: 3 and 1"),
        "{}",
        violations[0]
    );

    let superseded = Script::new()
        .lost((0, 1), claim("a"))
        .read((2, 3), 1, Some("a"))
        .claim((4, 5), "b", 2)
        .op(
            (6, 7),
            OpKind::Replay {
                claim_id: "a".into(),
            },
            Outcome::Superseded {
                generation: 1,
                current: 2,
            },
        )
        .check();
    assert!(superseded.is_empty(), "{superseded:#?}");
}

#[test]
fn a_claim_superseded_in_its_own_request_may_have_written_its_gen() {
    // "a" wrote gen 1, its answer was lost inside the server, "b" wrote 2, and a's
    // next attempt found itself replaced: a read in between saw gen 1 held by "a".
    let violations = Script::new()
        .op(
            (0, 10),
            claim("a"),
            Outcome::Superseded {
                generation: 1,
                current: 2,
            },
        )
        .read((1, 2), 1, Some("a"))
        .claim((3, 4), "b", 2)
        .check();
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn a_retry_after_the_window_is_a_new_login() {
    // Nine wins after "a" at gen 1: the record no longer remembers it, so its retry
    // is a new login (gen 11), as documented.
    let mut script = Script::new().claim((0, 1), "a", 1);
    for generation in 2..=10 {
        let at = u64::try_from(generation).unwrap() * 2;
        script = script.claim((at, at + 1), &format!("c{generation}"), generation);
    }
    let beyond = script.claim((30, 31), "a", 11).check();
    assert!(beyond.is_empty(), "{beyond:#?}");

    let within = Script::new()
        .claim((0, 1), "a", 1)
        .claim((2, 3), "b", 2)
        .claim((4, 5), "a", 3)
        .check();
    assert_eq!(rules(&within), [Rule::OneGenPerClaim], "{within:#?}");
}

#[test]
fn each_slot_is_checked_on_its_own() {
    // Each slot climbs from gen 1 on its own, claim_ids and all: no rule relates them.
    let two_slots = Script::new()
        .claim((0, 1), "a", 5)
        .on("mobile")
        .claim((2, 3), "b", 1)
        .read((4, 5), 1, Some("b"))
        .on("")
        .read((6, 7), 5, Some("a"))
        .check();
    assert!(two_slots.is_empty(), "{two_slots:#?}");
    // The same operations on one key break (a) and (b).
    let one_key = Script::new()
        .claim((0, 1), "a", 5)
        .claim((2, 3), "b", 1)
        .read((4, 5), 1, Some("b"))
        .read((6, 7), 5, Some("a"))
        .check();
    assert!(rules(&one_key).contains(&Rule::ClaimAbove), "{one_key:#?}");
    assert!(rules(&one_key).contains(&Rule::NoGoingBack), "{one_key:#?}");
    // A claim_id seen on another slot than the one it was sent to was never written there.
    let crossed = Script::new()
        .claim((0, 1), "a", 1)
        .on("mobile")
        .read((2, 3), 1, Some("a"))
        .check();
    assert_eq!(rules(&crossed), [Rule::OneClaimPerGen], "{crossed:#?}");
    assert_eq!(crossed[0].key, Key::new("p", "e", 1).with_slot("mobile"));
}

#[test]
fn a_listing_is_judged_as_a_read_of_each_slot_it_lists() {
    let correct = Script::new()
        .claim((0, 1), "a", 1)
        .on("mobile")
        .claim((2, 3), "b", 1)
        .list((4, 5), &[("", 1, "a"), ("mobile", 1, "b")])
        .release((6, 7), 1, true)
        .list((8, 9), &[("", 1, "a")])
        .check();
    assert!(correct.is_empty(), "{correct:#?}");
    // A listing that shows an older gen of a slot than one already answered.
    let back = Script::new()
        .on("mobile")
        .claim((0, 1), "a", 1)
        .claim((2, 3), "b", 2)
        .list((4, 5), &[("mobile", 1, "a")])
        .check();
    assert_eq!(rules(&back), [Rule::NoGoingBack], "{back:#?}");
    assert_eq!(back[0].key, Key::new("p", "e", 1).with_slot("mobile"));
    assert!(
        back[0]
            .to_string()
            .contains("#2 client 2 list -> gen 1 held by a"),
        "{}",
        back[0]
    );
    // A listing that shows a released session.
    let released = Script::new()
        .on("mobile")
        .claim((0, 1), "a", 1)
        .release((2, 3), 1, true)
        .list((4, 5), &[("mobile", 1, "a")])
        .check();
    assert_eq!(
        rules(&released),
        [Rule::ReleasedIsTombstone],
        "{released:#?}"
    );
    // A listing that puts a slot's session on another slot.
    let misplaced = Script::new()
        .on("mobile")
        .claim((0, 1), "a", 1)
        .list((2, 3), &[("", 1, "a")])
        .check();
    assert_eq!(rules(&misplaced), [Rule::OneClaimPerGen], "{misplaced:#?}");
}

#[test]
fn violations_name_the_rule_and_the_operations() {
    let violations = Script::new()
        .claim((0, 1), "a", 5)
        .read((2, 3), 4, Some("a"))
        .check();
    let shown = violations
        .iter()
        .find(|v| v.rule == Rule::NoGoingBack)
        .expect("(b) fires")
        .to_string();
    assert!(shown.starts_with("[reads never go back] p#e#1:"), "{shown}");
    assert!(shown.contains("#0 client 0 claim a -> gen 5"), "{shown}");
    assert!(
        shown.contains("#1 client 1 read -> gen 4 held by a"),
        "{shown}"
    );
}
