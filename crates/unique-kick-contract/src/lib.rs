#![doc = include_str!("../README.md")]

/// The checks (`ensure!`, `ensure_eq!`) and what the generated tests run each case
/// through.
#[doc(hidden)]
#[macro_use]
pub extern crate unique_suite_kit as __kit;

mod cases;
mod check;
mod http1;
pub mod identity;
mod peer;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use unique_core::{KickOutcome, KickPayload, KickReason, Kicker};

pub use cases::*;
pub use http1::Received;
pub use peer::{Behaviour, Peer};

/// The deadline of every case that expects an answer or a prompt failure: long
/// enough that no classification can be a timeout in disguise on a loaded machine.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(5);

/// The deadline of the `timeout` cases.
pub const TIMEOUT_DEADLINE: Duration = Duration::from_millis(500);

/// How far past its deadline a kick may return: a kicker respects the deadline
/// it is given (`docs/design.md#kicker`), give or take timer resolution.
pub const TIMEOUT_SLACK: Duration = Duration::from_millis(100);

/// How long past its deadline the suite waits for a kicker that ignores it before
/// failing the case (instead of hanging the test run).
const HANG_GUARD: Duration = Duration::from_secs(5);

/// The payload every case sends: every field set, the optional `message` included, so a
/// kicker that drops a field fails the payload case.
pub fn payload() -> KickPayload {
    KickPayload {
        project: "contract".to_owned(),
        env: "kick-test".to_owned(),
        uid: 4_242,
        slot: String::new(),
        generation: 17,
        reason: KickReason::Admin,
        message: Some("contract check: \"é\"".to_owned()),
    }
}

/// Kicks `endpoint` with [`payload`] under `deadline`, returning the outcome and
/// the time it took.
///
/// # Panics
///
/// If the kicker has not returned 5 s after its deadline.
pub async fn timed_kick(
    kicker: &dyn Kicker,
    endpoint: &str,
    deadline: Duration,
) -> (KickOutcome, Duration) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        deadline + HANG_GUARD,
        kicker.kick(endpoint, &payload(), deadline),
    )
    .await
    .unwrap_or_else(|_| {
        check::violated(
            "Kicker",
            "a kick must respect the deadline it is given",
            format_args!("still running {HANG_GUARD:?} after its {deadline:?} deadline"),
        )
    });
    (outcome, started.elapsed())
}

/// A running case.
pub type CaseFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A case: its name and its body.
#[derive(Clone, Copy)]
pub struct Case {
    /// The case's function name.
    pub name: &'static str,
    /// Runs the case against a kicker; panics on a contract violation.
    pub run: for<'a> fn(&'a dyn Kicker) -> CaseFuture<'a>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The one list of case names; every other list is generated from it.
#[doc(hidden)]
#[macro_export]
macro_rules! __kicker_contract_cases {
    ($callback:ident ! { $($args:tt)* }) => {
        $crate::$callback! {
            { $($args)* }
            confirmed_on_200
            confirmed_on_204
            non_2xx_on_404
            non_2xx_on_500
            non_2xx_on_503
            redirect_301_not_followed
            redirect_302_not_followed
            redirect_307_not_followed
            timeout_when_server_never_answers
            timeout_when_body_stalls
            timeout_when_tls_handshake_stalls
            connect_error_on_closed_port
            connect_error_on_reset
            connect_error_on_garbled_response
            connect_error_on_https_to_plain_tcp
            connect_error_on_untrusted_certificate
            connect_error_on_invalid_endpoint
            keep_alive_reuses_the_connection
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kicker_contract_case_table {
    ({} $($case:ident)*) => {
        /// Every case, in the order [`run_all`] runs them.
        pub const CASES: &[Case] = &[
            $( Case { name: stringify!($case), run: |kicker| Box::pin(cases::$case(kicker)) }, )*
        ];
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kicker_contract_emit_tests {
    ({ $factory:expr } $($case:ident)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let kicker = $factory;
                $crate::__kit::run_case("kicker", stringify!($case), async move {
                    $crate::$case(&kicker).await;
                })
                .await;
            }
        )*
    };
}

/// Expands to one `#[tokio::test]` per contract case, each with a fresh kicker
/// from `$factory` (an expression evaluated once per test).
///
/// Needs `tokio` with the `macros` and `rt-multi-thread` features in the calling
/// crate's dev-dependencies.
///
/// ```
/// unique_kick_contract::kicker_contract_tests!(unique_kick_http::HttpKicker::new());
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! kicker_contract_tests {
    ($factory:expr) => {
        $crate::__kicker_contract_cases!(__kicker_contract_emit_tests! { $factory });
    };
}

__kicker_contract_cases!(__kicker_contract_case_table! {});

/// Runs every case, each on a fresh kicker from `factory` and a task of its own, and
/// panics listing every case that failed, one line each: `  case: <clause> <rule>:
/// <seen>`.
///
/// # Panics
///
/// If any case fails.
pub async fn run_all<K, F>(factory: F)
where
    K: Kicker,
    F: Fn() -> K,
{
    let mut report = __kit::Report::new("kicker");
    for case in CASES {
        let kicker = factory();
        let run = case.run;
        report
            .run(case.name, async move { run(&kicker).await })
            .await;
    }
    report.assert_passed();
}
