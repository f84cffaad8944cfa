//! Batched heartbeats, measured: a node heartbeating many sessions against a real server over
//! loopback HTTP, once per session (the old way) and once batched, counting the HTTP requests
//! the node sends and the store round trips the server makes.
//!
//! `cargo run --release -p unique-bench --bin heartbeats -- --sessions 10000 --interval 5s`

// Request counts stay far below 2^52, where u64 → f64 is exact.
#![allow(clippy::cast_precision_loss)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser;
use unique_arbiter_http::{ArbiterService, serve};
use unique_client::{
    ClaimOutcome, CurrentView, Heartbeat, HeartbeatOptions, Transport, async_trait,
};
use unique_client_http::HttpTransport;
use unique_core::{
    Arbiter, ClaimInput, Error, Key, MAX_BATCH_KEYS, Owner, StoreAnswer, StoreCall, StoreLayer,
    StoreOperation,
};
use unique_store_memory::MemoryStore;

#[derive(Debug, Parser)]
struct Args {
    /// Sessions the node holds.
    #[arg(long, default_value_t = 10_000)]
    sessions: i64,
    /// Heartbeat interval.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Measured time per mode, after one interval of warm-up.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    duration: Duration,
}

/// The memory store, counting every call it answers: each is one store round trip.
#[derive(Default)]
struct CountingStore {
    inner: MemoryStore,
    round_trips: AtomicU64,
}

/// A `StoreLayer`: every call reaches the memory store, and each counts.
impl StoreLayer for CountingStore {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn around<'a, T: StoreAnswer + 'a>(
        &'a self,
        _: StoreOperation,
        call: StoreCall<'a, T>,
    ) -> Result<T, Error> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        call.await
    }
}

/// The HTTP transport, counting the requests it sends; `batched: false` leaves
/// `current_batch` to the trait's default (one `current` request per session), which is
/// how every heartbeat behaved before batching.
struct Counted {
    http: HttpTransport,
    batched: bool,
    requests: AtomicU64,
}

#[async_trait]
impl Transport for Counted {
    async fn claim(&self, request: &ClaimInput) -> Result<ClaimOutcome, Error> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.http.claim(request).await
    }
    async fn current(&self, key: &Key) -> Result<CurrentView, Error> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.http.current(key).await
    }
    async fn release(&self, key: &Key, generation: i64) -> Result<bool, Error> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.http.release(key, generation).await
    }
    async fn current_batch(&self, keys: &[Key]) -> Result<Vec<Result<CurrentView, Error>>, Error> {
        if !self.batched {
            let mut views = Vec::with_capacity(keys.len());
            for key in keys {
                views.push(self.current(key).await);
            }
            return Ok(views);
        }
        let requests = keys.len().div_ceil(MAX_BATCH_KEYS) as u64;
        self.requests.fetch_add(requests, Ordering::Relaxed);
        self.http.current_batch(keys).await
    }
}

struct Rates {
    requests: f64,
    round_trips: f64,
}

async fn measure(args: &Args, batched: bool) -> Rates {
    let store = Arc::new(CountingStore::default());
    let arbiter = Arbiter::new(Arc::clone(&store));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(
        listener,
        ArbiterService::new(arbiter.clone()),
        std::future::pending(),
    ));
    let keys: Vec<Key> = (1..=args.sessions)
        .map(|uid| Key::new("bench", "heartbeats", uid))
        .collect();
    let owner = Owner::new("", "", "http://127.0.0.1:9/kick");
    for key in &keys {
        let input = ClaimInput {
            key: key.clone(),
            owner: owner.clone(),
            claim_id: format!("c{}", key.uid),
        };
        arbiter.claim(&input).await.unwrap();
    }
    let transport = Arc::new(Counted {
        http: HttpTransport::new(&base).unwrap(),
        batched,
        requests: AtomicU64::new(0),
    });
    let heartbeat = Heartbeat::with_options(
        Arc::clone(&transport),
        HeartbeatOptions::default().interval(args.interval),
    );
    let handles: Vec<_> = keys
        .into_iter()
        .map(|key| heartbeat.spawn(key, 1, owner.clone(), |reason| panic!("evicted: {reason}")))
        .collect();
    tokio::time::sleep(args.interval).await;
    let (requests, round_trips) = (
        transport.requests.load(Ordering::Relaxed),
        store.round_trips.load(Ordering::Relaxed),
    );
    tokio::time::sleep(args.duration).await;
    let seconds = args.duration.as_secs_f64();
    let rates = Rates {
        requests: (transport.requests.load(Ordering::Relaxed) - requests) as f64 / seconds,
        round_trips: (store.round_trips.load(Ordering::Relaxed) - round_trips) as f64 / seconds,
    };
    for handle in handles {
        handle.stop().await;
    }
    rates
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let before = measure(&args, false).await;
    let after = measure(&args, true).await;
    println!(
        "{} sessions, heartbeat every {:?}, measured {:?} each",
        args.sessions, args.interval, args.duration
    );
    println!("| heartbeats | HTTP requests/s | store round trips/s |");
    println!("|---|---|---|");
    println!(
        "| per session (before) | {:.0} | {:.0} |",
        before.requests, before.round_trips
    );
    println!(
        "| batched (after) | {:.0} | {:.0} |",
        after.requests, after.round_trips
    );
    println!(
        "| fewer | {:.1}x | {:.1}x |",
        before.requests / after.requests,
        before.round_trips / after.round_trips
    );
}
