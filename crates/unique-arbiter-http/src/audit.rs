//! The audit log: one record per session event, handed to a sink before the answer is sent.
//!
//! The service builds an [`AuditRecord`] for every first login, takeover, replay, superseded
//! retry, release, admin logout and refused caller, and gives it to the [`AuditSink`] of
//! [`ArbiterService::with_audit`](crate::ArbiterService::with_audit). A record that cannot be
//! written fails a session event closed (503 `unavailable`, see [`Auditor::session`]); a
//! refused caller is refused all the same and the failure is logged.
//!
//! The line format ([`AuditRecord::write_json_line`]) is written here, once, so every sink
//! writes the same lines.

use std::io;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use metrics::Counter;
use unique_core::{ClaimOutcome, Error, Key, KickDetail, LogoutOutcome};

use crate::auth::Grant;
use crate::request_id::RequestId;

/// Counter: audit records the sink could not write. Session events among them were answered
/// 503; refused callers were refused anyway.
pub const AUDIT_WRITE_ERRORS_TOTAL: &str = "unique_audit_write_errors_total";

/// The message of the 503 a session event gets when its record cannot be written.
pub const AUDIT_UNAVAILABLE: &str = "audit log cannot be written";

/// Where audit records go: a file (`unique-server --audit-log`), a collector, a test's list.
///
/// # Contract
///
/// - `record` returns `Ok` only once the record has been handed to its destination whole
///   (a file sink: one `write(2)` of the complete line, not a buffer flushed later), because
///   the service sends its answer right after: an answered session event has its record.
/// - It is called synchronously on the request's task, from many requests at once. It MUST
///   NOT interleave two records and SHOULD NOT block for longer than a local write.
/// - `Err` means the record is not (wholly) recorded. The service then answers the session
///   event 503 [`AUDIT_UNAVAILABLE`] and logs the error with the record; the error's text is
///   logged, never sent to the caller.
pub trait AuditSink: Send + Sync + 'static {
    /// Records `record`; see the trait's contract.
    fn record(&self, record: &AuditRecord<'_>) -> io::Result<()>;
}

impl<T: AuditSink + ?Sized> AuditSink for Arc<T> {
    fn record(&self, record: &AuditRecord<'_>) -> io::Result<()> {
        (**self).record(record)
    }
}

impl<T: AuditSink + ?Sized> AuditSink for Box<T> {
    fn record(&self, record: &AuditRecord<'_>) -> io::Result<()> {
        (**self).record(record)
    }
}

/// One audit record: what happened, to which key, for which caller, in which request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditRecord<'a> {
    /// When the record was made (after the event, before the answer).
    pub ts: SystemTime,
    /// What happened, with its gens.
    pub event: AuditEvent,
    /// The key acted on; `None` for a caller refused before its body was read (401).
    pub key: Option<&'a Key>,
    /// The device slot of the session: the key's slot, `""` for the default slot or
    /// when there is no key.
    pub slot: &'a str,
    /// The caller's token name (never the token); `None` without tokens or for a 401.
    pub token: Option<&'a str>,
    /// The request's id, as in the request's log span.
    pub request_id: &'a str,
}

/// What happened. Gens follow the wire's naming: `gen` is the session's, `prev_gen` the one it
/// replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditEvent {
    /// A claim that found no online session: no record, or a tombstone.
    FirstLogin {
        /// The gen written.
        generation: i64,
        /// The tombstone's gen when the key had been logged out; `None` without a record.
        prev_generation: Option<i64>,
    },
    /// A claim that replaced an online session (or a corrupt record).
    Takeover {
        /// The gen written.
        generation: i64,
        /// The replaced session's gen.
        prev_generation: i64,
        /// The old session's node confirmed the kick (or no kicker is configured).
        kicked: bool,
        /// Why the old session is only presumed offline; `None` when kicked.
        kick_detail: Option<KickDetail>,
    },
    /// A retried claim whose claim_id still holds the key (I4): nothing kicked or written.
    Replay {
        /// The gen the claim_id holds.
        generation: i64,
    },
    /// A retried claim whose claim_id no longer holds the key (C9), answered 409.
    Superseded {
        /// The gen the claim_id won.
        generation: i64,
        /// The key's gen now.
        current_generation: i64,
    },
    /// A release (`POST /v1/release`).
    Release {
        /// The gen asked to release.
        generation: i64,
        /// Whether that gen held the key and is now a tombstone (false: a newer gen holds it).
        released: bool,
    },
    /// An administrator's logout of the key (`POST /v1/logout`), as
    /// [`LogoutOutcome`] reports it.
    AdminLogout {
        /// The gen of the record the logout read: the logged-out session's when `released`;
        /// `None` without a record.
        generation: Option<i64>,
        /// A session was online and is now a tombstone (false: nothing was written).
        released: bool,
        /// The session's node confirmed the kick (or no kicker is configured).
        kicked: bool,
        /// Why a released session is only presumed offline; `None` when kicked or nothing
        /// was released.
        kick_detail: Option<KickDetail>,
    },
    /// A caller refused with 401 or 403: nothing was read or written.
    Refused {
        /// Why.
        reason: RefusalReason,
        /// The path asked for (`/v1/claim`, …).
        path: &'static str,
    },
}

/// Why a caller was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalReason {
    /// No `Authorization` header (401).
    Missing,
    /// An `Authorization` header that is not a bearer token (401).
    Malformed,
    /// A bearer token that is not configured (401).
    Unknown,
    /// The token's scope does not cover the key (403).
    Forbidden,
    /// The token lacks the role the route needs (403).
    MissingRole,
}

impl RefusalReason {
    /// The stable name in a record's `reason`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::Unknown => "unknown",
            Self::Forbidden => "forbidden",
            Self::MissingRole => "missing-role",
        }
    }

    /// The status the caller was answered with.
    pub const fn status(self) -> u16 {
        match self {
            Self::Missing | Self::Malformed | Self::Unknown => 401,
            Self::Forbidden | Self::MissingRole => 403,
        }
    }
}

impl From<crate::Unauthenticated> for RefusalReason {
    fn from(why: crate::Unauthenticated) -> Self {
        match why {
            crate::Unauthenticated::Missing => Self::Missing,
            crate::Unauthenticated::Malformed => Self::Malformed,
            crate::Unauthenticated::Unknown => Self::Unknown,
        }
    }
}

impl AuditEvent {
    /// The event a successful claim's outcome records: a replay, a takeover (the snapshot
    /// held a session) or a first login.
    pub fn of_claim(outcome: &ClaimOutcome) -> Self {
        if outcome.replayed {
            Self::Replay {
                generation: outcome.generation,
            }
        } else if outcome.has_prev {
            Self::Takeover {
                generation: outcome.generation,
                prev_generation: outcome.prev_generation,
                kicked: outcome.kicked,
                kick_detail: outcome.kick_detail,
            }
        } else {
            Self::FirstLogin {
                generation: outcome.generation,
                // A tombstone has a gen; no record reads as gen 0 (see Records).
                prev_generation: (outcome.prev_generation > 0).then_some(outcome.prev_generation),
            }
        }
    }

    /// The event an admin logout's outcome records.
    pub fn of_logout(outcome: &LogoutOutcome) -> Self {
        Self::AdminLogout {
            // No record reads as gen 0, outside the gen domain.
            generation: (outcome.generation > 0).then_some(outcome.generation),
            released: outcome.released,
            kicked: outcome.kicked,
            kick_detail: outcome.kick_detail,
        }
    }

    /// The stable name in a record's `event`.
    pub const fn name(&self) -> &'static str {
        match self {
            Self::FirstLogin { .. } => "first-login",
            Self::Takeover { .. } => "takeover",
            Self::Replay { .. } => "replay",
            Self::Superseded { .. } => "superseded",
            Self::Release { .. } => "release",
            Self::AdminLogout { .. } => "admin-logout",
            Self::Refused { .. } => "refused",
        }
    }

    /// `(gen, prev_gen)` of the record.
    fn generations(&self) -> (Option<i64>, Option<i64>) {
        match *self {
            Self::FirstLogin {
                generation,
                prev_generation,
            } => (Some(generation), prev_generation),
            Self::Takeover {
                generation,
                prev_generation,
                ..
            } => (Some(generation), Some(prev_generation)),
            Self::Replay { generation }
            | Self::Superseded { generation, .. }
            | Self::Release { generation, .. } => (Some(generation), None),
            Self::AdminLogout { generation, .. } => (generation, None),
            Self::Refused { .. } => (None, None),
        }
    }
}

impl<'a> AuditRecord<'a> {
    /// A record of `event` made now, in the key's slot.
    pub fn new(
        event: AuditEvent,
        key: Option<&'a Key>,
        token: Option<&'a str>,
        request_id: &'a str,
    ) -> Self {
        Self {
            ts: SystemTime::now(),
            event,
            key,
            slot: key.map_or("", |key| key.slot.as_str()),
            token,
            request_id,
        }
    }

    /// The same record made at `ts` instead.
    #[must_use]
    pub fn at(mut self, ts: SystemTime) -> Self {
        self.ts = ts;
        self
    }

    /// Appends the record as one line of JSON, `\n` included. Every line has, in this order,
    /// `ts` (RFC 3339 UTC, milliseconds), `event`, `project`, `env`, `uid`, `slot`, `gen`,
    /// `prev_gen`, `token` and `request_id`, `null` where they do not apply; then the event's
    /// own fields: `kicked` and `kick_detail` (takeover), `current_gen` (superseded),
    /// `released` (release), `released`, `kicked` and `kick_detail` (admin-logout), and
    /// `status`, `reason` and `path` (refused). Strings
    /// are escaped as JSON, so a line never holds a raw newline.
    pub fn write_json_line(&self, out: &mut Vec<u8>) {
        let (generation, prev_generation) = self.event.generations();
        out.extend_from_slice(b"{\"ts\":\"");
        // Digits, dashes, colons, a dot, `T` and `Z`: nothing to escape.
        out.extend_from_slice(
            humantime::format_rfc3339_millis(self.ts)
                .to_string()
                .as_bytes(),
        );
        out.extend_from_slice(b"\",\"event\":");
        write_str(out, self.event.name());
        out.extend_from_slice(b",\"project\":");
        write_opt_str(out, self.key.map(|k| k.project.as_str()));
        out.extend_from_slice(b",\"env\":");
        write_opt_str(out, self.key.map(|k| k.env.as_str()));
        out.extend_from_slice(b",\"uid\":");
        write_opt_i64(out, self.key.map(|k| k.uid));
        out.extend_from_slice(b",\"slot\":");
        write_str(out, self.slot);
        out.extend_from_slice(b",\"gen\":");
        write_opt_i64(out, generation);
        out.extend_from_slice(b",\"prev_gen\":");
        write_opt_i64(out, prev_generation);
        out.extend_from_slice(b",\"token\":");
        write_opt_str(out, self.token);
        out.extend_from_slice(b",\"request_id\":");
        write_str(out, self.request_id);
        match self.event {
            AuditEvent::Takeover {
                kicked,
                kick_detail,
                ..
            } => write_kick(out, kicked, kick_detail),
            AuditEvent::AdminLogout {
                released,
                kicked,
                kick_detail,
                ..
            } => {
                out.extend_from_slice(b",\"released\":");
                write_bool(out, released);
                write_kick(out, kicked, kick_detail);
            }
            AuditEvent::Superseded {
                current_generation, ..
            } => {
                out.extend_from_slice(b",\"current_gen\":");
                write_opt_i64(out, Some(current_generation));
            }
            AuditEvent::Release { released, .. } => {
                out.extend_from_slice(b",\"released\":");
                write_bool(out, released);
            }
            AuditEvent::Refused { reason, path } => {
                out.extend_from_slice(b",\"status\":");
                write_opt_i64(out, Some(i64::from(reason.status())));
                out.extend_from_slice(b",\"reason\":");
                write_str(out, reason.as_str());
                out.extend_from_slice(b",\"path\":");
                write_str(out, path);
            }
            AuditEvent::FirstLogin { .. } | AuditEvent::Replay { .. } => {}
        }
        out.extend_from_slice(b"}\n");
    }

    /// The record as one line of JSON, `\n` included (see [`write_json_line`](Self::write_json_line)).
    pub fn to_json_line(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        self.write_json_line(&mut out);
        out
    }
}

fn write_kick(out: &mut Vec<u8>, kicked: bool, kick_detail: Option<KickDetail>) {
    out.extend_from_slice(b",\"kicked\":");
    write_bool(out, kicked);
    out.extend_from_slice(b",\"kick_detail\":");
    write_opt_str(out, kick_detail.map(KickDetail::as_str));
}

fn write_str(out: &mut Vec<u8>, value: &str) {
    // serde_json escapes quotes, backslashes and every control character, newlines included.
    serde_json::to_writer(&mut *out, value).expect("a string serialises into a Vec");
}

fn write_opt_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => write_str(out, value),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_opt_i64(out: &mut Vec<u8>, value: Option<i64>) {
    match value {
        Some(value) => out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

/// The service's handle on its sink.
#[derive(Clone)]
pub(crate) struct Auditor {
    sink: Arc<dyn AuditSink>,
}

impl Auditor {
    pub(crate) fn new(sink: impl AuditSink) -> Self {
        write_errors();
        Self {
            sink: Arc::new(sink),
        }
    }

    /// Records a session event (a claim's outcome, a release, an admin logout) before its
    /// answer. Fails closed: a record that cannot be written is `Unavailable` (503
    /// [`AUDIT_UNAVAILABLE`]) even though the event already took effect in the store, so no
    /// caller is told of a session event the log does not hold. The error log keeps the
    /// record.
    pub(crate) fn session(
        &self,
        event: AuditEvent,
        key: &Key,
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<(), Error> {
        let request_id = request_id.to_string();
        let record = AuditRecord::new(event, Some(key), grant.map(Grant::name), &request_id);
        self.sink.record(&record).map_err(|error| {
            failed(&record, &error, "answering 503: the event took effect");
            Error::unavailable(AUDIT_UNAVAILABLE)
        })
    }

    /// Records a refused caller. The caller is refused whether or not the record is written;
    /// a failure is logged and counted.
    pub(crate) fn refused(
        &self,
        reason: RefusalReason,
        path: &'static str,
        key: Option<&Key>,
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) {
        let request_id = request_id.to_string();
        let event = AuditEvent::Refused { reason, path };
        let record = AuditRecord::new(event, key, grant.map(Grant::name), &request_id);
        if let Err(error) = self.sink.record(&record) {
            failed(&record, &error, "the caller is refused all the same");
        }
    }
}

/// Logs and counts a record the sink did not take, with the line it would have written.
fn failed(record: &AuditRecord<'_>, error: &io::Error, then: &str) {
    write_errors().increment(1);
    let line = record.to_json_line();
    tracing::error!(
        event = record.event.name(),
        request_id = record.request_id,
        %error,
        line = %String::from_utf8_lossy(line.trim_ascii_end()),
        "audit log cannot be written; {then}"
    );
}

/// The handle, registered with the recorder in force when the first auditor is made.
fn write_errors() -> &'static Counter {
    static HANDLE: OnceLock<Counter> = OnceLock::new();
    HANDLE.get_or_init(|| {
        metrics::describe_counter!(
            AUDIT_WRITE_ERRORS_TOTAL,
            "Audit records the audit sink could not write"
        );
        metrics::counter!(AUDIT_WRITE_ERRORS_TOTAL)
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::{Duration, UNIX_EPOCH};

    use serde_json::{Value, json};

    use super::*;

    #[allow(dead_code)]
    fn object_safe(_: Box<dyn AuditSink>) {}

    /// 2026-05-01T12:34:56.789Z
    fn when() -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_777_638_896_789)
    }

    fn line(record: &AuditRecord<'_>) -> String {
        let line = String::from_utf8(record.to_json_line()).expect("utf-8");
        assert!(line.ends_with('\n'), "{line:?}");
        assert_eq!(line.matches('\n').count(), 1, "one line: {line:?}");
        line
    }

    /// Each event of `cases` on one key, by one token, in one request, reads exactly as its
    /// name, the key's fields, its gens, the token and request id, then its own fields.
    fn reads_as_documented(cases: &[(AuditEvent, &str, &str, &str)]) {
        let key = Key::new("game", "prod", 7);
        let at = |event| {
            line(&AuditRecord::new(event, Some(&key), Some("game-backend"), "req-1").at(when()))
        };
        let head = r#"{"ts":"2026-05-01T12:34:56.789Z","event":"#;
        let key_fields = r#""project":"game","env":"prod","uid":7,"slot":"""#;
        let tail = r#""token":"game-backend","request_id":"req-1""#;
        for &(event, name, gens, extra) in cases {
            assert_eq!(
                at(event),
                format!("{head}{name},{key_fields},{gens},{tail}{extra}}}\n"),
                "{event:?}"
            );
        }
    }

    #[test]
    fn claim_events_read_as_documented() {
        reads_as_documented(&[
            (
                AuditEvent::FirstLogin {
                    generation: 1,
                    prev_generation: None,
                },
                r#""first-login""#,
                r#""gen":1,"prev_gen":null"#,
                "",
            ),
            (
                AuditEvent::FirstLogin {
                    generation: 4,
                    prev_generation: Some(3),
                },
                r#""first-login""#,
                r#""gen":4,"prev_gen":3"#,
                "",
            ),
            (
                AuditEvent::Takeover {
                    generation: 2,
                    prev_generation: 1,
                    kicked: false,
                    kick_detail: Some(KickDetail::ConnectError),
                },
                r#""takeover""#,
                r#""gen":2,"prev_gen":1"#,
                r#","kicked":false,"kick_detail":"connect-error""#,
            ),
            (
                AuditEvent::Takeover {
                    generation: 3,
                    prev_generation: 2,
                    kicked: true,
                    kick_detail: None,
                },
                r#""takeover""#,
                r#""gen":3,"prev_gen":2"#,
                r#","kicked":true,"kick_detail":null"#,
            ),
            (
                AuditEvent::Replay { generation: 1 },
                r#""replay""#,
                r#""gen":1,"prev_gen":null"#,
                "",
            ),
            (
                AuditEvent::Superseded {
                    generation: 1,
                    current_generation: 2,
                },
                r#""superseded""#,
                r#""gen":1,"prev_gen":null"#,
                r#","current_gen":2"#,
            ),
        ]);
    }

    #[test]
    fn release_logout_and_refusal_events_read_as_documented() {
        reads_as_documented(&[
            (
                AuditEvent::Release {
                    generation: 2,
                    released: true,
                },
                r#""release""#,
                r#""gen":2,"prev_gen":null"#,
                r#","released":true"#,
            ),
            (
                AuditEvent::AdminLogout {
                    generation: Some(5),
                    released: true,
                    kicked: false,
                    kick_detail: Some(KickDetail::Timeout),
                },
                r#""admin-logout""#,
                r#""gen":5,"prev_gen":null"#,
                r#","released":true,"kicked":false,"kick_detail":"timeout""#,
            ),
            (
                AuditEvent::AdminLogout {
                    generation: None,
                    released: false,
                    kicked: false,
                    kick_detail: None,
                },
                r#""admin-logout""#,
                r#""gen":null,"prev_gen":null"#,
                r#","released":false,"kicked":false,"kick_detail":null"#,
            ),
            (
                AuditEvent::Refused {
                    reason: RefusalReason::Forbidden,
                    path: "/v1/claim",
                },
                r#""refused""#,
                r#""gen":null,"prev_gen":null"#,
                r#","status":403,"reason":"forbidden","path":"/v1/claim""#,
            ),
            (
                AuditEvent::Refused {
                    reason: RefusalReason::MissingRole,
                    path: "/v1/logout",
                },
                r#""refused""#,
                r#""gen":null,"prev_gen":null"#,
                r#","status":403,"reason":"missing-role","path":"/v1/logout""#,
            ),
        ]);
    }

    #[test]
    fn a_caller_refused_before_its_body_has_no_key_and_no_token() {
        let event = AuditEvent::Refused {
            reason: RefusalReason::Unknown,
            path: "/v1/release",
        };
        assert_eq!(
            line(&AuditRecord::new(event, None, None, "0a1b2c3d-9").at(when())),
            concat!(
                r#"{"ts":"2026-05-01T12:34:56.789Z","event":"refused","project":null,"env":null,"#,
                r#""uid":null,"slot":"","gen":null,"prev_gen":null,"token":null,"#,
                r#""request_id":"0a1b2c3d-9","status":401,"reason":"unknown","path":"/v1/release"}"#,
                "\n"
            )
        );
    }

    #[test]
    fn odd_strings_are_escaped_and_read_back_unchanged() {
        // A 403 is decided before the arbiter validates the key, and token names come from
        // the operator's file: both may hold anything a JSON string can.
        let odd = [
            "quote\" backslash\\ slash/",
            "new\nline\r\ttab",
            "\u{0}\u{1}\u{1f}\u{7f}",
            "é 😀 \u{2028}\u{2029}",
            "}{\"event\":\"forged\"",
        ];
        for text in odd {
            let key = Key::new(text, text, 1);
            let event = AuditEvent::Refused {
                reason: RefusalReason::Forbidden,
                path: "/v1/current",
            };
            let record = AuditRecord::new(event, Some(&key), Some(text), "r").at(when());
            let line = line(&record);
            let value: Value = serde_json::from_str(&line).expect("valid JSON");
            assert_eq!(value["project"], text, "{line}");
            assert_eq!(value["env"], text, "{line}");
            assert_eq!(value["token"], text, "{line}");
            assert_eq!(value["event"], "refused", "{line}");
        }
    }

    #[test]
    fn timestamps_are_utc_with_milliseconds() {
        let record = AuditRecord::new(AuditEvent::Replay { generation: 1 }, None, None, "r");
        for (ts, text) in [
            (UNIX_EPOCH, "1970-01-01T00:00:00.000Z"),
            (when(), "2026-05-01T12:34:56.789Z"),
            (
                when() + Duration::from_micros(999),
                "2026-05-01T12:34:56.789Z",
            ),
        ] {
            let value: Value = serde_json::from_str(&line(&record.at(ts))).unwrap();
            assert_eq!(value["ts"], text);
        }
    }

    fn outcome(replayed: bool, has_prev: bool, prev_generation: i64) -> ClaimOutcome {
        ClaimOutcome {
            generation: 9,
            prev_generation,
            has_prev,
            prev_owner: None,
            kicked: false,
            kick_detail: has_prev.then_some(KickDetail::Non2xx),
            replayed,
        }
    }

    #[test]
    fn a_claim_outcome_names_its_event() {
        assert_eq!(
            AuditEvent::of_claim(&outcome(false, false, 0)),
            AuditEvent::FirstLogin {
                generation: 9,
                prev_generation: None
            }
        );
        assert_eq!(
            AuditEvent::of_claim(&outcome(false, false, 8)),
            AuditEvent::FirstLogin {
                generation: 9,
                prev_generation: Some(8)
            }
        );
        assert_eq!(
            AuditEvent::of_claim(&outcome(false, true, 8)),
            AuditEvent::Takeover {
                generation: 9,
                prev_generation: 8,
                kicked: false,
                kick_detail: Some(KickDetail::Non2xx)
            }
        );
        assert_eq!(
            AuditEvent::of_claim(&outcome(true, false, 0)),
            AuditEvent::Replay { generation: 9 }
        );
    }

    #[test]
    fn a_logout_outcome_names_its_event() {
        let outcome = |released, generation, kicked, kick_detail| LogoutOutcome {
            released,
            generation,
            kicked,
            kick_detail,
        };
        assert_eq!(
            AuditEvent::of_logout(&outcome(true, 4, false, Some(KickDetail::ConnectError))),
            AuditEvent::AdminLogout {
                generation: Some(4),
                released: true,
                kicked: false,
                kick_detail: Some(KickDetail::ConnectError)
            }
        );
        assert_eq!(
            AuditEvent::of_logout(&outcome(false, 0, false, None)),
            AuditEvent::AdminLogout {
                generation: None,
                released: false,
                kicked: false,
                kick_detail: None
            }
        );
    }

    /// Keeps every line; fails every write while `broken` is set.
    #[derive(Default)]
    struct Lines {
        lines: Mutex<Vec<Value>>,
        broken: std::sync::atomic::AtomicBool,
    }

    impl AuditSink for Lines {
        fn record(&self, record: &AuditRecord<'_>) -> io::Result<()> {
            if self.broken.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(io::Error::from(io::ErrorKind::StorageFull));
            }
            let value = serde_json::from_slice(&record.to_json_line()).unwrap();
            self.lines.lock().unwrap().push(value);
            Ok(())
        }
    }

    mod service {
        use std::sync::atomic::Ordering;

        use bytes::Bytes;
        use http::{Request, StatusCode};
        use http_body_util::{BodyExt, Full};
        use unique_core::Arbiter;
        use unique_store_memory::MemoryStore;

        use super::*;
        use crate::{ArbiterService, Tokens};

        const TOKEN: &str = "audit-unit-token-0123456789";

        fn service(sink: &Arc<Lines>) -> ArbiterService<MemoryStore> {
            let mut tokens = Tokens::new();
            tokens
                .add(TOKEN, Grant::new("game", vec!["game".into()], None))
                .unwrap();
            ArbiterService::new(Arbiter::new(MemoryStore::new()))
                .with_tokens(tokens)
                .with_audit(Arc::clone(sink))
        }

        async fn call(
            service: &ArbiterService<MemoryStore>,
            path: &str,
            token: Option<&str>,
            body: &Value,
        ) -> (StatusCode, Value) {
            let mut request = Request::post(path).header("x-request-id", "unit-1");
            if let Some(token) = token {
                request = request.header("authorization", format!("Bearer {token}"));
            }
            let request = request
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap();
            let answer = service.handle(request).await;
            let status = answer.status();
            let bytes = answer.into_body().collect().await.unwrap().to_bytes();
            (
                status,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            )
        }

        fn claim(project: &str, claim_id: &str) -> Value {
            json!({"project": project, "env": "prod", "uid": 7, "claim_id": claim_id,
                   "owner": {"endpoint": "http://127.0.0.1:1/kick"}})
        }

        fn key() -> Value {
            json!({"project": "game", "env": "prod", "uid": 7})
        }

        #[tokio::test]
        async fn a_claim_the_sink_cannot_record_is_answered_503_and_its_retry_replays() {
            let sink = Arc::new(Lines::default());
            let service = service(&sink);
            sink.broken.store(true, Ordering::SeqCst);
            let (status, body) =
                call(&service, "/v1/claim", Some(TOKEN), &claim("game", "a")).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
            assert_eq!(body["message"], AUDIT_UNAVAILABLE, "{body}");
            // The claim took effect: reads (never audited) show it.
            let (status, view) = call(&service, "/v1/current", Some(TOKEN), &key()).await;
            assert_eq!((status, view["gen"].clone()), (StatusCode::OK, json!(1)));
            // A release is answered 503 too; a refused caller is still refused.
            let release = json!({"project": "game", "env": "prod", "uid": 7, "gen": 1});
            let (status, _) = call(&service, "/v1/release", Some(TOKEN), &release).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            let (status, _) = call(&service, "/v1/claim", None, &claim("game", "a")).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            let (status, _) = call(&service, "/v1/claim", Some(TOKEN), &claim("other", "a")).await;
            assert_eq!(status, StatusCode::FORBIDDEN);
            assert!(sink.lines.lock().unwrap().is_empty());

            // The log works again: the retry is superseded by the logout it could not report
            // (released above), and that is what is recorded.
            sink.broken.store(false, Ordering::SeqCst);
            let (status, body) =
                call(&service, "/v1/claim", Some(TOKEN), &claim("game", "a")).await;
            assert_eq!(status, StatusCode::CONFLICT, "{body}");
            let (status, body) =
                call(&service, "/v1/claim", Some(TOKEN), &claim("game", "b")).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            let (status, body) =
                call(&service, "/v1/claim", Some(TOKEN), &claim("game", "b")).await;
            assert_eq!(
                (status, body["replayed"].clone()),
                (StatusCode::OK, json!(true))
            );
            let lines = sink.lines.lock().unwrap();
            let events: Vec<_> = lines
                .iter()
                .map(|l| (l["event"].as_str().unwrap(), l["gen"].clone()))
                .collect();
            assert_eq!(
                events,
                [
                    ("superseded", json!(1)),
                    ("first-login", json!(2)),
                    ("replay", json!(2))
                ]
            );
            assert_eq!(lines[1]["prev_gen"], 1, "after the tombstone: {}", lines[1]);
            assert!(lines.iter().all(|l| l["request_id"] == "unit-1"));
        }

        #[tokio::test]
        async fn reads_and_probes_are_not_recorded() {
            let sink = Arc::new(Lines::default());
            let service = service(&sink);
            let (status, _) = call(&service, "/v1/current", Some(TOKEN), &key()).await;
            assert_eq!(status, StatusCode::OK);
            let batch = json!({"keys": [key()]});
            let (status, _) = call(&service, "/v1/current/batch", Some(TOKEN), &batch).await;
            assert_eq!(status, StatusCode::OK);
            let health = Request::get("/healthz")
                .body(Full::new(Bytes::new()))
                .unwrap();
            assert_eq!(service.handle(health).await.status(), StatusCode::OK);
            assert!(sink.lines.lock().unwrap().is_empty());
        }

        #[tokio::test]
        async fn refused_reads_are_recorded_with_their_path() {
            let sink = Arc::new(Lines::default());
            let service = service(&sink);
            let batch = json!({"keys": [key(), {"project": "other", "env": "prod", "uid": 2}]});
            let (status, _) = call(&service, "/v1/current/batch", Some(TOKEN), &batch).await;
            assert_eq!(status, StatusCode::FORBIDDEN);
            let (status, _) = call(&service, "/v1/current", Some("not-a-token"), &key()).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            let lines = sink.lines.lock().unwrap();
            assert_eq!(lines.len(), 2, "{lines:?}");
            let forbidden = &lines[0];
            assert_eq!(
                (
                    &forbidden["path"],
                    &forbidden["status"],
                    &forbidden["project"],
                    &forbidden["uid"],
                    &forbidden["token"]
                ),
                (
                    &json!("/v1/current/batch"),
                    &json!(403),
                    &json!("other"),
                    &json!(2),
                    &json!("game")
                )
            );
            let unknown = &lines[1];
            assert_eq!(
                (&unknown["path"], &unknown["reason"], &unknown["token"]),
                (&json!("/v1/current"), &json!("unknown"), &Value::Null)
            );
        }
    }
}
