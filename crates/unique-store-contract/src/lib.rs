#![doc = include_str!("../README.md")]
// Every case panics on a contract violation by design; the crate docs say so once.
#![allow(clippy::missing_panics_doc)]

use std::future::Future;
use std::sync::Arc;

use unique_core::{Error, Key, Store, async_trait};

/// The checks (`ensure!`, `ensure_eq!`) and what the generated tests run each case
/// through.
#[doc(hidden)]
#[macro_use]
pub extern crate unique_suite_kit as __kit;

mod check;

pub use forwarding::Wrapped;
pub use rival::RivalKicker;

pub mod absent_records;
pub mod arbiter;
pub mod atomic_increment;
pub mod batch_reads;
pub mod cid_presence;
pub mod corrupt_owner;
pub mod error_classification;
pub mod fence_forms;
pub mod fenced_release;
pub mod forwarding;
pub mod invariants;
pub mod linearizability;
pub mod listing;
pub mod model;
pub mod online_count;
pub mod recent_claims;
mod rival;
pub mod slots;
pub mod strong_reads;
mod support;
pub mod traps;
pub mod vacant_claims;

/// A record exactly as stored, for building states the Arbiter never writes
/// (corrupt owners, empty cids, near-`i64::MAX` gens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// The `gen` attribute.
    pub generation: i64,
    /// The `owner` attribute as a raw string; `None` = attribute absent.
    pub owner: Option<String>,
    /// The `cid` attribute; `None` = attribute absent.
    pub claim_id: Option<String>,
    /// The `won` attribute (the recent claims, C9) as raw text; `None` = attribute absent.
    pub won: Option<String>,
}

/// The raw-record hook a backend gives the suite: an unconditional write that
/// bypasses every fence. Test-only; implemented next to the backend's contract test.
#[async_trait]
pub trait RawWriter: Send + Sync + 'static {
    /// Writes `record` for `key`, replacing whatever is stored.
    async fn put_raw(&self, key: &Key, record: RawRecord) -> Result<(), Error>;
}

/// What every case receives: the store under test and its raw-record hook
/// (both views of the same backend state).
#[derive(Clone)]
pub struct Subject {
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// Writes raw records into the same backend.
    pub raw: Arc<dyn RawWriter>,
}

/// The one list of cases, grouped by module. Every other list (the [`CASES`]
/// names, [`run_all`], the tests of [`store_contract_tests!`]) is generated
/// from it by passing a callback macro, so they cannot disagree.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_contract_cases {
    ($callback:ident ! $args:tt) => {
        $crate::$callback! {
            $args
            linearizability {
                race_first_login_one_winner,
                race_double_pin_one_winner,
                race_tombstone_one_winner,
                race_claim_against_release,
                interleaved_claims_and_releases,
                independent_keys_do_not_interfere,
                tenants_are_isolated,
                conditions_see_latest_write,
            }
            strong_reads {
                read_sees_committed_claim,
                read_sees_raw_write,
                current_agrees_with_read_owner,
                reads_never_go_back,
            }
            batch_reads {
                batch_agrees_with_single_reads,
                batch_sees_committed_writes,
                full_and_empty_batches,
            }
            absent_records {
                gen_0_record_reads_absent,
                first_login_claims_gen_0_record,
            }
            fence_forms {
                first_login_requires_absence,
                double_pin_requires_gen,
                double_pin_requires_cid,
                double_pin_replaces_session,
                tombstone_form_requires_absent_cid,
                corrupt_record_replaceable,
                owner_without_cid_uses_tombstone_form,
                empty_owner_with_cid_uses_double_pin,
            }
            atomic_increment {
                first_login_writes_gen_one,
                returned_gen_is_written_gen,
                no_torn_writes,
                gen_exhausted_refused,
                gen_below_max_claimable,
            }
            fenced_release {
                release_tombstones_and_keeps_gen,
                repeated_release_is_true,
                release_gen_mismatch_is_false,
                release_without_record_is_false,
                release_nonpositive_gen_is_false,
                release_never_resets_gen,
                stale_release_after_takeover_is_false,
            }
            cid_presence {
                empty_cid_reads_as_empty,
                absent_cid_reads_as_none,
                empty_cid_uses_double_pin,
                claim_writes_exact_cid,
            }
            corrupt_owner {
                corrupt_owner_reads_soft,
                corrupt_owner_is_unavailable_on_current,
                tombstone_distinct_from_absent,
                owner_json_round_trip,
                node_owner_round_trip,
            }
            error_classification {
                failed_condition_writes_nothing,
                lost_race_only_on_condition,
                lost_race_record_is_current,
                owner_without_endpoint_refused,
            }
            recent_claims {
                claims_append_their_wins,
                recent_claims_keep_the_last_ones,
                lost_race_writes_no_win,
                unreadable_list_reads_empty,
                superseded_retry_neither_kicks_nor_writes,
                superseded_after_logout,
            }
            traps {
                stale_snapshot_loses,
                records_outlive_an_idle_second,
            }
            invariants {
                random_operations_match_model,
                gen_monotone_under_concurrency,
            }
            slots {
                slots_are_independent,
                race_on_one_slot_leaves_the_other,
                default_slot_is_the_old_key,
                slots_distinct_from_prefix_uids,
                unusual_slot_text_works,
            }
            listing {
                empty_for_a_user_without_records,
                lists_exactly_the_slots_holding_an_owner,
                release_drops_a_slot_until_the_next_claim,
                gen_0_records_not_listed,
                corrupt_owner_fails_the_listing,
                never_lists_another_users_records,
                listing_sees_completed_writes,
                many_slots_all_listed,
                pool_places_round_trip,
            }
            vacant_claims {
                unsupported_sends_nothing,
                absent_record_claimed_at_gen_1,
                tombstone_claimed_at_next_gen,
                online_session_not_written,
                superseded_claim_id_not_written,
                logged_out_claim_id_not_written,
                other_records_not_written,
                owner_without_endpoint_refused,
                races_with_fenced_claims_one_winner,
            }
            arbiter {
                concurrent_claims_one_final_owner,
                replay_returns_same_gen_without_write,
                release_then_next_login,
                corrupt_record_replaced,
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __store_contract_names {
    (() $($module:ident { $($case:ident),* $(,)? })*) => {
        &[$($(concat!(stringify!($module), "::", stringify!($case)),)*)*]
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __store_contract_run_all {
    (($report:ident, $factory:ident) $($module:ident { $($case:ident),* $(,)? })*) => {
        $($(
            $report
                .run(
                    concat!(stringify!($module), "::", stringify!($case)),
                    $crate::$module::$case($factory().await),
                )
                .await;
        )*)*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __store_contract_test_fns {
    (() $($module:ident { $($case:ident),* $(,)? })*) => {
        $(
            mod $module {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                    async fn $case() {
                        $crate::__kit::run_case(
                            "store",
                            concat!(stringify!($module), "::", stringify!($case)),
                            $crate::$module::$case(super::__subject().await),
                        )
                        .await;
                    }
                )*
            }
        )*
    };
}

/// Expands to one `#[tokio::test(flavor = "multi_thread", worker_threads = 4)]`
/// per contract case, in a module `store_contract::<clause>::<case>`, so a
/// failure names its case. `$factory` is called once per case: an async fn or
/// a closure returning a future of a fresh [`Subject`].
///
/// The calling crate needs `tokio` (features `macros`, `rt-multi-thread`) as a
/// dev-dependency. See the crate docs for a complete example.
#[macro_export]
macro_rules! store_contract_tests {
    ($factory:expr $(,)?) => {
        mod store_contract {
            #[allow(unused_imports)]
            use super::*;

            async fn __subject() -> $crate::Subject {
                ($factory)().await
            }

            $crate::__store_contract_cases!(__store_contract_test_fns!());
        }
    };
}

/// Every case name as `module::case`, in the order [`run_all`] runs them.
pub const CASES: &[&str] = __store_contract_cases!(__store_contract_names!());

/// Runs every case in [`CASES`] order, each on a fresh subject from `factory`,
/// and panics at the end if any failed, listing every failure with its clause.
/// (To inspect the failures instead, use [`check_all`].)
pub async fn run_all<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Subject>,
{
    let report = check_all(factory).await;
    assert!(report.failures.is_empty(), "{report}");
}

/// Runs every case in [`CASES`] order, each on a fresh subject from `factory`
/// and on a task of its own, and reports every failure: a failing case does
/// not stop the run.
///
/// Runs inside a tokio runtime; use a multi-threaded one, as the per-case tests
/// of [`store_contract_tests!`] do, so the race cases really race.
pub async fn check_all<F, Fut>(factory: F) -> Report
where
    F: Fn() -> Fut,
    Fut: Future<Output = Subject>,
{
    let mut report = Report::new("store");
    __store_contract_cases!(__store_contract_run_all!(report, factory));
    report
}

/// The count cases (C13), run by [`online_count_tests!`] and [`check_online_count`]: apart
/// from the others, since each needs a store of its own.
#[doc(hidden)]
#[macro_export]
macro_rules! __online_count_cases {
    ($callback:ident ! $args:tt) => {
        $crate::$callback! {
            $args
            online_count {
                counts_exactly_the_sessions_held,
                count_sees_completed_concurrent_writes,
            }
        }
    };
}

/// Expands to one test per count case (C13) in a module `online_count_contract`, for a
/// store whose [`Store::count_online`] answers `Some`. The count is of the whole store, so
/// `$factory` must hand each case a store no other test writes while the case runs (a fresh
/// store, or a table of its own), unlike [`store_contract_tests!`]'s factory.
#[macro_export]
macro_rules! online_count_tests {
    ($factory:expr $(,)?) => {
        mod online_count_contract {
            #[allow(unused_imports)]
            use super::*;

            async fn __subject() -> $crate::Subject {
                ($factory)().await
            }

            $crate::__online_count_cases!(__store_contract_test_fns!());
        }
    };
}

/// Every count case name as `online_count::case`.
pub const ONLINE_COUNT_CASES: &[&str] = __online_count_cases!(__store_contract_names!());

/// Runs every count case (C13), each on a fresh subject from `factory` (a store no one else
/// writes meanwhile, as for [`online_count_tests!`]), and reports every failure.
pub async fn check_online_count<F, Fut>(factory: F) -> Report
where
    F: Fn() -> Fut,
    Fut: Future<Output = Subject>,
{
    let mut report = Report::new("store");
    __online_count_cases!(__store_contract_run_all!(report, factory));
    report
}

/// What [`check_all`] found: the passed cases and every failure with its clause.
pub use unique_suite_kit::{Failure, Report};

/// The forwarding cases (C12), run on a wrapper by [`wrapper_contract_tests!`] and
/// [`check_wrapper`]: one per `Store` method, each named for it.
#[doc(hidden)]
#[macro_export]
macro_rules! __wrapper_contract_cases {
    ($callback:ident ! $args:tt) => {
        $crate::$callback! {
            $args
            forwarding {
                read_owner,
                claim_cas,
                vacant_claims,
                claim_vacant,
                current,
                release,
                read_owners,
                list_sessions,
                check_ready,
                count_online,
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __wrapper_contract_run_all {
    (($report:ident, $factory:ident, $wrap:ident) $($module:ident { $($case:ident),* $(,)? })*) => {
        $($(
            $report
                .run(
                    concat!(stringify!($module), "::", stringify!($case)),
                    $crate::$module::$case($crate::Wrapped::new(
                        $factory().await,
                        &$wrap,
                        stringify!($case),
                    )),
                )
                .await;
        )*)*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __wrapper_contract_test_fns {
    (() $($module:ident { $($case:ident),* $(,)? })*) => {
        $(
            mod $module {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                    async fn $case() {
                        $crate::__kit::run_case(
                            "store",
                            concat!(stringify!($module), "::", stringify!($case)),
                            $crate::$module::$case($crate::Wrapped::new(
                                super::__inner().await,
                                &super::__wrap,
                                stringify!($case),
                            )),
                        )
                        .await;
                    }
                )*
            }
        )*
    };
}

/// The store contract run on a `Store` wrapper (C12): `$wrap` builds the wrapper around any
/// store (`Fn(Arc<dyn Store>) -> Arc<dyn Store>`) and `$factory` makes a fresh [`Subject`]
/// of the backend it wraps, as for [`store_contract_tests!`].
///
/// Expands to one test per case in a module `store_contract`: every case of the store
/// contract on the wrapper around the backend (`store_contract::<clause>::<case>`, the raw
/// hook writing to the backend below it), and the forwarding cases,
/// `store_contract::forwarding::<method>`, one per `Store` method, each on the wrapper around
/// a witness of the backend that records the calls that reach it. A wrapper that leaves a
/// method to the trait's default fails the forwarding case named for the method.
///
/// ```ignore
/// unique_store_contract::wrapper_contract_tests!(subject, |store| {
///     Arc::new(MeteredStore::new(store)) as Arc<dyn Store>
/// });
/// ```
#[macro_export]
macro_rules! wrapper_contract_tests {
    ($factory:expr, $wrap:expr $(,)?) => {
        mod store_contract {
            #[allow(unused_imports)]
            use super::*;

            async fn __inner() -> $crate::Subject {
                ($factory)().await
            }

            fn __wrap(
                store: ::std::sync::Arc<dyn $crate::__Store>,
            ) -> ::std::sync::Arc<dyn $crate::__Store> {
                ($wrap)(store)
            }

            async fn __subject() -> $crate::Subject {
                $crate::wrap_subject(__inner().await, &__wrap)
            }

            $crate::__store_contract_cases!(__store_contract_test_fns!());
            $crate::__wrapper_contract_cases!(__wrapper_contract_test_fns!());
        }
    };
}

#[doc(hidden)]
pub use unique_core::Store as __Store;

/// Every forwarding case name as `forwarding::<method>`, in the order [`check_wrapper`]
/// runs them.
pub const WRAPPER_CASES: &[&str] = __wrapper_contract_cases!(__store_contract_names!());

/// `subject` with its store wrapped by `wrap`; the raw hook still writes to the store below.
pub fn wrap_subject(subject: Subject, wrap: &dyn Fn(Arc<dyn Store>) -> Arc<dyn Store>) -> Subject {
    Subject {
        store: wrap(subject.store),
        raw: subject.raw,
    }
}

/// What [`wrapper_contract_tests!`] runs, as one report: the forwarding cases
/// ([`WRAPPER_CASES`]) on the wrapper around a witness, then every case of [`CASES`] on the
/// wrapper around a fresh subject from `factory`.
pub async fn check_wrapper<F, Fut, W>(factory: F, wrap: W) -> Report
where
    F: Fn() -> Fut,
    Fut: Future<Output = Subject>,
    W: Fn(Arc<dyn Store>) -> Arc<dyn Store>,
{
    let mut report = Report::new("store");
    __wrapper_contract_cases!(__wrapper_contract_run_all!(report, factory, wrap));
    let wrapped = || async { wrap_subject(factory().await, &wrap) };
    __store_contract_cases!(__store_contract_run_all!(report, wrapped));
    report
}
