//! Claimer: retry schedule and budget, claim_id handling, no retry on bad input.
//! All on tokio's paused clock, so every instant is exact.

mod common;

use std::time::Duration;

use common::{Scripted, Step, key, outcome, owner, replayed};
use tokio::time::Instant;
use unique_client::{Claimer, ClaimerOptions, Jitter};
use unique_core::Error;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn no_jitter() -> ClaimerOptions {
    ClaimerOptions::default().jitter(Jitter::none())
}

/// Offsets of each call from `start`.
fn offsets(t: &Scripted, start: Instant) -> Vec<Duration> {
    t.calls().iter().map(|c| c.at - start).collect()
}

#[tokio::test(start_paused = true)]
async fn default_schedule_doubles_from_100ms_caps_at_2s_and_stops_within_25s() {
    let t = Scripted::new().claim_forever(|| Error::unavailable("store down"));
    let claimer = Claimer::with_options(t.clone(), no_jitter());
    let start = Instant::now();
    let err = claimer.login(key(), owner()).await.unwrap_err();

    // Nominal waits 100, 200, 400, 800, 1600, then 2000 each: attempts start at these
    // offsets; the next one (25.1 s) would be past the 25 s budget.
    let mut expected = vec![ms(0), ms(100), ms(300), ms(700), ms(1500), ms(3100)];
    while let Some(&last) = expected.last() {
        if last + ms(2000) >= Duration::from_secs(25) {
            break;
        }
        expected.push(last + ms(2000));
    }
    assert_eq!(offsets(&t, start), expected);
    assert_eq!(expected.len(), 16);
    assert_eq!(err.attempts, 16);
    assert!(err.error.is_unavailable(), "{}", err.error);
    // It gives up right after the last failure instead of sleeping into the deadline.
    assert_eq!(start.elapsed(), ms(23_100));
}

#[tokio::test(start_paused = true)]
async fn full_jitter_waits_never_exceed_their_cap_nor_the_budget() {
    let t = Scripted::new().claim_forever(|| Error::Throttled);
    let claimer = Claimer::new(t.clone());
    let start = Instant::now();
    let err = claimer.login(key(), owner()).await.unwrap_err();
    assert!(err.error.is_throttled());

    let at = offsets(&t, start);
    let mut cap = ms(100);
    for pair in at.windows(2) {
        let gap = pair[1].checked_sub(pair[0]).expect("calls in order");
        assert!(gap <= cap, "gap {gap:?} over cap {cap:?} in {at:?}");
        cap = (cap * 2).min(ms(2000));
    }
    assert!(*at.last().unwrap() < Duration::from_secs(25));
    assert!(start.elapsed() < Duration::from_secs(25));
    // Full jitter waits less than the caps on average, so it fits more attempts than the
    // 16 of the unjittered schedule.
    assert!(at.len() > 16, "{} attempts", at.len());
}

#[tokio::test(start_paused = true)]
async fn retries_reuse_the_claim_id_and_report_it() {
    let t = Scripted::new()
        .claim(Step::Reply(Err(Error::Throttled)))
        .claim(Step::Reply(Err(Error::unavailable("connection reset"))))
        .claim(Step::Reply(Ok(outcome(7))));
    let login = Claimer::with_options(t.clone(), no_jitter())
        .login(key(), owner())
        .await
        .unwrap();
    let ids: Vec<_> = t.calls().into_iter().map(|c| c.claim_id.unwrap()).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|id| *id == login.claim_id), "{ids:?}");
    assert_eq!(login.attempts, 3);
    assert_eq!(login.generation(), 7);
    assert_eq!(login.outcome, outcome(7));
}

#[tokio::test(start_paused = true)]
async fn every_login_gets_a_fresh_random_claim_id() {
    let mut t = Scripted::new();
    for g in 1..=50 {
        t = t.claim(Step::Reply(Ok(outcome(g))));
    }
    let claimer = Claimer::new(t.clone());
    let mut ids = std::collections::HashSet::new();
    for _ in 0..50 {
        let login = claimer.login(key(), owner()).await.unwrap();
        let uuid = uuid_version(&login.claim_id);
        assert_eq!(uuid, Some(4), "{}", login.claim_id);
        assert!(ids.insert(login.claim_id), "claim_id reused across logins");
    }
}

/// The UUID version nibble, if `s` is a hyphenated UUID.
fn uuid_version(s: &str) -> Option<u32> {
    let parts: Vec<_> = s.split('-').collect();
    let lens: Vec<_> = parts.iter().map(|p| p.len()).collect();
    if lens != [8, 4, 4, 4, 12] || !s.chars().all(|c| c == '-' || c.is_ascii_hexdigit()) {
        return None;
    }
    parts[2].chars().next()?.to_digit(16)
}

#[tokio::test(start_paused = true)]
async fn invalid_params_fails_at_once_without_waiting() {
    let t = Scripted::new().claim(Step::Reply(Err(Error::invalid("uid must be >= 1"))));
    let start = Instant::now();
    let err = Claimer::new(t.clone())
        .login(key(), owner())
        .await
        .unwrap_err();
    assert!(err.error.is_invalid_params());
    assert_eq!(err.attempts, 1);
    assert_eq!(t.calls().len(), 1);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(err.claim_id, t.calls()[0].claim_id.clone().unwrap());
}

#[tokio::test(start_paused = true)]
async fn invalid_params_after_a_retry_stops_the_retries() {
    let t = Scripted::new()
        .claim(Step::Reply(Err(Error::unavailable("down"))))
        .claim(Step::Reply(Err(Error::invalid(
            "owner.endpoint must have a host",
        ))));
    let err = Claimer::with_options(t.clone(), no_jitter())
        .login(key(), owner())
        .await
        .unwrap_err();
    assert!(err.error.is_invalid_params());
    assert_eq!(err.attempts, 2);
    assert_eq!(t.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_claim_is_cut_at_the_budget() {
    let t = Scripted::new().claim(Step::Hang);
    let start = Instant::now();
    let err = Claimer::new(t.clone())
        .login(key(), owner())
        .await
        .unwrap_err();
    assert!(err.error.is_unavailable(), "{}", err.error);
    assert_eq!(start.elapsed(), Duration::from_secs(25));
    assert_eq!(err.attempts, 1);
}

#[tokio::test(start_paused = true)]
async fn every_knob_of_the_policy_is_honoured() {
    let t = Scripted::new().claim_forever(|| Error::Throttled);
    let options = ClaimerOptions::default()
        .initial_backoff(ms(50))
        .backoff_multiplier(3)
        .max_backoff(ms(400))
        .budget(ms(1000))
        .jitter(Jitter::none());
    let start = Instant::now();
    let err = Claimer::with_options(t.clone(), options)
        .login(key(), owner())
        .await
        .unwrap_err();
    // 50, 150, 400 (capped from 450); the next start (1000 ms) is the deadline itself.
    assert_eq!(offsets(&t, start), [ms(0), ms(50), ms(200), ms(600)]);
    assert_eq!(err.attempts, 4);
}

#[tokio::test(start_paused = true)]
async fn resuming_with_the_reported_claim_id_sends_that_id() {
    let t = Scripted::new().claim_forever(|| Error::unavailable("down"));
    let options = no_jitter().budget(ms(150));
    let err = Claimer::with_options(t.clone(), options)
        .login(key(), owner())
        .await
        .unwrap_err();
    let t2 = Scripted::new().claim(Step::Reply(Ok(replayed(3))));
    let login = Claimer::new(t2.clone())
        .login_with_claim_id(key(), owner(), err.claim_id.clone())
        .await
        .unwrap();
    assert_eq!(login.claim_id, err.claim_id);
    assert_eq!(
        t2.calls()[0].claim_id.as_deref(),
        Some(err.claim_id.as_str())
    );
    assert!(login.outcome.replayed);
}

#[tokio::test(start_paused = true)]
async fn logout_retries_and_returns_released() {
    let t = Scripted::new()
        .release(Step::Reply(Err(Error::Throttled)))
        .release(Step::Reply(Ok(true)));
    let claimer = Claimer::with_options(t.clone(), no_jitter());
    let start = Instant::now();
    assert!(claimer.logout(&key(), 3).await.unwrap());
    assert_eq!(offsets(&t, start), [ms(0), ms(100)]);

    let t = Scripted::new().release(Step::Reply(Ok(false)));
    assert!(!Claimer::new(t).logout(&key(), 2).await.unwrap());

    let t = Scripted::new().release(Step::Reply(Err(Error::invalid("env must not be empty"))));
    let err = Claimer::new(t.clone()).logout(&key(), 2).await.unwrap_err();
    assert!(err.error.is_invalid_params());
    assert_eq!(t.calls().len(), 1);
}

/// The first attempt's answer was lost (its claim won gen 1), another login took the key
/// (gen 2), and the retry is answered `Superseded`: the login ends there, with that error and
/// its gens, and no third attempt, however much budget is left.
#[tokio::test(start_paused = true)]
async fn superseded_stops_the_retries_at_once() {
    let t = Scripted::new()
        .claim(Step::Reply(Err(Error::unavailable("connection reset"))))
        .claim(Step::Reply(Err(Error::Superseded {
            generation: 1,
            current: 2,
        })))
        .claim(Step::Reply(Ok(outcome(3))));
    let start = Instant::now();
    let err = Claimer::with_options(t.clone(), no_jitter())
        .login(key(), owner())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.error,
            Error::Superseded {
                generation: 1,
                current: 2
            }
        ),
        "{}",
        err.error
    );
    assert!(err.is_superseded() && !err.error.is_retryable());
    assert_eq!(err.attempts, 2);
    assert_eq!(offsets(&t, start), [ms(0), ms(100)]);
    assert_eq!(
        start.elapsed(),
        ms(100),
        "no wait after the superseded answer"
    );
    let ids: Vec<_> = t.calls().into_iter().map(|c| c.claim_id.unwrap()).collect();
    assert_eq!(ids, [err.claim_id.clone(), err.claim_id.clone()]);
    assert_eq!(
        err.to_string(),
        "gave up after 2 attempt(s): superseded: this claim won gen 1; the key is at gen 2"
    );
}
