//! What to tell the user's client when its session ends: [`EndNotice`], and its shape as a
//! WebSocket close and as a server-sent event.

use serde::{Deserialize, Serialize};

use crate::session::Ending;

/// The most bytes a WebSocket close frame's reason may take (RFC 6455 §5.5: a control
/// frame's payload is at most 125 bytes, 2 of them the close code).
pub const MAX_CLOSE_REASON_BYTES: usize = 123;

/// The server-sent event's name: `event: session-ended`.
pub const SSE_EVENT: &str = "session-ended";

/// What cuts a message or a reason short in [`EndNotice::close_reason`].
const ELLIPSIS: &str = "…";

/// Why a player's session ended, to pass on to their client, and whether it should log in
/// again: `{"reason": …, "message": …, "gen": …, "reconnect": …}` (`message` omitted when
/// there is none).
///
/// | reason | ending | WebSocket close code | reconnect |
/// |---|---|---|---|
/// | `login-elsewhere` | a newer login elsewhere took the key | 4001 | no |
/// | `admin` | an operator logged the user out (`message`: why) | 4002 | no |
/// | `replaced` | a newer login of the key on the same node | 4003 | no |
/// | `evicted` | the heartbeat found the record gone or taken (`message`: what it found) | 4004 | no |
/// | `logged-out` | the application logged it out | 4005 | no |
/// | another kick reason | a kick this version does not know | 4000 | no |
/// | `node-draining` | [`Node::drain`](crate::Node::drain) | 4100 | yes |
/// | `node-shutdown` | [`Node::shutdown`](crate::Node::shutdown) | 4101 | yes |
///
/// Codes 41xx are exactly those the client should reconnect after (at once, with jitter:
/// this node takes no logins, so the load balancer sends it elsewhere). Every other ending
/// means another session holds the key, or it was ended on purpose: reconnecting would take
/// the key back from the user's other device, which would take it back in turn.
///
/// As a WebSocket close: [`close_code`](Self::close_code) and
/// [`close_reason`](Self::close_reason), this JSON cut to the 123 bytes a close reason may
/// hold. As a server-sent event: [`sse_event`](Self::sse_event), `event: session-ended` and
/// one `data:` line with the whole JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EndNotice {
    /// [`Ending::reason`]: `login-elsewhere`, `admin`, `replaced`, `evicted`, `logged-out`,
    /// `node-draining`, `node-shutdown`, or a kick reason this version does not know.
    pub reason: String,
    /// Text for the user: an admin logout's reason; for `evicted`, what the heartbeat found
    /// (`not-exists`, `gen-mismatch`, `owner-empty`, `owner-changed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The gen of the session that ended.
    #[serde(rename = "gen")]
    pub generation: i64,
    /// Whether the client should log in again on its own ([`Ending::reconnect`]).
    pub reconnect: bool,
}

impl EndNotice {
    /// The notice for the session `generation` that ended with `ending`.
    pub fn new(ending: &Ending, generation: i64) -> Self {
        let message = match ending {
            Ending::Kicked { message, .. } => message.clone(),
            Ending::Evicted { reason } => Some(reason.as_str().to_owned()),
            _ => None,
        };
        Self {
            reason: ending.reason().to_owned(),
            message,
            generation,
            reconnect: ending.reconnect(),
        }
    }

    /// The WebSocket close code for its reason (see the table above): 4100 and up when the
    /// client should reconnect.
    pub fn close_code(&self) -> u16 {
        match self.reason.as_str() {
            "login-elsewhere" => 4001,
            "admin" => 4002,
            "replaced" => 4003,
            "evicted" => 4004,
            "logged-out" => 4005,
            "node-draining" => 4100,
            "node-shutdown" => 4101,
            _ if self.reconnect => 4199,
            _ => 4000,
        }
    }

    /// The whole notice as one line of JSON.
    pub fn to_json(&self) -> String {
        // A struct of strings, an integer and a bool: serialising it cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The notice as a WebSocket close reason: its JSON, at most
    /// [`MAX_CLOSE_REASON_BYTES`] bytes. What does not fit is cut from the message (ending
    /// in `…`, dropped when nothing of it fits) and then from an unknown reason's name; the
    /// reason, gen and reconnect of every known ending always fit. Send the whole notice
    /// (an SSE event, a last text message) when the message must arrive whole.
    pub fn close_reason(&self) -> String {
        let whole = self.to_json();
        if whole.len() <= MAX_CLOSE_REASON_BYTES {
            return whole;
        }
        let mut fitted = Self {
            message: None,
            ..self.clone()
        };
        if fitted.to_json().len() > MAX_CLOSE_REASON_BYTES {
            // Only an unknown reason's name can be this long: cut it, without a message.
            fitted.reason = longest_fitting(&self.reason, "", |reason| Self {
                reason,
                ..fitted.clone()
            })
            .unwrap_or_default();
            return fitted.to_json();
        }
        if let Some(message) = &self.message {
            fitted.message = longest_fitting(message, ELLIPSIS, |cut| Self {
                message: Some(cut),
                ..fitted.clone()
            });
        }
        fitted.to_json()
    }

    /// The notice as one server-sent event: `event: session-ended`, then `data:` and the
    /// JSON (one line), then the blank line that ends the event.
    pub fn sse_event(&self) -> String {
        format!("event: {SSE_EVENT}\ndata: {}\n\n", self.to_json())
    }
}

/// The longest non-empty prefix of `text` (followed by `suffix`) whose notice, as `with`
/// builds it, fits a close reason. JSON escapes some characters to six bytes, so the fit is
/// found by trying (a binary search over the character boundaries), not computed.
fn longest_fitting(text: &str, suffix: &str, with: impl Fn(String) -> EndNotice) -> Option<String> {
    let ends: Vec<usize> = text.char_indices().skip(1).map(|(i, _)| i).collect();
    let fits = |end: usize| {
        with(format!("{}{suffix}", &text[..end])).to_json().len() <= MAX_CLOSE_REASON_BYTES
    };
    // The first `fitting` ends fit, the rest do not (a longer prefix is never shorter JSON).
    let fitting = ends.partition_point(|&end| fits(end));
    let end = *ends.get(fitting.checked_sub(1)?)?;
    Some(format!("{}{suffix}", &text[..end]))
}

#[cfg(test)]
mod tests {
    use unique_core::{EvictReason, KickReason, MAX_LOGOUT_REASON_CHARS};

    use super::*;

    fn admin(message: &str) -> EndNotice {
        let ending = Ending::Kicked {
            reason: KickReason::Admin,
            message: Some(message.to_owned()),
        };
        EndNotice::new(&ending, i64::MAX)
    }

    #[test]
    fn the_longest_admin_message_fits_a_close_reason() {
        // The longest message a server sends: MAX_LOGOUT_REASON_CHARS characters, each one
        // that JSON escapes to six bytes or that takes four in UTF-8.
        for c in ['\u{1}', '"', '😀', 'a'] {
            let notice = admin(&c.to_string().repeat(MAX_LOGOUT_REASON_CHARS));
            let reason = notice.close_reason();
            assert!(reason.len() <= MAX_CLOSE_REASON_BYTES, "{c:?}: {reason}");
            let read: EndNotice = serde_json::from_str(&reason).unwrap();
            assert_eq!(
                (read.reason.as_str(), read.generation, read.reconnect),
                ("admin", i64::MAX, false)
            );
            let message = read.message.expect("a cut message is kept");
            assert!(message.ends_with(ELLIPSIS), "{message}");
            assert!(
                notice
                    .message
                    .as_ref()
                    .unwrap()
                    .starts_with(message.strip_suffix(ELLIPSIS).unwrap()),
                "a prefix of the message"
            );
        }
    }

    #[test]
    fn a_short_notice_is_sent_whole() {
        let notice = admin("chargeback under review");
        assert_eq!(
            notice.close_reason(),
            r#"{"reason":"admin","message":"chargeback under review","gen":9223372036854775807,"reconnect":false}"#
        );
        assert_eq!(notice.close_reason(), notice.to_json());
    }

    #[test]
    fn an_unknown_reason_too_long_is_cut_too() {
        let ending = Ending::Kicked {
            reason: KickReason::Other("x".repeat(1000)),
            message: Some("m".repeat(1000)),
        };
        let reason = EndNotice::new(&ending, 1).close_reason();
        assert!(reason.len() <= MAX_CLOSE_REASON_BYTES, "{reason}");
        let read: EndNotice = serde_json::from_str(&reason).unwrap();
        assert_eq!(read.message, None);
        assert!(read.reason.starts_with("xxx"));
    }

    #[test]
    fn codes_and_reconnect_per_ending() {
        let cases = [
            (
                Ending::Kicked {
                    reason: KickReason::LoginElsewhere,
                    message: None,
                },
                4001,
                false,
            ),
            (admin("x").into_ending(), 4002, false),
            (Ending::Replaced { by: 2 }, 4003, false),
            (
                Ending::Evicted {
                    reason: EvictReason::GenMismatch,
                },
                4004,
                false,
            ),
            (Ending::LoggedOut, 4005, false),
            (
                Ending::Kicked {
                    reason: KickReason::Other("new".into()),
                    message: None,
                },
                4000,
                false,
            ),
            (Ending::Drained, 4100, true),
            (Ending::ShutDown, 4101, true),
        ];
        for (ending, code, reconnect) in cases {
            let notice = EndNotice::new(&ending, 1);
            assert_eq!(
                (notice.close_code(), notice.reconnect),
                (code, reconnect),
                "{ending:?}"
            );
        }
        let evicted = EndNotice::new(
            &Ending::Evicted {
                reason: EvictReason::GenMismatch,
            },
            3,
        );
        assert_eq!(
            evicted.sse_event(),
            "event: session-ended\ndata: {\"reason\":\"evicted\",\"message\":\"gen-mismatch\",\"gen\":3,\"reconnect\":false}\n\n"
        );
    }

    impl EndNotice {
        fn into_ending(self) -> Ending {
            Ending::Kicked {
                reason: KickReason::from_wire(&self.reason),
                message: self.message,
            }
        }
    }
}
