#![doc = include_str!("../README.md")]
#![allow(
    clippy::missing_panics_doc,
    reason = "every case panics on a contract violation, documented once in the crate doc"
)]

/// The checks (`ensure!`, `ensure_eq!`) and what the generated tests run each case
/// through (see [`lease_contract_tests!`]).
#[doc(hidden)]
#[macro_use]
pub extern crate unique_suite_kit as __kit;

mod broken;
mod check;
mod lease;
mod model;
mod races;
mod registry;
mod sweep;

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use check::Answer;
use unique_lease::{Clock, Directory, Lease, LeaseRows, MAX_ID_LEN, ManualClock, NodeRegistry};

pub use broken::TrustsTheCaller;
pub use lease::*;
pub use model::*;
pub use races::*;
pub use registry::*;
pub use sweep::*;

/// What every case receives: a fresh backend seen through both traits.
#[derive(Clone)]
pub struct Subject {
    /// The directory under test.
    pub directory: Arc<dyn Directory>,
    /// A second directory over the same store and clock, as another process would
    /// open it (D10 cases: callers with other clocks). Defaults to `directory`;
    /// backends that keep state per instance (DynamoDB's observations) should give
    /// a real second instance.
    pub peer: Arc<dyn Directory>,
    /// The registry under test (usually the same backend).
    pub registry: Arc<dyn NodeRegistry>,
    /// The store's clock: the backend judges every expiry on it (in place of Redis
    /// `TIME`, the database's clock, …), and cases advance it to let time pass.
    /// Callers' `now` arguments are other clocks. Factories start it at
    /// [`start_time`].
    pub clock: Arc<ManualClock>,
    /// Anything the backend needs kept alive while the case runs (a server guard).
    pub keep_alive: Option<Arc<dyn Any + Send + Sync>>,
    /// The longest room and node id the directory takes (D9): [`MAX_ID_LEN`] unless a
    /// front in between needs bytes of its own (the HTTP routes store `<project>#<room>`).
    pub max_id_len: usize,
    /// The backend's rows, for the sweep cases (D12, [`lease_sweep_tests!`]): the same
    /// instance as `directory`, so it shares its step guard.
    pub rows: Option<Arc<dyn LeaseRows>>,
}

impl Subject {
    /// A subject over one backend implementing both traits, with `clock` as its
    /// registry clock.
    pub fn new<B: Directory + NodeRegistry>(backend: Arc<B>, clock: Arc<ManualClock>) -> Self {
        Self {
            directory: backend.clone(),
            peer: backend.clone(),
            registry: backend,
            clock,
            keep_alive: None,
            max_id_len: MAX_ID_LEN,
            rows: None,
        }
    }

    /// A subject over one [`LeaseRows`] backend, its rows included (the sweep cases).
    pub fn with_rows<B: LeaseRows>(backend: Arc<B>, clock: Arc<ManualClock>) -> Self {
        let mut subject = Self::new(Arc::clone(&backend), clock);
        subject.rows = Some(backend);
        subject
    }

    /// Sets the longest id the directory takes (see [`Subject::max_id_len`]).
    #[must_use]
    pub fn with_max_id_len(mut self, max_id_len: usize) -> Self {
        self.max_id_len = max_id_len;
        self
    }

    /// Sets the second directory instance over the same store and clock.
    #[must_use]
    pub fn with_peer(mut self, peer: Arc<dyn Directory>) -> Self {
        self.peer = peer;
        self
    }

    /// The store's clock now: what a caller whose clock agrees with the store passes.
    pub fn now(&self) -> SystemTime {
        self.clock.now()
    }

    /// Lets `by` pass on the store's clock.
    pub fn pass(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Steps the store's wall clock forward by `by`: no time passes (D11).
    pub fn step_forward(&self, by: Duration) {
        self.clock.step_forward(by);
    }

    /// Steps the store's wall clock back by `by`: no time passes (D11).
    pub fn step_back(&self, by: Duration) {
        self.clock.step_back(by);
    }

    /// Keeps `guard` alive as long as the subject.
    #[must_use]
    pub fn keep_alive(mut self, guard: Arc<dyn Any + Send + Sync>) -> Self {
        self.keep_alive = Some(guard);
        self
    }
}

/// A random token no backend issued (a UUID v4, like the tokens backends issue), for
/// cases that present a forged or stale token.
fn fresh_token() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Where factories should start the subject's clock: 2030-03-17T17:46:40.000123Z
/// (sub-millisecond on purpose, to exercise millisecond truncation).
pub fn start_time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_900_000_000) + Duration::from_micros(123)
}

/// A case: its name and how to run it.
#[derive(Clone, Copy)]
pub struct Case {
    /// The case's function name.
    pub name: &'static str,
    /// Runs the case on a subject (panics on failure).
    pub run: fn(Subject) -> Pin<Box<dyn Future<Output = ()> + Send>>,
}

macro_rules! case_table {
    ($($case:ident),* $(,)?) => {
        /// Every case of the suite, in order.
        pub static CASES: &[Case] = &[$(Case {
            name: stringify!($case),
            run: |subject| Box::pin($case(subject)),
        }),*];
    };
}

crate::__unique_lease_cases!(case_table;);

/// Runs every case, each on a fresh subject from `factory` and its own task, and
/// panics at the end listing every failure, one line each: `  case: <clause>
/// <rule>: <seen>`. A failing case does not stop the others.
pub async fn run_all<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Subject>,
{
    let mut report = unique_suite_kit::Report::new("lease");
    for case in CASES {
        report.run(case.name, (case.run)(factory().await)).await;
    }
    report.assert_passed();
}

/// The list of case names, handed to `$callback` after `$args`. One list feeds
/// both [`CASES`] and [`lease_contract_tests!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __unique_lease_cases {
    ($callback:path; $($args:tt)*) => {
        $callback! {
            $($args)*
            // D7, D1, D9
            lookup_of_unknown_room_is_none,
            ensure_grants_a_free_room,
            grant_uses_millisecond_resolution,
            zero_ttl_means_thirty_seconds,
            // D2
            renewal_keeps_token_and_epoch,
            renewal_never_shortens_the_lease,
            // D3
            valid_lease_of_another_node_is_returned_unchanged,
            // D1, D4
            takeover_after_expiry_issues_new_token_and_higher_epoch,
            expiry_instant_is_already_expired,
            holder_returning_after_expiry_gets_a_new_token,
            epoch_grows_across_release_and_expiry,
            // D5
            verify_accepts_only_the_current_holding,
            verify_rejects_an_expired_lease,
            verify_never_renews_or_takes_over,
            verify_of_unknown_room_is_false,
            // D6
            release_by_holder_deletes_the_lease,
            release_by_another_node_changes_nothing,
            release_of_an_expired_lease_by_its_holder,
            release_with_another_token_changes_nothing,
            // D7, D8, D9
            lookup_returns_an_expired_lease_without_taking_over,
            // D10
            callers_clocks_never_decide_expiry,
            a_caller_clock_far_ahead_cannot_pin_a_room,
            // D11
            a_forward_step_never_hands_a_held_room_to_another_node,
            a_backward_step_never_stretches_a_lease_past_its_ttl,
            rooms_are_independent,
            invalid_lease_inputs_are_rejected_before_storage,
            ids_at_the_length_limit_work,
            // D8 races
            many_nodes_race_for_one_free_room,
            renewal_races_takeover_at_the_expiry_instant,
            early_renewal_races_takeover,
            release_races_ensure,
            concurrent_random_operations_keep_epochs_ordered,
            // D1–D7 against a reference model
            random_sequences_match_the_reference_model,
            // N1–N4
            registered_node_can_be_looked_up,
            reregistration_replaces_address_and_extends,
            zero_registration_ttl_means_thirty_seconds,
            registration_expires,
            unregister_removes_and_tolerates_unknown,
            invalid_registrations_are_rejected,
        }
    };
}

/// Expands to one `#[tokio::test]` per sweep case (D12), each on a fresh subject from
/// `$factory` (an `async fn() -> Subject` built with [`Subject::with_rows`]). For the
/// [`LeaseRows`] backends only: Redis expires its keys itself, DynamoDB keeps its items.
#[macro_export]
macro_rules! lease_sweep_tests {
    ($factory:path) => {
        $crate::__unique_lease_case_tests! { $factory;
            sweeping_keeps_the_table_to_its_live_rows,
            a_sweep_never_frees_a_held_room_nor_lowers_an_epoch,
        }
    };
}

/// Expands to one `#[tokio::test]` (multi-threaded runtime) per contract case, each
/// on a fresh subject from `$factory` (an `async fn() -> Subject`).
#[macro_export]
macro_rules! lease_contract_tests {
    ($factory:path) => {
        $crate::__unique_lease_cases!($crate::__unique_lease_case_tests; $factory;);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __unique_lease_case_tests {
    ($factory:path; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::__kit::run_case(
                    "lease",
                    stringify!($case),
                    $crate::$case($factory().await),
                )
                .await;
            }
        )*
    };
}

/// The default ttl of the cases.
const TTL: Duration = Duration::from_secs(10);

/// `t` truncated to the millisecond.
fn whole_ms(t: SystemTime) -> SystemTime {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis();
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).expect("fits"))
}

/// The seed of a randomized case: `UNIQUE_LEASE_SEED` when set, random otherwise.
fn seed() -> u64 {
    std::env::var("UNIQUE_LEASE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..))
}

/// Prints the seed when the case panics, so the failing sequence can be replayed.
struct SeedReport(u64);

impl Drop for SeedReport {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "lease contract: failing seed {0}; replay with UNIQUE_LEASE_SEED={0}",
                self.0
            );
        }
    }
}

/// What a case compares of a lease: the holding and the time the store said was
/// left. The store's clock stands still between the calls a case compares, so two
/// answers about one holding agree on all of it; `expires_at` and `deadline` are
/// the callers' clocks and are left out.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Seen {
    room_id: String,
    node_id: String,
    lease_token: String,
    epoch: u64,
    ttl_left: Duration,
}

fn seen(lease: &Lease) -> Seen {
    Seen {
        room_id: lease.room_id.clone(),
        node_id: lease.node_id.clone(),
        lease_token: lease.lease_token.clone(),
        epoch: lease.epoch,
        ttl_left: lease.ttl_left,
    }
}

fn seen_opt(lease: Option<&Lease>) -> Option<Seen> {
    lease.map(seen)
}

/// D5: `verify_owner(room, node, token, now)` must answer `want` (true iff the
/// stored lease has this node and token and is valid on the store's clock); a case
/// states what the stored lease is by the calls it made before.
async fn verify_is(
    directory: &dyn Directory,
    room: &str,
    node: &str,
    token: &str,
    now: SystemTime,
    want: bool,
) {
    let got = directory.verify_owner(room, node, token, now).await.answer(
        "D5",
        "verify_owner must answer a valid call with true or false",
    );
    ensure_eq!(
        got,
        want,
        "D5",
        "verify_owner must be true iff the lease has this node and token and is valid",
        "room {room:?} node {node:?} token {token:?} at {now:?}"
    );
}

/// `ensure_owner` of a valid call (its failure breaks D1).
async fn ensure(
    directory: &dyn Directory,
    room: &str,
    node: &str,
    now: SystemTime,
    ttl: Duration,
) -> Lease {
    directory
        .ensure_owner(room, node, now, ttl)
        .await
        .answer("D1", "ensure_owner must answer a valid call with a lease")
}

/// `release_owner` of a valid call (its failure breaks D6).
async fn release(directory: &dyn Directory, room: &str, node: &str, token: &str) -> bool {
    directory
        .release_owner(room, node, token)
        .await
        .answer("D6", "release_owner must answer a valid call")
}

/// `lookup` of a valid call (its failure breaks D7).
async fn lookup(directory: &dyn Directory, room: &str) -> Option<Lease> {
    directory
        .lookup(room)
        .await
        .answer("D7", "lookup must answer a valid call")
}

/// The stored lease of `room`, which a case just wrote: D7 lookup must return it.
async fn stored(directory: &dyn Directory, room: &str) -> Lease {
    lookup(directory, room).await.unwrap_or_else(|| {
        unique_suite_kit::violated(
            "D7",
            "lookup must return the stored lease, expired ones included",
            format_args!("room {room:?} read as none"),
        )
    })
}
