//! The JSON bodies of requests and answers.
//!
//! One set of request types serves both sides. The server deserializes them: unknown fields
//! are rejected at every level (a typo must not silently drop data) and the strings borrow
//! from the body when they can. The client serializes them from borrowed domain types: every
//! field is always sent, because the server rejects unknown fields but accepts every present
//! one.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize};
use unique_core::{
    ClaimInput, CurrentView, Error, Key, LogoutInput, MAX_BATCH_KEYS, Owner, PoolPolicy,
    PoolRequest, ReleaseReason, UserKey, UserLogoutInput,
};

use crate::ErrorCode;
use crate::answer::{CurrentAnswer, SessionEntry};

/// `POST /v1/claim` body: `{"project","env","uid","slot"?,"owner":{…},"claim_id","pool"?}`;
/// `slot` and `pool` are exclusive (read it with [`into_claim`](Self::into_claim)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody<'a> {
    /// The key's project.
    #[serde(borrow)]
    pub project: Cow<'a, str>,
    /// The key's environment.
    #[serde(borrow)]
    pub env: Cow<'a, str>,
    /// The key's user id, a JSON integer.
    #[serde(deserialize_with = "crate::integer::i64")]
    pub uid: i64,
    /// The key's slot; `""` (the default slot) when omitted, and omitted when `""`, so a
    /// default-slot request is byte for byte what it was before slots.
    #[serde(borrow, default, skip_serializing_if = "str::is_empty")]
    pub slot: Cow<'a, str>,
    /// The claiming session's owner.
    #[serde(borrow)]
    pub owner: OwnerBody<'a>,
    /// The login's idempotency token.
    #[serde(borrow)]
    pub claim_id: Cow<'a, str>,
    /// A pooled claim: take a place in the user's pool instead of a named slot
    /// (`docs/design.md#pooled-sessions`). Omitted when absent, so a plain claim is byte for
    /// byte what it was before pools.
    #[serde(
        borrow,
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub pool: Option<PoolBody<'a>>,
}

/// `pool` inside a claim: `{"policy"?: "evict-oldest" | "deny-new", "limit"?: k}`; the policy
/// defaults to `evict-oldest`, the limit to the project's session limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolBody<'a> {
    /// `evict-oldest` or `deny-new`; `evict-oldest` when omitted.
    #[serde(
        borrow,
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub policy: Option<Cow<'a, str>>,
    /// The most sessions the user may hold, from 1 to the project's session limit; that
    /// limit when omitted.
    #[serde(
        default,
        deserialize_with = "crate::integer::option_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub limit: Option<u64>,
}

/// A field that may be omitted but never sent as `null`: the document types it as its value
/// alone, so a `null` is refused like any other wrong type.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

impl From<&PoolRequest> for PoolBody<'static> {
    fn from(pool: &PoolRequest) -> Self {
        Self {
            policy: Some(Cow::Borrowed(pool.policy.as_str())),
            limit: pool.limit.map(|k| u64::try_from(k).unwrap_or(u64::MAX)),
        }
    }
}

impl PoolBody<'_> {
    /// The pool request, its policy checked.
    ///
    /// # Errors
    ///
    /// `InvalidParams` for a policy that is neither `evict-oldest` nor `deny-new`.
    pub fn into_request(self) -> Result<PoolRequest, Error> {
        let policy = match self.policy.as_deref() {
            None => PoolPolicy::default(),
            Some(name) => PoolPolicy::from_wire(name).ok_or_else(|| {
                Error::invalid("pool.policy must be \"evict-oldest\" or \"deny-new\"")
            })?,
        };
        // A limit past usize is past every project's limit too.
        let limit = self.limit.map(|k| usize::try_from(k).unwrap_or(usize::MAX));
        Ok(PoolRequest { policy, limit })
    }
}

impl ClaimBody<'_> {
    /// The same body asking for a place in the user's pool (`self`'s slot must be the
    /// default one).
    #[must_use]
    pub fn with_pool(mut self, pool: &PoolRequest) -> Self {
        self.pool = Some(pool.into());
        self
    }

    /// The claim, and the pool it asks for when it does.
    ///
    /// # Errors
    ///
    /// `InvalidParams` when the body names both a slot and a pool, or a pool whose policy is
    /// unknown.
    pub fn into_claim(mut self) -> Result<(ClaimInput, Option<PoolRequest>), Error> {
        let pool = match self.pool.take() {
            None => None,
            Some(_) if !self.slot.is_empty() => {
                return Err(Error::invalid(
                    "slot and pool are exclusive: a pooled claim names the user, and the pool picks the slot",
                ));
            }
            Some(pool) => Some(pool.into_request()?),
        };
        Ok((self.into(), pool))
    }
}

/// `owner` inside a claim: `region` and `cluster` may be omitted (read as empty); exactly
/// one of `endpoint` (kicks are POSTed there) and `node` (kicks are pushed over the node's
/// kick stream, [`crate::push`]) names how the session is kicked. Each is read as empty when
/// omitted and omitted when empty; the arbiter's validation refuses both or neither.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerBody<'a> {
    /// The owner's region; empty when omitted.
    #[serde(borrow, default)]
    pub region: Cow<'a, str>,
    /// The owner's cluster; empty when omitted.
    #[serde(borrow, default)]
    pub cluster: Cow<'a, str>,
    /// The URL that receives kicks for this session; empty for a node owner.
    #[serde(borrow, default, skip_serializing_if = "str::is_empty")]
    pub endpoint: Cow<'a, str>,
    /// The node whose kick stream receives kicks for this session; empty for an endpoint
    /// owner.
    #[serde(borrow, default, skip_serializing_if = "str::is_empty")]
    pub node: Cow<'a, str>,
}

/// `POST /v1/current` body: `{"project","env","uid","slot"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBody<'a> {
    /// The key's project.
    #[serde(borrow)]
    pub project: Cow<'a, str>,
    /// The key's environment.
    #[serde(borrow)]
    pub env: Cow<'a, str>,
    /// The key's user id.
    #[serde(deserialize_with = "crate::integer::i64")]
    pub uid: i64,
    /// The key's slot; `""` (the default slot) when omitted, and omitted when `""`, so a
    /// default-slot request is byte for byte what it was before slots.
    #[serde(borrow, default, skip_serializing_if = "str::is_empty")]
    pub slot: Cow<'a, str>,
}

/// `POST /v1/sessions` body: `{"project","env","uid","limit"?,"after"?}`, one user across all
/// its slots: at most `limit` sessions (1 to 1000, default 100) whose slot sorts after `after`
/// (from the first when absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserBody<'a> {
    /// The user's project.
    #[serde(borrow)]
    pub project: Cow<'a, str>,
    /// The user's environment.
    #[serde(borrow)]
    pub env: Cow<'a, str>,
    /// The user's id.
    #[serde(deserialize_with = "crate::integer::i64")]
    pub uid: i64,
    /// The most sessions to answer; the server's default (100) when absent.
    #[serde(
        default,
        deserialize_with = "crate::integer::option_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub limit: Option<u64>,
    /// Answer the sessions whose slot sorts after this one: the `next` of the previous page.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Cow<'a, str>>,
}

impl<'a> From<&'a UserKey> for UserBody<'a> {
    fn from(user: &'a UserKey) -> Self {
        Self {
            project: Cow::Borrowed(&user.project),
            env: Cow::Borrowed(&user.env),
            uid: user.uid,
            limit: None,
            after: None,
        }
    }
}

impl From<UserBody<'_>> for UserKey {
    fn from(body: UserBody<'_>) -> Self {
        UserKey::new(body.project.into_owned(), body.env.into_owned(), body.uid)
    }
}

/// `POST /v1/sessions` answer: `{"sessions":[{"slot","gen","owner"}, …],"next"?}`, one page
/// of the user's online sessions sorted by slot; `[]` for none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionsAnswer {
    /// One entry per slot that holds a session.
    pub sessions: Vec<SessionEntry>,
    /// When more sessions remain: the last entry's slot, the next request's `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `POST /v1/release` body: `{"project","env","uid","slot"?,"gen","reason"?}`. `reason` may be
/// omitted or `null`; a malformed one is refused and a well-formed one the server does not know
/// reads as none ([`ReleaseReason::from_wire`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody<'a> {
    /// The key's project.
    #[serde(borrow)]
    pub project: Cow<'a, str>,
    /// The key's environment.
    #[serde(borrow)]
    pub env: Cow<'a, str>,
    /// The key's user id.
    #[serde(deserialize_with = "crate::integer::i64")]
    pub uid: i64,
    /// The key's slot; `""` (the default slot) when omitted, and omitted when `""`, so a
    /// default-slot request is byte for byte what it was before slots.
    #[serde(borrow, default, skip_serializing_if = "str::is_empty")]
    pub slot: Cow<'a, str>,
    /// The generation being released (`gen` on the wire).
    #[serde(rename = "gen", deserialize_with = "crate::integer::i64")]
    pub generation: i64,
    /// Why the node released the session; omitted when none (a plain logout).
    #[serde(
        default,
        deserialize_with = "release_reason",
        serialize_with = "release_reason_name",
        skip_serializing_if = "Option::is_none"
    )]
    pub reason: Option<ReleaseReason>,
}

/// Writes a release's `reason` as its wire name (only called when there is one).
#[allow(
    clippy::ref_option,
    clippy::trivially_copy_pass_by_ref,
    reason = "the signature serde's serialize_with calls"
)]
fn release_reason_name<S: serde::Serializer>(
    reason: &Option<ReleaseReason>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(reason.map_or("", ReleaseReason::as_str))
}

/// Reads a release's `reason`: absent or `null` is none, a string goes through
/// [`ReleaseReason::from_wire`].
fn release_reason<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<ReleaseReason>, D::Error> {
    let name = Option::<Cow<'de, str>>::deserialize(deserializer)?;
    name.map_or(Ok(None), |name| {
        // The path names the field: `reason: must be a token …`.
        ReleaseReason::from_wire(&name).map_err(|_| serde::de::Error::custom(ReleaseReason::RULE))
    })
}

/// `POST /v1/release` answer: `{"released": bool}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseAnswer {
    /// The record was the released generation and is now a tombstone.
    pub released: bool,
}

/// `POST /v1/logout` body: `{"project","env","uid","slot"?,"reason"?}`, an admin logout of the key's
/// current session. `reason` may be omitted or `null`; the arbiter checks it
/// ([`unique_core::ValidationLimits::check_logout_reason`]). The answer is
/// [`unique_core::LogoutOutcome`]: `{"released","gen","kicked","kick_detail"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogoutBody<'a> {
    /// The key's project.
    #[serde(borrow)]
    pub project: Cow<'a, str>,
    /// The key's environment.
    #[serde(borrow)]
    pub env: Cow<'a, str>,
    /// The key's user id.
    #[serde(deserialize_with = "crate::integer::i64")]
    pub uid: i64,
    /// The key's slot; `""` (the default slot) when omitted, and omitted when `""`, so a
    /// default-slot request is byte for byte what it was before slots.
    #[serde(borrow, default, skip_serializing_if = "str::is_empty")]
    pub slot: Cow<'a, str>,
    /// Why, for the user (the kick's `message`); omitted when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Cow<'a, str>>,
}

impl<'a> From<&'a LogoutInput> for LogoutBody<'a> {
    fn from(input: &'a LogoutInput) -> Self {
        let KeyBody {
            project,
            env,
            uid,
            slot,
        } = KeyBody::from(&input.key);
        Self {
            project,
            env,
            uid,
            slot,
            reason: input.reason.as_deref().map(Cow::Borrowed),
        }
    }
}

impl From<LogoutBody<'_>> for LogoutInput {
    fn from(body: LogoutBody<'_>) -> Self {
        let LogoutBody {
            project,
            env,
            uid,
            slot,
            reason,
        } = body;
        LogoutInput {
            key: KeyBody {
                project,
                env,
                uid,
                slot,
            }
            .into(),
            reason: reason.map(Cow::into_owned),
        }
    }
}

/// `POST /v1/logout/all` body: `{"project","env","uid","reason"?}`, read into
/// [`unique_core::UserLogoutInput`]; `reason` as [`LogoutBody`]'s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserLogoutBody<'a> {
    /// The user's project.
    #[serde(borrow)]
    pub project: Cow<'a, str>,
    /// The user's environment.
    #[serde(borrow)]
    pub env: Cow<'a, str>,
    /// The user's id.
    #[serde(deserialize_with = "crate::integer::i64")]
    pub uid: i64,
    /// Why, for the user (each kick's `message`); omitted when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Cow<'a, str>>,
}

impl<'a> From<&'a UserLogoutInput> for UserLogoutBody<'a> {
    fn from(input: &'a UserLogoutInput) -> Self {
        Self {
            project: Cow::Borrowed(&input.user.project),
            env: Cow::Borrowed(&input.user.env),
            uid: input.user.uid,
            reason: input.reason.as_deref().map(Cow::Borrowed),
        }
    }
}

impl From<UserLogoutBody<'_>> for UserLogoutInput {
    fn from(body: UserLogoutBody<'_>) -> Self {
        UserLogoutInput {
            user: UserKey::new(body.project.into_owned(), body.env.into_owned(), body.uid),
            reason: body.reason.map(Cow::into_owned),
        }
    }
}

/// `POST /v1/current/batch` body: `{"keys": [{"project","env","uid"}, …]}`, at most
/// [`MAX_BATCH_KEYS`] keys, which may mix projects and envs and repeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchBody<'a> {
    /// The keys to read, answered in this order.
    #[serde(borrow)]
    pub keys: Vec<KeyBody<'a>>,
}

impl<'a> BatchBody<'a> {
    /// The body reading `keys`.
    pub fn new(keys: &'a [Key]) -> Self {
        Self {
            keys: keys.iter().map(KeyBody::from).collect(),
        }
    }

    /// The keys, refused with `InvalidParams` when there are more than [`MAX_BATCH_KEYS`].
    pub fn into_keys(self) -> Result<Vec<Key>, Error> {
        if self.keys.len() > MAX_BATCH_KEYS {
            return Err(Error::invalid(format!(
                "keys: at most {MAX_BATCH_KEYS} per batch, got {}",
                self.keys.len()
            )));
        }
        Ok(self.keys.into_iter().map(Key::from).collect())
    }
}

/// `POST /v1/current/batch` answer: `{"views": [...]}`, one per requested key, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchAnswer {
    /// Each key's view, or why that key alone could not be read.
    pub views: Vec<BatchView>,
}

/// One key of a [`BatchAnswer`]: its view (`{"gen","owner","exists"}`, as `/v1/current`
/// answers) or its error (`{"error","message"}`, as the error body; today only a corrupt
/// stored owner, `unavailable`). A failure of the whole batch is an error answer instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BatchView {
    /// This key could not be read. Listed first: read leniently, a view could otherwise
    /// swallow an error object.
    Failed {
        /// What kind of failure.
        error: ErrorCode,
        /// A lower-case fragment for people.
        message: String,
    },
    /// The key's self-eviction baseline.
    View(CurrentAnswer),
}

impl BatchView {
    /// The wire form of one result of [`unique_core::Arbiter::current_batch`].
    pub fn from_result(result: &Result<CurrentView, Error>) -> Self {
        match result {
            Ok(view) => Self::View(view.clone().into()),
            Err(e) => {
                let body = crate::ErrorBody::from_error(e);
                Self::Failed {
                    error: body.error,
                    message: body.message.to_owned(),
                }
            }
        }
    }

    /// Back to a result: `invalid_params` → `InvalidParams`, `throttled` → `Throttled`,
    /// any other code → `Unavailable`, each with the message.
    pub fn into_result(self) -> Result<CurrentView, Error> {
        match self {
            Self::View(view) => Ok(view.into()),
            Self::Failed { error, message } => Err(match error {
                ErrorCode::InvalidParams => Error::invalid(message),
                ErrorCode::Throttled => Error::Throttled,
                _ => Error::unavailable(message),
            }),
        }
    }
}

impl<'a> From<&'a ClaimInput> for ClaimBody<'a> {
    fn from(input: &'a ClaimInput) -> Self {
        let KeyBody {
            project,
            env,
            uid,
            slot,
        } = KeyBody::from(&input.key);
        // The login time is the arbiter's to stamp: never sent.
        let Owner {
            region,
            cluster,
            endpoint,
            node,
            since: _,
        } = &input.owner;
        Self {
            project,
            env,
            uid,
            slot,
            owner: OwnerBody {
                region: Cow::Borrowed(region),
                cluster: Cow::Borrowed(cluster),
                endpoint: Cow::Borrowed(endpoint),
                node: Cow::Borrowed(node),
            },
            claim_id: Cow::Borrowed(&input.claim_id),
            pool: None,
        }
    }
}

impl From<ClaimBody<'_>> for ClaimInput {
    fn from(body: ClaimBody<'_>) -> Self {
        let ClaimBody {
            project,
            env,
            uid,
            slot,
            owner,
            claim_id,
            // Read by `into_claim`; a plain conversion is the claim on the key.
            pool: _,
        } = body;
        ClaimInput {
            key: KeyBody {
                project,
                env,
                uid,
                slot,
            }
            .into(),
            owner: Owner {
                node: owner.node.into_owned(),
                ..Owner::new(
                    owner.region.into_owned(),
                    owner.cluster.into_owned(),
                    owner.endpoint.into_owned(),
                )
            },
            claim_id: claim_id.into_owned(),
        }
    }
}

impl<'a> From<&'a Key> for KeyBody<'a> {
    fn from(key: &'a Key) -> Self {
        Self {
            project: Cow::Borrowed(&key.project),
            env: Cow::Borrowed(&key.env),
            uid: key.uid,
            slot: Cow::Borrowed(&key.slot),
        }
    }
}

impl From<KeyBody<'_>> for Key {
    fn from(body: KeyBody<'_>) -> Self {
        Key {
            project: body.project.into_owned(),
            env: body.env.into_owned(),
            uid: body.uid,
            slot: body.slot.into_owned(),
        }
    }
}

impl<'a> ReleaseBody<'a> {
    /// The body releasing `key` at `generation`.
    pub fn new(key: &'a Key, generation: i64) -> Self {
        let KeyBody {
            project,
            env,
            uid,
            slot,
        } = KeyBody::from(key);
        Self {
            project,
            env,
            uid,
            slot,
            generation,
            reason: None,
        }
    }

    /// The same body, telling the server why.
    #[must_use]
    pub fn with_reason(mut self, reason: Option<ReleaseReason>) -> Self {
        self.reason = reason;
        self
    }

    /// The key and the generation to release (the reason is the public field).
    pub fn into_parts(self) -> (Key, i64) {
        let Self {
            project,
            env,
            uid,
            slot,
            generation,
            reason: _,
        } = self;
        let key = KeyBody {
            project,
            env,
            uid,
            slot,
        };
        (key.into(), generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    #[test]
    fn a_pooled_claim_reads_its_pool_and_refuses_a_slot_beside_it() {
        let read = |body: &str| crate::parse_claim(body.as_bytes()).and_then(ClaimBody::into_claim);
        let head =
            r#"{"project":"p","env":"e","uid":1,"owner":{"endpoint":"http://h"},"claim_id":"c""#;
        let (input, pool) = read(&format!(r#"{head},"pool":{{}}}}"#)).unwrap();
        assert_eq!(
            (input.key.slot.as_str(), pool),
            ("", Some(PoolRequest::default()))
        );
        let (_, pool) = read(&format!(
            r#"{head},"pool":{{"policy":"deny-new","limit":3}}}}"#
        ))
        .unwrap();
        let deny = PoolRequest {
            policy: PoolPolicy::DenyNew,
            limit: Some(3),
        };
        assert_eq!(pool, Some(deny));
        assert_eq!(read(&format!("{head}}}")).unwrap().1, None);
        for (body, message) in [
            (
                format!(r#"{head},"slot":"pc","pool":{{}}}}"#),
                "invalid params: slot and pool are exclusive",
            ),
            (
                format!(r#"{head},"pool":{{"policy":"evict"}}}}"#),
                r#"invalid params: pool.policy must be "evict-oldest" or "deny-new""#,
            ),
            (
                format!(r#"{head},"pool":{{"limit":-1}}}}"#),
                "invalid params: pool.limit: ",
            ),
            (
                format!(r#"{head},"pool":{{"size":2}}}}"#),
                "invalid params: pool.size: unknown field `size`",
            ),
            // The document types each as its value alone: null is a wrong type, not omitted.
            (
                format!(r#"{head},"pool":null}}"#),
                "invalid params: pool: invalid type: null",
            ),
            (
                format!(r#"{head},"pool":{{"policy":null}}}}"#),
                "invalid params: pool.policy: invalid type: null",
            ),
            (
                format!(r#"{head},"pool":{{"limit":null}}}}"#),
                "invalid params: pool.limit: ",
            ),
        ] {
            let e = read(&body).unwrap_err();
            assert!(e.to_string().starts_with(message), "{body}: {e}");
        }
        // A client's body carries the pool, and reads back as it was.
        let input = ClaimInput {
            key: Key::new("p", "e", 1),
            owner: Owner::new("", "", "http://h"),
            claim_id: "c".into(),
        };
        let body = serde_json::to_vec(&ClaimBody::from(&input).with_pool(&deny)).unwrap();
        let (back, pool) = crate::parse_claim(&body).unwrap().into_claim().unwrap();
        assert_eq!((back, pool), (input, Some(deny)));
    }

    fn key() -> Key {
        Key::new("game", "prod", 42)
    }

    fn input() -> ClaimInput {
        ClaimInput {
            key: key(),
            owner: Owner::new("", "c1", "http://h:1/k?x=1"),
            claim_id: "cid".into(),
        }
    }

    #[test]
    fn claim_body_is_exact() {
        let input = input();
        assert_eq!(
            serde_json::to_string(&ClaimBody::from(&input)).unwrap(),
            r#"{"project":"game","env":"prod","uid":42,"owner":{"region":"","cluster":"c1","endpoint":"http://h:1/k?x=1"},"claim_id":"cid"}"#
        );
    }

    #[test]
    fn key_and_release_bodies_are_exact() {
        let k = key();
        assert_eq!(
            serde_json::to_string(&KeyBody::from(&k)).unwrap(),
            r#"{"project":"game","env":"prod","uid":42}"#
        );
        assert_eq!(
            serde_json::to_string(&ReleaseBody::new(&k, 7)).unwrap(),
            r#"{"project":"game","env":"prod","uid":42,"gen":7}"#
        );
        assert_eq!(
            serde_json::to_string(&ReleaseAnswer { released: true }).unwrap(),
            r#"{"released":true}"#
        );
    }

    #[test]
    fn a_release_reason_is_sent_and_read_back() {
        let k = key();
        let body = ReleaseBody::new(&k, 7).with_reason(Some(ReleaseReason::NodeDraining));
        let json = serde_json::to_string(&body).unwrap();
        assert_eq!(
            json,
            r#"{"project":"game","env":"prod","uid":42,"gen":7,"reason":"node-draining"}"#
        );
        assert_eq!(parse::<ReleaseBody>(json.as_bytes()).unwrap(), body);
        // null and a well-formed name this version does not know read as none.
        for reason in ["null", r#""node-rebooting""#] {
            let json =
                format!(r#"{{"project":"game","env":"prod","uid":42,"gen":7,"reason":{reason}}}"#);
            assert_eq!(parse::<ReleaseBody>(json.as_bytes()).unwrap().reason, None);
        }
        for reason in [
            r#""""#,
            r#""Node-Draining""#,
            r#""node draining""#,
            "1",
            "[]",
        ] {
            let json =
                format!(r#"{{"project":"game","env":"prod","uid":42,"gen":7,"reason":{reason}}}"#);
            let error = parse::<ReleaseBody>(json.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(error.contains("reason"), "{reason}: {error}");
        }
    }

    #[test]
    fn requests_round_trip() {
        let input = input();
        let json = serde_json::to_vec(&ClaimBody::from(&input)).unwrap();
        assert_eq!(ClaimInput::from(parse::<ClaimBody>(&json).unwrap()), input);

        let k = key();
        let json = serde_json::to_vec(&KeyBody::from(&k)).unwrap();
        assert_eq!(Key::from(parse::<KeyBody>(&json).unwrap()), k);

        let json = serde_json::to_vec(&ReleaseBody::new(&k, 7)).unwrap();
        assert_eq!(parse::<ReleaseBody>(&json).unwrap().into_parts(), (k, 7));
    }

    #[test]
    fn strings_borrow_from_the_body_unless_escaped() {
        let body = br#"{"project":"game","env":"pr\"od","uid":1}"#;
        let parsed = parse::<KeyBody>(body).unwrap();
        assert!(matches!(parsed.project, Cow::Borrowed("game")));
        assert!(matches!(parsed.env, Cow::Owned(ref s) if s == "pr\"od"));
    }

    #[test]
    fn owner_region_and_cluster_default_to_empty() {
        let body = br#"{"project":"p","env":"e","uid":1,"owner":{"endpoint":"http://h/k"},"claim_id":"c"}"#;
        let input = ClaimInput::from(parse::<ClaimBody>(body).unwrap());
        assert_eq!(input.owner, Owner::new("", "", "http://h/k"));
    }

    #[test]
    fn batch_bodies_are_exact_and_round_trip() {
        let keys = [key(), Key::new("chat", "dev", 7)];
        let json = serde_json::to_string(&BatchBody::new(&keys)).unwrap();
        assert_eq!(
            json,
            r#"{"keys":[{"project":"game","env":"prod","uid":42},{"project":"chat","env":"dev","uid":7}]}"#
        );
        let read = parse::<BatchBody>(json.as_bytes()).unwrap().into_keys();
        assert_eq!(read.unwrap(), keys);
        let too_many = vec![key(); MAX_BATCH_KEYS + 1];
        let json = serde_json::to_vec(&BatchBody::new(&too_many)).unwrap();
        let err = parse::<BatchBody>(&json).unwrap().into_keys().unwrap_err();
        assert!(
            err.is_invalid_params() && err.to_string().contains("at most 100"),
            "{err}"
        );
    }

    #[test]
    fn batch_views_are_a_view_or_an_error() {
        let view = CurrentView {
            generation: 3,
            owner: Some(Owner::new("", "", "http://h/k")),
            exists: true,
        };
        let answer = BatchAnswer {
            views: vec![
                BatchView::from_result(&Ok(view.clone())),
                BatchView::from_result(&Err(Error::unavailable("stored owner is corrupt"))),
            ],
        };
        let json = serde_json::to_string(&answer).unwrap();
        assert_eq!(
            json,
            r#"{"views":[{"gen":3,"owner":{"endpoint":"http://h/k"},"exists":true},{"error":"unavailable","message":"stored owner is corrupt"}]}"#
        );
        let back: BatchAnswer = serde_json::from_str(&json).unwrap();
        let mut results = back.views.into_iter().map(BatchView::into_result);
        assert_eq!(results.next().unwrap().unwrap(), view);
        assert!(results.next().unwrap().unwrap_err().is_unavailable());
        // An error never reads as a view (which would look like an absent key and evict).
        let odd: BatchView =
            serde_json::from_str(r#"{"error":"throttled","message":"m","gen":0,"exists":false}"#)
                .unwrap();
        assert!(odd.into_result().unwrap_err().is_throttled());
    }

    #[test]
    fn logout_bodies_are_exact_and_round_trip() {
        let with = LogoutInput {
            key: key(),
            reason: Some("chargeback \"42\"".into()),
        };
        let json = serde_json::to_string(&LogoutBody::from(&with)).unwrap();
        assert_eq!(
            json,
            r#"{"project":"game","env":"prod","uid":42,"reason":"chargeback \"42\""}"#
        );
        assert_eq!(
            LogoutInput::from(parse::<LogoutBody>(json.as_bytes()).unwrap()),
            with
        );
        let without = LogoutInput {
            key: key(),
            reason: None,
        };
        let json = serde_json::to_string(&LogoutBody::from(&without)).unwrap();
        assert_eq!(json, r#"{"project":"game","env":"prod","uid":42}"#);
        assert_eq!(
            LogoutInput::from(parse::<LogoutBody>(json.as_bytes()).unwrap()),
            without
        );
        let null = br#"{"project":"game","env":"prod","uid":42,"reason":null}"#;
        assert_eq!(
            LogoutInput::from(parse::<LogoutBody>(null).unwrap()),
            without
        );
    }

    #[test]
    fn logout_all_bodies_are_exact_round_trip_and_refuse_a_slot() {
        let with = UserLogoutInput {
            user: UserKey::new("game", "prod", 42),
            reason: Some("chargeback".into()),
        };
        let json = serde_json::to_string(&UserLogoutBody::from(&with)).unwrap();
        assert_eq!(
            json,
            r#"{"project":"game","env":"prod","uid":42,"reason":"chargeback"}"#
        );
        assert_eq!(
            UserLogoutInput::from(parse::<UserLogoutBody>(json.as_bytes()).unwrap()),
            with
        );
        let null = br#"{"project":"game","env":"prod","uid":42,"reason":null}"#;
        assert_eq!(
            UserLogoutInput::from(parse::<UserLogoutBody>(null).unwrap()).reason,
            None
        );
        // All of the user's sessions: a slot is not a field of this body.
        let slot = br##"{"project":"game","env":"prod","uid":42,"slot":"#1"}"##;
        let e = parse::<UserLogoutBody>(slot).unwrap_err();
        assert!(e.to_string().contains("unknown field `slot`"), "{e}");
    }

    #[test]
    fn logout_bodies_refuse_what_other_requests_refuse() {
        for (body, needle) in [
            (
                &br#"{"project":"p","env":"e","uid":1,"device":"a"}"#[..],
                "unknown field `device`",
            ),
            (
                br#"{"project":"p","env":"e","uid":1,"slot":5}"#,
                "slot: invalid type",
            ),
            (
                br#"{"project":"p","env":"e","uid":1,"reason":5}"#,
                "reason: invalid type",
            ),
            (
                br#"{"project":"p","env":"e","reason":"r"}"#,
                "missing field `uid`",
            ),
            (
                br#"{"project":"p","env":"e","uid":"1"}"#,
                "uid: invalid type",
            ),
            (b"{", "malformed json"),
        ] {
            let e = parse::<LogoutBody>(body).unwrap_err();
            assert!(
                e.is_invalid_params() && e.to_string().contains(needle),
                "{}: {e}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn slots_ride_every_key_body_and_only_when_not_default() {
        let slotted = key().with_slot("pc");
        let input = ClaimInput {
            key: slotted.clone(),
            ..input()
        };
        let json = serde_json::to_string(&ClaimBody::from(&input)).unwrap();
        assert!(json.contains(r#""uid":42,"slot":"pc","owner""#), "{json}");
        assert_eq!(
            ClaimInput::from(crate::parse_claim(json.as_bytes()).unwrap()),
            input
        );
        let json = serde_json::to_vec(&KeyBody::from(&slotted)).unwrap();
        assert_eq!(Key::from(parse::<KeyBody>(&json).unwrap()), slotted);
        let json = serde_json::to_vec(&ReleaseBody::new(&slotted, 3)).unwrap();
        assert_eq!(
            parse::<ReleaseBody>(&json).unwrap().into_parts(),
            (slotted.clone(), 3)
        );
        let logout = LogoutInput {
            key: slotted.clone(),
            reason: None,
        };
        let json = serde_json::to_vec(&LogoutBody::from(&logout)).unwrap();
        assert_eq!(
            LogoutInput::from(parse::<LogoutBody>(&json).unwrap()),
            logout
        );
        let keys = [slotted, key()];
        let json = serde_json::to_string(&BatchBody::new(&keys)).unwrap();
        assert_eq!(
            json,
            r#"{"keys":[{"project":"game","env":"prod","uid":42,"slot":"pc"},{"project":"game","env":"prod","uid":42}]}"#
        );
        assert_eq!(
            parse::<BatchBody>(json.as_bytes())
                .unwrap()
                .into_keys()
                .unwrap(),
            keys
        );
        let explicit_default = br#"{"project":"game","env":"prod","uid":42,"slot":""}"#;
        assert_eq!(
            Key::from(parse::<KeyBody>(explicit_default).unwrap()),
            key()
        );
    }

    #[test]
    fn sessions_bodies_are_exact() {
        let user = UserKey::new("game", "prod", 42);
        let json = serde_json::to_string(&UserBody::from(&user)).unwrap();
        assert_eq!(json, r#"{"project":"game","env":"prod","uid":42}"#);
        assert_eq!(
            UserKey::from(parse::<UserBody>(json.as_bytes()).unwrap()),
            user
        );
        let e = parse::<UserBody>(br#"{"project":"p","env":"e","uid":1,"slot":"pc"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `slot`"), "{e}");
        let answer = SessionsAnswer {
            sessions: vec![SessionEntry {
                slot: "pc".into(),
                generation: 3,
                owner: Owner::new("", "", "http://h/k"),
            }],
            next: None,
        };
        let json = serde_json::to_string(&answer).unwrap();
        assert_eq!(
            json,
            r#"{"sessions":[{"slot":"pc","gen":3,"owner":{"endpoint":"http://h/k"}}]}"#
        );
        assert_eq!(
            serde_json::from_str::<SessionsAnswer>(&json).unwrap(),
            answer
        );
        let paged = SessionsAnswer {
            next: Some("pc".into()),
            ..answer
        };
        assert!(
            serde_json::to_string(&paged)
                .unwrap()
                .ends_with(r#","next":"pc"}"#)
        );
    }

    #[test]
    fn sessions_pages_take_a_limit_and_an_after() {
        let body =
            parse::<UserBody>(br#"{"project":"p","env":"e","uid":1,"limit":1e2,"after":""}"#)
                .unwrap();
        assert_eq!((body.limit, body.after.as_deref()), (Some(100), Some("")));
        for bad in [
            &br#"{"project":"p","env":"e","uid":1,"limit":-1}"#[..],
            br#"{"project":"p","env":"e","uid":1,"limit":2.5}"#,
            br#"{"project":"p","env":"e","uid":1,"limit":null}"#,
            br#"{"project":"p","env":"e","uid":1,"after":7}"#,
        ] {
            assert!(
                parse::<UserBody>(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn integer_fields_take_integral_floats_and_refuse_fractions() {
        let k = key();
        let float = br#"{"project":"game","env":"prod","uid":42.0}"#;
        assert_eq!(Key::from(parse::<KeyBody>(float).unwrap()), k);
        let user = br#"{"project":"game","env":"prod","uid":4.2e1}"#;
        assert_eq!(
            UserKey::from(parse::<UserBody>(user).unwrap()),
            UserKey::new("game", "prod", 42)
        );
        let release = br#"{"project":"game","env":"prod","uid":42,"gen":-7.0}"#;
        assert_eq!(parse::<ReleaseBody>(release).unwrap().into_parts(), (k, -7));
        let claim = br#"{"project":"game","env":"prod","uid":42.0,"owner":{"endpoint":"http://h:1/k?x=1","cluster":"c1"},"claim_id":"cid"}"#;
        assert_eq!(
            ClaimInput::from(crate::parse_claim(claim).unwrap()),
            input()
        );
        for (body, needle) in [
            (
                &br#"{"project":"p","env":"e","uid":1.5}"#[..],
                "uid: invalid type: floating point `1.5`",
            ),
            (
                br#"{"project":"p","env":"e","uid":9.3e18}"#,
                "uid: invalid value: floating point",
            ),
        ] {
            let e = parse::<KeyBody>(body).unwrap_err();
            assert!(e.to_string().contains(needle), "{e}");
        }
        let e = parse::<LogoutBody>(br#"{"project":"p","env":"e","uid":0.5}"#).unwrap_err();
        assert!(e.to_string().contains("uid: invalid type"), "{e}");
    }

    #[test]
    fn answers_are_read_leniently() {
        let answer: ReleaseAnswer =
            serde_json::from_str(r#"{"released":false,"later":1}"#).unwrap();
        assert!(!answer.released);
    }
}
