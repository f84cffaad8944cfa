//! One audit record and its one line of JSON, written here once so every sink writes the same
//! lines.

use std::time::SystemTime;

use unique_core::{Key, KickDetail, ReleaseReason};

use super::AuditEvent;

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
    /// own fields: `kicked` and `kick_detail` (takeover), `kicked`, `kick_detail` and `limit`
    /// (eviction), `limit` (limit-reached), `current_gen` (superseded),
    /// `released` and `reason` (release), `released`, `kicked` and `kick_detail` (admin-logout), and
    /// `status`, `reason`, `path`, `source`, `count`, `first_ts` and `last_ts` (refused, a
    /// tally of refusals whose `ts` is when it was written). Strings
    /// are escaped as JSON, so a line never holds a raw newline.
    pub fn write_json_line(&self, out: &mut Vec<u8>) {
        let (generation, prev_generation) = self.event.generations();
        out.extend_from_slice(b"{\"ts\":");
        write_ts(out, self.ts);
        out.extend_from_slice(b",\"event\":");
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
            AuditEvent::Eviction {
                kicked,
                kick_detail,
                limit,
                ..
            } => {
                write_kick(out, kicked, kick_detail);
                write_limit(out, limit);
            }
            AuditEvent::LimitReached { limit } => write_limit(out, limit),
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
            AuditEvent::Release {
                released, reason, ..
            } => {
                out.extend_from_slice(b",\"released\":");
                write_bool(out, released);
                out.extend_from_slice(b",\"reason\":");
                write_opt_str(out, reason.map(ReleaseReason::as_str));
            }
            AuditEvent::Refused {
                reason,
                path,
                source,
                count,
                first,
                last,
            } => {
                out.extend_from_slice(b",\"status\":");
                write_opt_i64(out, Some(i64::from(reason.status())));
                out.extend_from_slice(b",\"reason\":");
                write_str(out, reason.as_str());
                out.extend_from_slice(b",\"path\":");
                write_str(out, path);
                out.extend_from_slice(b",\"source\":");
                match source {
                    // Digits, dots, colons and hex: nothing to escape.
                    Some(ip) => {
                        out.push(b'"');
                        out.extend_from_slice(ip.to_string().as_bytes());
                        out.push(b'"');
                    }
                    None => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b",\"count\":");
                out.extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
                out.extend_from_slice(b",\"first_ts\":");
                write_ts(out, first);
                out.extend_from_slice(b",\"last_ts\":");
                write_ts(out, last);
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

/// `"2026-05-01T12:34:56.789Z"`, quotes included: digits, dashes, colons, a dot, `T` and
/// `Z`, nothing to escape.
fn write_ts(out: &mut Vec<u8>, ts: SystemTime) {
    out.push(b'"');
    out.extend_from_slice(humantime::format_rfc3339_millis(ts).to_string().as_bytes());
    out.push(b'"');
}

fn write_limit(out: &mut Vec<u8>, limit: usize) {
    out.extend_from_slice(b",\"limit\":");
    out.extend_from_slice(itoa::Buffer::new().format(limit).as_bytes());
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use serde_json::Value;

    use super::*;
    use crate::audit::RefusalReason;

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
            (
                AuditEvent::Eviction {
                    generation: 5,
                    prev_generation: 4,
                    kicked: true,
                    kick_detail: None,
                    limit: 3,
                },
                r#""eviction""#,
                r#""gen":5,"prev_gen":4"#,
                r#","kicked":true,"kick_detail":null,"limit":3"#,
            ),
            (
                AuditEvent::LimitReached { limit: 3 },
                r#""limit-reached""#,
                r#""gen":null,"prev_gen":null"#,
                r#","limit":3"#,
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
                    reason: None,
                },
                r#""release""#,
                r#""gen":2,"prev_gen":null"#,
                r#","released":true,"reason":null"#,
            ),
            (
                AuditEvent::Release {
                    generation: 3,
                    released: false,
                    reason: Some(ReleaseReason::NodeDraining),
                },
                r#""release""#,
                r#""gen":3,"prev_gen":null"#,
                r#","released":false,"reason":"node-draining""#,
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
                refused(RefusalReason::Forbidden, "/v1/claim", Some("127.0.0.9"), 1),
                r#""refused""#,
                r#""gen":null,"prev_gen":null"#,
                concat!(
                    r#","status":403,"reason":"forbidden","path":"/v1/claim","source":"127.0.0.9","#,
                    r#""count":1,"first_ts":"2026-05-01T12:34:50.000Z","last_ts":"2026-05-01T12:34:56.000Z""#
                ),
            ),
            (
                refused(RefusalReason::MissingRole, "/v1/logout", Some("::1"), 7),
                r#""refused""#,
                r#""gen":null,"prev_gen":null"#,
                concat!(
                    r#","status":403,"reason":"missing-role","path":"/v1/logout","source":"::1","#,
                    r#""count":7,"first_ts":"2026-05-01T12:34:50.000Z","last_ts":"2026-05-01T12:34:56.000Z""#
                ),
            ),
        ]);
    }

    /// A tally of `count` refusals from `source`, from 12:34:50 to 12:34:56.
    fn refused(
        reason: RefusalReason,
        path: &'static str,
        source: Option<&str>,
        count: u64,
    ) -> AuditEvent {
        let at = |seconds| UNIX_EPOCH + Duration::from_secs(seconds);
        AuditEvent::Refused {
            reason,
            path,
            source: source.map(|ip| ip.parse().unwrap()),
            count,
            first: at(1_777_638_890),
            last: at(1_777_638_896),
        }
    }

    #[test]
    fn a_tally_of_refusals_has_no_key_and_no_token_for_a_401() {
        let event = refused(RefusalReason::Unknown, "/v1/release", None, 100_000);
        assert_eq!(
            line(&AuditRecord::new(event, None, None, "0a1b2c3d-9").at(when())),
            concat!(
                r#"{"ts":"2026-05-01T12:34:56.789Z","event":"refused","project":null,"env":null,"#,
                r#""uid":null,"slot":"","gen":null,"prev_gen":null,"token":null,"#,
                r#""request_id":"0a1b2c3d-9","status":401,"reason":"unknown","path":"/v1/release","#,
                r#""source":null,"count":100000,"first_ts":"2026-05-01T12:34:50.000Z","#,
                r#""last_ts":"2026-05-01T12:34:56.000Z"}"#,
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
            let event = refused(RefusalReason::Forbidden, "/v1/current", None, 1);
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
}
