//! Loom model of the pooled-session decision (issue 45, design.md "Pooled sessions").
//!
//! Run with the other models:
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p unique-store-memory --lib loom`
//! (`cargo xtask loom` runs them all). A user's pool is `k` places; each place is a
//! versioned cell, written only by a compare-and-set on the gen a read saw (the store's
//! fenced claim, C3). Two or three pooled logins of the user run at once, each as the
//! arbiter of a different server would (no shared claim line): a listing that reads the
//! places **one by one** (not a snapshot), then the lowest free place claimed by a CAS on
//! the gen read, or at the limit `deny-new` refused and `evict-oldest` kicking the
//! session with the oldest login and then a CAS on its place; a lost CAS starts the next
//! attempt from a fresh listing.
//!
//! Each place logs its writes under its own lock (a global order of writes, and whether
//! the session a write replaced had been kicked by then), and the checks at the end are:
//! no write replaces a session that was not kicked first (otherwise two logins both
//! believe they hold one place), an eviction kicks the very session its write replaces,
//! the sessions online at the end (won or initial, never kicked) are exactly the places'
//! owners and at most `k`, a refusal saw `k` places held and no place stayed free across
//! the whole refused call, and every login answered within its attempts.
//!
//! The broken variant ([`Pool`] with `CHECK_VERSION = false`) is the same CAS with its
//! version check removed: the models run on it too and must find a violation.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};

use loom::sync::{Arc, Mutex};
use loom::thread;

/// Two logins both believing they hold one place (a write over a session not kicked).
const ONE_HOLDER: &str = "invariant violated: no two logins both believe they hold one place";
/// An eviction whose write replaced another session than the one it kicked.
const KICKED_FIRST: &str =
    "invariant violated: an evicted session is kicked before its place is written";
/// The sessions online are the places' owners, at most `k` of them.
const AT_MOST_K: &str = "invariant violated: at most k sessions online, each one a place's owner";
/// A deny-new refusal with a place free, or one that stayed free across the call.
const REFUSED_FULL: &str = "invariant violated: deny-new refuses only when its listing saw k places held and none stayed free";
/// A login that neither won nor was refused within its attempts.
const ANSWERED: &str = "invariant violated: every pooled login answers within its attempts";

/// A session: a login of the model (0, 1, 2) or a session online before it (100, 101).
type Login = usize;

/// The login time of a session: the sessions online before the model logged in first.
fn since(login: Login) -> usize {
    if login >= 100 {
        login - 100
    } else {
        10 + login
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    EvictOldest,
    DenyNew,
}

/// One place's record: its gen and its owner (`None` before the first claim).
#[derive(Clone, Copy, Debug)]
struct Cell {
    generation: u64,
    owner: Option<Login>,
}

/// A write as its place's lock saw it.
#[derive(Debug)]
struct Write {
    seq: usize,
    place: usize,
    owner: Login,
    /// The session the write replaced, and whether it had been kicked by then.
    replaced: Option<(Login, bool)>,
}

/// What a login answered.
#[derive(Debug)]
enum Answer {
    Won {
        login: Login,
        place: usize,
        /// The session it kicked to take the place (evict-oldest at the limit).
        evicted: Option<Login>,
    },
    Refused {
        login: Login,
        /// How many places its listing saw held.
        held: usize,
        /// The last write before the call and after it (write seqs).
        from: usize,
        to: usize,
    },
    GaveUp(Login),
}

/// The model's bookkeeping, outside loom (a `std` mutex, never held across a loom
/// operation): not part of what is checked, only how it is checked.
#[derive(Default)]
struct Log {
    writes: Vec<Write>,
    kicked: BTreeSet<Login>,
    answers: Vec<Answer>,
}

/// A user's pool of places. `CHECK_VERSION = false` is the broken variant: the CAS
/// writes whatever the place holds.
struct Pool<const CHECK_VERSION: bool> {
    places: Vec<Mutex<Cell>>,
    log: std::sync::Mutex<Log>,
}

impl<const CHECK_VERSION: bool> Pool<CHECK_VERSION> {
    /// `k` places, the first ones held by the sessions `initial` (gen 1 each).
    fn new(k: usize, initial: &[Login]) -> Arc<Self> {
        let places = (0..k)
            .map(|place| {
                Mutex::new(match initial.get(place) {
                    Some(&login) => Cell {
                        generation: 1,
                        owner: Some(login),
                    },
                    None => Cell {
                        generation: 0,
                        owner: None,
                    },
                })
            })
            .collect();
        Arc::new(Self {
            places,
            log: std::sync::Mutex::default(),
        })
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap()
    }

    /// One strong read of one place.
    fn read(&self, place: usize) -> Cell {
        *self.places[place].lock().unwrap()
    }

    /// The fenced claim of `place` on the gen `seen` read: writes `seen + 1` with
    /// `login` as owner if the place still holds `seen` (or always, broken).
    fn cas(&self, place: usize, seen: u64, login: Login) -> bool {
        let mut cell = self.places[place].lock().unwrap();
        if CHECK_VERSION && cell.generation != seen {
            return false;
        }
        let mut log = self.log();
        let replaced = cell.owner.map(|old| (old, log.kicked.contains(&old)));
        let seq = log.writes.len() + 1;
        log.writes.push(Write {
            seq,
            place,
            owner: login,
            replaced,
        });
        *cell = Cell {
            generation: seen + 1,
            owner: Some(login),
        };
        true
    }

    /// The kick of `victim`: its node ends the session (synchronous, as a confirmed
    /// kick is, before the kicker writes).
    fn kick(&self, victim: Login) {
        self.log().kicked.insert(victim);
    }

    fn last_write(&self) -> usize {
        self.log().writes.len()
    }

    /// One pooled login, as the arbiter decides it, within `attempts` attempts.
    fn login(&self, login: Login, policy: Policy, attempts: usize) {
        let from = self.last_write();
        let answer = 'call: {
            for _ in 0..attempts {
                // The listing: one read per place, each at its own time.
                let listing: Vec<Cell> = (0..self.places.len()).map(|p| self.read(p)).collect();
                if let Some(place) = listing.iter().position(|cell| cell.owner.is_none()) {
                    if self.cas(place, listing[place].generation, login) {
                        break 'call Answer::Won {
                            login,
                            place,
                            evicted: None,
                        };
                    }
                    continue;
                }
                if policy == Policy::DenyNew {
                    break 'call Answer::Refused {
                        login,
                        held: listing.len(),
                        from,
                        to: self.last_write(),
                    };
                }
                let (place, victim) = listing
                    .iter()
                    .enumerate()
                    .filter_map(|(place, cell)| cell.owner.map(|owner| (place, owner)))
                    .min_by_key(|&(place, owner)| (since(owner), place))
                    .expect("every place is held");
                self.kick(victim);
                if self.cas(place, listing[place].generation, login) {
                    break 'call Answer::Won {
                        login,
                        place,
                        evicted: Some(victim),
                    };
                }
            }
            Answer::GaveUp(login)
        };
        self.log().answers.push(answer);
    }

    /// The checks once every login answered; the sessions online at the end.
    fn check(&self, initial: &[Login]) -> BTreeSet<Login> {
        let log = self.log();
        for write in &log.writes {
            if let Some((old, kicked)) = write.replaced {
                assert!(
                    kicked,
                    "{ONE_HOLDER}: login {} wrote place #{} over session {old}, never kicked",
                    write.owner, write.place
                );
            }
        }
        let mut online: BTreeSet<Login> = initial.iter().copied().collect();
        for answer in &log.answers {
            match *answer {
                Answer::Won {
                    login,
                    place,
                    evicted,
                } => {
                    online.insert(login);
                    let write = log
                        .writes
                        .iter()
                        .find(|w| w.owner == login)
                        .expect("a winner wrote");
                    assert_eq!(write.place, place);
                    if let Some(victim) = evicted {
                        assert_eq!(
                            write.replaced,
                            Some((victim, true)),
                            "{KICKED_FIRST}: login {login} kicked {victim} and wrote place #{place}"
                        );
                    }
                }
                Answer::Refused {
                    login,
                    held,
                    from,
                    to,
                } => self.check_refusal(&log, login, held, from..=to, initial.len()),
                Answer::GaveUp(login) => panic!("{ANSWERED}: login {login} gave up"),
            }
        }
        online.retain(|login| !log.kicked.contains(login));
        let owners: BTreeSet<Login> = (0..self.places.len())
            .filter_map(|p| self.read(p).owner)
            .collect();
        assert_eq!(online, owners, "{AT_MOST_K}");
        assert!(online.len() <= self.places.len(), "{AT_MOST_K}");
        online
    }

    /// A refused call saw `k` places held, and no place was free from the call's start
    /// (`seqs.start()`, the writes before it) to its end without a write in between.
    fn check_refusal(
        &self,
        log: &Log,
        login: Login,
        held: usize,
        seqs: std::ops::RangeInclusive<usize>,
        initial: usize,
    ) {
        let k = self.places.len();
        assert_eq!(
            held, k,
            "{REFUSED_FULL}: login {login} saw {held} of {k} held"
        );
        for place in initial..k {
            let written_before_end = log
                .writes
                .iter()
                .any(|w| w.place == place && w.seq <= *seqs.end());
            assert!(
                written_before_end,
                "{REFUSED_FULL}: login {login} refused while place #{place} stayed free"
            );
        }
    }
}

/// Logins `(id, policy)` race on a pool of `k` places with `initial` sessions online.
/// Returns the sessions online at the end.
fn race<const CHECK_VERSION: bool>(
    k: usize,
    initial: &'static [Login],
    logins: &[(Login, Policy)],
) -> BTreeSet<Login> {
    let pool = Pool::<CHECK_VERSION>::new(k, initial);
    let attempts = logins.len() + 1;
    let handles: Vec<_> = logins
        .iter()
        .map(|&(login, policy)| {
            let pool = Arc::clone(&pool);
            thread::spawn(move || pool.login(login, policy, attempts))
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    pool.check(initial)
}

/// Runs `body` under loom and returns how many interleavings it explored.
fn explore(name: &str, logins: usize, body: impl Fn() + Send + Sync + 'static) -> usize {
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&runs);
    builder(logins).check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        body();
    });
    let explored = runs.load(Ordering::Relaxed);
    eprintln!("loom model {name}: {explored} interleavings explored");
    explored
}

/// The models of two logins explore every interleaving. Three logins of several steps
/// each have millions (8.7 million for the mixed model, minutes): those are bounded to
/// every schedule with at most [`THREE_LOGINS_PREEMPTIONS`] preemptions, thousands,
/// under a second. `LOOM_MAX_PREEMPTIONS` overrides both.
fn builder(logins: usize) -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() && logins > 2 {
        builder.preemption_bound = Some(THREE_LOGINS_PREEMPTIONS);
    }
    builder
}

/// The preemption bound of the models of three logins.
const THREE_LOGINS_PREEMPTIONS: usize = 3;

/// Runs a model that must fail and returns the message of its violation.
fn violation_found(name: &str, body: impl Fn() + Send + Sync + 'static) -> String {
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&runs);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        builder(2).check(move || {
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

use Policy::{DenyNew, EvictOldest};

#[test]
fn loom_pool_deny_new_two_logins_one_place() {
    assert!(
        explore("pool: deny-new, k=1, two logins", 2, || {
            race::<true>(1, &[], &[(0, DenyNew), (1, DenyNew)]);
        }) > 1
    );
}

#[test]
fn loom_pool_deny_new_three_logins_two_places() {
    assert!(
        explore("pool: deny-new, k=2, three logins", 3, || {
            race::<true>(2, &[], &[(0, DenyNew), (1, DenyNew), (2, DenyNew)]);
        }) > 1
    );
}

#[test]
fn loom_pool_last_free_place_mixed_policies() {
    assert!(
        explore(
            "pool: k=2, one place held, deny-new and evict-oldest",
            3,
            || {
                race::<true>(2, &[100], &[(0, DenyNew), (1, EvictOldest), (2, DenyNew)]);
            }
        ) > 1
    );
}

#[test]
fn loom_pool_evict_oldest_one_place() {
    assert!(
        explore("pool: evict-oldest, k=1, two logins", 2, || {
            race::<true>(1, &[100], &[(0, EvictOldest), (1, EvictOldest)]);
        }) > 1
    );
}

#[test]
fn loom_pool_evict_oldest_each_evicts_a_different_session() {
    assert!(
        explore("pool: evict-oldest, k=2 held, two logins", 2, || {
            let online = race::<true>(2, &[100, 101], &[(0, EvictOldest), (1, EvictOldest)]);
            assert_eq!(
                online,
                BTreeSet::from([0, 1]),
                "{AT_MOST_K}: each login evicts a different oldest session"
            );
        }) > 1
    );
}

#[test]
fn loom_pool_rejects_a_cas_without_its_version_check() {
    for (name, k, initial, logins) in [
        (
            "deny-new, k=1",
            1,
            &[][..],
            &[(0, DenyNew), (1, DenyNew)][..],
        ),
        (
            "evict-oldest, k=2 held",
            2,
            &[100, 101][..],
            &[(0, EvictOldest), (1, EvictOldest)][..],
        ),
    ] {
        let message = violation_found(&format!("pool broken CAS: {name}"), move || {
            race::<false>(k, initial, logins);
        });
        assert!(
            message.contains(ONE_HOLDER),
            "the model failed for another reason: {message}"
        );
    }
}
