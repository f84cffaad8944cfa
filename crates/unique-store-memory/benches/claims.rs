//! Per-operation cost of the memory store, alone and through `unique_core::Arbiter`
//! (no kicker): a first login on a fresh key (from one node, and from a thousand
//! nodes in turn), a takeover of a hot key (read + double-pin CAS), and a bare
//! `read_owner`. Single caller; the futures are always ready, so `block_on` adds
//! only a few nanoseconds.

use std::hint::black_box;

use criterion::{Criterion, criterion_main};
use futures::executor::block_on;
use unique_core::{Arbiter, CasOutcome, ClaimInput, Key, Owner, RECENT_CLAIMS, Store};
use unique_store_memory::MemoryStore;

fn input(uid: i64, claim_id: &str) -> ClaimInput {
    ClaimInput {
        key: Key::new("bench", "prod", uid),
        owner: Owner::new("eu", "a", "http://10.0.0.1:7000/kick"),
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
    // Each store is dropped after its bench, so the millions of records a bench of
    // fresh keys leaves do not weigh on the benches after it.
    drop(arbiter);

    // First logins spread over a thousand nodes, each login from the next node.
    let arbiter = Arbiter::new(MemoryStore::new());
    let nodes: Vec<Owner> = (0..1000)
        .map(|n| {
            Owner::new(
                "eu",
                "a",
                format!("http://10.0.{}.{}:7000/kick", n / 250, n % 250),
            )
        })
        .collect();
    let mut uid = 0;
    group.bench_function("arbiter_claim/fresh_key_1000_nodes", |b| {
        b.iter(|| {
            uid += 1;
            let mut next = login.clone();
            next.key.uid = uid;
            next.owner
                .clone_from(&nodes[usize::try_from(uid).expect("positive") % nodes.len()]);
            black_box(block_on(arbiter.claim(&next)).expect("claim"))
        });
    });
    drop(arbiter);

    // A ring of logins, each with its own claim_id and alternating between two
    // nodes: every claim replaces the previous one. The ring is longer than the
    // record's list of recent wins (C9), so a login coming round again is new,
    // not a superseded retry, and the list stays full as on a busy key.
    let arbiter = Arbiter::new(MemoryStore::new());
    let ring: Vec<ClaimInput> = (0..2 * RECENT_CLAIMS)
        .map(|i| {
            let mut login = input(1, &format!("login-{i:06}"));
            login.owner.endpoint = format!("http://10.0.0.{}:7000/kick", i % 2 + 1);
            login
        })
        .collect();
    let mut turn = 0;
    group.bench_function("arbiter_claim/takeover", |b| {
        b.iter(|| {
            turn = (turn + 1) % ring.len();
            black_box(block_on(arbiter.claim(&ring[turn])).expect("claim"))
        });
    });
    drop(arbiter);

    let store = MemoryStore::new();
    let key = Key::new("bench", "prod", 1);
    let snap = block_on(store.read_owner(&key)).expect("read");
    let first = block_on(store.claim_cas(&key, &ring[0].owner, "a", &snap)).expect("claim");
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
