//! The contract suite must be able to fail: each broken kicker here violates one
//! clause, and the case for that clause must reject it.

use std::time::Duration;

use unique_core::{KickDetail, KickOutcome, KickPayload, Kicker, async_trait};
use unique_kick_contract::{self as contract, identity};
use unique_kick_http::HttpKicker;

/// Runs `case` against `kicker` and returns whether it failed naming `clause`:
/// its panic message starts with the clause (a heading of `docs/design.md`,
/// as `cargo xtask contract` reads it), then a space.
async fn rejects<K, F>(kicker: K, clause: &str, case: F) -> bool
where
    K: Kicker,
    F: for<'a> FnOnce(&'a dyn Kicker) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>>
        + Send
        + 'static,
{
    let joined = tokio::spawn(async move { case(&kicker).await }).await;
    let Err(e) = joined else { return false };
    let payload = e.into_panic();
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    assert!(
        message.starts_with(&format!("{clause} ")),
        "the failure does not name {clause}: {message:?}"
    );
    true
}

/// Answers every kick with the same outcome, at once.
struct Always(KickOutcome);

#[async_trait]
impl Kicker for Always {
    async fn kick(&self, _: &str, _: &KickPayload, _: Duration) -> KickOutcome {
        self.0
    }
}

/// A real kicker whose outcome is rewritten: `from` becomes `to`.
struct Mislabels {
    inner: HttpKicker,
    from: KickOutcome,
    to: KickOutcome,
}

#[async_trait]
impl Kicker for Mislabels {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        let outcome = self.inner.kick(endpoint, payload, timeout).await;
        if outcome == self.from {
            self.to
        } else {
            outcome
        }
    }
}

/// A real kicker that sends the payload of the next gen instead of its own.
struct WrongGen(HttpKicker);

#[async_trait]
impl Kicker for WrongGen {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        let mut payload = payload.clone();
        payload.generation += 1;
        self.0.kick(endpoint, &payload, timeout).await
    }
}

/// A real kicker that runs with a longer deadline than it was given.
struct OverrunsDeadline(HttpKicker);

#[async_trait]
impl Kicker for OverrunsDeadline {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        self.0.kick(endpoint, payload, timeout * 2).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kicker_that_sends_another_gen_fails_the_payload_case() {
    reference_case(
        "a_kicker_that_sends_another_gen_fails_the_payload_case",
        async move {
            let kicker = WrongGen(HttpKicker::new());
            assert!(
                rejects(kicker, "Kick payload", |k| Box::pin(
                    contract::confirmed_on_200(k)
                ))
                .await
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kicker_that_always_confirms_fails_the_non_2xx_case() {
    reference_case(
        "a_kicker_that_always_confirms_fails_the_non_2xx_case",
        async move {
            let kicker = Always(KickOutcome::Confirmed);
            assert!(rejects(kicker, "Kicker", |k| Box::pin(contract::non_2xx_on_404(k))).await);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kicker_that_gives_up_at_once_fails_the_timeout_bound() {
    reference_case(
        "a_kicker_that_gives_up_at_once_fails_the_timeout_bound",
        async move {
            let kicker = Always(KickOutcome::Failed(KickDetail::Timeout));
            assert!(
                rejects(kicker, "Kicker", |k| Box::pin(
                    contract::timeout_when_server_never_answers(k)
                ))
                .await
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kicker_that_overruns_its_deadline_fails_the_timeout_bound() {
    reference_case(
        "a_kicker_that_overruns_its_deadline_fails_the_timeout_bound",
        async move {
            let kicker = OverrunsDeadline(HttpKicker::new());
            assert!(
                rejects(kicker, "Kicker", |k| Box::pin(
                    contract::timeout_when_server_never_answers(k)
                ))
                .await
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kicker_that_calls_a_timeout_a_connect_error_fails() {
    reference_case(
        "a_kicker_that_calls_a_timeout_a_connect_error_fails",
        async move {
            let kicker = Mislabels {
                inner: HttpKicker::new(),
                from: KickOutcome::Failed(KickDetail::Timeout),
                to: KickOutcome::Failed(KickDetail::ConnectError),
            };
            assert!(
                rejects(kicker, "Kicker", |k| Box::pin(
                    contract::timeout_when_body_stalls(k)
                ))
                .await
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kicker_that_calls_a_reset_a_timeout_fails() {
    reference_case("a_kicker_that_calls_a_reset_a_timeout_fails", async move {
        let kicker = Mislabels {
            inner: HttpKicker::new(),
            from: KickOutcome::Failed(KickDetail::ConnectError),
            to: KickOutcome::Failed(KickDetail::Timeout),
        };
        assert!(
            rejects(kicker, "Kicker", |k| Box::pin(
                contract::connect_error_on_reset(k)
            ))
            .await
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kicker_without_keep_alive_fails_the_reuse_case() {
    reference_case(
        "a_kicker_without_keep_alive_fails_the_reuse_case",
        async move {
            let kicker = HttpKicker::builder()
                .pool_max_idle_per_host(0)
                .build()
                .expect("valid options");
            assert!(
                rejects(kicker, "Kicker", |k| Box::pin(
                    contract::keep_alive_reuses_the_connection(k)
                ))
                .await
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kicker_that_trusts_the_test_ca_fails_the_untrusted_certificate_case() {
    reference_case(
        "a_kicker_that_trusts_the_test_ca_fails_the_untrusted_certificate_case",
        async move {
            let kicker = HttpKicker::builder()
                .add_root_certificate(identity::ca_certificate())
                .build()
                .expect("valid options");
            assert!(
                rejects(kicker, "Kicker", |k| Box::pin(
                    contract::connect_error_on_untrusted_certificate(k)
                ))
                .await
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_names_the_failed_cases() {
    reference_case("run_all_names_the_failed_cases", async move {
        // Confirms non-2xx answers; right about everything else.
        let outcome = tokio::spawn(contract::run_all(|| Mislabels {
            inner: HttpKicker::new(),
            from: KickOutcome::Failed(KickDetail::Non2xx),
            to: KickOutcome::Confirmed,
        }))
        .await;
        let panic = outcome.expect_err("run_all passed a kicker that confirms non-2xx answers");
        let message = panic.into_panic();
        let message = message
            .downcast_ref::<String>()
            .expect("run_all panics with a formatted message");
        for case in [
            "non_2xx_on_404",
            "non_2xx_on_503",
            "redirect_307_not_followed",
        ] {
            assert!(
                message.contains(&format!("  {case}: Kicker ")),
                "{case} missing, or without its clause, in {message:?}"
            );
        }
        for case in [
            "confirmed_on_200",
            "connect_error_on_closed_port",
            "timeout_when_body_stalls",
        ] {
            assert!(
                !message.contains(case),
                "the passing case {case} was reported as failed: {message:?}"
            );
        }
    })
    .await;
}

/// Runs one test of this target as a case of the reference suite, so `cargo xtask contract`
/// reports it like the cases of a backend's run.
async fn reference_case(
    name: &'static str,
    body: impl std::future::Future<Output = ()> + Send + 'static,
) {
    unique_kick_contract::__kit::run_case("kicker reference", name, body).await;
}
