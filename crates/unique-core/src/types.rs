//! Domain types shared by every crate: keys, owners, snapshots and outcomes.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::recent::RecentClaims;

/// The identity one session is arbitrated for: `(project, env, uid, slot)`.
///
/// Different `(project, env)` pairs never interfere for the same uid, and neither do
/// different slots of one user: a login on slot `"mobile"` never kicks slot `"pc"`. The
/// default slot is `""`, which is exactly the key before slots existed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    /// Tenant (game, app). 1..=64 bytes by default, no `#`, no control characters.
    pub project: String,
    /// Environment within the project (`prod`, `staging`, …). Same rules as `project`.
    pub env: String,
    /// User id, ≥ 1.
    pub uid: i64,
    /// The device slot: `""` (the default) or 1..=64 bytes by default without `#` or
    /// control characters. Omitted on the wire when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub slot: String,
}

impl Key {
    /// Builds a key on the default slot. Validation happens in the
    /// [`Arbiter`](crate::Arbiter), not here.
    pub fn new(project: impl Into<String>, env: impl Into<String>, uid: i64) -> Self {
        Self {
            project: project.into(),
            env: env.into(),
            uid,
            slot: String::new(),
        }
    }

    /// The same user's key on `slot` (`""` is the default slot).
    #[must_use]
    pub fn with_slot(mut self, slot: impl Into<String>) -> Self {
        self.slot = slot.into();
        self
    }

    /// The user this key belongs to, whatever its slot.
    pub fn user(&self) -> UserKey {
        UserKey::new(self.project.clone(), self.env.clone(), self.uid)
    }
}

/// `project#env#uid` on the default slot, `project#env#uid#slot` on any other: the
/// storage partition key. Unambiguous because `#` is forbidden in `project`, `env` and
/// `slot`, and the default slot's form is exactly the key before slots existed, so old
/// records are the default slot's. Every slot of a user sorts in one byte range after
/// its [`UserKey`]'s form (see [`UserKey::slot_range`]).
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}#{}", self.project, self.env, self.uid)?;
        if !self.slot.is_empty() {
            write!(f, "#{}", self.slot)?;
        }
        Ok(())
    }
}

/// One user, `(project, env, uid)`, across all of its slots: what
/// [`Store::list_sessions`](crate::Store::list_sessions) lists.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UserKey {
    /// Tenant, as in [`Key::project`].
    pub project: String,
    /// Environment, as in [`Key::env`].
    pub env: String,
    /// User id, as in [`Key::uid`].
    pub uid: i64,
}

impl UserKey {
    /// Builds a user key. Validation happens in the [`Arbiter`](crate::Arbiter).
    pub fn new(project: impl Into<String>, env: impl Into<String>, uid: i64) -> Self {
        Self {
            project: project.into(),
            env: env.into(),
            uid,
        }
    }

    /// This user's key on `slot` (`""` is the default slot).
    pub fn key(&self, slot: impl Into<String>) -> Key {
        Key {
            project: self.project.clone(),
            env: self.env.clone(),
            uid: self.uid,
            slot: slot.into(),
        }
    }

    /// The half-open byte range `[start, end)` of the partition keys of this user's
    /// non-default slots: `project#env#uid#` up to `project#env#uid$` (`$` is the byte
    /// after `#`). With the default slot's key (`project#env#uid`, this user's
    /// [`Display`](fmt::Display)) it is every record of the user, which an ordered store
    /// reads in one range scan. The range holds no other user's key: the uid's digits end
    /// at the `#`, and `#` is forbidden in `project` and `env`.
    pub fn slot_range(&self) -> (String, String) {
        let user = self.to_string();
        (format!("{user}#"), format!("{user}$"))
    }

    /// The slot of a partition key in this user's [`slot_range`](Self::slot_range), or of
    /// the default slot's key (`""`); `None` for any other key.
    pub fn slot_of<'k>(&self, partition_key: &'k str) -> Option<&'k str> {
        let rest = partition_key
            .strip_prefix(self.project.as_str())?
            .strip_prefix('#')?
            .strip_prefix(self.env.as_str())?
            .strip_prefix('#')?;
        let uid = self.uid.to_string();
        let rest = rest.strip_prefix(uid.as_str())?;
        if rest.is_empty() {
            return Some("");
        }
        rest.strip_prefix('#').filter(|slot| !slot.is_empty())
    }
}

/// `project#env#uid`: the default slot's partition key.
impl fmt::Display for UserKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}#{}", self.project, self.env, self.uid)
    }
}

/// One online session of a user, as [`Store::list_sessions`](crate::Store::list_sessions)
/// lists it (`unique_wire::SessionEntry` on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSession {
    /// The session's slot (`""` for the default slot).
    pub slot: String,
    /// The session's gen.
    pub generation: i64,
    /// Where the session lives.
    pub owner: Owner,
}

/// One page of a user's online sessions ([`Arbiter::sessions_page`](crate::Arbiter::sessions_page)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionsPage {
    /// The sessions, sorted by slot (the default slot `""` first).
    pub sessions: Vec<UserSession>,
    /// The last listed slot when more sessions remain: the next page's `after`.
    pub next: Option<String>,
}

/// Where a session lives: the node's region, cluster, and how it is kicked: an `endpoint`
/// the server POSTs kicks to, or a `node` id whose kick stream the server pushes kicks over
/// (`docs/design.md#push-kicks`). A claiming owner names exactly one of the two.
///
/// Stored as JSON. Every field is optional in JSON and omitted when empty;
/// unknown fields are ignored so older records and newer writers interoperate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Owner {
    /// Region of the node holding the session.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub region: String,
    /// Cluster of the node holding the session.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    /// Absolute `http`/`https` URL that receives kicks for this session.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub endpoint: String,
    /// The id of the node whose kick stream (`GET /v1/nodes/{node}/kicks`) receives kicks
    /// for this session; empty for an endpoint owner. 1 to 64 characters of
    /// `A-Z a-z 0-9 . _ -` when set ([`MAX_NODE_ID_CHARS`](crate::MAX_NODE_ID_CHARS)).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node: String,
    /// When the session logged in, in milliseconds since the Unix epoch by the claiming
    /// server's clock: set by the [`Arbiter`](crate::Arbiter) on a pooled claim (the oldest
    /// login is the one `evict-oldest` evicts, `docs/design.md#pooled-sessions`), `None`
    /// otherwise. Never compared by a heartbeat ([`decide_evict`](crate::decide_evict)); a
    /// value that is not a non-negative integer reads as `None`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_since"
    )]
    pub since: Option<u64>,
}

/// `since` as stored: a non-negative integer, else none (a damaged login time must not make
/// the whole owner corrupt).
fn lenient_since<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<u64>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(de)?;
    Ok(value.and_then(|v| v.as_u64()))
}

impl Owner {
    /// Builds an endpoint owner from its three parts.
    pub fn new(
        region: impl Into<String>,
        cluster: impl Into<String>,
        endpoint: impl Into<String>,
    ) -> Self {
        Self {
            region: region.into(),
            cluster: cluster.into(),
            endpoint: endpoint.into(),
            node: String::new(),
            since: None,
        }
    }

    /// Builds a node owner: kicks for its session are pushed over the kick stream node
    /// `node` holds open, and it has no endpoint.
    pub fn with_node(
        region: impl Into<String>,
        cluster: impl Into<String>,
        node: impl Into<String>,
    ) -> Self {
        Self {
            region: region.into(),
            cluster: cluster.into(),
            endpoint: String::new(),
            node: node.into(),
            since: None,
        }
    }

    /// Whether this and `other` are the same kick target: the same non-empty node, or the
    /// same non-empty endpoint (the self-replace rule of `docs/design.md#claim-steps`).
    pub fn same_kick_target(&self, other: &Owner) -> bool {
        (!self.node.is_empty() && self.node == other.node)
            || (!self.endpoint.is_empty() && self.endpoint == other.endpoint)
    }
}

/// A strongly consistent snapshot of one key's record, as read by
/// [`Store::read_owner`](crate::Store::read_owner).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerState {
    /// A record exists (a tombstone counts).
    pub exists: bool,
    /// The stored `gen`; 0 when no record exists.
    pub generation: i64,
    /// The parsed owner; `None` for a tombstone, no record, or a corrupt owner.
    pub owner: Option<Owner>,
    /// The stored owner is non-empty but not parseable as [`Owner`] (C7).
    pub owner_corrupt: bool,
    /// `None` = no `cid` attribute; `Some("")` = `cid` is the empty string (C6).
    pub claim_id: Option<String>,
    /// The record's last winning claims, the `won` attribute (C9).
    pub recent_claims: RecentClaims,
}

impl OwnerState {
    /// The state of a key that has never been written.
    pub fn absent() -> Self {
        Self::default()
    }

    /// The snapshot holds a session that a new claim must replace (owner present or corrupt).
    pub fn holds_session(&self) -> bool {
        self.owner.is_some() || self.owner_corrupt
    }

    /// The snapshot of a stored record (`exists = true`) from its attributes as a
    /// backend reads them: the one place a stored `owner` becomes `owner` and
    /// `owner_corrupt` (C7). `claim_id` is the `cid` attribute (`None`: absent, C6);
    /// `won` the `won` attribute (`None`: absent; absent or unreadable is no
    /// recent claims, C9).
    ///
    /// A record whose `gen` is 0 was never claimed (no claim writes gen 0), so
    /// it reads as [`absent`](Self::absent) and a first login may take it
    /// (see [`Fence::holds`](crate::Fence::holds)).
    pub fn from_record(
        generation: i64,
        owner: StoredOwner<'_>,
        claim_id: Option<String>,
        won: Option<&str>,
    ) -> Self {
        if generation == 0 {
            return Self::absent();
        }
        let (owner, owner_corrupt) = match owner {
            StoredOwner::Absent => (None, false),
            StoredOwner::Text(raw) => match crate::decode_owner(raw) {
                Ok(owner) => (owner, false),
                Err(()) => (None, true),
            },
            StoredOwner::NotText => (None, true),
        };
        Self {
            exists: true,
            generation,
            owner,
            owner_corrupt,
            claim_id,
            recent_claims: RecentClaims::decode(won),
        }
    }

    /// The `won` attribute a claim from this snapshot writes when `claim_id` wins
    /// `generation` (C9): these recent claims followed by the new win. A store
    /// writes it in the same atomic write as `gen`, `owner` and `cid` (C4).
    pub fn won_after(&self, claim_id: &str, generation: i64) -> String {
        self.recent_claims.after_win(claim_id, generation).encode()
    }

    /// The record as `current` reports it (C7): the same record, but a corrupt
    /// owner is a hard error, so a heartbeat keeps its session rather than
    /// evicting on a record it cannot read.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the stored owner is corrupt.
    pub fn into_current_view(self) -> Result<CurrentView, Error> {
        if self.owner_corrupt {
            return Err(Error::unavailable("stored owner is corrupt"));
        }
        Ok(CurrentView {
            generation: self.generation,
            owner: self.owner,
            exists: self.exists,
        })
    }
}

/// A record's `owner` attribute as a backend reads it, before decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredOwner<'a> {
    /// No attribute (or SQL `NULL`): a tombstone.
    Absent,
    /// A string: empty for a tombstone, else the owner's JSON — or corrupt when it
    /// is not a JSON object parseable as an [`Owner`].
    Text(&'a str),
    /// A value of another type than string: corrupt.
    NotText,
}

impl<'a> From<Option<&'a str>> for StoredOwner<'a> {
    fn from(raw: Option<&'a str>) -> Self {
        raw.map_or(Self::Absent, Self::Text)
    }
}

/// One login attempt: who claims the key, and the idempotency token of the login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimInput {
    /// The key to claim.
    pub key: Key,
    /// The new session's owner; its endpoint receives future kicks.
    pub owner: Owner,
    /// Fresh per login, identical on every retry of that login (replay idempotence, I4).
    pub claim_id: String,
}

/// The result of a successful claim (`unique_wire::ClaimAnswer` on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimOutcome {
    /// The session's fencing generation.
    pub generation: i64,
    /// The snapshot's gen when a record existed (tombstone included), else 0.
    pub prev_generation: i64,
    /// The snapshot held a session (owner present or corrupt).
    pub has_prev: bool,
    /// The previous owner, when it was parseable.
    pub prev_owner: Option<Owner>,
    /// The old session's kick was confirmed (or no kicker is configured).
    pub kicked: bool,
    /// Why the old session is only presumed offline; `None` when kicked or nothing to kick.
    pub kick_detail: Option<KickDetail>,
    /// Answered by the replay short-circuit: this claim_id already holds the key.
    pub replayed: bool,
}

/// What [`Arbiter::current`](crate::Arbiter::current) reports: the self-eviction baseline
/// (`unique_wire::CurrentAnswer` on the wire).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CurrentView {
    /// The stored gen (0 when no record).
    pub generation: i64,
    /// The online owner; `None` for a tombstone or no record.
    pub owner: Option<Owner>,
    /// A record exists.
    pub exists: bool,
}

/// Why a heartbeat decided its session must go. See [`decide_evict`](crate::decide_evict).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvictReason {
    /// Keep the session.
    None,
    /// No record exists for the key.
    NotExists,
    /// Another session holds a different gen.
    GenMismatch,
    /// The record is a tombstone: the session was released.
    OwnerEmpty,
    /// The record holds this gen but another owner: after a gen rollback (a
    /// restarted memory store, a restored backup, a failover to a lagging
    /// replica) a new login got the same gen as this session.
    OwnerChanged,
}

impl EvictReason {
    /// The stable lower-case name: `none`, `not-exists`, `gen-mismatch`, `owner-empty`,
    /// `owner-changed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::NotExists => "not-exists",
            Self::GenMismatch => "gen-mismatch",
            Self::OwnerEmpty => "owner-empty",
            Self::OwnerChanged => "owner-changed",
        }
    }
}

impl fmt::Display for EvictReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a kick tells an old session's node, POSTed as `unique_wire::KickBody`:
/// `{"project","env","uid","slot"?,"gen","reason","message"?}`, where `gen` is the gen the node must
/// yield to: a takeover announces the new session's gen (`snapshot gen + 1`); an admin
/// logout of the session at gen `g` announces `g + 1` too (see
/// `docs/design.md#admin-logout`).
///
/// `project`, `env`, `uid` and `gen` are required when reading; any other field is
/// ignored, so a field a newer arbiter adds never breaks an older receiver. The two
/// optional fields never make a kick fail: a payload without `reason` (an older server)
/// reads as [`KickReason::LoginElsewhere`], a reason this version does not know as
/// [`KickReason::Other`], and a `message` that is not a string as none.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KickPayload {
    /// Project of the key.
    pub project: String,
    /// Env of the key.
    pub env: String,
    /// Uid of the key.
    pub uid: i64,
    /// Slot of the key; omitted for the default slot (`""`), so an older receiver reads
    /// every default-slot kick as before. Not a string: the payload is refused.
    pub slot: String,
    /// The announced gen; receivers destroy only sessions with a smaller gen.
    pub generation: i64,
    /// Why the kick was sent; always written.
    pub reason: KickReason,
    /// Text for the user whose session ends (an admin logout's reason); omitted when none.
    pub message: Option<String>,
}

impl KickPayload {
    /// A kick of `key` announcing `generation`, for `reason`, without a message.
    pub fn new(key: &Key, generation: i64, reason: KickReason) -> Self {
        Self {
            project: key.project.clone(),
            env: key.env.clone(),
            uid: key.uid,
            slot: key.slot.clone(),
            generation,
            reason,
            message: None,
        }
    }

    /// The key this kick is for.
    pub fn key(&self) -> Key {
        Key::new(self.project.clone(), self.env.clone(), self.uid).with_slot(self.slot.clone())
    }
}

/// Why a kick was sent: the `reason` of a [`KickPayload`], a stable lower-case name on
/// the wire.
///
/// Read leniently, so that no reason makes a kick fail: a missing or `null` reason (a
/// payload from a server older than the field) is [`LoginElsewhere`](Self::LoginElsewhere),
/// the only kick such a server sent; a name this version does not know is
/// [`Other`](Self::Other) with that name; a value that is not a string is `Other("")`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KickReason {
    /// `login-elsewhere`: a newer login of the key took it (a claim's kick).
    #[default]
    LoginElsewhere,
    /// `admin`: an operator logged the session out (`POST /v1/logout`).
    Admin,
    /// A reason this version does not know, as sent (empty when it was not a string).
    Other(String),
}

impl KickReason {
    /// The wire name: `login-elsewhere`, `admin`, or the unknown name as sent.
    pub fn as_str(&self) -> &str {
        match self {
            Self::LoginElsewhere => "login-elsewhere",
            Self::Admin => "admin",
            Self::Other(name) => name,
        }
    }

    /// The reason a wire name stands for; [`Other`](Self::Other) for a name this version
    /// does not know.
    pub fn from_wire(name: &str) -> Self {
        match name {
            "login-elsewhere" => Self::LoginElsewhere,
            "admin" => Self::Admin,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for KickReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operator's logout of a key's current session (`POST /v1/logout`, see
/// [`Arbiter::logout`](crate::Arbiter::logout)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogoutInput {
    /// The key whose session to end.
    pub key: Key,
    /// Why, for the user: sent to the session's node as the kick's `message`. At most
    /// [`MAX_LOGOUT_REASON_CHARS`](crate::MAX_LOGOUT_REASON_CHARS) characters, not empty, no
    /// control characters.
    pub reason: Option<String>,
}

/// What an admin logout did (`unique_wire::LogoutAnswer` on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogoutOutcome {
    /// The session was online and is now a tombstone. `false` when there was no online
    /// session (no record, a tombstone), or when a newer login took the key between the
    /// logout's read and its tombstone (the newer session is never logged out): then
    /// nothing was written and nobody kicked.
    pub released: bool,
    /// The gen of the record the logout read: the logged-out session's gen when
    /// `released` (kept by the tombstone, C5); else the tombstone's gen, 0 for no record,
    /// or the gen of the session a newer login replaced meanwhile.
    pub generation: i64,
    /// The session's node confirmed the kick (or no kicker is configured). `false` when
    /// nothing was released.
    pub kicked: bool,
    /// Why a released session's kick did not confirm (`no-endpoint`, `timeout`,
    /// `connect-error`, `non-2xx`): its node is presumed offline, and the session's
    /// heartbeat evicts it (`owner-empty`). `None` when kicked or nothing was released.
    pub kick_detail: Option<KickDetail>,
}

/// An operator's logout of every online session of a user (`POST /v1/logout/all`, see
/// [`Arbiter::logout_all`](crate::Arbiter::logout_all)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserLogoutInput {
    /// The user whose sessions to end: the default slot, named slots and pool places.
    pub user: UserKey,
    /// Why, for the user: each kick's `message`, as [`LogoutInput::reason`].
    pub reason: Option<String>,
}

/// One session an [`Arbiter::logout_all`](crate::Arbiter::logout_all) found online, and what
/// its logout did (`unique_wire::SlotLogoutEntry` on the wire).
#[derive(Debug)]
pub struct SlotLogout {
    /// The session's slot (`""` for the default slot, `#i` for a pool place).
    pub slot: String,
    /// Exactly what [`Arbiter::logout`](crate::Arbiter::logout) of that slot answered.
    pub result: Result<LogoutOutcome, crate::Error>,
}

/// Why a kick did not confirm; every variant but `SelfReplaceSkipped` means
/// the old session is presumed offline (I5b).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KickDetail {
    /// The old owner is corrupt or has no endpoint.
    NoEndpoint,
    /// The old and new endpoints are equal: the node replaces its own session, no call made.
    SelfReplaceSkipped,
    /// No answer within the kick timeout.
    Timeout,
    /// The connection failed before an HTTP status arrived (refused, reset, TLS, garbled).
    ConnectError,
    /// The endpoint answered with a status outside 2xx (redirects included).
    Non2xx,
}

impl KickDetail {
    /// Every variant, in declaration order.
    pub const ALL: [KickDetail; 5] = [
        Self::NoEndpoint,
        Self::SelfReplaceSkipped,
        Self::Timeout,
        Self::ConnectError,
        Self::Non2xx,
    ];

    /// The stable wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoEndpoint => "no-endpoint",
            Self::SelfReplaceSkipped => "self-replace-skipped",
            Self::Timeout => "timeout",
            Self::ConnectError => "connect-error",
            Self::Non2xx => "non-2xx",
        }
    }

    /// Parses a wire name back; `None` for anything else.
    pub fn from_wire(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == name)
    }

    /// True for every variant except `SelfReplaceSkipped`.
    pub fn is_presumed_offline(self) -> bool {
        !matches!(self, Self::SelfReplaceSkipped)
    }
}

impl fmt::Display for KickDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_display_joins_with_hash() {
        assert_eq!(Key::new("p", "e", 42).to_string(), "p#e#42");
        assert_eq!(Key::new("p", "e", 42).with_slot("").to_string(), "p#e#42");
        assert_eq!(
            Key::new("p", "e", 42).with_slot("mobile").to_string(),
            "p#e#42#mobile"
        );
        assert_eq!(UserKey::new("p", "e", 42).to_string(), "p#e#42");
    }

    #[test]
    fn a_users_slots_fill_one_range_that_holds_no_other_user() {
        let user = UserKey::new("p", "e", 4);
        let (start, end) = user.slot_range();
        assert_eq!((start.as_str(), end.as_str()), ("p#e#4#", "p#e#4$"));
        let in_range = |pk: &str| start.as_str() <= pk && pk < end.as_str();
        for slot in ["a", "mobile", "\u{10ffff}", "$", "~~"] {
            let pk = user.key(slot).to_string();
            assert!(in_range(&pk), "{pk}");
            assert_eq!(user.slot_of(&pk), Some(slot));
        }
        assert_eq!(user.slot_of("p#e#4"), Some(""));
        assert!(!in_range("p#e#4"), "the default slot is its own point");
        for other in [
            "p#e#40", "p#e#41#a", "p#e#4", "p#e#3#a", "p#ex#4#a", "px#e#4#a",
        ] {
            assert!(!in_range(other), "{other}");
        }
        for other in [
            "p#e#40", "p#e#41#a", "p#e#4#", "p#ex#4#a", "px#e#4#a", "p#e",
        ] {
            assert_eq!(user.slot_of(other), None, "{other}");
        }
        assert_eq!(Key::new("p", "e", 4).with_slot("pc").user(), user);
        assert_eq!(user.key("pc"), Key::new("p", "e", 4).with_slot("pc"));
    }

    #[test]
    fn key_json_omits_the_default_slot() {
        let key = Key::new("p", "e", 1);
        assert_eq!(
            serde_json::to_string(&key).unwrap(),
            r#"{"project":"p","env":"e","uid":1}"#
        );
        let slotted = key.clone().with_slot("pc");
        let json = serde_json::to_string(&slotted).unwrap();
        assert_eq!(json, r#"{"project":"p","env":"e","uid":1,"slot":"pc"}"#);
        assert_eq!(serde_json::from_str::<Key>(&json).unwrap(), slotted);
    }

    #[test]
    fn owner_json_omits_empty_and_ignores_unknown() {
        let o = Owner::new("", "c1", "http://h/k");
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"cluster":"c1","endpoint":"http://h/k"}"#
        );
        let back: Owner = serde_json::from_str(r#"{"endpoint":"x","future":1}"#).unwrap();
        assert_eq!(back, Owner::new("", "", "x"));
    }

    #[test]
    fn kick_detail_names_round_trip() {
        for d in KickDetail::ALL {
            assert_eq!(KickDetail::from_wire(d.as_str()), Some(d));
        }
        assert_eq!(
            KickDetail::ALL
                .iter()
                .filter(|d| !d.is_presumed_offline())
                .collect::<Vec<_>>(),
            [&KickDetail::SelfReplaceSkipped]
        );
    }

    #[test]
    fn evict_reason_names() {
        assert_eq!(EvictReason::GenMismatch.to_string(), "gen-mismatch");
        assert_eq!(EvictReason::None.to_string(), "none");
        assert_eq!(EvictReason::NotExists.to_string(), "not-exists");
        assert_eq!(EvictReason::OwnerEmpty.to_string(), "owner-empty");
    }

    #[test]
    fn stored_owner_attributes_read_back_by_c7() {
        let read = |owner: StoredOwner<'_>| {
            let state = OwnerState::from_record(4, owner, Some(String::new()), None);
            assert!(state.exists && state.generation == 4);
            assert_eq!(state.claim_id.as_deref(), Some(""));
            (state.owner, state.owner_corrupt)
        };
        assert_eq!(read(StoredOwner::Absent), (None, false));
        assert_eq!(read(StoredOwner::Text("")), (None, false));
        assert_eq!(
            read(StoredOwner::Text(r#"{"endpoint":"http://h","later":1}"#)),
            (Some(Owner::new("", "", "http://h")), false)
        );
        for corrupt in [
            StoredOwner::Text("{"),
            StoredOwner::Text("[]"),
            StoredOwner::NotText,
        ] {
            assert_eq!(read(corrupt), (None, true), "{corrupt:?}");
        }
        assert_eq!(StoredOwner::from(None), StoredOwner::Absent);
        let corrupt = OwnerState::from_record(4, StoredOwner::NotText, None, None);
        assert!(corrupt.into_current_view().unwrap_err().is_unavailable());
    }

    #[test]
    fn a_record_at_gen_0_reads_as_absent() {
        for owner in [
            StoredOwner::Absent,
            StoredOwner::Text(r#"{"endpoint":"http://h"}"#),
            StoredOwner::NotText,
        ] {
            let state = OwnerState::from_record(0, owner, Some("c".into()), Some(r#"[["c",1]]"#));
            assert_eq!(state, OwnerState::absent(), "{owner:?}");
            let view = state.into_current_view().expect("absent is readable");
            assert!(!view.exists && view.generation == 0 && view.owner.is_none());
        }
        assert!(OwnerState::from_record(1, StoredOwner::Absent, None, None).exists);
    }
}
