//! What a [`Node`](crate::node::Node) reports, and the one-line text form the smoke client
//! prints and the smoke runner parses.
//!
//! A line is `NAME t=<µs since the Unix epoch> key=value …`, with an optional free-text
//! `msg=` field that always comes last and runs to the end of the line. Values other than
//! `msg` never contain spaces.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use unique_sessions::{CurrentView, EvictReason, KickDetail};

/// Something that happened to a node, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The kick receiver listens; `endpoint` is the owner endpoint the node advertises.
    Listening {
        /// The receiver's bound address.
        addr: SocketAddr,
        /// `http://<addr>/kick`.
        endpoint: String,
    },
    /// A login (or a replayed one) returned.
    LoggedIn {
        /// The session's gen.
        generation: i64,
        /// The gen of the record it replaced (0 when none).
        prev_generation: i64,
        /// A session was online before it.
        has_prev: bool,
        /// The old session confirmed its kick.
        kicked: bool,
        /// Why the old session is only presumed offline.
        kick_detail: Option<KickDetail>,
        /// Answered by the replay short-circuit.
        replayed: bool,
        /// The login's claim_id.
        claim_id: String,
        /// Claim attempts the client made.
        attempts: u32,
    },
    /// A login gave up.
    LoginFailed {
        /// The claim_id it used (empty when there was nothing to replay).
        claim_id: String,
        /// Why.
        error: String,
    },
    /// The kick receiver answered a kick.
    Kick {
        /// The kick's announced gen (`None` when the body was not a kick).
        generation: Option<i64>,
        /// The HTTP status it answered.
        status: u16,
        /// The receiver's ack (`destroyed`, `no-session`, `not-older`), or `-` on an error.
        ack: String,
    },
    /// A kick ended the local session, or had replaced it before it went online.
    Destroyed {
        /// The gen of the destroyed session.
        local_generation: i64,
    },
    /// One heartbeat check returned.
    Check {
        /// What the server said, or why the check failed.
        view: Result<CurrentView, String>,
    },
    /// The heartbeat evicted the local session.
    Evicted {
        /// The gen of the evicted session.
        local_generation: i64,
        /// Why.
        reason: EvictReason,
    },
    /// A logout returned (the session ended here, then its gen was released).
    LoggedOut {
        /// The released gen.
        generation: i64,
        /// The release took effect (the gen still held the key).
        released: bool,
    },
    /// A logout gave up.
    LogoutFailed {
        /// Why.
        error: String,
    },
    /// The kick receiver stopped listening; kicks now fail to connect.
    ReceiverClosed,
}

impl Report {
    /// The line's first word.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Listening { .. } => "LISTENING",
            Self::LoggedIn { .. } => "LOGGED_IN",
            Self::LoginFailed { .. } => "LOGIN_FAILED",
            Self::Kick { .. } => "KICK",
            Self::Destroyed { .. } => "DESTROYED",
            Self::Check { .. } => "CHECK",
            Self::Evicted { .. } => "EVICTED",
            Self::LoggedOut { .. } => "LOGGED_OUT",
            Self::LogoutFailed { .. } => "LOGOUT_FAILED",
            Self::ReceiverClosed => "RECEIVER_CLOSED",
        }
    }

    /// The line for this event, stamped with the current wall-clock time.
    pub fn to_line(&self) -> String {
        let mut fields: Vec<(&str, String)> = Vec::new();
        let mut message = None;
        match self {
            Self::Listening { addr, endpoint } => {
                fields.push(("addr", addr.to_string()));
                fields.push(("endpoint", endpoint.clone()));
            }
            Self::LoggedIn {
                generation,
                prev_generation,
                has_prev,
                kicked,
                kick_detail,
                replayed,
                claim_id,
                attempts,
            } => {
                fields.push(("gen", generation.to_string()));
                fields.push(("prev_gen", prev_generation.to_string()));
                fields.push(("has_prev", has_prev.to_string()));
                fields.push(("kicked", kicked.to_string()));
                fields.push(("kick_detail", detail_name(*kick_detail).to_owned()));
                fields.push(("replayed", replayed.to_string()));
                fields.push(("claim_id", claim_id.clone()));
                fields.push(("attempts", attempts.to_string()));
            }
            Self::LoginFailed { claim_id, error } => {
                fields.push(("claim_id", claim_id.clone()));
                message = Some(error.as_str());
            }
            Self::Kick {
                generation,
                status,
                ack,
            } => {
                let generation = generation.map_or_else(|| "-".to_owned(), |g| g.to_string());
                fields.push(("gen", generation));
                fields.push(("status", status.to_string()));
                fields.push(("ack", ack.clone()));
            }
            Self::Destroyed { local_generation } => {
                fields.push(("local_gen", local_generation.to_string()));
            }
            Self::Check { view } => match view {
                Ok(view) => {
                    fields.push(("gen", view.generation.to_string()));
                    fields.push(("exists", view.exists.to_string()));
                    fields.push(("owner", view.owner.is_some().to_string()));
                }
                Err(error) => message = Some(error.as_str()),
            },
            Self::Evicted {
                local_generation,
                reason,
            } => {
                fields.push(("local_gen", local_generation.to_string()));
                fields.push(("reason", reason.to_string()));
            }
            Self::LoggedOut {
                generation,
                released,
            } => {
                fields.push(("gen", generation.to_string()));
                fields.push(("released", released.to_string()));
            }
            Self::LogoutFailed { error } => message = Some(error.as_str()),
            Self::ReceiverClosed => {}
        }
        format_line(self.name(), &fields, message)
    }
}

/// `none` for no detail, else the detail's wire name.
pub fn detail_name(detail: Option<KickDetail>) -> &'static str {
    detail.map_or("none", KickDetail::as_str)
}

/// Microseconds since the Unix epoch: the same clock in every process of the machine,
/// so the runner can order events that different processes report.
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Builds a line: `NAME t=… k=v … [msg=…]`. Spaces in values become `_` so every value
/// stays one word; `msg` keeps its spaces (it is last) but loses line breaks.
pub fn format_line(name: &str, fields: &[(&str, String)], message: Option<&str>) -> String {
    let mut line = format!("{name} t={}", now_micros());
    for (key, value) in fields {
        let value = if value.is_empty() {
            "-".to_owned()
        } else {
            value.replace(char::is_whitespace, "_")
        };
        let _ = write!(line, " {key}={value}");
    }
    if let Some(message) = message {
        let _ = write!(line, " msg={}", message.replace(['\n', '\r'], " "));
    }
    line
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The first word (`LOGGED_IN`, `KICK`, …).
    pub name: String,
    /// The `t=` stamp, µs since the Unix epoch (0 when missing).
    pub t_micros: u64,
    fields: Vec<(String, String)>,
    raw: String,
}

impl Line {
    /// Parses a line; `None` for an empty one.
    pub fn parse(raw: &str) -> Option<Self> {
        let raw = raw.trim_end();
        let (head, message) = match raw.find(" msg=") {
            Some(at) => (&raw[..at], Some(&raw[at + 5..])),
            None => (raw, None),
        };
        let mut words = head.split_whitespace();
        let name = words.next()?.to_owned();
        let mut fields: Vec<(String, String)> = words
            .filter_map(|word| word.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        if let Some(message) = message {
            fields.push(("msg".to_owned(), message.to_owned()));
        }
        let t_micros = fields
            .iter()
            .find(|(k, _)| k == "t")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        Some(Self {
            name,
            t_micros,
            fields,
            raw: raw.to_owned(),
        })
    }

    /// The line as it was printed.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// A field's value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A field's value, or an error naming the field and the line.
    pub fn field(&self, key: &str) -> Result<&str, String> {
        self.get(key)
            .ok_or_else(|| format!("no {key} in line {:?}", self.raw))
    }

    /// An integer field.
    pub fn int(&self, key: &str) -> Result<i64, String> {
        let value = self.field(key)?;
        value
            .parse()
            .map_err(|_| format!("{key}={value} is not an integer in line {:?}", self.raw))
    }

    /// A `true`/`false` field.
    pub fn flag(&self, key: &str) -> Result<bool, String> {
        match self.field(key)? {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(format!(
                "{key}={other} is not a flag in line {:?}",
                self.raw
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_in_line_round_trips() {
        let event = Report::LoggedIn {
            generation: 2,
            prev_generation: 1,
            has_prev: true,
            kicked: false,
            kick_detail: Some(KickDetail::ConnectError),
            replayed: false,
            claim_id: "c-1".into(),
            attempts: 1,
        };
        let line = Line::parse(&event.to_line()).expect("a line");
        assert_eq!(line.name, "LOGGED_IN");
        assert!(line.t_micros > 0);
        assert_eq!(line.int("gen"), Ok(2));
        assert_eq!(line.flag("has_prev"), Ok(true));
        assert_eq!(line.get("kick_detail"), Some("connect-error"));
        assert_eq!(line.get("claim_id"), Some("c-1"));
        assert!(line.int("claim_id").is_err());
        assert!(line.field("nope").is_err());
    }

    #[test]
    fn the_message_runs_to_the_end_of_the_line() {
        let event = Report::LoginFailed {
            claim_id: String::new(),
            error: "gave up after 3 attempt(s): store unavailable\nnext".into(),
        };
        let line = Line::parse(&event.to_line()).expect("a line");
        assert_eq!(line.get("claim_id"), Some("-"));
        assert_eq!(
            line.get("msg"),
            Some("gave up after 3 attempt(s): store unavailable next")
        );
    }

    #[test]
    fn values_never_contain_spaces() {
        let line = format_line("X", &[("a", "b c".into())], None);
        assert_eq!(
            Line::parse(&line).and_then(|l| l.get("a").map(str::to_owned)),
            Some("b_c".into())
        );
    }
}
