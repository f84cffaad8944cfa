//! The lease contract suite (`unique-lease-contract`) on dynalite: every case on a
//! fresh table, with a second directory instance on the same table and clock as the
//! subject's peer (each instance keeps its own observations, D10).

mod common;

use std::sync::Arc;
use std::time::Duration;

use unique_lease::{ManualClock, new_lease_token};
use unique_lease_contract::{self as contract, Subject};
use unique_store_dynamodb::DynamoDirectory;
use unique_testsupport::dynalite::Dynalite;

/// Two instances on one fresh table, judging time on one manual clock.
async fn dynamodb() -> Subject {
    let table = format!("lease-contract-{}", new_lease_token());
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    let instance = || async {
        DynamoDirectory::builder(table.clone())
            .connection(
                common::builder()
                    .endpoint_url(Dynalite::shared().endpoint_url())
                    .attempt_timeout(Duration::from_secs(10))
                    .operation_timeout(Duration::from_secs(10)),
            )
            .clock(clock.clone())
            .build()
            .await
            .expect("build a lease directory for dynalite")
    };
    let directory = instance().await;
    directory
        .create_table_if_missing(Duration::from_secs(10))
        .await
        .expect("create the lease table on dynalite");
    let peer = instance().await;
    Subject::new(Arc::new(directory), clock).with_peer(Arc::new(peer))
}

unique_lease_contract::lease_contract_tests!(dynamodb);
