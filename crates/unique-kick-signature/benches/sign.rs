//! What signing costs a kick: one `sign` on the arbiter, one `verify` on the node,
//! over a typical kick body (the numbers go to BENCHMARKS.md).

use std::hint::black_box;
use std::time::SystemTime;

use criterion::{Criterion, criterion_main};
use unique_kick_signature::{DEFAULT_WINDOW, SigningKeys};

const BODY: &[u8] = br#"{"project":"game","env":"prod","uid":421337,"gen":18}"#;

fn signing(c: &mut Criterion) {
    let keys = SigningKeys::parse("bench-signing-key-0123456789abcdef0123\n").expect("a valid key");
    // A receiver mid-rotation holds two keys; the kick is signed with the second.
    let rotating = SigningKeys::parse(
        "old-signing-key-0123456789abcdef01234567\nbench-signing-key-0123456789abcdef0123\n",
    )
    .expect("valid keys");
    let now = SystemTime::now();
    let header = keys.sign(BODY, now);
    let mut group = c.benchmark_group("kick_signature");
    group.bench_function("sign", |b| {
        b.iter(|| black_box(keys.sign(black_box(BODY), now)));
    });
    group.bench_function("verify", |b| {
        b.iter(|| {
            keys.verify(
                Some(black_box(&header)),
                black_box(BODY),
                now,
                DEFAULT_WINDOW,
            )
            .expect("genuine");
        });
    });
    group.bench_function("verify_second_of_two_keys", |b| {
        b.iter(|| {
            rotating
                .verify(
                    Some(black_box(&header)),
                    black_box(BODY),
                    now,
                    DEFAULT_WINDOW,
                )
                .expect("genuine");
        });
    });
    group.finish();
}

/// The benchmark group, configured from the command line.
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    signing(&mut criterion);
}

criterion_main!(benches);
