//! The suite must be able to fail, naming the clause broken: a directory that
//! forgets to raise the fencing epoch is rejected with a D4 failure, one that releases
//! by node whatever the token with a D6 failure, one that judges expiry by the
//! caller's clock with a D10 failure.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use unique_lease::{Directory, Lease, LeaseError, ManualClock, MemoryDirectory, async_trait};
use unique_lease_contract::{self as contract, Subject};

/// The memory directory, except that every lease it hands out carries epoch 1.
struct EpochOne(MemoryDirectory);

#[async_trait]
impl Directory for EpochOne {
    async fn lookup(&self, room_id: &str) -> Result<Option<Lease>, LeaseError> {
        Ok(self.0.lookup(room_id).await?.map(epoch_one))
    }

    async fn ensure_owner(
        &self,
        room_id: &str,
        node_id: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        Ok(epoch_one(
            self.0.ensure_owner(room_id, node_id, now, ttl).await?,
        ))
    }

    async fn verify_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
        now: SystemTime,
    ) -> Result<bool, LeaseError> {
        self.0
            .verify_owner(room_id, node_id, lease_token, now)
            .await
    }

    async fn release_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
    ) -> Result<bool, LeaseError> {
        self.0.release_owner(room_id, node_id, lease_token).await
    }
}

/// The memory directory, except that a release frees the node's holding whatever the token
/// (the release by node this crate had before tokens).
struct ReleasesByNode(MemoryDirectory);

#[async_trait]
impl Directory for ReleasesByNode {
    async fn lookup(&self, room_id: &str) -> Result<Option<Lease>, LeaseError> {
        self.0.lookup(room_id).await
    }

    async fn ensure_owner(
        &self,
        room_id: &str,
        node_id: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        self.0.ensure_owner(room_id, node_id, now, ttl).await
    }

    async fn verify_owner(
        &self,
        room_id: &str,
        node_id: &str,
        lease_token: &str,
        now: SystemTime,
    ) -> Result<bool, LeaseError> {
        self.0
            .verify_owner(room_id, node_id, lease_token, now)
            .await
    }

    async fn release_owner(
        &self,
        room_id: &str,
        node_id: &str,
        _lease_token: &str,
    ) -> Result<bool, LeaseError> {
        match self.0.lookup(room_id).await? {
            Some(held) if held.node_id == node_id => {
                self.0
                    .release_owner(room_id, node_id, &held.lease_token)
                    .await
            }
            _ => Ok(false),
        }
    }
}

fn epoch_one(lease: Lease) -> Lease {
    Lease { epoch: 1, ..lease }
}

/// A subject whose directory is `broken` around a memory directory on the suite's clock.
fn subject_of<D: Directory>(broken: impl FnOnce(MemoryDirectory) -> D) -> Subject {
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    let memory = Arc::new(MemoryDirectory::with_clock(clock.clone()));
    let directory: Arc<dyn Directory> =
        Arc::new(broken(MemoryDirectory::with_clock(clock.clone())));
    Subject {
        peer: directory.clone(),
        directory,
        registry: memory,
        clock,
        keep_alive: None,
        max_id_len: unique_lease::MAX_ID_LEN,
        rows: None,
    }
}

/// A subject whose directories judge expiry by their callers' clocks.
fn trusting_subject() -> Subject {
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    let directory: Arc<dyn Directory> =
        Arc::new(contract::TrustsTheCaller::new(contract::start_time()));
    Subject {
        peer: directory.clone(),
        directory,
        registry: Arc::new(MemoryDirectory::with_clock(clock.clone())),
        clock,
        keep_alive: None,
        max_id_len: unique_lease::MAX_ID_LEN,
        rows: None,
    }
}

fn epoch_one_subject() -> Subject {
    subject_of(EpochOne)
}

/// The message a case panicked with on the epoch-reusing directory, or `None` when it passed.
async fn failure(case: &str) -> Option<String> {
    failure_on(case, epoch_one_subject()).await
}

/// The message a case panicked with on `subject`, or `None` when it passed.
async fn failure_on(case: &str, subject: Subject) -> Option<String> {
    let case = contract::CASES
        .iter()
        .find(|c| c.name == case)
        .unwrap_or_else(|| panic!("no case {case}"));
    let run = (case.run)(subject);
    let e = tokio::spawn(run).await.err()?;
    let payload = e.into_panic();
    Some(
        payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_that_reuses_epochs_fails_naming_d4() {
    reference_case(
        "a_directory_that_reuses_epochs_fails_naming_d4",
        async move {
            for case in [
                "epoch_grows_across_release_and_expiry",
                "takeover_after_expiry_issues_new_token_and_higher_epoch",
                "release_by_holder_deletes_the_lease",
            ] {
                let message = failure(case)
                    .await
                    .unwrap_or_else(|| panic!("{case} passed a directory that reuses epochs"));
                assert!(
                    message.starts_with("D4 a new lease must carry a higher epoch"),
                    "{case} failed without naming D4: {message:?}"
                );
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_that_releases_by_node_fails_naming_d6() {
    reference_case(
        "a_directory_that_releases_by_node_fails_naming_d6",
        async move {
            let message = failure_on(
                "release_with_another_token_changes_nothing",
                subject_of(ReleasesByNode),
            )
            .await
            .expect("a release by node whatever the token passed");
            assert!(
                message.starts_with("D6 a release with another token must answer false"),
                "{message:?}"
            );
            let fine = failure_on(
                "release_by_holder_deletes_the_lease",
                subject_of(ReleasesByNode),
            );
            assert_eq!(
                fine.await,
                None,
                "the holder's own release is not the fault"
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_that_trusts_the_callers_clock_fails_naming_d10() {
    reference_case(
        "a_directory_that_trusts_the_callers_clock_fails_naming_d10",
        async move {
            for case in [
                "callers_clocks_never_decide_expiry",
                "a_caller_clock_far_ahead_cannot_pin_a_room",
            ] {
                let message = failure_on(case, trusting_subject())
                    .await
                    .unwrap_or_else(|| panic!("{case} passed a directory that trusts the caller"));
                assert!(
                    message.starts_with("D10 "),
                    "{case} failed without naming D10: {message:?}"
                );
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cases_of_other_clauses_still_pass() {
    reference_case("cases_of_other_clauses_still_pass", async move {
        for case in [
            "verify_accepts_only_the_current_holding",
            "rooms_are_independent",
        ] {
            assert_eq!(failure(case).await, None, "{case}");
        }
    })
    .await;
}

/// `run_all` runs every case and reports every failure, each under its case with its clause,
/// instead of stopping at the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_reports_every_failure() {
    reference_case("run_all_reports_every_failure", async move {
        let report = tokio::spawn(contract::run_all(|| async { epoch_one_subject() }))
            .await
            .expect_err("run_all must fail on a directory that reuses epochs")
            .into_panic();
        let report = report.downcast_ref::<String>().cloned().unwrap_or_default();
        let d4 = report
            .lines()
            .filter(|line| line.contains(": D4 a new lease must carry a higher epoch"))
            .count();
        assert!(
            d4 >= 3,
            "every D4 failure listed, not just the first:\n{report}"
        );
        assert!(
            report.contains("  epoch_grows_across_release_and_expiry: D4 "),
            "{report}"
        );
    })
    .await;
}

/// Runs one test of this target as a case of the reference suite, so `cargo xtask contract`
/// reports it like the cases of a backend's run.
async fn reference_case(
    name: &'static str,
    body: impl std::future::Future<Output = ()> + Send + 'static,
) {
    unique_lease_contract::__kit::run_case("lease reference", name, body).await;
}
