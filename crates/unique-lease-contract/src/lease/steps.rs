//! Steps of the store's wall clock (D11): no time passes on the monotonic clocks, the
//! store's clock jumps, as after an operator's `date -s` or an NTP step.

use std::time::Duration;

use super::stored_left;
use crate::{Subject, TTL, ensure, seen};

/// How far the cases step the store's clock: two minutes, far beyond every ttl here.
const STEP: Duration = Duration::from_mins(2);

/// D11 (a): after a forward step no room is granted to another node while its holder's
/// deadline has not passed in real time; the holder's renewal keeps token and epoch
/// (D2); once a ttl has passed since the step, the room is free again.
pub async fn a_forward_step_never_hands_a_held_room_to_another_node(s: Subject) {
    let d = &*s.directory;
    let held = ensure(d, "d11-forward", "a", s.now(), TTL).await;
    // The peer instance has read the clock before the step too.
    let _ = ensure(&*s.peer, "d11-forward-peer", "a", s.now(), TTL).await;
    s.pass(Duration::from_millis(200));
    s.step_forward(STEP);
    for (who, directory) in [("this instance", d), ("the peer", &*s.peer)] {
        let other = ensure(directory, "d11-forward", "b", s.now(), TTL).await;
        ensure!(
            other.same_holding(&held) && other.ttl_left <= TTL,
            "D11",
            "after a forward step of the store's clock, a room must stay with its holder \
             until the holder's ttl has passed in real time",
            "{who}: b asked 200 ms into a's {TTL:?} lease, {STEP:?} step, and was told {other:?}"
        );
    }
    s.pass(TTL / 2);
    let renewed = ensure(d, "d11-forward", "a", s.now(), TTL).await;
    ensure!(
        renewed.same_holding(&held) && renewed.ttl_left == TTL,
        "D11",
        "the holder renewing after a forward step must keep its token and epoch (D2)",
        "a renewed and was told {renewed:?}, held {held:?}"
    );
    s.pass(TTL);
    let taken = ensure(d, "d11-forward", "b", s.now(), TTL).await;
    ensure!(
        taken.is_held_by("b") && taken.epoch > held.epoch,
        "D11",
        "once a ttl has passed since the holder's last renewal, the room must be free again",
        "b was told {taken:?}"
    );
}

/// D11 (b): after a backward step no answer reports more time left than the ttl
/// granted, and the room is free to another node a ttl after its first attempt.
pub async fn a_backward_step_never_stretches_a_lease_past_its_ttl(s: Subject) {
    let d = &*s.directory;
    let ttl = Duration::from_millis(1_500);
    let held = ensure(d, "d11-back", "a", s.now(), ttl).await;
    s.pass(Duration::from_millis(500));
    s.step_back(STEP);
    let left = stored_left(&s, "d11-back").await;
    ensure!(
        left <= ttl,
        "D11",
        "after a backward step of the store's clock, no answer may report more time left \
         than the ttl granted",
        "lookup said {left:?} left of a {ttl:?} lease"
    );
    let other = ensure(d, "d11-back", "b", s.now(), ttl).await;
    ensure!(
        other.same_holding(&held) && other.ttl_left <= ttl,
        "D11",
        "after a backward step of the store's clock, no answer may report more time left \
         than the ttl granted",
        "b was told {other:?}"
    );
    let again = ensure(&*s.peer, "d11-back", "b", s.now(), ttl).await;
    ensure!(
        again.same_holding(&held) && again.ttl_left <= ttl,
        "D11",
        "after a backward step of the store's clock, no answer may report more time left \
         than the ttl granted",
        "the peer told b {again:?}"
    );
    s.pass(ttl);
    let taken = ensure(d, "d11-back", "b", s.now(), ttl).await;
    ensure!(
        taken.is_held_by("b") && taken.epoch > held.epoch,
        "D11",
        "after a backward step, a lease must not outlive a ttl counted from the first \
         attempt to take its room",
        "b asked {ttl:?} after its first attempt and was told {taken:?}"
    );
    let renewed = ensure(d, "d11-back", "b", s.now(), ttl).await;
    ensure_eq!(
        seen(&renewed),
        seen(&taken),
        "D2",
        "a renewal with nothing to extend must keep the holding unchanged"
    );
}
