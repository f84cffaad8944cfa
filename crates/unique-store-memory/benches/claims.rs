//! Per-operation cost of the memory store, alone and through `unique_core::Arbiter`
//! (no kicker): a first login on a fresh key, a takeover of a hot key (read +
//! double-pin CAS), and a bare `read_owner`. Single caller; the futures are
//! always ready, so `block_on` adds only a few nanoseconds.

use std::hint::black_box;

use criterion::{Criterion, criterion_main};
use futures::executor::block_on;
use unique_core::{Arbiter, CasOutcome, ClaimInput, Key, Owner, Store};
use unique_store_memory::MemoryStore;

fn input(uid: i64, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: Key::new("bench", "prod", uid),
        owner: Owner::new("eu", "a", format!("http://10.0.0.1:7000/kick/{claim_id}")),
        claim_id: claim_id.to_owned(),
    }
}

fn claims(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory");

    let arbiter = Arbiter::new(MemoryStore::new());
    let mut uid = 0;
    let login = input(1, "login");
    group.bench_function("arbiter_claim/fresh_key", |b| {
        b.iter(|| {
            uid += 1;
            let mut next = login.clone();
            next.key.uid = uid;
            black_box(block_on(arbiter.claim(&next)).expect("claim"))
        });
    });

    let arbiter = Arbiter::new(MemoryStore::new());
    let pair = [input(1, "a"), input(1, "b")];
    let mut turn = 0;
    group.bench_function("arbiter_claim/takeover", |b| {
        b.iter(|| {
            turn ^= 1;
            black_box(block_on(arbiter.claim(&pair[turn])).expect("claim"))
        });
    });

    let store = MemoryStore::new();
    let key = Key::new("bench", "prod", 1);
    let snap = block_on(store.read_owner(&key)).expect("read");
    let first = block_on(store.claim_cas(&key, &pair[0].owner, "a", &snap)).expect("claim");
    assert_eq!(first, CasOutcome::Written { generation: 1 });
    group.bench_function("store_read_owner", |b| {
        b.iter(|| black_box(block_on(store.read_owner(&key)).expect("read")));
    });
    group.finish();
}

/// The benchmark group, configured from the command line.
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    claims(&mut criterion);
}

criterion_main!(benches);
