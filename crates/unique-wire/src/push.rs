//! Push kicks: the kick stream a node opens (`GET /v1/nodes/{node}/kicks`) and the ack it
//! answers each kick with (`POST /v1/nodes/{node}/kicks/ack`), `docs/design.md#push-kicks`.
//!
//! The stream's body is NDJSON: one [`StreamLine`] per line, each a JSON object tagged by
//! `type`. A reader ignores fields it does not know, and a line whose `type` it does not
//! know reads as [`StreamLine::Unknown`], so a newer server never breaks an older node.

use serde::{Deserialize, Serialize};

/// `GET`: the kick stream of a node, as a template (`{node_id}` is the node id; named so, not
/// `node`, so that OpenAPI tools do not link it to the lease routes' free-text `node` fields).
pub const NODE_KICKS_PATH: &str = "/v1/nodes/{node_id}/kicks";
/// `POST`: the ack of a pushed kick, as a template (`{node_id}` is the node id).
pub const NODE_KICKS_ACK_PATH: &str = "/v1/nodes/{node_id}/kicks/ack";
/// The media type of the kick stream's body.
pub const NDJSON_CONTENT_TYPE: &str = "application/x-ndjson";
/// The ping interval a server announces unless told otherwise, in milliseconds. A node that
/// hears nothing for three intervals reconnects.
pub const DEFAULT_PING_MS: u64 = 15_000;

const NODES_PREFIX: &str = "/v1/nodes/";
const KICKS_SUFFIX: &str = "/kicks";
const ACK_SUFFIX: &str = "/kicks/ack";

/// The kick-stream path of `node`: `/v1/nodes/{node}/kicks`. A valid node id
/// ([`unique_core::check_node_id`]) needs no escaping.
pub fn node_kicks_path(node: &str) -> String {
    format!("{NODES_PREFIX}{node}{KICKS_SUFFIX}")
}

/// The ack path of `node`: `/v1/nodes/{node}/kicks/ack`.
pub fn node_kicks_ack_path(node: &str) -> String {
    format!("{NODES_PREFIX}{node}{ACK_SUFFIX}")
}

/// Which of the two push routes `path` is, with its `{node}` segment: any non-empty
/// segment without `/` (the handler checks it is a valid node id, so a bad one is a 400
/// naming the rule, not a 404).
pub fn parse_node_kicks_path(path: &str) -> Option<(PushRoute, &str)> {
    let rest = path.strip_prefix(NODES_PREFIX)?;
    let (node, route) = if let Some(node) = rest.strip_suffix(ACK_SUFFIX) {
        (node, PushRoute::Ack)
    } else {
        (rest.strip_suffix(KICKS_SUFFIX)?, PushRoute::Stream)
    };
    (!node.is_empty() && !node.contains('/')).then_some((route, node))
}

/// One of the two push routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PushRoute {
    /// [`NODE_KICKS_PATH`], `GET`.
    Stream,
    /// [`NODE_KICKS_ACK_PATH`], `POST`.
    Ack,
}

impl PushRoute {
    /// The route's path template.
    pub const fn path(self) -> &'static str {
        match self {
            Self::Stream => NODE_KICKS_PATH,
            Self::Ack => NODE_KICKS_ACK_PATH,
        }
    }
}

/// Why a server ended a kick stream itself, the `reason` of [`StreamLine::Closed`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClosedReason {
    /// A newer stream for the same node replaced this one.
    Replaced,
    /// The node did not read fast enough: its queue filled, or a write stalled.
    SlowReader,
    /// The server is shutting down.
    Shutdown,
    /// A reason this version does not know (a newer server's).
    #[serde(other)]
    Other,
}

/// One line of a kick stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum StreamLine {
    /// The first line: the stream is open for `node`; a ping follows every `ping_ms`.
    Hello {
        /// The node the stream serves.
        node: String,
        /// The interval between pings, in milliseconds.
        ping_ms: u64,
    },
    /// Keep-alive, every `ping_ms`.
    Ping,
    /// A kick for a session this node holds; answer it on the ack route.
    Kick(KickLine),
    /// The last line when the server ends the stream itself.
    Closed {
        /// Why.
        reason: ClosedReason,
    },
    /// A line whose `type` this version does not know: ignored.
    #[serde(other)]
    Unknown,
}

/// A pushed kick, [`StreamLine::Kick`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KickLine {
    /// The kick's id, 32 lowercase hex digits: the ack names it.
    pub id: String,
    /// The exact JSON text an HTTP kick would POST ([`encode_kick`](crate::encode_kick)):
    /// verify the signature over these bytes, then [`decode_kick`](crate::decode_kick) them.
    pub body: String,
    /// Exactly the `Unique-Signature` header value an HTTP kick carries
    /// (`t=<unix s>,v1=<hex>`), HMAC over `<t>.<body>`; `None` (`null`) when the server
    /// has no signing keys.
    pub signature: Option<String>,
}

impl StreamLine {
    /// The line as it travels: its JSON and a `\n`.
    ///
    /// # Panics
    ///
    /// Never: a line holds only strings and integers.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).expect("a stream line serialises");
        line.push(b'\n');
        line
    }

    /// Reads one line (its trailing `\n` or `\r\n`, if any, ignored).
    ///
    /// # Errors
    ///
    /// Not a JSON object with a string `type`, or a known type with missing or mistyped
    /// fields.
    pub fn from_line(line: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(line.trim_ascii_end())
    }
}

/// `POST /v1/nodes/{node}/kicks/ack` body: `{"id","status"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KickAckBody {
    /// The id of the kick answered ([`KickLine::id`]).
    pub id: String,
    /// What the node's kick receiver would have answered an HTTP kick: 2xx confirms the
    /// kick, anything else refuses it. An integral float (`200.0`) reads as the integer, as
    /// every integer of the wire does.
    #[serde(deserialize_with = "status")]
    pub status: u16,
}

fn status<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u16, D::Error> {
    let wide = crate::integer::u64(deserializer)?;
    u16::try_from(wide).map_err(|_| {
        serde::de::Error::invalid_value(
            serde::de::Unexpected::Unsigned(wide),
            &"a status from 0 to 65535",
        )
    })
}

/// The answer of the ack route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KickAckAnswer {
    /// `true` when that kick was waiting on this server for this node; `false` when not
    /// (late, unknown, already answered).
    pub accepted: bool,
}

/// `POST`: a kick forwarded by another server to the server holding the node's stream
/// (`docs/design.md#push-kicks-across-servers`). Internal: authenticated by the servers' shared
/// peer secret, never by a caller's token.
pub const PEER_KICK_PATH: &str = "/v1/peer/kick";
/// `POST`: a node's ack that landed on a server other than the one holding its stream,
/// forwarded to that one. Internal, as [`PEER_KICK_PATH`].
pub const PEER_ACK_PATH: &str = "/v1/peer/ack";

/// One of the two internal peer routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerRoute {
    /// [`PEER_KICK_PATH`], `POST`.
    Kick,
    /// [`PEER_ACK_PATH`], `POST`.
    Ack,
}

impl PeerRoute {
    /// The route of `path`, if it is one of the two.
    pub fn from_path(path: &str) -> Option<Self> {
        match path {
            PEER_KICK_PATH => Some(Self::Kick),
            PEER_ACK_PATH => Some(Self::Ack),
            _ => None,
        }
    }

    /// The route's path.
    pub const fn path(self) -> &'static str {
        match self {
            Self::Kick => PEER_KICK_PATH,
            Self::Ack => PEER_ACK_PATH,
        }
    }
}

/// [`PEER_KICK_PATH`] body: push `body` (signed by `signature`) to `node`'s stream, held by the
/// server whose epoch is `server_epoch`, and wait at most `timeout_ms` for the ack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerKickBody {
    /// The node the kick is for.
    pub node: String,
    /// The epoch of the server the sender found holding the stream: a server started again
    /// on the same address has another, and answers `connect-error`.
    pub server_epoch: String,
    /// The kick's JSON text, as [`KickLine::body`].
    pub body: String,
    /// Its signature, as [`KickLine::signature`].
    pub signature: Option<String>,
    /// How long the receiving server may wait for the node's ack.
    pub timeout_ms: u64,
}

/// [`PEER_KICK_PATH`] answer: how the push ended, `"confirmed"` or a kick detail's wire name
/// (`"non-2xx"`, `"timeout"`, `"connect-error"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerKickAnswer {
    /// The outcome.
    pub outcome: String,
}

/// [`PEER_ACK_PATH`] body: the ack `id`/`status` a node sent for `node`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerAckBody {
    /// The node that acked.
    pub node: String,
    /// The kick's id.
    pub id: String,
    /// The node's status.
    pub status: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_and_write_as_the_spec_shows() {
        let cases = [
            (
                StreamLine::Hello {
                    node: "n1".into(),
                    ping_ms: 15_000,
                },
                r#"{"type":"hello","node":"n1","ping_ms":15000}"#,
            ),
            (StreamLine::Ping, r#"{"type":"ping"}"#),
            (
                StreamLine::Kick(KickLine {
                    id: "0123456789abcdef0123456789abcdef".into(),
                    body: r#"{"project":"p","env":"e","uid":1,"gen":2,"reason":"login-elsewhere"}"#
                        .into(),
                    signature: Some("t=1,v1=ab".into()),
                }),
                r#"{"type":"kick","id":"0123456789abcdef0123456789abcdef","body":"{\"project\":\"p\",\"env\":\"e\",\"uid\":1,\"gen\":2,\"reason\":\"login-elsewhere\"}","signature":"t=1,v1=ab"}"#,
            ),
            (
                StreamLine::Kick(KickLine {
                    id: "00000000000000000000000000000001".into(),
                    body: "{}".into(),
                    signature: None,
                }),
                r#"{"type":"kick","id":"00000000000000000000000000000001","body":"{}","signature":null}"#,
            ),
            (
                StreamLine::Closed {
                    reason: ClosedReason::Replaced,
                },
                r#"{"type":"closed","reason":"replaced"}"#,
            ),
            (
                StreamLine::Closed {
                    reason: ClosedReason::SlowReader,
                },
                r#"{"type":"closed","reason":"slow-reader"}"#,
            ),
            (
                StreamLine::Closed {
                    reason: ClosedReason::Shutdown,
                },
                r#"{"type":"closed","reason":"shutdown"}"#,
            ),
        ];
        for (line, text) in cases {
            let mut wire = text.as_bytes().to_vec();
            wire.push(b'\n');
            assert_eq!(line.to_line(), wire, "{line:?}");
            assert_eq!(StreamLine::from_line(&wire).unwrap(), line, "{text}");
        }
    }

    #[test]
    fn unknown_types_reasons_and_fields_are_tolerated() {
        assert_eq!(
            StreamLine::from_line(br#"{"type":"resume","from":3}"#).unwrap(),
            StreamLine::Unknown
        );
        assert_eq!(
            StreamLine::from_line(b"{\"type\":\"closed\",\"reason\":\"draining\"}\r\n").unwrap(),
            StreamLine::Closed {
                reason: ClosedReason::Other
            }
        );
        assert_eq!(
            StreamLine::from_line(br#"{"type":"ping","seq":9}"#).unwrap(),
            StreamLine::Ping
        );
        // A missing signature reads as null (unsigned), as a reader should be lenient.
        assert_eq!(
            StreamLine::from_line(br#"{"type":"kick","id":"x","body":"{}"}"#).unwrap(),
            StreamLine::Kick(KickLine {
                id: "x".into(),
                body: "{}".into(),
                signature: None
            })
        );
        for bad in [
            &br#"{"node":"n1"}"#[..],
            br#"{"type":"hello","node":"n1"}"#,
            br#"{"type":"kick","id":"x","signature":null}"#,
            b"not json",
        ] {
            assert!(
                StreamLine::from_line(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn ack_body_and_answer() {
        let body: KickAckBody = serde_json::from_str(r#"{"id":"ab","status":200}"#).unwrap();
        assert_eq!(
            body,
            KickAckBody {
                id: "ab".into(),
                status: 200
            }
        );
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"id":"ab","status":200}"#
        );
        // An integral float is the integer (JSON Schema's reading).
        let float: KickAckBody = serde_json::from_str(r#"{"id":"ab","status":409.0}"#).unwrap();
        assert_eq!(float.status, 409);
        for bad in [
            r#"{"id":"ab","status":200.5}"#,
            r#"{"id":"ab"}"#,
            r#"{"status":200}"#,
            r#"{"id":"ab","status":70000}"#,
            r#"{"id":"ab","status":-1}"#,
            r#"{"id":"ab","status":200,"x":1}"#,
        ] {
            assert!(serde_json::from_str::<KickAckBody>(bad).is_err(), "{bad}");
        }
        assert_eq!(
            serde_json::to_string(&KickAckAnswer { accepted: true }).unwrap(),
            r#"{"accepted":true}"#
        );
    }

    #[test]
    fn paths_read_back_with_their_node() {
        assert_eq!(node_kicks_path("n-1.a_b"), "/v1/nodes/n-1.a_b/kicks");
        assert_eq!(node_kicks_ack_path("n1"), "/v1/nodes/n1/kicks/ack");
        assert_eq!(
            parse_node_kicks_path(&node_kicks_path("n1")),
            Some((PushRoute::Stream, "n1"))
        );
        assert_eq!(
            parse_node_kicks_path(&node_kicks_ack_path("n1")),
            Some((PushRoute::Ack, "n1"))
        );
        // A node named like a lease route is still a node.
        assert_eq!(
            parse_node_kicks_path("/v1/nodes/register/kicks"),
            Some((PushRoute::Stream, "register"))
        );
        for other in [
            "/v1/nodes/register",
            "/v1/nodes//kicks",
            "/v1/nodes/a/b/kicks",
            "/v1/nodes/n1/kicks/",
            "/v1/nodes/n1/kicks/ack/",
            "/v1/nodes/kicks",
            "/v1/node/n1/kicks",
        ] {
            assert_eq!(parse_node_kicks_path(other), None, "{other}");
        }
    }
}
