//! The lease contract suite on a real `redis-server` (installed and started by
//! `unique-testsupport`; one server per test binary, one key prefix per case).
#![cfg(feature = "redis")]

use std::sync::Arc;

use unique_lease::{ManualClock, RedisDirectory};
use unique_lease_contract::{self as contract, Subject};

async fn redis() -> Subject {
    let server = unique_testsupport::redis::shared();
    let conn = RedisDirectory::connection_manager(&server.url())
        .await
        .expect("connect to the test redis-server");
    let clock = Arc::new(ManualClock::new(contract::start_time()));
    let directory = RedisDirectory::builder(conn)
        .key_prefix(format!("{{lease-contract-{}}}", uuid::Uuid::new_v4()))
        .clock(clock.clone())
        .build()
        .expect("valid settings");
    Subject::new(Arc::new(directory), clock).keep_alive(server)
}

unique_lease_contract::lease_contract_tests!(redis);
