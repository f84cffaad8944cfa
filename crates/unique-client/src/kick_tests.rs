//! Unit tests of `kick.rs`.
use super::*;

#[test]
fn a_cause_keeps_at_most_max_cause_bytes_of_each_text() {
    let kick = |reason: KickReason, message: Option<String>| KickPayload {
        message,
        ..KickPayload::new(&Key::new("p", "e", 1), 2, reason)
    };
    assert_eq!(
        KickCause::of(&kick(KickReason::Admin, Some("abuse".into()))),
        KickCause::new(KickReason::Admin).with_message("abuse")
    );
    assert_eq!(
        KickCause::from(&kick(KickReason::LoginElsewhere, None)),
        KickCause::default()
    );
    // 'é' is two bytes: a cut inside it backs off to the boundary before it.
    let long = format!("{}é{}", "x".repeat(MAX_CAUSE_BYTES - 1), "y".repeat(5000));
    let cause = KickCause::of(&kick(KickReason::Other(long.clone()), Some(long)));
    let kept = "x".repeat(MAX_CAUSE_BYTES - 1);
    assert_eq!(cause.reason, KickReason::Other(kept.clone()));
    assert_eq!(cause.message, Some(kept));
    let exact = "z".repeat(MAX_CAUSE_BYTES);
    assert_eq!(bounded(&exact), exact);
}

#[test]
fn ack_names_and_success() {
    let cases = [
        (
            KickAck::Destroyed {
                local_generation: 1,
            },
            "destroyed",
            true,
        ),
        (
            KickAck::Ignored(IgnoreReason::NoSession),
            "no-session",
            true,
        ),
        (
            KickAck::Ignored(IgnoreReason::NotOlder {
                local_generation: 1,
            }),
            "not-older",
            true,
        ),
        (
            KickAck::TimedOut {
                local_generation: 1,
            },
            "timed-out",
            false,
        ),
        (
            KickAck::Failed {
                local_generation: 1,
            },
            "failed",
            false,
        ),
    ];
    for (ack, name, ok) in cases {
        assert_eq!(ack.to_string(), name);
        assert_eq!(ack.no_older_session(), ok, "{name}");
    }
}
