//! Heartbeat: every eviction reason, exactly once, never on an error, clean stop.
//! All on tokio's paused clock.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Scripted, Step, absent, key, online, owner, tombstone};
use tokio::time::{Instant, sleep, timeout};
use unique_client::{Heartbeat, HeartbeatExit, HeartbeatOptions, Jitter};
use unique_core::{Error, EvictReason};

const INTERVAL: Duration = Duration::from_secs(5);

fn exact() -> HeartbeatOptions {
    HeartbeatOptions::default().jitter(Jitter::none())
}

/// An `on_evict` that records every call.
fn recorder() -> (
    Arc<Mutex<Vec<EvictReason>>>,
    impl FnOnce(EvictReason) + Send + 'static,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    (seen, move |r| s.lock().unwrap().push(r))
}

async fn run_to_end(t: &Scripted, generation: i64) -> (HeartbeatExit, Vec<EvictReason>, Duration) {
    let (seen, on_evict) = recorder();
    let start = Instant::now();
    let (heartbeat, key, owner) = (Heartbeat::with_options(t.clone(), exact()), key(), owner());
    let run = heartbeat.run(&key, generation, &owner, on_evict, std::future::pending());
    // Bounded, so a check that keeps the session fails here instead of looping on the
    // paused clock once the script runs out.
    let exit = timeout(INTERVAL * 20, run)
        .await
        .expect("the heartbeat ends by itself");
    let seen = seen.lock().unwrap().clone();
    (exit, seen, start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn each_eviction_reason_is_reported_once_and_ends_the_heartbeat() {
    let cases = [
        (absent(), EvictReason::NotExists),
        (online(6), EvictReason::GenMismatch),
        (online(4), EvictReason::GenMismatch),
        (tombstone(5), EvictReason::OwnerEmpty),
        (tombstone(9), EvictReason::GenMismatch),
        (held_by_another(5), EvictReason::OwnerChanged),
    ];
    for (view, reason) in cases {
        // Two healthy checks first, then the verdict.
        let t = Scripted::new()
            .current(Step::Reply(Ok(online(5))))
            .current(Step::Reply(Ok(online(5))))
            .current(Step::Reply(Ok(view.clone())));
        let (exit, seen, took) = run_to_end(&t, 5).await;
        assert_eq!(exit, HeartbeatExit::Evicted(reason), "{view:?}");
        assert_eq!(seen, [reason], "{view:?}");
        assert_eq!(t.calls().len(), 3);
        assert_eq!(
            took,
            INTERVAL * 3,
            "checks at exact intervals without jitter"
        );
    }
}

/// The session's gen, held by another node: what a gen rollback leaves (a new login got the
/// same gen as this session).
fn held_by_another(generation: i64) -> unique_core::CurrentView {
    unique_core::CurrentView {
        generation,
        owner: Some(unique_core::Owner::new(
            "eu",
            "c2",
            "http://127.0.0.2:9/kick",
        )),
        exists: true,
    }
}

/// The owner is compared with the one the heartbeat was given, not with whoever held the
/// key at the previous check: a session watched for another owner is evicted at once.
#[tokio::test(start_paused = true)]
async fn the_owner_compared_is_the_sessions_own() {
    let t = Scripted::new().current(Step::Reply(Ok(online(5))));
    let (seen, on_evict) = recorder();
    let elsewhere = unique_core::Owner::new("eu", "c1", "http://127.0.0.1:10/kick");
    let (heartbeat, key) = (Heartbeat::with_options(t.clone(), exact()), key());
    let run = heartbeat.run(&key, 5, &elsewhere, on_evict, std::future::pending());
    let exit = timeout(INTERVAL * 4, run)
        .await
        .expect("the heartbeat ends by itself");
    assert_eq!(exit, HeartbeatExit::Evicted(EvictReason::OwnerChanged));
    assert_eq!(*seen.lock().unwrap(), [EvictReason::OwnerChanged]);
    assert_eq!(t.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn no_check_after_the_eviction() {
    let t = Scripted::new().current(Step::Reply(Ok(online(2))));
    let (seen, on_evict) = recorder();
    let handle = Heartbeat::with_options(t.clone(), exact()).spawn(key(), 1, owner(), on_evict);
    let exit = handle.join().await;
    assert_eq!(exit, HeartbeatExit::Evicted(EvictReason::GenMismatch));
    sleep(INTERVAL * 10).await;
    // A further check would panic the exhausted script; the count proves there was none.
    assert_eq!(t.calls().len(), 1);
    assert_eq!(*seen.lock().unwrap(), [EvictReason::GenMismatch]);
}

#[tokio::test(start_paused = true)]
async fn errors_and_slow_answers_never_evict() {
    let t = Scripted::new()
        .current(Step::Reply(Err(Error::unavailable("store down"))))
        .current(Step::Reply(Err(Error::Throttled)))
        .current(Step::Reply(Err(Error::invalid("unexpected"))))
        .current(Step::Hang)
        .current(Step::Reply(Ok(online(3))))
        .current(Step::Reply(Ok(tombstone(3))));
    let (exit, seen, took) = run_to_end(&t, 3).await;
    assert_eq!(exit, HeartbeatExit::Evicted(EvictReason::OwnerEmpty));
    assert_eq!(seen, [EvictReason::OwnerEmpty]);
    assert_eq!(t.calls().len(), 6);
    // Six checks one interval apart, plus the hanging call, cut one interval after it was
    // queued: its batch window (a twentieth of the interval here) counts in that interval,
    // so 7 intervals less a twentieth.
    assert_eq!(took, INTERVAL * 139 / 20);
}

#[tokio::test(start_paused = true)]
async fn stop_ends_it_without_evicting() {
    let t = Scripted::new()
        .current(Step::Reply(Ok(online(1))))
        .current(Step::Reply(Ok(online(1))));
    let (seen, on_evict) = recorder();
    let handle = Heartbeat::with_options(t.clone(), exact()).spawn(key(), 1, owner(), on_evict);
    sleep(INTERVAL * 2 + Duration::from_secs(1)).await;
    assert_eq!(t.calls().len(), 2);
    assert!(!handle.is_finished());
    assert_eq!(handle.stop().await, HeartbeatExit::Stopped);
    sleep(INTERVAL * 10).await;
    assert_eq!(t.calls().len(), 2);
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn stop_interrupts_a_check_in_flight() {
    let t = Scripted::new().current(Step::Hang);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (seen, on_evict) = recorder();
    let hb = Heartbeat::with_options(t.clone(), exact());
    let run = tokio::spawn(async move {
        hb.run(&key(), 1, &owner(), on_evict, async {
            let _ = stop_rx.await;
        })
        .await
    });
    // Into the hanging call, which alone would last until 10 s.
    sleep(INTERVAL + Duration::from_secs(1)).await;
    assert_eq!(t.calls().len(), 1);
    let stopped_at = Instant::now();
    stop_tx.send(()).unwrap();
    assert_eq!(run.await.unwrap(), HeartbeatExit::Stopped);
    assert_eq!(stopped_at.elapsed(), Duration::ZERO);
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_handle_stops_it() {
    let t = Scripted::new().current(Step::Reply(Ok(online(1))));
    let (_seen, on_evict) = recorder();
    let handle = Heartbeat::with_options(t.clone(), exact()).spawn(key(), 1, owner(), on_evict);
    sleep(INTERVAL + Duration::from_secs(1)).await;
    assert_eq!(t.calls().len(), 1);
    drop(handle);
    sleep(INTERVAL * 10).await;
    // The script holds one answer; a second check would have panicked the task and
    // still be counted here.
    assert_eq!(t.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn default_timing_is_5s_jittered_down_by_at_most_20_percent() {
    let mut t = Scripted::new();
    for _ in 0..200 {
        t = t.current(Step::Reply(Ok(online(1))));
    }
    let t = t.current(Step::Reply(Ok(absent())));
    let (seen, on_evict) = recorder();
    let start = Instant::now();
    let exit = Heartbeat::new(t.clone())
        .run(&key(), 1, &owner(), on_evict, std::future::pending())
        .await;
    assert_eq!(exit, HeartbeatExit::Evicted(EvictReason::NotExists));
    assert_eq!(*seen.lock().unwrap(), [EvictReason::NotExists]);
    let mut last = start;
    let mut gaps = Vec::new();
    for call in t.calls() {
        gaps.push(call.at - last);
        last = call.at;
    }
    assert_eq!(gaps.len(), 201);
    assert!(
        gaps.iter()
            .all(|g| *g >= Duration::from_secs(4) && *g <= INTERVAL),
        "{gaps:?}"
    );
    assert!(
        gaps.iter().any(|g| *g < Duration::from_millis(4900)),
        "jittered"
    );
}
