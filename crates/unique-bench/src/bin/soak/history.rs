//! What the server acknowledged, and the check that it still holds it.
//!
//! Every 200 answer the load receives is recorded here: a claim's gen and owner, a release's
//! or a logout's tombstone, a lease's holding, a node's registration. After the SIGKILL and
//! restart (and at the end of the run) the load pauses and every recorded key is read back:
//! a key's gen must be at least the acknowledged one (a later claim supersedes it; nothing
//! may take it back), a lease granted and not yet run out must still be held under its
//! token, a live registration must still be found, and every new holding of a room must
//! carry an epoch above every epoch the room had (D4).
//!
//! A request that got no clear answer (the server was killed, the disk was full) may or may
//! not have happened: a claim's would only raise the gen, but a release's or a logout's
//! would leave a tombstone at the same gen, so those are remembered until the next answer.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use unique_wire::{CurrentAnswer, LeaseAnswer};

/// A session key of the soak: a uid and the index of its slot.
pub(crate) type SessionKey = (u64, usize);

/// How long before its deadline a holding or registration is no longer required to be
/// found: the restart's own delays come off it, and the store's clock judges, not ours.
const MARGIN: Duration = Duration::from_secs(2);

/// What the server acknowledged last for one session key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Acked {
    /// A claim answered 200: this gen, owned by the owner with this endpoint.
    Claimed { generation: i64, endpoint: String },
    /// A release or logout answered `released`: a tombstone at this gen.
    Released { generation: i64 },
}

#[derive(Debug, Clone)]
struct Session {
    acked: Acked,
    /// A release or logout was sent after the acknowledgement and got no clear answer.
    release_unanswered: bool,
}

/// A lease holding as its last answer described it.
#[derive(Debug, Clone)]
struct Holding {
    token: String,
    epoch: u64,
    /// The instant before the request was sent plus the ttl the store said was left.
    deadline: Instant,
}

#[derive(Debug, Clone, Default)]
struct Room {
    held: Option<Holding>,
    /// The greatest epoch any answer carried for the room.
    max_epoch: u64,
    /// A release was sent after the holding's last answer and got no clear answer.
    release_unanswered: bool,
}

#[derive(Debug, Clone)]
struct Registration {
    deadline: Instant,
    deregister_unanswered: bool,
}

/// One acknowledgement the server no longer honours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Loss(pub(crate) String);

/// Everything acknowledged so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    sessions: HashMap<SessionKey, Session>,
    rooms: HashMap<String, Room>,
    nodes: HashMap<String, Registration>,
}

impl History {
    /// A claim of `key` answered 200 with `generation`, for the owner at `endpoint`.
    pub(crate) fn claimed(&mut self, key: SessionKey, generation: i64, endpoint: &str) {
        self.sessions.insert(
            key,
            Session {
                acked: Acked::Claimed {
                    generation,
                    endpoint: endpoint.to_owned(),
                },
                release_unanswered: false,
            },
        );
    }

    /// A release or logout of `key` answered that it wrote a tombstone at `generation`.
    pub(crate) fn released(&mut self, key: SessionKey, generation: i64) {
        self.sessions.insert(
            key,
            Session {
                acked: Acked::Released { generation },
                release_unanswered: false,
            },
        );
    }

    /// A release or logout of `key` got no clear answer: it may have landed.
    pub(crate) fn release_unanswered(&mut self, key: SessionKey) {
        if let Some(session) = self.sessions.get_mut(&key) {
            session.release_unanswered = true;
        }
    }

    /// The keys with an acknowledgement, to read back.
    pub(crate) fn session_keys(&self) -> Vec<SessionKey> {
        let mut keys: Vec<_> = self.sessions.keys().copied().collect();
        keys.sort_unstable();
        keys
    }

    /// Whether `current`, read after everything recorded, still honours `key`'s
    /// acknowledgement.
    pub(crate) fn check_session(
        &self,
        key: SessionKey,
        current: &CurrentAnswer,
    ) -> Result<(), Loss> {
        let Some(session) = self.sessions.get(&key) else {
            return Ok(());
        };
        let (uid, slot) = key;
        let now_owner = current.owner.as_ref().map(|owner| owner.endpoint.as_str());
        let lost = |what: String| Err(Loss(format!("uid {uid} slot {slot}: {what}")));
        match &session.acked {
            Acked::Claimed { generation, .. } | Acked::Released { generation }
                if current.generation < *generation =>
            {
                lost(format!(
                    "acknowledged gen {generation}, the server now says gen {}",
                    current.generation
                ))
            }
            Acked::Claimed {
                generation,
                endpoint,
            } if current.generation == *generation => match now_owner {
                Some(owner) if owner == endpoint => Ok(()),
                None if session.release_unanswered => Ok(()),
                other => lost(format!(
                    "gen {generation} was acknowledged to {endpoint}, the server says it is \
                     {other:?}'s"
                )),
            },
            Acked::Released { generation } if current.generation == *generation => {
                match now_owner {
                    None => Ok(()),
                    Some(owner) => lost(format!(
                        "gen {generation} was acknowledged released, the server says {owner} \
                         holds it"
                    )),
                }
            }
            _ => Ok(()),
        }
    }

    /// An answer about `room` (an ensure's, or a lookup's that found a lease), from a
    /// request sent at `sent`: a new token must carry an epoch above every epoch the room
    /// had (D4), a known one the epoch it had. `ours` says the answer made or renewed a
    /// holding of the asking node (so a later release may name it).
    pub(crate) fn lease(
        &mut self,
        answer: &LeaseAnswer,
        sent: Instant,
        ours: bool,
    ) -> Result<(), Loss> {
        let room = self.rooms.entry(answer.room.clone()).or_default();
        let known = room.held.as_ref().filter(|held| held.token == answer.token);
        let verdict = match known {
            Some(held) if held.epoch != answer.epoch => Err(Loss(format!(
                "room {}: token {} had epoch {}, now {}",
                answer.room, answer.token, held.epoch, answer.epoch
            ))),
            None if answer.epoch <= room.max_epoch => Err(Loss(format!(
                "room {}: a new holding (token {}) has epoch {}, not above the room's {}",
                answer.room, answer.token, answer.epoch, room.max_epoch
            ))),
            _ => Ok(()),
        };
        room.max_epoch = room.max_epoch.max(answer.epoch);
        if ours || known.is_none() {
            room.held = Some(Holding {
                token: answer.token.clone(),
                epoch: answer.epoch,
                deadline: sent + Duration::from_millis(answer.ttl_left_ms),
            });
            room.release_unanswered = false;
        }
        verdict
    }

    /// A release of `room` answered 200 (whether it deleted a holding or not: either way
    /// none of ours is left).
    pub(crate) fn lease_released(&mut self, room: &str) {
        if let Some(room) = self.rooms.get_mut(room) {
            room.held = None;
            room.release_unanswered = false;
        }
    }

    /// A release of `room` got no clear answer.
    pub(crate) fn lease_release_unanswered(&mut self, room: &str) {
        if let Some(room) = self.rooms.get_mut(room) {
            room.release_unanswered = true;
        }
    }

    /// The rooms with a recorded holding, to look up.
    pub(crate) fn rooms(&self) -> Vec<String> {
        let mut rooms: Vec<_> = self.rooms.keys().cloned().collect();
        rooms.sort_unstable();
        rooms
    }

    /// Whether a lookup of `room` at `now` still honours what was acknowledged: a holding
    /// whose deadline is ahead (by [`MARGIN`]) and that no unanswered release may have ended
    /// is found under its token; any lease found obeys D4 against what the room had.
    pub(crate) fn check_room(
        &self,
        room: &str,
        found: Option<&LeaseAnswer>,
        now: Instant,
    ) -> Result<(), Loss> {
        let Some(entry) = self.rooms.get(room) else {
            return Ok(());
        };
        let live = entry
            .held
            .as_ref()
            .filter(|held| !entry.release_unanswered && held.deadline > now + MARGIN);
        match (live, found) {
            (Some(held), Some(lease)) if lease.token != held.token => Err(Loss(format!(
                "room {room}: holding {} (epoch {}) acknowledged until after now, the server \
                 says {} (epoch {}) holds it",
                held.token, held.epoch, lease.token, lease.epoch
            ))),
            (Some(held), None) => Err(Loss(format!(
                "room {room}: holding {} (epoch {}) acknowledged until after now is gone",
                held.token, held.epoch
            ))),
            (_, Some(lease)) => match entry.held.as_ref().filter(|h| h.token == lease.token) {
                Some(held) if held.epoch != lease.epoch => Err(Loss(format!(
                    "room {room}: holding {} had epoch {}, the server says {}",
                    lease.token, held.epoch, lease.epoch
                ))),
                None if lease.epoch <= entry.max_epoch => Err(Loss(format!(
                    "room {room}: holding {} has epoch {}, not above the room's {}",
                    lease.token, lease.epoch, entry.max_epoch
                ))),
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// A registration of `node` answered 200 with `ttl_left_ms`, sent at `sent`.
    pub(crate) fn registered(&mut self, node: &str, sent: Instant, ttl_left_ms: u64) {
        self.nodes.insert(
            node.to_owned(),
            Registration {
                deadline: sent + Duration::from_millis(ttl_left_ms),
                deregister_unanswered: false,
            },
        );
    }

    /// A deregistration of `node` answered 200, or got no clear answer (`answered`).
    pub(crate) fn deregistered(&mut self, node: &str, answered: bool) {
        if answered {
            self.nodes.remove(node);
        } else if let Some(registration) = self.nodes.get_mut(node) {
            registration.deregister_unanswered = true;
        }
    }

    /// The nodes with a recorded registration, to look up.
    pub(crate) fn nodes(&self) -> Vec<String> {
        let mut nodes: Vec<_> = self.nodes.keys().cloned().collect();
        nodes.sort_unstable();
        nodes
    }

    /// Whether a lookup of `node` at `now` (`found`: it answered a registration) still
    /// honours a registration acknowledged until after now.
    pub(crate) fn check_node(&self, node: &str, found: bool, now: Instant) -> Result<(), Loss> {
        match self.nodes.get(node) {
            Some(r) if !found && !r.deregister_unanswered && r.deadline > now + MARGIN => {
                Err(Loss(format!(
                    "node {node}: registration acknowledged until after now is gone"
                )))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use unique_core::Owner;

    use super::*;

    fn current(generation: i64, endpoint: Option<&str>) -> CurrentAnswer {
        CurrentAnswer {
            generation,
            owner: endpoint.map(|endpoint| Owner::new("", "", endpoint)),
            exists: generation > 0,
        }
    }

    fn lease(room: &str, token: &str, epoch: u64, ttl_left_ms: u64) -> LeaseAnswer {
        LeaseAnswer {
            room: room.to_owned(),
            node: "n".to_owned(),
            token: token.to_owned(),
            epoch,
            ttl_left_ms,
        }
    }

    #[test]
    fn a_claim_is_honoured_by_its_gen_or_a_later_one() {
        let mut history = History::default();
        history.claimed((7, 0), 5, "http://a");
        assert_eq!(
            history.check_session((7, 0), &current(5, Some("http://a"))),
            Ok(())
        );
        // Superseded by a later claim (one whose answer may never have come).
        assert_eq!(
            history.check_session((7, 0), &current(6, Some("http://b"))),
            Ok(())
        );
        assert_eq!(history.check_session((7, 0), &current(6, None)), Ok(()));
        // A key never acknowledged is not judged.
        assert_eq!(history.check_session((8, 0), &current(0, None)), Ok(()));
    }

    #[test]
    fn a_lost_claim_is_flagged() {
        let mut history = History::default();
        history.claimed((7, 1), 5, "http://a");
        let gone = history.check_session((7, 1), &current(4, Some("http://a")));
        assert!(
            gone.unwrap_err()
                .0
                .contains("acknowledged gen 5, the server now says gen 4")
        );
        assert!(history.check_session((7, 1), &current(0, None)).is_err());
        // The same gen under another owner, or released without a release sent.
        assert!(
            history
                .check_session((7, 1), &current(5, Some("http://b")))
                .is_err()
        );
        assert!(history.check_session((7, 1), &current(5, None)).is_err());
        // ...unless a release went out and its answer never came.
        history.release_unanswered((7, 1));
        assert_eq!(history.check_session((7, 1), &current(5, None)), Ok(()));
    }

    #[test]
    fn a_lost_release_is_flagged() {
        let mut history = History::default();
        history.claimed((9, 0), 3, "http://a");
        history.released((9, 0), 3);
        assert_eq!(history.check_session((9, 0), &current(3, None)), Ok(()));
        assert_eq!(
            history.check_session((9, 0), &current(4, Some("http://a"))),
            Ok(())
        );
        let back = history.check_session((9, 0), &current(3, Some("http://a")));
        assert!(back.unwrap_err().0.contains("acknowledged released"));
    }

    #[test]
    fn a_live_holding_must_survive_and_epochs_only_grow() {
        let t0 = Instant::now();
        let mut history = History::default();
        assert_eq!(
            history.lease(&lease("r", "t1", 4, 60_000), t0, true),
            Ok(())
        );
        // A renewal keeps token and epoch.
        assert_eq!(
            history.lease(&lease("r", "t1", 4, 60_000), t0, true),
            Ok(())
        );
        let same = lease("r", "t1", 4, 59_000);
        assert_eq!(history.check_room("r", Some(&same), t0), Ok(()));
        // Gone, or another token, while ours is live: lost.
        assert!(history.check_room("r", None, t0).is_err());
        assert!(
            history
                .check_room("r", Some(&lease("r", "t2", 5, 1)), t0)
                .is_err()
        );
        // Once it ran out, a new holding with a greater epoch is fine, a smaller one is not.
        let later = t0 + Duration::from_secs(61);
        assert_eq!(history.check_room("r", None, later), Ok(()));
        assert_eq!(
            history.check_room("r", Some(&lease("r", "t2", 5, 1)), later),
            Ok(())
        );
        assert!(
            history
                .check_room("r", Some(&lease("r", "t2", 3, 1)), later)
                .is_err()
        );
        assert!(
            history
                .check_room("r", Some(&lease("r", "t1", 3, 0)), later)
                .is_err()
        );
        // An ensure answering a new token with an epoch not above the room's: D4 broken.
        let reused = history.lease(&lease("r", "t3", 4, 60_000), later, true);
        assert!(reused.unwrap_err().0.contains("not above the room's 4"));
        // The same token with another epoch.
        let t1_moved = history.lease(&lease("r", "t3", 9, 60_000), later, true);
        assert!(t1_moved.is_err(), "t3 was recorded with epoch 4");
    }

    #[test]
    fn a_released_or_unanswered_holding_need_not_be_found() {
        let t0 = Instant::now();
        let mut history = History::default();
        history
            .lease(&lease("a", "t1", 1, 60_000), t0, true)
            .unwrap();
        history
            .lease(&lease("b", "t2", 1, 60_000), t0, true)
            .unwrap();
        history.lease_released("a");
        history.lease_release_unanswered("b");
        assert_eq!(history.check_room("a", None, t0), Ok(()));
        assert_eq!(history.check_room("b", None, t0), Ok(()));
        assert_eq!(history.rooms(), ["a", "b"]);
    }

    #[test]
    fn a_live_registration_must_be_found() {
        let t0 = Instant::now();
        let mut history = History::default();
        history.registered("n1", t0, 60_000);
        history.registered("n2", t0, 60_000);
        assert!(history.check_node("n1", false, t0).is_err());
        assert_eq!(history.check_node("n1", true, t0), Ok(()));
        // Expired, deregistered, or a deregistration whose answer never came.
        assert_eq!(
            history.check_node("n1", false, t0 + Duration::from_secs(61)),
            Ok(())
        );
        history.deregistered("n1", true);
        history.deregistered("n2", false);
        assert_eq!(history.check_node("n1", false, t0), Ok(()));
        assert_eq!(history.check_node("n2", false, t0), Ok(()));
        assert_eq!(history.nodes(), ["n2"]);
    }
}
