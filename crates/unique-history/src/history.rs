//! What a history holds: operations with their real-time interval and outcome, and the
//! [`Recorder`] that collects them from concurrent clients.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use unique_core::{Error, Key};

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpKind {
    /// A claim with a claim_id never sent before.
    Claim {
        /// The login's claim_id.
        claim_id: String,
    },
    /// A claim sent again with the claim_id of an earlier claim of the same client (a retry
    /// whose answer was lost, or that failed).
    Replay {
        /// The earlier claim's claim_id.
        claim_id: String,
    },
    /// A read of the key (`current`, what a heartbeat asks).
    Read,
    /// A release (logout) of a gen the client was granted.
    Release {
        /// The gen released.
        generation: i64,
    },
    /// A listing of the user's sessions on every slot (`POST /v1/sessions`, C10). The
    /// operation's key is the user's default-slot key; the checker reads its answer as one
    /// read of each slot it lists.
    List,
}

impl OpKind {
    /// The claim_id a claim or replay carries.
    pub fn claim_id(&self) -> Option<&str> {
        match self {
            Self::Claim { claim_id } | Self::Replay { claim_id } => Some(claim_id),
            Self::Read | Self::Release { .. } | Self::List => None,
        }
    }

    /// `claim`, `replay`, `read`, `release` or `list`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Claim { .. } => "claim",
            Self::Replay { .. } => "replay",
            Self::Read => "read",
            Self::Release { .. } => "release",
            Self::List => "list",
        }
    }
}

/// How an operation ended, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A claim or replay was answered with this gen.
    Claimed {
        /// The gen granted.
        generation: i64,
        /// The server answered from its replay short-circuit: the record already held this
        /// claim_id.
        replayed: bool,
    },
    /// A read was answered.
    Read {
        /// The stored gen (0 when no record).
        generation: i64,
        /// The claim_id of the session the record holds, decoded from its owner; `None` for a
        /// tombstone or no record.
        holder: Option<String>,
    },
    /// A listing was answered: the sessions of the user, one per slot that holds one.
    Listed {
        /// What each listed slot held.
        sessions: Vec<Listed>,
    },
    /// A release was answered.
    Released {
        /// The record was at the released gen and is now a tombstone.
        released: bool,
    },
    /// A claim answered `superseded`: its claim_id won `generation` earlier and the key has
    /// moved on to `current`; nothing was kicked or written (C9).
    Superseded {
        /// The gen the claim_id won.
        generation: i64,
        /// The key's gen when the claim was decided.
        current: i64,
    },
    /// A definite failure: the server refused the request before touching the store
    /// (`InvalidParams`). Nothing happened.
    Failed(String),
    /// No answer that says what happened: a timeout, a 503, a 429 or a broken connection.
    /// The operation may or may not have taken effect, at any time after it started.
    Indeterminate(String),
}

impl Outcome {
    /// The outcome of a call that returned `error`: `InvalidParams` is a definite failure
    /// (the server validates before anything else); anything else may have taken effect.
    pub fn from_error(error: &Error) -> Self {
        if let Error::Superseded {
            generation,
            current,
        } = error
        {
            return Self::Superseded {
                generation: *generation,
                current: *current,
            };
        }
        if error.is_invalid_params() {
            Self::Failed(error.to_string())
        } else {
            Self::Indeterminate(error.to_string())
        }
    }

    /// The gen this outcome saw the record at, when it says: a claim's or read's gen, or the
    /// gen of a release that held (`released_gen`).
    pub(crate) fn observed(&self, kind: &OpKind) -> Option<i64> {
        match (kind, self) {
            (OpKind::Claim { .. } | OpKind::Replay { .. }, Self::Claimed { generation, .. })
            | (OpKind::Read | OpKind::List, Self::Read { generation, .. })
            | (
                OpKind::Claim { .. } | OpKind::Replay { .. },
                Self::Superseded {
                    current: generation,
                    ..
                },
            ) => Some(*generation),
            (OpKind::Release { generation }, Self::Released { released: true }) => {
                Some(*generation)
            }
            _ => None,
        }
    }
}

/// One slot of a listing's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The slot (`""` for the default slot).
    pub slot: String,
    /// The session's gen.
    pub generation: i64,
    /// The claim_id of the session, decoded from its owner.
    pub holder: String,
}

/// One operation of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Unique within its history, in the order the operations started.
    pub id: usize,
    /// The client (task) that ran it; a client runs one operation at a time.
    pub client: usize,
    /// The key it addressed.
    pub key: Key,
    /// What was asked.
    pub kind: OpKind,
    /// Taken just before the request was sent.
    pub start: Instant,
    /// Taken just after the answer (or the failure) arrived.
    pub end: Instant,
    /// How it ended.
    pub outcome: Outcome,
}

impl Op {
    /// Whether this operation finished before `other` started (real-time order). Only
    /// answered operations constrain later ones: see the crate docs.
    pub fn finished_before(&self, other: &Op) -> bool {
        self.end < other.start
    }

    /// An answered listing as one read per listed slot: operations of kind
    /// [`OpKind::List`] on that slot's key, with the listing's id, client and interval, each
    /// answered as a read of a held record. Empty for any other operation.
    pub fn listed_reads(&self) -> Vec<Op> {
        let Outcome::Listed { sessions } = &self.outcome else {
            return Vec::new();
        };
        let user = self.key.user();
        sessions
            .iter()
            .map(|listed| Op {
                key: user.key(listed.slot.as_str()),
                outcome: Outcome::Read {
                    generation: listed.generation,
                    holder: Some(listed.holder.clone()),
                },
                ..self.clone()
            })
            .collect()
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} client {} {}",
            self.id,
            self.client,
            self.kind.name()
        )?;
        match &self.kind {
            OpKind::Claim { claim_id } | OpKind::Replay { claim_id } => write!(f, " {claim_id}")?,
            OpKind::Release { generation } => write!(f, " gen {generation}")?,
            OpKind::Read | OpKind::List => {}
        }
        write!(f, " -> ")?;
        match &self.outcome {
            Outcome::Claimed {
                generation,
                replayed,
            } => write!(
                f,
                "gen {generation}{}",
                if *replayed { " (replayed)" } else { "" }
            ),
            Outcome::Read { generation, holder } => match holder {
                Some(holder) => write!(f, "gen {generation} held by {holder}"),
                None => write!(f, "gen {generation}, no owner"),
            },
            Outcome::Listed { sessions } => {
                let listed: Vec<String> = sessions
                    .iter()
                    .map(|s| format!("{:?} gen {} held by {}", s.slot, s.generation, s.holder))
                    .collect();
                write!(f, "listed [{}]", listed.join(", "))
            }
            Outcome::Released { released } => write!(f, "released {released}"),
            Outcome::Superseded {
                generation,
                current,
            } => write!(f, "superseded (won gen {generation}, key at {current})"),
            Outcome::Failed(reason) => write!(f, "failed ({reason})"),
            Outcome::Indeterminate(reason) => write!(f, "indeterminate ({reason})"),
        }
    }
}

/// A finished history: every recorded operation, in start order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    ops: Vec<Op>,
}

impl History {
    /// A history of these operations (sorted by id).
    pub fn new(mut ops: Vec<Op>) -> Self {
        ops.sort_by_key(|op| op.id);
        Self { ops }
    }

    /// The operations, in start order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// From the first operation's start to the last one's end (zero when empty).
    pub fn span(&self) -> Duration {
        let start = self.ops.iter().map(|op| op.start).min();
        let end = self.ops.iter().map(|op| op.end).max();
        match (start, end) {
            (Some(start), Some(end)) => end.saturating_duration_since(start),
            _ => Duration::ZERO,
        }
    }

    /// How many operations it holds.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether it holds no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Collects operations from concurrent clients. Cheap to clone; clones share the history.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    inner: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    next_id: AtomicUsize,
    ops: Mutex<Vec<Op>>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts an operation now; call [`Pending::finish`] with its outcome. An operation
    /// dropped unfinished is recorded as indeterminate (it may still take effect).
    pub fn begin(&self, client: usize, key: &Key, kind: OpKind) -> Pending {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        Pending {
            recorder: self.clone(),
            op: Some((id, client, key.clone(), kind)),
            start: Instant::now(),
        }
    }

    /// Everything recorded so far.
    pub fn history(&self) -> History {
        History::new(self.lock().clone())
    }

    fn push(&self, op: Op) {
        self.lock().push(op);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Op>> {
        // A panicking client cannot leave a half-pushed op behind: keep recording.
        self.inner
            .ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// An operation in flight; see [`Recorder::begin`].
#[derive(Debug)]
pub struct Pending {
    recorder: Recorder,
    op: Option<(usize, usize, Key, OpKind)>,
    start: Instant,
}

impl Pending {
    /// Ends the operation now with `outcome`.
    pub fn finish(mut self, outcome: Outcome) {
        self.record(outcome);
    }

    fn record(&mut self, outcome: Outcome) {
        let end = Instant::now();
        if let Some((id, client, key, kind)) = self.op.take() {
            self.recorder.push(Op {
                id,
                client,
                key,
                kind,
                start: self.start,
                end,
                outcome,
            });
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.record(Outcome::Indeterminate(
            "abandoned before its answer".to_owned(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_keeps_start_order_and_intervals() {
        let recorder = Recorder::new();
        let key = Key::new("p", "e", 1);
        let first = recorder.begin(0, &key, OpKind::Read);
        let second = recorder.begin(1, &key, OpKind::Release { generation: 3 });
        second.finish(Outcome::Released { released: true });
        first.finish(Outcome::Read {
            generation: 3,
            holder: None,
        });
        let history = recorder.history();
        let ids: Vec<usize> = history.ops().iter().map(|op| op.id).collect();
        assert_eq!(ids, [0, 1]);
        for op in history.ops() {
            assert!(op.start <= op.end);
        }
        assert_eq!(
            history.ops()[1].outcome,
            Outcome::Released { released: true }
        );
    }

    #[test]
    fn an_abandoned_operation_is_indeterminate() {
        let recorder = Recorder::new();
        drop(recorder.begin(
            0,
            &Key::new("p", "e", 1),
            OpKind::Claim {
                claim_id: "c".into(),
            },
        ));
        let history = recorder.history();
        assert_eq!(history.len(), 1);
        assert!(matches!(
            history.ops()[0].outcome,
            Outcome::Indeterminate(_)
        ));
    }

    #[test]
    fn only_invalid_params_is_a_definite_failure() {
        assert!(matches!(
            Outcome::from_error(&Error::invalid("bad uid")),
            Outcome::Failed(_)
        ));
        for error in [Error::unavailable("timeout"), Error::Throttled] {
            assert!(matches!(
                Outcome::from_error(&error),
                Outcome::Indeterminate(_)
            ));
        }
    }
}
