//! KickHandler: the gen fence, single-flight destroy under real concurrency, the timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use unique_client::{IgnoreReason, KickAck, KickHandler, KickOptions, Sessions};
use unique_core::{Key, KickPayload};

fn key() -> Key {
    Key::new("game", "prod", 42)
}

fn kick(generation: i64) -> KickPayload {
    KickPayload {
        project: "game".into(),
        env: "prod".into(),
        uid: 42,
        slot: String::new(),
        generation,
        reason: unique_core::KickReason::LoginElsewhere,
        message: None,
    }
}

/// A handler over `sessions` whose destroy removes the session and records `(key, gen)`.
fn handler(sessions: &Sessions, destroyed: &Arc<std::sync::Mutex<Vec<(Key, i64)>>>) -> KickHandler {
    let read = sessions.clone();
    let remove = sessions.clone();
    let log = Arc::clone(destroyed);
    KickHandler::new(
        move |k| read.generation(k),
        move |k: Key, g| {
            remove.remove_if(&k, g);
            log.lock().unwrap().push((k, g));
            async {}
        },
        KickOptions::default(),
    )
}

#[tokio::test]
async fn fence_never_destroys_a_session_that_is_not_older() {
    let sessions = Sessions::new();
    let destroyed = Arc::default();
    let h = handler(&sessions, &destroyed);

    assert_eq!(
        h.handle(&kick(5)).await,
        KickAck::Ignored(IgnoreReason::NoSession)
    );

    sessions.insert(key(), 5);
    assert_eq!(
        h.handle(&kick(5)).await,
        KickAck::Ignored(IgnoreReason::NotOlder {
            local_generation: 5
        }),
        "equal gen: this is the kicker's own session"
    );
    assert_eq!(
        h.handle(&kick(3)).await,
        KickAck::Ignored(IgnoreReason::NotOlder {
            local_generation: 5
        }),
        "a late kick from an older claim never kills the newer session"
    );
    assert!(destroyed.lock().unwrap().is_empty());
    assert_eq!(sessions.generation(&key()), Some(5));

    // Another tenant's kick for the same uid does not touch this session.
    let other = KickPayload {
        env: "staging".into(),
        ..kick(9)
    };
    assert_eq!(
        h.handle(&other).await,
        KickAck::Ignored(IgnoreReason::NoSession)
    );

    assert_eq!(
        h.handle(&kick(6)).await,
        KickAck::Destroyed {
            local_generation: 5
        }
    );
    assert_eq!(*destroyed.lock().unwrap(), [(key(), 5)]);
    assert_eq!(sessions.generation(&key()), None);

    // The same kick again: nothing older is left.
    assert_eq!(
        h.handle(&kick(6)).await,
        KickAck::Ignored(IgnoreReason::NoSession)
    );
    assert_eq!(destroyed.lock().unwrap().len(), 1);
}

/// Many kicks for one session on real worker threads: `destroy` runs once, and every
/// kick answers that no older session remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_kicks_share_one_destroy() {
    const KICKS: usize = 32;
    for round in 0..20 {
        let sessions = Sessions::new();
        sessions.insert(key(), 1);
        let destroy_calls = Arc::new(AtomicUsize::new(0));
        let (asked_tx, mut asked_rx) = mpsc::unbounded_channel();
        let gate = Arc::new(Notify::new());
        let h = {
            let read = sessions.clone();
            let remove = sessions.clone();
            let calls = Arc::clone(&destroy_calls);
            let gate = Arc::clone(&gate);
            KickHandler::new(
                move |k| {
                    let local = read.generation(k);
                    let _ = asked_tx.send(());
                    local
                },
                move |k: Key, g| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let remove = remove.clone();
                    let gate = Arc::clone(&gate);
                    async move {
                        gate.notified().await;
                        remove.remove_if(&k, g);
                    }
                },
                KickOptions::default(),
            )
        };
        let barrier = Arc::new(tokio::sync::Barrier::new(KICKS));
        let tasks: Vec<_> = (0..KICKS)
            .map(|i| {
                let h = h.clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    h.handle(&kick(2 + i64::try_from(i % 3).unwrap())).await
                })
            })
            .collect();
        // Every kick has read the local gen (and so joined the flight) before destroy may end.
        for _ in 0..KICKS {
            asked_rx.recv().await.unwrap();
        }
        gate.notify_one();
        for t in tasks {
            let ack = t.await.unwrap();
            assert_eq!(
                ack,
                KickAck::Destroyed {
                    local_generation: 1
                },
                "round {round}"
            );
        }
        assert_eq!(destroy_calls.load(Ordering::SeqCst), 1, "round {round}");
        assert!(sessions.is_empty());
    }
}

/// Kicks that race a destroy already finishing either join it or find the session gone;
/// none starts a second destroy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kicks_racing_the_end_of_a_destroy_never_destroy_twice() {
    for round in 0..50 {
        let sessions = Sessions::new();
        sessions.insert(key(), 7);
        let destroyed = Arc::default();
        let h = handler(&sessions, &destroyed);
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let h = h.clone();
                tokio::spawn(async move { h.handle(&kick(8)).await })
            })
            .collect();
        for t in tasks {
            let ack = t.await.unwrap();
            assert!(
                ack == KickAck::Destroyed {
                    local_generation: 7
                } || ack == KickAck::Ignored(IgnoreReason::NoSession),
                "round {round}: {ack:?}"
            );
        }
        assert_eq!(*destroyed.lock().unwrap(), [(key(), 7)], "round {round}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_destroy_times_out_and_later_kicks_join_it() {
    let sessions = Sessions::new();
    sessions.insert(key(), 1);
    let calls = Arc::new(AtomicUsize::new(0));
    let finish = Arc::new(Notify::new());
    let h = {
        let read = sessions.clone();
        let remove = sessions.clone();
        let calls = Arc::clone(&calls);
        let finish = Arc::clone(&finish);
        KickHandler::new(
            move |k| read.generation(k),
            move |k: Key, g| {
                calls.fetch_add(1, Ordering::SeqCst);
                let remove = remove.clone();
                let finish = Arc::clone(&finish);
                async move {
                    finish.notified().await;
                    remove.remove_if(&k, g);
                }
            },
            KickOptions::default(),
        )
    };
    let start = Instant::now();
    assert_eq!(
        h.handle(&kick(2)).await,
        KickAck::TimedOut {
            local_generation: 1
        }
    );
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "default destroy timeout"
    );

    // The destroy is still running: a second kick waits for it instead of starting another.
    let second = {
        let h = h.clone();
        tokio::spawn(async move { h.handle(&kick(3)).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    finish.notify_one();
    assert_eq!(
        second.await.unwrap(),
        KickAck::Destroyed {
            local_generation: 1
        }
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(sessions.generation(&key()), None);
}

#[tokio::test(start_paused = true)]
async fn destroy_timeout_is_configurable() {
    let h = KickHandler::new(
        |_: &Key| Some(1),
        |_: Key, _| std::future::pending::<()>(),
        KickOptions::default().destroy_timeout(Duration::from_millis(300)),
    );
    let start = Instant::now();
    assert_eq!(
        h.handle(&kick(2)).await,
        KickAck::TimedOut {
            local_generation: 1
        }
    );
    assert_eq!(start.elapsed(), Duration::from_millis(300));
}

#[tokio::test]
async fn a_panicking_destroy_fails_the_kick_and_frees_the_slot() {
    let calls = Arc::new(AtomicUsize::new(0));
    let h = {
        let calls = Arc::clone(&calls);
        KickHandler::new(
            |_: &Key| Some(1),
            move |_: Key, _| {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    assert!(n > 0, "first destroy fails on purpose");
                }
            },
            KickOptions::default(),
        )
    };
    assert_eq!(
        h.handle(&kick(2)).await,
        KickAck::Failed {
            local_generation: 1
        }
    );
    // The failed flight is gone: the next kick tries again.
    assert_eq!(
        h.handle(&kick(2)).await,
        KickAck::Destroyed {
            local_generation: 1
        }
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// The race of a kick and the login it targets: the newer login's kick arrives before the
/// older login's answer. The kick finds nothing (200, no-session), and `admit` then refuses
/// the older session; a session at or above the kick's gen is admitted.
#[tokio::test]
async fn a_kick_before_the_login_answer_refuses_that_session() {
    let sessions = Sessions::new();
    let destroyed = Arc::default();
    let h = handler(&sessions, &destroyed);

    // Two logins of the key in flight here: one that will get gen 7, one gen 8.
    let (older, newer) = (h.expect_login(&key()), h.expect_login(&key()));
    assert_eq!(
        h.handle(&kick(8)).await,
        KickAck::Ignored(IgnoreReason::NoSession)
    );
    // An older kick later does not lower what was remembered.
    h.handle(&kick(6)).await;
    assert_eq!(h.remembered_early_kicks(), 1);
    let admitted = older.admit(7, || {
        sessions.insert(key(), 7);
    });
    assert!(
        !admitted,
        "gen 7 was replaced by gen 8 before it went online"
    );
    assert_eq!(sessions.generation(&key()), None);

    // Another tenant's key is not affected.
    let other = Key::new("game", "staging", 42);
    assert!(h.expect_login(&other).admit(1, || {
        sessions.insert(other.clone(), 1);
    }));

    // The newer session itself (gen 8) goes online.
    assert!(newer.admit(8, || {
        sessions.insert(key(), 8);
    }));
    assert_eq!(sessions.generation(&key()), Some(8));
    assert_eq!(
        h.remembered_early_kicks(),
        0,
        "no login of the key in flight"
    );
    // Once a session is online, kicks go the usual way: gen 9 destroys gen 8.
    assert_eq!(
        h.handle(&kick(9)).await,
        KickAck::Destroyed {
            local_generation: 8
        }
    );
    assert!(destroyed.lock().unwrap().contains(&(key(), 8)));
}

/// Without an early kick every login is admitted, and a kick after admission destroys.
#[tokio::test]
async fn admit_without_an_early_kick_goes_online() {
    let sessions = Sessions::new();
    let destroyed = Arc::default();
    let h = handler(&sessions, &destroyed);
    assert!(h.expect_login(&key()).admit(3, || {
        sessions.insert(key(), 3);
    }));
    assert_eq!(
        h.handle(&kick(4)).await,
        KickAck::Destroyed {
            local_generation: 3
        }
    );
    assert_eq!(sessions.generation(&key()), None);
}

/// An early kick is forgotten after `early_kick_memory`: by then the heartbeat (I5b)
/// is what removes a stale session.
#[tokio::test(start_paused = true)]
async fn early_kicks_are_forgotten_after_their_memory() {
    let sessions = Sessions::new();
    let read = sessions.clone();
    let h = KickHandler::new(
        move |k| read.generation(k),
        |_, _| async {},
        KickOptions::default().early_kick_memory(Duration::from_secs(30)),
    );
    let (first, second) = (h.expect_login(&key()), h.expect_login(&key()));
    h.handle(&kick(5)).await;
    tokio::time::advance(Duration::from_secs(29)).await;
    assert!(!first.admit(4, || {}), "still remembered at 29 s");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(second.admit(4, || {}), "forgotten after 30 s");
    assert_eq!(
        KickOptions::default().early_kick_memory,
        Duration::from_mins(1)
    );
}

/// A kick for another key than [`key`] (its own project), one per uid.
fn unrelated_kick(uid: i64) -> KickPayload {
    KickPayload {
        project: "flood".into(),
        env: "prod".into(),
        uid,
        slot: String::new(),
        generation: 2,
        reason: unique_core::KickReason::LoginElsewhere,
        message: None,
    }
}

/// A flood of genuine kicks for keys no login here expects (what anyone who can make the
/// server kick many unrelated uids can send) leaves nothing behind, and does not hold up a
/// login and kick of another key while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_kicks_for_keys_no_login_expects_is_not_remembered() {
    const FLOOD: i64 = 100_000;
    let sessions = Sessions::new();
    let destroyed = Arc::default();
    let h = handler(&sessions, &destroyed);
    let (started, done) = (Arc::new(Notify::new()), Arc::new(AtomicBool::new(false)));
    let flood = {
        let (h, started, done) = (h.clone(), Arc::clone(&started), Arc::clone(&done));
        tokio::spawn(async move {
            let mut uid = 0;
            // It keeps going until the other key's login is through, so that login runs
            // while the flood does.
            while uid < FLOOD || !done.load(Ordering::SeqCst) {
                uid += 1;
                let ack = h.handle(&unrelated_kick(uid)).await;
                assert_eq!(ack, KickAck::Ignored(IgnoreReason::NoSession));
                if uid == 1_000 {
                    started.notify_one();
                }
                if uid % 256 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            uid
        })
    };
    started.notified().await;

    // Meanwhile a login of another key is kicked early, refused, and a newer one goes online
    // and is kicked the usual way.
    let replaced = h.expect_login(&key());
    assert_eq!(
        h.handle(&kick(8)).await,
        KickAck::Ignored(IgnoreReason::NoSession)
    );
    assert_eq!(h.remembered_early_kicks(), 1, "the one login in flight");
    assert!(!replaced.admit(7, || unreachable!("replaced by gen 8")));
    assert!(h.expect_login(&key()).admit(8, || {
        sessions.insert(key(), 8);
    }));
    assert_eq!(
        h.handle(&kick(9)).await,
        KickAck::Destroyed {
            local_generation: 8
        }
    );
    assert!(
        !flood.is_finished(),
        "the login and kicks completed while the flood ran"
    );
    done.store(true, Ordering::SeqCst);

    let kicks = flood.await.unwrap();
    assert!(kicks >= FLOOD, "{kicks} kicks");
    assert_eq!(h.remembered_early_kicks(), 0);
    assert_eq!(h.dropped_early_kicks(), 0, "none was even a candidate");
}

/// Several logins of one key in flight: the key's early kick is kept until the last of them
/// ends, whichever ends first, and forgotten then.
#[tokio::test]
async fn an_early_kick_is_kept_while_any_login_of_its_key_is_in_flight() {
    let h = KickHandler::new(|_: &Key| None, |_, _| async {}, KickOptions::default());
    let (abandoned, late) = (h.expect_login(&key()), h.expect_login(&key()));
    // One login gives up (its claim failed): the other is still expected.
    drop(abandoned);
    h.handle(&kick(8)).await;
    assert_eq!(h.remembered_early_kicks(), 1);
    assert!(
        !late.admit(7, || {}),
        "the remaining login was replaced by gen 8"
    );
    assert_eq!(
        h.remembered_early_kicks(),
        0,
        "forgotten with the last login"
    );

    // With no login in flight a kick is not kept, so it refuses no later login.
    h.handle(&kick(9)).await;
    assert_eq!(h.remembered_early_kicks(), 0);
    assert!(h.expect_login(&key()).admit(7, || {}));
}

/// At most `max_early_kicks` keys hold an early kick; past the cap a kick is counted, not
/// kept, and the login it replaced goes online (its heartbeat removes it, I5b).
#[tokio::test]
async fn the_early_kick_cap_holds() {
    const CAP: usize = 8;
    let h = KickHandler::new(
        |_: &Key| None,
        |_, _| async {},
        KickOptions::default().max_early_kicks(CAP),
    );
    assert_eq!(KickOptions::default().max_early_kicks, 4096);
    let keys: Vec<Key> = (0..10).map(|uid| Key::new("game", "prod", uid)).collect();
    let logins: Vec<_> = keys.iter().map(|k| h.expect_login(k)).collect();
    for k in &keys {
        let kick = KickPayload {
            uid: k.uid,
            ..kick(5)
        };
        assert_eq!(
            h.handle(&kick).await,
            KickAck::Ignored(IgnoreReason::NoSession)
        );
    }
    assert_eq!(h.remembered_early_kicks(), CAP);
    assert_eq!(h.dropped_early_kicks(), 2);
    let admitted: Vec<bool> = logins.into_iter().map(|l| l.admit(4, || {})).collect();
    assert_eq!(admitted, [[false; CAP].as_slice(), &[true; 2]].concat());
    assert_eq!(h.remembered_early_kicks(), 0);
}

/// A full cap makes room by sweeping the expired early kicks (those of logins still in
/// flight past `early_kick_memory`).
#[tokio::test(start_paused = true)]
async fn a_full_cap_sweeps_expired_early_kicks() {
    let h = KickHandler::new(
        |_: &Key| None,
        |_, _| async {},
        KickOptions::default()
            .max_early_kicks(2)
            .early_kick_memory(Duration::from_secs(10)),
    );
    let uid_kick = |uid| KickPayload { uid, ..kick(5) };
    let stale: Vec<_> = (1..=2)
        .map(|uid| h.expect_login(&Key::new("game", "prod", uid)))
        .collect();
    for uid in 1..=2 {
        h.handle(&uid_kick(uid)).await;
    }
    assert_eq!(h.remembered_early_kicks(), 2);

    tokio::time::advance(Duration::from_secs(11)).await;
    let fresh = h.expect_login(&Key::new("game", "prod", 3));
    h.handle(&uid_kick(3)).await;
    assert_eq!(h.dropped_early_kicks(), 0, "the sweep made room");
    assert_eq!(
        h.remembered_early_kicks(),
        1,
        "the two expired ones are gone"
    );
    assert!(!fresh.admit(4, || {}), "the new early kick is kept");
    for login in stale {
        assert!(login.admit(4, || {}), "expired: forgotten");
    }
    assert_eq!(h.remembered_early_kicks(), 0);
}

/// A closed handler destroys nothing (every kick is `no-session`), admits no login, and
/// `closed` resolves for whoever waits on it.
#[tokio::test(start_paused = true)]
async fn a_closed_handler_finds_no_session_and_admits_nothing() {
    let sessions = Sessions::new();
    let destroyed = Arc::default();
    let h = handler(&sessions, &destroyed);
    sessions.insert(key(), 1);
    let pending = h.expect_login(&Key::new("game", "prod", 7));
    let waiter = {
        let h = h.clone();
        tokio::spawn(async move { h.closed().await })
    };
    // A wait given up before the close is harmless (cancel-safe).
    assert!(
        tokio::time::timeout(Duration::from_secs(1), h.closed())
            .await
            .is_err()
    );
    assert!(!h.is_closed());

    h.close();
    assert!(h.is_closed());
    waiter.await.unwrap();
    h.closed().await;
    assert_eq!(
        h.handle(&kick(2)).await,
        KickAck::Ignored(IgnoreReason::NoSession)
    );
    assert!(destroyed.lock().unwrap().is_empty());
    assert!(!pending.admit(1, || unreachable!("closed")));
    assert!(!h.expect_login(&key()).admit(5, || unreachable!("closed")));
    h.close();
    assert!(h.is_closed(), "idempotent");
}

fn admin_kick(generation: i64, message: &str) -> KickPayload {
    KickPayload {
        message: Some(message.to_owned()),
        ..KickPayload::new(&key(), generation, unique_core::KickReason::Admin)
    }
}

/// `with_cause`: `destroy` learns why the session ends, from the kick that started it; a
/// kick that joins a running destroy does not change it.
#[tokio::test]
async fn destroy_is_told_the_cause_of_the_kick_that_started_it() {
    use unique_client::KickCause;
    use unique_core::KickReason;

    let sessions = Sessions::new();
    let causes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let gate = Arc::new(Notify::new());
    let h = {
        let (read, remove) = (sessions.clone(), sessions.clone());
        let (log, gate) = (Arc::clone(&causes), Arc::clone(&gate));
        KickHandler::with_cause(
            move |k| read.generation(k),
            move |k: Key, g, cause: KickCause| {
                log.lock().unwrap().push((g, cause));
                let (remove, gate) = (remove.clone(), Arc::clone(&gate));
                async move {
                    gate.notified().await;
                    remove.remove_if(&k, g);
                }
            },
            KickOptions::default(),
        )
    };

    sessions.insert(key(), 3);
    let first = tokio::spawn({
        let h = h.clone();
        async move { h.handle(&admin_kick(4, "chargeback")).await }
    });
    // The admin kick's destroy is running (and held at the gate); a takeover's kick joins it.
    while causes.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    let joined = tokio::spawn({
        let h = h.clone();
        async move { h.handle(&kick(4)).await }
    });
    tokio::task::yield_now().await;
    gate.notify_one();
    let done = KickAck::Destroyed {
        local_generation: 3,
    };
    assert_eq!(first.await.unwrap(), done);
    assert_eq!(joined.await.unwrap(), done);
    assert_eq!(
        *causes.lock().unwrap(),
        [(
            3,
            KickCause::new(KickReason::Admin).with_message("chargeback")
        )]
    );

    // A takeover's kick (what a payload without a reason reads as, see unique-core).
    sessions.insert(key(), 7);
    let h2 = h.clone();
    let second = tokio::spawn(async move { h2.handle(&kick(8)).await });
    while causes.lock().unwrap().len() < 2 {
        tokio::task::yield_now().await;
    }
    gate.notify_one();
    assert!(second.await.unwrap().no_older_session());
    assert_eq!(causes.lock().unwrap()[1], (7, KickCause::default()));
}

/// A kick that came while a login was in flight refuses that login with its cause.
#[tokio::test]
async fn an_early_kick_refuses_its_login_with_its_cause() {
    use unique_client::{Admission, KickCause};
    use unique_core::KickReason;

    let sessions = Sessions::new();
    let h = handler(&sessions, &Arc::default());

    let pending = h.expect_login(&key());
    assert_eq!(
        h.handle(&admin_kick(2, "abuse")).await,
        KickAck::Ignored(IgnoreReason::NoSession)
    );
    let admission = pending.try_admit(1, || panic!("a replaced login never goes online"));
    assert_eq!(
        admission,
        Admission::Replaced(KickCause::new(KickReason::Admin).with_message("abuse"))
    );

    // The newest gen's cause is kept; an equal gen announced again replaces it.
    let pending = h.expect_login(&key());
    h.handle(&admin_kick(5, "first")).await;
    h.handle(&kick(4)).await;
    h.handle(&kick(5)).await;
    assert_eq!(
        pending.try_admit(3, || ()),
        Admission::Replaced(KickCause::default())
    );

    // Not newer than the login (an admin logout of the previous session announces the
    // gen this login got): admitted.
    let pending = h.expect_login(&key());
    h.handle(&admin_kick(6, "old session")).await;
    let mut online = false;
    assert_eq!(pending.try_admit(6, || online = true), Admission::Admitted);
    assert!(online);

    h.close();
    let pending = h.expect_login(&Key::new("game", "prod", 43));
    assert_eq!(pending.try_admit(1, || ()), Admission::Closed);
}
