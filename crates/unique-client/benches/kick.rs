//! Cost of one kick that finds no session on this node: what each kick of a flood for
//! unrelated uids costs, under the lock every login and kick takes. On a fresh handler,
//! after 100,000 earlier such kicks, and with the early-kick memory full (4096 logins in
//! flight, each kicked, and one more kicked past the cap). Single caller; the futures are
//! always ready, so `block_on` adds only a few nanoseconds.

use std::hint::black_box;

use criterion::{Criterion, criterion_main};
use futures::executor::block_on;
use unique_client::{KickHandler, KickOptions};
use unique_core::{Key, KickPayload};

const PRIOR_KICKS: i64 = 100_000;

fn kick(uid: i64) -> KickPayload {
    KickPayload {
        project: "bench".into(),
        env: "prod".into(),
        uid,
        slot: String::new(),
        generation: 2,
        reason: unique_core::KickReason::LoginElsewhere,
        message: None,
    }
}

/// A node with no session at all: every kick is `no-session`.
fn handler() -> KickHandler {
    KickHandler::new(|_: &Key| None, |_: Key, _| async {}, KickOptions::default())
}

fn no_session(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _context = runtime.enter();
    let mut group = c.benchmark_group("kick_handler/no_session");
    // The same key every time, so the handler stays as it started.
    let probe = kick(PRIOR_KICKS + 1);

    let fresh = handler();
    group.bench_function("fresh", |b| {
        b.iter(|| black_box(block_on(fresh.handle(&probe))));
    });

    let flooded = handler();
    for uid in 1..=PRIOR_KICKS {
        block_on(flooded.handle(&kick(uid)));
    }
    group.bench_function("after_100k_unrelated_kicks", |b| {
        b.iter(|| black_box(block_on(flooded.handle(&probe))));
    });
    group.finish();
    over_cap(c);
}

/// The early-kick memory full: the kick of one more login in flight is counted and dropped
/// (a sweep of expired kicks runs at most once a second).
fn over_cap(c: &mut Criterion) {
    let full = handler();
    let cap = i64::try_from(full.options().max_early_kicks).expect("cap fits");
    let logins: Vec<_> = (1..=cap + 1)
        .map(|uid| full.expect_login(&kick(uid).key()))
        .collect();
    for uid in 1..=cap {
        block_on(full.handle(&kick(uid)));
    }
    assert_eq!(
        full.remembered_early_kicks(),
        full.options().max_early_kicks
    );
    let past = kick(cap + 1);
    c.bench_function("kick_handler/no_session/over_the_cap", |b| {
        b.iter(|| black_box(block_on(full.handle(&past))));
    });
    assert!(full.dropped_early_kicks() > 0);
    drop(logins);
}

/// The benchmark group, configured from the command line.
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    no_session(&mut criterion);
}

criterion_main!(benches);
