//! The checker of pooled histories ([`PoolHistory`]): from the answers the clients saw and the
//! kicks the sessions' nodes received, in real time.
//!
//! A session is `(uid, place, gen)`. It is **online** from the first answer that granted it
//! until the first of: a kick of its place announcing a higher gen arrived at a node (it is
//! destroyed there), its client sent a release of it, or a later gen of its place was granted
//! by a takeover of it whose kick failed (the answer's `has_prev`, `prev_gen` and `kicked`:
//! presumed offline, I5b), at that answer or at the first answer granting that gen or a later
//! one of the place, if earlier (the takeover's write came before theirs). A later gen
//! granted as a free place, or by a takeover claiming a confirmed kick that never arrived,
//! ends nothing: the old session stays online, which is what a server granting a held place
//! looks like. Intervals are half-open, so a session whose end and another's start fall at
//! one instant never overlap. On that, per user:
//!
//! - [`PoolRule::AtMostK`]: never more than `k` sessions online at once;
//! - [`PoolRule::OnePerPlace`]: never two sessions of one place online at once;
//! - [`PoolRule::OneSessionPerGen`]: one claim_id per `(place, gen)` granted;
//! - [`PoolRule::PlaceWithinLimit`]: every place granted is `#0`..`#<k-1>`;
//! - [`PoolRule::EvictionKicksFirst`]: an eviction whose kick was confirmed has its kick
//!   (the place, announcing the winner's gen) arrive before the winner's answer, and only
//!   `evict-oldest` evicts;
//! - [`PoolRule::RefusalIsFull`]: a `limit_reached` names `k` sessions on `k` distinct places
//!   below `k`;
//! - [`PoolRule::RefusalNamesOnline`]: each session it names was in the store at some point
//!   in the refusal's interval: not granted only after the refusal was answered (its claim was
//!   sent before that), and not certainly replaced before the refusal was sent (a later gen of
//!   its place answered, or its release answered released, before). A named session no answer
//!   granted (its claim's answer was lost) cannot be judged and is counted, not flagged.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use unique_core::PoolPolicy;

use crate::pool::{PoolHistory, PoolOp, PoolOpKind, PoolOutcome};

/// Which rule a pooled history broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolRule {
    /// More than `k` sessions of one user online at once.
    AtMostK,
    /// Two sessions of one place online at once.
    OnePerPlace,
    /// Two claim_ids granted one `(place, gen)`.
    OneSessionPerGen,
    /// A place at or above the limit granted.
    PlaceWithinLimit,
    /// An eviction answered before its kick arrived, or a `deny-new` claim that evicted.
    EvictionKicksFirst,
    /// A `limit_reached` not naming `k` sessions on distinct places below `k`.
    RefusalIsFull,
    /// A `limit_reached` naming a session not in the store during the refusal.
    RefusalNamesOnline,
}

/// One violation: the rule, the user and what shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolViolation {
    /// The rule broken.
    pub rule: PoolRule,
    /// The user.
    pub uid: i64,
    /// The operations and kicks that show it.
    pub detail: String,
}

impl fmt::Display for PoolViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} (uid {}): {}", self.rule, self.uid, self.detail)
    }
}

/// A session as the history shows it.
#[derive(Debug, Clone)]
struct Session {
    claim_id: String,
    /// When its claim was first sent.
    sent: Duration,
    /// The first answer granting it.
    granted: Duration,
    /// When it certainly stopped being online (see the module doc); `None` while online.
    offline: Option<Duration>,
    /// When it was certainly no longer in the store.
    replaced: Option<Duration>,
}

type Place = (i64, String);

/// What the checker derives once from a history.
struct Derived {
    /// Per `(uid, place)`, the sessions by gen.
    places: BTreeMap<Place, BTreeMap<i64, Session>>,
    /// Per user, its limit `k` (the highest any of its claims asked).
    limits: BTreeMap<i64, usize>,
    violations: Vec<PoolViolation>,
}

/// Checks `history` against every [`PoolRule`]; also returns how many named sessions of
/// refusals could not be judged.
pub fn check_pool(history: &PoolHistory) -> (Vec<PoolViolation>, usize) {
    let mut derived = derive(history);
    end_sessions(history, &mut derived);
    at_most_k(&mut derived);
    let mut unjudged = 0;
    for op in &history.ops {
        evictions(history, op, &mut derived.violations);
        unjudged += refusal(op, &mut derived);
    }
    (derived.violations, unjudged)
}

fn earlier(slot: &mut Option<Duration>, at: Duration) {
    *slot = Some(slot.map_or(at, |t| t.min(at)));
}

/// The sessions granted, one claim_id per gen, within the limit.
fn derive(history: &PoolHistory) -> Derived {
    let mut derived = Derived {
        places: BTreeMap::new(),
        limits: BTreeMap::new(),
        violations: Vec::new(),
    };
    let mut sent: BTreeMap<&str, Duration> = BTreeMap::new();
    for op in &history.ops {
        if let PoolOpKind::Claim {
            claim_id, limit, ..
        } = &op.kind
        {
            let k = derived.limits.entry(op.uid).or_insert(0);
            *k = (*k).max(*limit);
            let first = sent.entry(claim_id.as_str()).or_insert(op.invoked);
            *first = (*first).min(op.invoked);
        }
    }
    for op in &history.ops {
        let (
            PoolOpKind::Claim {
                claim_id, limit, ..
            },
            PoolOutcome::Won {
                slot, generation, ..
            },
        ) = (&op.kind, &op.outcome)
        else {
            continue;
        };
        if unique_core::place_index(slot).is_none_or(|index| index >= *limit) {
            derived.violations.push(PoolViolation {
                rule: PoolRule::PlaceWithinLimit,
                uid: op.uid,
                detail: format!("limit {limit}: {op}"),
            });
        }
        let sessions = derived.places.entry((op.uid, slot.clone())).or_default();
        let session = sessions.entry(*generation).or_insert_with(|| Session {
            claim_id: claim_id.clone(),
            sent: sent[claim_id.as_str()],
            granted: op.answered,
            offline: None,
            replaced: None,
        });
        if session.claim_id == *claim_id {
            session.granted = session.granted.min(op.answered);
        } else {
            derived.violations.push(PoolViolation {
                rule: PoolRule::OneSessionPerGen,
                uid: op.uid,
                detail: format!(
                    "{slot} gen {generation} granted to {} and to {claim_id}: {op}",
                    session.claim_id
                ),
            });
        }
    }
    derived
}

/// When each session went offline and left the store, as far as the history tells.
fn end_sessions(history: &PoolHistory, derived: &mut Derived) {
    for kick in &history.kicks {
        if let Some(sessions) = derived.places.get_mut(&(kick.uid, kick.slot.clone())) {
            for session in sessions.range_mut(..kick.generation).map(|(_, s)| s) {
                earlier(&mut session.offline, kick.at);
            }
        }
    }
    for op in &history.ops {
        let PoolOpKind::Release { slot, generation } = &op.kind else {
            continue;
        };
        if let Some(session) = derived
            .places
            .get_mut(&(op.uid, slot.clone()))
            .and_then(|sessions| sessions.get_mut(generation))
        {
            earlier(&mut session.offline, op.invoked);
            if op.outcome == (PoolOutcome::Released { released: true }) {
                earlier(&mut session.replaced, op.answered);
            }
        }
    }
    let written_by = written_by(derived);
    for op in &history.ops {
        let PoolOutcome::Won {
            slot,
            generation,
            replayed,
            has_prev,
            prev_generation,
            kicked,
            ..
        } = &op.outcome
        else {
            continue;
        };
        let place = (op.uid, slot.clone());
        // The takeover's write came before any later gen of the place was written, so
        // before any answer granting one: another client's may come before this one.
        let written = written_by
            .get(&place)
            .and_then(|by| by.get(generation))
            .map_or(op.answered, |at| op.answered.min(*at));
        let Some(sessions) = derived.places.get_mut(&place) else {
            continue;
        };
        for (gen_before, session) in sessions.range_mut(..*generation) {
            // The write of a later gen replaced every earlier session of the place.
            earlier(&mut session.replaced, op.answered);
            // It ended the session it replaced only when it says so: a takeover whose kick
            // failed (presumed offline, I5b). A confirmed kick ended it when it arrived; a
            // place taken as free ended nothing. A replay's answer says nothing of the
            // first answer's takeover: it ends every earlier session, leniently.
            let presumed_offline = *has_prev && !*kicked && *gen_before == *prev_generation;
            if presumed_offline {
                earlier(&mut session.offline, written);
            } else if *replayed {
                earlier(&mut session.offline, op.answered);
            }
        }
    }
}

/// Per place and gen `g`, the earliest answer granting `g` or a later gen of the place: by
/// then `g` had been written (gens of a place are written in order, C3).
fn written_by(derived: &Derived) -> BTreeMap<Place, BTreeMap<i64, Duration>> {
    derived
        .places
        .iter()
        .map(|(place, sessions)| {
            let mut earliest: Option<Duration> = None;
            let by = sessions
                .iter()
                .rev()
                .map(|(generation, session)| {
                    let at = earliest.map_or(session.granted, |e| e.min(session.granted));
                    earliest = Some(at);
                    (*generation, at)
                })
                .collect();
            (place.clone(), by)
        })
        .collect()
}

/// Sweeps each user's online intervals: never more than `k` at once, never two of a place.
fn at_most_k(derived: &mut Derived) {
    type Event = (Duration, bool, String, String);
    let mut per_user: BTreeMap<i64, Vec<Event>> = BTreeMap::new();
    for ((uid, slot), sessions) in &derived.places {
        for (generation, session) in sessions {
            if session.offline.is_some_and(|end| end <= session.granted) {
                continue;
            }
            let name = format!("{slot} gen {generation} ({})", session.claim_id);
            let events = per_user.entry(*uid).or_default();
            events.push((session.granted, true, slot.clone(), name.clone()));
            if let Some(end) = session.offline {
                events.push((end, false, slot.clone(), name));
            }
        }
    }
    for (uid, mut events) in per_user {
        let k = derived.limits.get(&uid).copied().unwrap_or(0);
        // At one instant, ends before starts (half-open intervals).
        events.sort_by_key(|a| (a.0, a.1));
        let mut online: BTreeMap<String, String> = BTreeMap::new();
        let mut found = BTreeSet::new();
        for (at, start, slot, name) in events {
            if !start {
                online.remove(&name);
                continue;
            }
            if online.values().any(|s| *s == slot) && found.insert(PoolRule::OnePerPlace) {
                derived.violations.push(PoolViolation {
                    rule: PoolRule::OnePerPlace,
                    uid,
                    detail: format!("{name} granted at {at:?} while online: {online:?}"),
                });
            }
            online.insert(name, slot);
            if online.len() > k && found.insert(PoolRule::AtMostK) {
                derived.violations.push(PoolViolation {
                    rule: PoolRule::AtMostK,
                    uid,
                    detail: format!("{} online at {at:?} (k = {k}): {online:?}", online.len()),
                });
            }
        }
    }
}

/// A pooled claim that replaced a session is an eviction (only `evict-oldest` evicts), and
/// when it says its kick was confirmed, the kick (its place, announcing its gen) arrived
/// before its answer.
fn evictions(history: &PoolHistory, op: &PoolOp, violations: &mut Vec<PoolViolation>) {
    let (
        PoolOpKind::Claim { policy, .. },
        PoolOutcome::Won {
            slot,
            generation,
            evicted,
            has_prev,
            kicked,
            replayed: false,
            ..
        },
    ) = (&op.kind, &op.outcome)
    else {
        return;
    };
    let mut fail = |why: &str| {
        violations.push(PoolViolation {
            rule: PoolRule::EvictionKicksFirst,
            uid: op.uid,
            detail: format!("{why}: {op}"),
        });
    };
    if *evicted && *policy == PoolPolicy::DenyNew {
        fail("a deny-new claim evicted");
    }
    if *has_prev != *evicted {
        fail("a pooled claim replaced a session without evicting it, or evicted none");
    }
    let kicked_first = history.kicks.iter().any(|kick| {
        kick.uid == op.uid
            && kick.slot == *slot
            && kick.generation == *generation
            && kick.at <= op.answered
    });
    if *has_prev && *kicked && !kicked_first {
        fail(&format!(
            "no kick of {slot} announcing gen {generation} arrived before the answer"
        ));
    }
}

/// A refusal names `k` sessions each in the store during it; returns how many it named that
/// the history cannot judge.
fn refusal(op: &PoolOp, derived: &mut Derived) -> usize {
    let (
        PoolOpKind::Claim { limit, .. },
        PoolOutcome::LimitReached {
            limit: named,
            sessions,
        },
    ) = (&op.kind, &op.outcome)
    else {
        return 0;
    };
    let places: BTreeSet<Option<usize>> = sessions
        .iter()
        .map(|(slot, _)| unique_core::place_index(slot))
        .collect();
    let full = named == limit
        && sessions.len() == *limit
        && places.len() == *limit
        && places.iter().all(|p| p.is_some_and(|i| i < *limit));
    if !full {
        derived.violations.push(PoolViolation {
            rule: PoolRule::RefusalIsFull,
            uid: op.uid,
            detail: format!("{op}"),
        });
    }
    let mut unjudged = 0;
    for (slot, generation) in sessions {
        let Some(session) = derived
            .places
            .get(&(op.uid, slot.clone()))
            .and_then(|s| s.get(generation))
        else {
            unjudged += 1;
            continue;
        };
        let later = session.sent > op.answered;
        let gone = session.replaced.is_some_and(|at| at < op.invoked);
        if later || gone {
            derived.violations.push(PoolViolation {
                rule: PoolRule::RefusalNamesOnline,
                uid: op.uid,
                detail: format!(
                    "{slot} gen {generation} ({}) sent {:?}, replaced {:?}: {op}",
                    session.claim_id, session.sent, session.replaced
                ),
            });
        }
    }
    unjudged
}

/// What a pooled run did and what the checker found.
#[derive(Debug, Clone)]
pub struct PoolReport {
    /// The run's name.
    pub name: String,
    /// Claims sent (fresh and retried).
    pub claims: usize,
    /// Claims granted a place (replays included).
    pub won: usize,
    /// Claims that evicted the oldest session.
    pub evicted: usize,
    /// Claims refused `limit_reached`.
    pub refused: usize,
    /// Releases answered released.
    pub released: usize,
    /// Operations without a telling answer.
    pub indeterminate: usize,
    /// Kicks received.
    pub kicks: usize,
    /// Sessions named by refusals that no answer granted (not judged).
    pub unjudged: usize,
    /// Evictions (of [`evicted`](Self::evicted)) whose kick was confirmed (`kicked`).
    pub kicks_confirmed: usize,
    /// Evictions whose kick was not: the evicted session is presumed offline (I5b).
    pub kicks_unconfirmed: usize,
    /// Those evictions, in the order they were sent.
    pub unconfirmed: Vec<UnconfirmedKick>,
    /// Evictions of sessions whose push node held its stream on each stream server (by its
    /// index in [`PoolWorkload::push_nodes`](crate::PoolWorkload::push_nodes)' list):
    /// confirmed and not. Empty when the sessions' node was the kick receiver.
    pub stream_servers: BTreeMap<usize, KickCounts>,
    /// What the checker found.
    pub violations: Vec<PoolViolation>,
}

/// Evictions by whether their kick was confirmed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KickCounts {
    /// The kick was confirmed.
    pub confirmed: usize,
    /// It was not.
    pub unconfirmed: usize,
}

/// An eviction whose kick was not confirmed: what the winner's answer said of the session
/// it evicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnconfirmedKick {
    /// The user.
    pub uid: i64,
    /// The place.
    pub slot: String,
    /// The evicted session's gen.
    pub prev_generation: i64,
    /// The evicted session's node (empty for a kick receiver's endpoint).
    pub node: String,
    /// The stream server of that node, when it is one of the run's push nodes.
    pub stream_server: Option<usize>,
    /// Why the kick was not confirmed (`kick_detail`).
    pub detail: Option<String>,
    /// When the winner's answer came, from the run's start.
    pub answered: Duration,
}

impl fmt::Display for UnconfirmedKick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "uid {} {} gen {} on node {:?} (stream server {:?}): {} at {:?}",
            self.uid,
            self.slot,
            self.prev_generation,
            self.node,
            self.stream_server,
            self.detail.as_deref().unwrap_or("no detail"),
            self.answered
        )
    }
}

impl PoolReport {
    /// Counts and checks `history`.
    pub fn new(name: impl Into<String>, history: &PoolHistory) -> Self {
        let (violations, unjudged) = check_pool(history);
        let count = |f: &dyn Fn(&PoolOp) -> bool| history.ops.iter().filter(|op| f(op)).count();
        Self {
            name: name.into(),
            claims: count(&|op| matches!(op.kind, PoolOpKind::Claim { .. })),
            won: count(&|op| matches!(op.outcome, PoolOutcome::Won { .. })),
            evicted: count(&|op| {
                matches!(
                    op.outcome,
                    PoolOutcome::Won {
                        evicted: true,
                        replayed: false,
                        ..
                    }
                )
            }),
            refused: count(&|op| matches!(op.outcome, PoolOutcome::LimitReached { .. })),
            released: count(&|op| op.outcome == PoolOutcome::Released { released: true }),
            indeterminate: count(&|op| matches!(op.outcome, PoolOutcome::Indeterminate(_))),
            kicks: history.kicks.len(),
            unjudged,
            kicks_confirmed: 0,
            kicks_unconfirmed: 0,
            unconfirmed: Vec::new(),
            stream_servers: BTreeMap::new(),
            violations,
        }
        .with_kicks(history)
    }

    /// Counts every eviction's kick (the fresh answers [`evicted`](Self::evicted) counts),
    /// by the evicted session's stream server.
    fn with_kicks(mut self, history: &PoolHistory) -> Self {
        for op in &history.ops {
            let PoolOutcome::Won {
                slot,
                evicted: true,
                replayed: false,
                prev_generation,
                kicked,
                kick_detail,
                prev_node,
                ..
            } = &op.outcome
            else {
                continue;
            };
            let stream_server = history.stream_server_of(prev_node);
            let counts = stream_server.map(|server| self.stream_servers.entry(server).or_default());
            if *kicked {
                self.kicks_confirmed += 1;
                if let Some(counts) = counts {
                    counts.confirmed += 1;
                }
                continue;
            }
            self.kicks_unconfirmed += 1;
            if let Some(counts) = counts {
                counts.unconfirmed += 1;
            }
            self.unconfirmed.push(UnconfirmedKick {
                uid: op.uid,
                slot: slot.clone(),
                prev_generation: *prev_generation,
                node: prev_node.clone(),
                stream_server,
                detail: kick_detail.clone(),
                answered: op.answered,
            });
        }
        self
    }

    /// The evictions whose kick was not confirmed, of sessions whose push node held its
    /// stream on a stream server `on` accepts (given its index). An evicted session whose
    /// node is none of the run's push nodes (a kick receiver's endpoint) is never among
    /// them: use [`kicks_unconfirmed`](Self::kicks_unconfirmed) for every eviction.
    pub fn unconfirmed_kicks(&self, on: impl Fn(usize) -> bool) -> Vec<&UnconfirmedKick> {
        self.unconfirmed
            .iter()
            .filter(|kick| kick.stream_server.is_some_and(&on))
            .collect()
    }

    /// Panics with the report unless the evictions of sessions whose push node was on a
    /// stream server `on` accepts all had their kick confirmed, and there was at least
    /// one such eviction.
    ///
    /// # Panics
    ///
    /// On an unconfirmed kick to such a node, or when no session of such a node was evicted.
    pub fn assert_kicks_confirmed(&self, on: impl Fn(usize) -> bool) {
        let unconfirmed = self.unconfirmed_kicks(&on);
        assert!(
            unconfirmed.is_empty(),
            "{} evictions' kicks to live nodes not confirmed, the first: {}\n{self}",
            unconfirmed.len(),
            unconfirmed[0]
        );
        let confirmed: usize = self
            .stream_servers
            .iter()
            .filter(|(server, _)| on(**server))
            .map(|(_, counts)| counts.confirmed)
            .sum();
        assert!(
            confirmed > 0,
            "no session of those nodes was evicted\n{self}"
        );
    }

    /// Panics with the report unless the run is clean and exercised each policy: at least
    /// one eviction, one refusal and one release.
    ///
    /// # Panics
    ///
    /// On any violation, or a run that never evicted, refused or released.
    pub fn assert_clean(&self) {
        assert!(self.violations.is_empty(), "{self}");
        assert!(
            self.evicted > 0 && self.refused > 0 && self.released > 0,
            "the run did not exercise every path\n{self}"
        );
    }
}

impl fmt::Display for PoolReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "pooled history {}: {} claims, {} won, {} evicted, {} refused, {} released, {} indeterminate, {} kicks, {} unjudged",
            self.name,
            self.claims,
            self.won,
            self.evicted,
            self.refused,
            self.released,
            self.indeterminate,
            self.kicks,
            self.unjudged
        )?;
        writeln!(
            f,
            "  evictions' kicks: {} confirmed, {} not",
            self.kicks_confirmed, self.kicks_unconfirmed
        )?;
        for (server, counts) in &self.stream_servers {
            writeln!(
                f,
                "  nodes on stream server {server}: {} confirmed, {} not",
                counts.confirmed, counts.unconfirmed
            )?;
        }
        for kick in self.unconfirmed.iter().take(10) {
            writeln!(f, "  unconfirmed: {kick}")?;
        }
        for violation in self.violations.iter().take(20) {
            writeln!(f, "  violation: {violation}")?;
        }
        Ok(())
    }
}
