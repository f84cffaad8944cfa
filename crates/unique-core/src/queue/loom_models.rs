//! Loom models of the claim queue in `queue.rs`.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p unique-core --lib loom`
//! (`cargo xtask loom` runs them); `--nocapture` shows how many interleavings
//! each model explored. A claim is a future: its first poll (a task's first
//! poll, on the model's main thread) puts it in line, and a loom thread then
//! drives it with `block_on` or drops it, as a cancelled claim is. Every model
//! checks, as the claims run, that at most one claim holds the key's turn, and
//! that the turn went to the claims in line order; loom itself fails a model in
//! which a claim waits for a turn that never comes (a deadlock). At the end the
//! key's slot is gone and a new claim holds the turn at once.
//!
//! Each model also runs on a copy of the queue with one deliberate defect
//! ([`Defect`]), and must fail there: that is what shows it can.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize as Counter, Ordering::Relaxed};
use std::task::{Context, Poll, Waker};

use loom::future::block_on;
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::thread::{self, JoinHandle};

use super::{ClaimQueue, KEEP_CAPACITY, SPARE_KEYS, Slot};
use crate::error::Error;
use crate::sync::{Arc, Semaphore, lock};
use crate::types::Key;

/// The message of two claims holding one key's turn at once.
const ONE_HOLDER: &str = "invariant violated: at most one claim holds a key's turn";
/// The message of a turn given out of line order.
const IN_LINE: &str = "invariant violated: the turn goes to the claims in line order";
/// The message of a key whose slot outlived its last claim.
const SLOT_REMOVED: &str = "invariant violated: a key's slot goes when its last claim leaves";

/// The message of a claim left waiting on a key no other claim holds or waits for.
const STRANDED: &str = "invariant violated: a claim never waits on a key no other claim is on";

/// Room in line for every model's claims.
const MAX_WAITERS: usize = 4;

fn key() -> Key {
    Key::new("p", "e", 1)
}

/// What the models drive: the queue, or a broken copy of it.
trait Line: 'static {
    type Turn<'a>
    where
        Self: 'a;

    fn enter<'a>(&'a self, key: &'a Key) -> impl Future<Output = Result<Self::Turn<'a>, Error>>;

    fn keys(&self) -> usize;
}

impl Line for ClaimQueue {
    type Turn<'a> = super::Turn<'a>;

    fn enter<'a>(&'a self, key: &'a Key) -> impl Future<Output = Result<Self::Turn<'a>, Error>> {
        ClaimQueue::enter(self, key)
    }

    fn keys(&self) -> usize {
        ClaimQueue::keys(self)
    }
}

/// What the claims of one model did, checked as they do it.
struct World {
    /// Claims holding the turn now.
    holding: AtomicUsize,
    /// The claims that held the turn, in the order they got it. Outside the
    /// model (a `std` mutex): bookkeeping, not part of what is checked.
    served: std::sync::Mutex<Vec<usize>>,
    /// The claims expected to get the turn, in line order.
    line: Vec<usize>,
}

impl World {
    fn new(line: &[usize]) -> Arc<Self> {
        Arc::new(Self {
            holding: AtomicUsize::new(0),
            served: std::sync::Mutex::default(),
            line: line.to_vec(),
        })
    }

    /// Claim `id` got the turn.
    fn start(&self, id: usize) {
        assert_eq!(self.holding.fetch_add(1, SeqCst), 0, "{ONE_HOLDER}");
        let mut served = self.served.lock().unwrap();
        served.push(id);
        assert!(
            self.line.starts_with(&served),
            "{IN_LINE}: served {served:?}, the line was {:?}",
            self.line
        );
    }

    /// The claim holding the turn is about to leave.
    fn stop(&self) {
        self.holding.fetch_sub(1, SeqCst);
    }

    /// Every claim in line was served.
    fn all_served(&self) {
        assert_eq!(*self.served.lock().unwrap(), self.line, "{IN_LINE}");
    }
}

type Claim = Pin<Box<dyn Future<Output = ()>>>;

/// Claim `id` on [`key`]: waits for the turn, holds it, leaves.
fn claim<Q: Line>(queue: &Arc<Q>, world: &Arc<World>, id: usize) -> Claim {
    let queue = Arc::clone(queue);
    let world = Arc::clone(world);
    Box::pin(async move {
        let key = key();
        let turn = queue.enter(&key).await.expect("the line has room");
        world.start(id);
        world.stop();
        drop(turn);
    })
}

fn noop_context() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// A claim polled once, as a task first is: it waits in line from here on.
fn waiting<Q: Line>(queue: &Arc<Q>, world: &Arc<World>, id: usize) -> Claim {
    let mut claim = claim(queue, world, id);
    assert!(
        claim.as_mut().poll(&mut noop_context()).is_pending(),
        "a claim waits while its key's turn is held"
    );
    claim
}

/// The turn of a claim on an idle key, which it holds at its first poll.
fn enter_idle<'a, Q: Line>(queue: &'a Q, key: &'a Key) -> Q::Turn<'a> {
    match pin!(queue.enter(key)).poll(&mut noop_context()) {
        Poll::Ready(turn) => turn.expect("the line has room"),
        Poll::Pending => panic!("{SLOT_REMOVED}: a claim on an idle key waited"),
    }
}

/// Joins `thread`, passing on its panic as it was.
fn join<T>(thread: JoinHandle<T>) -> T {
    thread.join().unwrap_or_else(|panic| resume_unwind(panic))
}

/// After every claim left: no slot is left, and a new claim holds at once.
fn key_is_idle<Q: Line>(queue: &Q) {
    assert_eq!(queue.keys(), 0, "{SLOT_REMOVED}");
    let key = key();
    drop(enter_idle(queue, &key));
    assert_eq!(queue.keys(), 0, "{SLOT_REMOVED}");
}

/// Claim 0 holds the turn and claims 1 and 2 wait behind it, in that order;
/// then 0 leaves while 1 and 2, each on its own thread, wait for their turn.
fn in_line_order<Q: Line>(queue: Q) {
    let queue = Arc::new(queue);
    let world = World::new(&[0, 1, 2]);
    let key = key();
    let held = enter_idle(&*queue, &key);
    world.start(0);
    let first = waiting(&queue, &world, 1);
    let second = waiting(&queue, &world, 2);
    let first = thread::spawn(move || block_on(first));
    let second = thread::spawn(move || block_on(second));
    world.stop();
    drop(held);
    join(first);
    join(second);
    world.all_served();
    key_is_idle(&*queue);
}

/// Claim 0 holds the turn, 1 and 2 wait behind it; 1 is cancelled (dropped)
/// while 0 leaves, so before, while or after the turn is handed to it. 2 gets
/// the turn, and only after 0 has left.
fn cancelled_waiter<Q: Line>(queue: Q) {
    let queue = Arc::new(queue);
    let world = World::new(&[0, 2]);
    let key = key();
    let held = enter_idle(&*queue, &key);
    world.start(0);
    let cancelled = waiting(&queue, &world, 1);
    let next = waiting(&queue, &world, 2);
    let cancelled = thread::spawn(move || drop(cancelled));
    let next = thread::spawn(move || block_on(next));
    world.stop();
    drop(held);
    join(cancelled);
    join(next);
    world.all_served();
    key_is_idle(&*queue);
}

/// Claim 0 holds the turn and 1 waits; 1 is cancelled while 0 leaves, so one
/// of them is the last claim on the key and removes its slot, while claim 2
/// arrives (its first poll): it joins the old slot or makes a new one. Once 0
/// and 1 are gone, claim 2 holds the turn at its next poll if not before: it
/// was never left waiting in a slot that is gone, for a turn nobody can hand on.
fn removal_races_a_newcomer<Q: Line>(queue: Q) {
    let queue = Arc::new(queue);
    let world = World::new(&[0, 2]);
    let key = key();
    let held = enter_idle(&*queue, &key);
    world.start(0);
    let cancelled = waiting(&queue, &world, 1);
    let cancelled = thread::spawn(move || drop(cancelled));
    let mut newcomer = claim(&queue, &world, 2);
    let newcomer = thread::spawn(move || {
        let served = newcomer.as_mut().poll(&mut noop_context()).is_ready();
        (newcomer, served)
    });
    world.stop();
    drop(held);
    join(cancelled);
    let (mut newcomer, served) = join(newcomer);
    assert!(
        served || newcomer.as_mut().poll(&mut noop_context()).is_ready(),
        "{STRANDED}"
    );
    world.all_served();
    key_is_idle(&*queue);
}

/// Runs `model` under loom and returns how many interleavings it explored.
fn explore(name: &str, model: impl Fn() + Send + Sync + 'static) -> usize {
    let runs = std::sync::Arc::new(Counter::new(0));
    let counter = std::sync::Arc::clone(&runs);
    loom::model(move || {
        counter.fetch_add(1, Relaxed);
        model();
    });
    let explored = runs.load(Relaxed);
    eprintln!("loom model {name}: {explored} interleavings explored");
    explored
}

/// Runs a model that must fail and returns the message of its failure.
fn violation_found(name: &str, model: impl Fn() + Send + Sync + 'static) -> String {
    let runs = std::sync::Arc::new(Counter::new(0));
    let counter = std::sync::Arc::clone(&runs);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        loom::model(move || {
            counter.fetch_add(1, Relaxed);
            model();
        });
    }));
    eprintln!(
        "loom model {name}: violation found at interleaving {}",
        runs.load(Relaxed)
    );
    let payload = outcome.expect_err("the model must find the defect of the broken copy");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

#[test]
fn loom_turns_go_in_line_order() {
    let explored = explore("turns in line order", || {
        in_line_order(ClaimQueue::new(MAX_WAITERS));
    });
    assert!(explored > 1);
}

#[test]
fn loom_a_cancelled_waiter_neither_keeps_nor_loses_the_turn() {
    let explored = explore("a cancelled waiter", || {
        cancelled_waiter(ClaimQueue::new(MAX_WAITERS));
    });
    assert!(explored > 1);
}

#[test]
fn loom_a_newcomer_racing_the_slot_removal_gets_its_turn() {
    let explored = explore("slot removal racing a newcomer", || {
        removal_races_a_newcomer(ClaimQueue::new(MAX_WAITERS));
    });
    assert!(explored > 1);
}

#[test]
fn loom_rejects_a_semaphore_per_waiter() {
    let message = violation_found("broken: a semaphore per waiter", || {
        in_line_order(Broken::new(Defect::SemaphorePerWaiter));
    });
    assert!(
        message.contains(IN_LINE),
        "the model failed for another reason: {message}"
    );
}

#[test]
fn loom_rejects_a_cancelled_waiter_handing_a_turn_on() {
    let message = violation_found("broken: a cancelled waiter hands a turn on", || {
        cancelled_waiter(Broken::new(Defect::WaiterHandsOn));
    });
    assert!(
        message.contains(ONE_HOLDER),
        "the model failed for another reason: {message}"
    );
}

#[test]
fn loom_rejects_a_removal_without_the_recheck() {
    let message = violation_found("broken: removal without the re-check", || {
        removal_races_a_newcomer(Broken::new(Defect::RemovalWithoutRecheck));
    });
    // The newcomer waits in the removed slot's line for a turn nobody hands on.
    assert!(
        message.contains(STRANDED),
        "the model failed for another reason: {message}"
    );
}

/// The one thing a [`Broken`] queue does wrong.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Defect {
    /// Each waiter gives its key's slot a new semaphore (`insert` where
    /// `enter` has `get_or_insert_with`), so the line restarts behind it.
    SemaphorePerWaiter,
    /// A waiter that leaves without the turn hands one on, as if it held it.
    WaiterHandsOn,
    /// The last claim to leave lets go of the shard between counting itself
    /// out and removing the slot, and removes it without counting again.
    RemovalWithoutRecheck,
}

/// A copy of [`ClaimQueue::enter`] and `Turn::drop` with one [`Defect`], on
/// the queue's own shards and slots; otherwise line for line the same.
struct Broken {
    queue: ClaimQueue,
    defect: Defect,
}

struct BrokenTurn<'a> {
    line: &'a Broken,
    key: &'a Key,
    shard: usize,
    holding: bool,
}

impl Broken {
    fn new(defect: Defect) -> Self {
        Self {
            queue: ClaimQueue::new(MAX_WAITERS),
            defect,
        }
    }

    async fn enter<'a>(&'a self, key: &'a Key) -> Result<BrokenTurn<'a>, Error> {
        let queue = &self.queue;
        let shard_index = queue.shard_of(key);
        let semaphore = {
            let mut shard = lock(&queue.shards[shard_index]);
            let Some(index) = shard.find(key) else {
                let owned = shard.owned(key);
                shard.slots.push((
                    owned,
                    Slot {
                        claims: 1,
                        turn: None,
                    },
                ));
                return Ok(BrokenTurn {
                    line: self,
                    key,
                    shard: shard_index,
                    holding: true,
                });
            };
            let slot = &mut shard.slots[index].1;
            if slot.claims > queue.max_waiters {
                return Err(Error::Throttled);
            }
            slot.claims += 1;
            if self.defect == Defect::SemaphorePerWaiter {
                Arc::clone(slot.turn.insert(Arc::new(Semaphore::new(0))))
            } else {
                Arc::clone(slot.turn.get_or_insert_with(|| Arc::new(Semaphore::new(0))))
            }
        };
        let mut turn = BrokenTurn {
            line: self,
            key,
            shard: shard_index,
            holding: false,
        };
        if let Ok(permit) = semaphore.acquire().await {
            permit.forget();
        }
        turn.holding = true;
        Ok(turn)
    }
}

impl Line for Broken {
    type Turn<'a> = BrokenTurn<'a>;

    fn enter<'a>(&'a self, key: &'a Key) -> impl Future<Output = Result<Self::Turn<'a>, Error>> {
        Broken::enter(self, key)
    }

    fn keys(&self) -> usize {
        self.queue.keys()
    }
}

impl Drop for BrokenTurn<'_> {
    fn drop(&mut self) {
        let defect = self.line.defect;
        let shards = &self.line.queue.shards;
        let mut shard = lock(&shards[self.shard]);
        let Some(index) = shard.find(self.key) else {
            return;
        };
        let slot = &mut shard.slots[index].1;
        slot.claims -= 1;
        if slot.claims > 0 {
            if (self.holding || defect == Defect::WaiterHandsOn)
                && let Some(turn) = &slot.turn
            {
                turn.add_permits(1);
            }
            return;
        }
        if defect == Defect::RemovalWithoutRecheck {
            drop(shard);
            shard = lock(&shards[self.shard]);
            let Some(index) = shard.find(self.key) else {
                return;
            };
            shard.slots.swap_remove(index);
            return;
        }
        let (key, _) = shard.slots.swap_remove(index);
        if shard.spare.len() < SPARE_KEYS {
            shard.spare.push(key);
        }
        if shard.slots.is_empty() && shard.slots.capacity() > KEEP_CAPACITY {
            shard.slots.shrink_to(KEEP_CAPACITY);
        }
    }
}
