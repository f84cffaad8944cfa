//! [`Clause`]: the clauses of the kick contract the check sends a kick for.

use std::fmt;

/// What a clause expects back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Expected {
    /// Any 2xx status: the arbiter reads a 2xx as a confirmed kick and nothing else.
    Success,
    /// Exactly this status.
    Status(u16),
}

impl Expected {
    /// Whether `status` meets the expectation.
    pub const fn accepts(self, status: u16) -> bool {
        match self {
            Self::Success => status >= 200 && status < 300,
            Self::Status(expected) => status == expected,
        }
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Success => f.write_str("2xx"),
            Self::Status(status) => write!(f, "{status}"),
        }
    }
}

/// One clause of the kick contract (`docs/design.md`, "Kick payload", "Kick receiver" and
/// "Signed kicks"), checked by sending real kicks. Each sends one request or a few
/// (its variants); it passes when every answer meets [`expected`](Self::expected).
///
/// Every kick the check sends, signed or not, names a key no node holds (see the crate docs),
/// so even a receiver that accepts what it must refuse destroys nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Clause {
    /// A kick signed with the node's key, now: 2xx (no session here, so nothing to destroy).
    SignedKick,
    /// A signed kick with fields the payload does not define: ignored, 2xx, so a field an
    /// arbiter adds later never breaks an older receiver.
    UnknownFieldsIgnored,
    /// A signed kick padded with whitespace to exactly the 4 KiB limit: 2xx.
    BodyAtLimit,
    /// A kick without a `Unique-Signature` header: 401.
    Unsigned,
    /// A kick signed with a key the node does not hold: 401.
    Forged,
    /// A signed kick whose body changed after signing: another uid, or only a trailing
    /// space (the signature covers the exact bytes, not the parsed JSON): 401.
    TamperedBody,
    /// A genuine signature whose timestamp is older than the window: 401.
    StaleTimestamp,
    /// A genuine signature whose timestamp is ahead of the clock by more than the window: 401.
    FutureTimestamp,
    /// A `Unique-Signature` header that is not `t=<unix seconds>,v1=<64 hex digits>`: 401.
    MalformedSignature,
    /// A signed body that is not a kick payload: not JSON, not an object, a mistyped field:
    /// 400.
    MalformedPayload,
    /// A signed payload missing one of `project`, `env`, `uid`, `gen`: 400.
    IncompletePayload,
    /// A signed kick sent with `GET` or `PUT`: 405.
    OtherMethod,
    /// A signed kick padded one byte over 4 KiB, with its `Content-Length`: 413.
    OversizedBody,
    /// The same sent chunked, so no length is declared and the limit must hold while
    /// reading: 413.
    OversizedChunkedBody,
}

impl Clause {
    /// Every clause, in the order a run checks and prints them.
    pub const ALL: [Self; 14] = [
        Self::SignedKick,
        Self::UnknownFieldsIgnored,
        Self::BodyAtLimit,
        Self::Unsigned,
        Self::Forged,
        Self::TamperedBody,
        Self::StaleTimestamp,
        Self::FutureTimestamp,
        Self::MalformedSignature,
        Self::MalformedPayload,
        Self::IncompletePayload,
        Self::OtherMethod,
        Self::OversizedBody,
        Self::OversizedChunkedBody,
    ];

    /// The clauses a check in push mode ([`NodeCheck::push`](crate::NodeCheck::push)) sends
    /// down a kick stream, in the order it checks and prints them: those about the signature
    /// and the payload. The others are about the HTTP request (its method, its size, declared
    /// or chunked), which a pushed kick does not have: the server writes the kick's exact
    /// bytes into a JSON line of a stream it frames itself, and never a body over the limit.
    pub const PUSHED: [Self; 10] = [
        Self::SignedKick,
        Self::UnknownFieldsIgnored,
        Self::Unsigned,
        Self::Forged,
        Self::TamperedBody,
        Self::StaleTimestamp,
        Self::FutureTimestamp,
        Self::MalformedSignature,
        Self::MalformedPayload,
        Self::IncompletePayload,
    ];

    /// Its stable name, as a run prints it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::SignedKick => "signed-kick",
            Self::UnknownFieldsIgnored => "unknown-fields-ignored",
            Self::BodyAtLimit => "body-at-limit",
            Self::Unsigned => "unsigned",
            Self::Forged => "forged",
            Self::TamperedBody => "tampered-body",
            Self::StaleTimestamp => "stale-timestamp",
            Self::FutureTimestamp => "future-timestamp",
            Self::MalformedSignature => "malformed-signature",
            Self::MalformedPayload => "malformed-payload",
            Self::IncompletePayload => "incomplete-payload",
            Self::OtherMethod => "other-method",
            Self::OversizedBody => "oversized-body",
            Self::OversizedChunkedBody => "oversized-chunked-body",
        }
    }

    /// The clause whose [`name`](Self::name) this is.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|clause| clause.name() == name)
    }

    /// What the contract requires of the answer.
    pub const fn expected(self) -> Expected {
        match self {
            Self::SignedKick | Self::UnknownFieldsIgnored | Self::BodyAtLimit => Expected::Success,
            Self::Unsigned
            | Self::Forged
            | Self::TamperedBody
            | Self::StaleTimestamp
            | Self::FutureTimestamp
            | Self::MalformedSignature => Expected::Status(401),
            Self::MalformedPayload | Self::IncompletePayload => Expected::Status(400),
            Self::OtherMethod => Expected::Status(405),
            Self::OversizedBody | Self::OversizedChunkedBody => Expected::Status(413),
        }
    }

    /// What is sent, in a few words.
    pub const fn description(self) -> &'static str {
        match self {
            Self::SignedKick => "a kick signed with the node's key",
            Self::UnknownFieldsIgnored => "a signed kick with unknown fields",
            Self::BodyAtLimit => "a signed kick of exactly 4 KiB",
            Self::Unsigned => "a kick without Unique-Signature",
            Self::Forged => "a kick signed with another key",
            Self::TamperedBody => "a signed kick whose body changed after signing",
            Self::StaleTimestamp => "a signature older than the window",
            Self::FutureTimestamp => "a signature ahead of the clock by more than the window",
            Self::MalformedSignature => "a malformed Unique-Signature header",
            Self::MalformedPayload => "a signed body that is not a kick payload",
            Self::IncompletePayload => "a signed payload missing a field",
            Self::OtherMethod => "a signed kick with another method",
            Self::OversizedBody => "a signed body over 4 KiB with Content-Length",
            Self::OversizedChunkedBody => "a signed body over 4 KiB, chunked",
        }
    }
}

impl fmt::Display for Clause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut names: Vec<&str> = Clause::ALL.iter().map(|c| c.name()).collect();
        for clause in Clause::ALL {
            assert_eq!(Clause::from_name(clause.name()), Some(clause));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Clause::ALL.len());
        assert_eq!(Clause::from_name("nothing"), None);
    }

    #[test]
    fn pushed_clauses_keep_the_order_of_all() {
        let in_order: Vec<Clause> = Clause::ALL
            .into_iter()
            .filter(|c| Clause::PUSHED.contains(c))
            .collect();
        assert_eq!(in_order, Clause::PUSHED);
    }

    #[test]
    fn expectations_accept_what_they_say() {
        assert!(Expected::Success.accepts(200) && Expected::Success.accepts(204));
        assert!(!Expected::Success.accepts(199) && !Expected::Success.accepts(300));
        assert!(Expected::Status(401).accepts(401) && !Expected::Status(401).accepts(403));
        assert_eq!(Expected::Success.to_string(), "2xx");
        assert_eq!(Expected::Status(413).to_string(), "413");
    }
}
