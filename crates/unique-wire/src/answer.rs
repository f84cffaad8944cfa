//! The answers of the session routes, as they travel: `gen` for a generation, kick details
//! by their stable names. Core's outcome types carry no wire names; each answer here
//! converts to and from its outcome, and the claim answer, the one body on the hot path,
//! also has a writer of its own ([`write_claim_answer`]).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use unique_core::{
    ClaimOutcome, CurrentView, KickDetail, LogoutOutcome, Owner, PooledOutcome, UserSession,
};

/// `POST /v1/claim` answer:
/// `{"gen","prev_gen","has_prev","prev_owner","kicked","kick_detail","replayed"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimAnswer {
    /// The session's fencing generation.
    #[serde(rename = "gen")]
    pub generation: i64,
    /// The snapshot's gen when a record existed (tombstone included), else 0.
    #[serde(rename = "prev_gen")]
    pub prev_generation: i64,
    /// The snapshot held a session.
    pub has_prev: bool,
    /// The previous owner, when it was parseable.
    pub prev_owner: Option<Owner>,
    /// The old session's kick was confirmed (or no kicker is configured).
    pub kicked: bool,
    /// Why the old session is only presumed offline, by its wire name.
    #[serde(with = "detail_name")]
    pub kick_detail: Option<KickDetail>,
    /// Answered by the replay short-circuit.
    pub replayed: bool,
}

mirror!(ClaimAnswer <=> ClaimOutcome {
    generation,
    prev_generation,
    has_prev,
    prev_owner,
    kicked,
    kick_detail,
    replayed,
});

/// `POST /v1/current` answer, and a view of `/v1/current/batch`: `{"gen","owner","exists"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentAnswer {
    /// The stored gen (0 when no record).
    #[serde(rename = "gen")]
    pub generation: i64,
    /// The online owner; `null` for a tombstone or no record.
    pub owner: Option<Owner>,
    /// A record exists.
    pub exists: bool,
}

mirror!(CurrentAnswer <=> CurrentView { generation, owner, exists });

/// `POST /v1/logout` answer: `{"released","gen","kicked","kick_detail"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogoutAnswer {
    /// The session was online and is now a tombstone.
    pub released: bool,
    /// The gen of the record the logout read.
    #[serde(rename = "gen")]
    pub generation: i64,
    /// The session's node confirmed the kick.
    pub kicked: bool,
    /// Why a released session's kick did not confirm, by its wire name.
    #[serde(with = "detail_name")]
    pub kick_detail: Option<KickDetail>,
}

mirror!(LogoutAnswer <=> LogoutOutcome { released, generation, kicked, kick_detail });

/// `POST /v1/logout/all` answer: `{"sessions":[{"slot","released","gen","kicked",
/// "kick_detail"}, …]}`, one entry per session the user's listing found online, in listing
/// order (by slot, the default slot first); `[]` for none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogoutAllAnswer {
    /// What the logout of each listed session did.
    pub sessions: Vec<SlotLogoutEntry>,
}

/// One entry of the `POST /v1/logout/all` answer: the slot and what its logout did, as
/// `POST /v1/logout` of that slot answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotLogoutEntry {
    /// The session's slot (`""` for the default slot, `#i` for a pool place).
    pub slot: String,
    /// The logout of the slot: `released`, `gen`, `kicked`, `kick_detail`.
    #[serde(flatten)]
    pub logout: LogoutAnswer,
}

impl SlotLogoutEntry {
    /// The entry of `slot`'s logout.
    pub fn new(slot: impl Into<String>, outcome: LogoutOutcome) -> Self {
        Self {
            slot: slot.into(),
            logout: outcome.into(),
        }
    }

    /// The slot and the logout's outcome.
    pub fn into_parts(self) -> (String, LogoutOutcome) {
        (self.slot, self.logout.into())
    }
}

/// One entry of the `POST /v1/sessions` answer: `{"slot","gen","owner"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEntry {
    /// The session's slot (`""` for the default slot).
    pub slot: String,
    /// The session's gen.
    #[serde(rename = "gen")]
    pub generation: i64,
    /// Where the session lives.
    pub owner: Owner,
}

mirror!(SessionEntry <=> UserSession { slot, generation, owner });

/// A kick detail by its stable name ([`KickDetail::as_str`]); `null` for none.
mod detail_name {
    use super::{Deserialize, Deserializer, KickDetail, Serializer};

    /// [`KickDetail::ALL`]'s names, for the error that lists them (a test keeps them equal).
    pub(super) const NAMES: [&str; 5] = [
        "no-endpoint",
        "self-replace-skipped",
        "timeout",
        "connect-error",
        "non-2xx",
    ];

    #[allow(clippy::ref_option, clippy::trivially_copy_pass_by_ref)] // serde's `with` hands a reference
    pub(super) fn serialize<S: Serializer>(
        detail: &Option<KickDetail>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match detail {
            Some(detail) => serializer.serialize_str(detail.as_str()),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<KickDetail>, D::Error> {
        let Some(name) = Option::<std::borrow::Cow<'de, str>>::deserialize(deserializer)? else {
            return Ok(None);
        };
        KickDetail::from_wire(&name)
            .map(Some)
            .ok_or_else(|| serde::de::Error::unknown_variant(&name, &NAMES))
    }
}

/// `POST /v1/claim` answer to a pooled claim (`"pool"` in the body): the claim answer on the
/// place taken plus `"slot"` (the place, `#0`, `#1`, …) and `"evicted"` (the claim took the
/// oldest login's place; the claim answer's `has_prev`, `prev_gen`, `prev_owner`, `kicked` and
/// `kick_detail` then describe the evicted session).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PooledClaimAnswer {
    /// The claim on the place, as a claim on a named slot answers it.
    #[serde(flatten)]
    pub claim: ClaimAnswer,
    /// The place taken: the slot of the session's key for every later call.
    pub slot: String,
    /// A session was evicted to make room.
    pub evicted: bool,
}

impl From<PooledOutcome> for PooledClaimAnswer {
    fn from(outcome: PooledOutcome) -> Self {
        let PooledOutcome {
            slot,
            evicted,
            claim,
        } = outcome;
        Self {
            claim: claim.into(),
            slot,
            evicted,
        }
    }
}

impl From<PooledClaimAnswer> for PooledOutcome {
    fn from(answer: PooledClaimAnswer) -> Self {
        let PooledClaimAnswer {
            claim,
            slot,
            evicted,
        } = answer;
        Self {
            slot,
            evicted,
            claim: claim.into(),
        }
    }
}

/// Appends `outcome` as its [`PooledClaimAnswer`] in serde_json's compact form: the claim
/// answer [`write_claim_answer`] writes, then `slot` and `evicted`.
pub fn write_pooled_claim_answer(out: &mut Vec<u8>, outcome: &PooledOutcome) {
    write_claim_answer(out, &outcome.claim);
    // Reopen the object the claim answer closed.
    out.pop();
    out.extend_from_slice(b",\"slot\":");
    write_str(out, &outcome.slot);
    out.extend_from_slice(b",\"evicted\":");
    write_bool(out, outcome.evicted);
    out.push(b'}');
}

/// Appends `outcome` as its [`ClaimAnswer`] in serde_json's compact form, without building
/// the answer.
///
/// serde_json spent about 1 800 instructions per claim on this body (most in its string
/// escaper); this writes the same bytes, which the tests check against serde_json itself,
/// and strings that need escaping still go through serde_json.
pub fn write_claim_answer(out: &mut Vec<u8>, outcome: &ClaimOutcome) {
    out.extend_from_slice(b"{\"gen\":");
    write_i64(out, outcome.generation);
    out.extend_from_slice(b",\"prev_gen\":");
    write_i64(out, outcome.prev_generation);
    out.extend_from_slice(b",\"has_prev\":");
    write_bool(out, outcome.has_prev);
    out.extend_from_slice(b",\"prev_owner\":");
    match &outcome.prev_owner {
        Some(owner) => write_owner(out, owner),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"kicked\":");
    write_bool(out, outcome.kicked);
    out.extend_from_slice(b",\"kick_detail\":");
    match outcome.kick_detail {
        Some(detail) => {
            // The names are fixed lower-case ASCII: nothing to escape.
            out.push(b'"');
            out.extend_from_slice(detail.as_str().as_bytes());
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"replayed\":");
    write_bool(out, outcome.replayed);
    out.push(b'}');
}

/// `Owner` skips its empty fields when serialised.
fn write_owner(out: &mut Vec<u8>, owner: &Owner) {
    out.push(b'{');
    let mut first = true;
    for (name, value) in [
        ("region", &owner.region),
        ("cluster", &owner.cluster),
        ("endpoint", &owner.endpoint),
        ("node", &owner.node),
    ] {
        if value.is_empty() {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":");
        write_str(out, value);
    }
    if let Some(since) = owner.since {
        if !first {
            out.push(b',');
        }
        out.extend_from_slice(b"\"since\":");
        out.extend_from_slice(itoa::Buffer::new().format(since).as_bytes());
    }
    out.push(b'}');
}

fn write_str(out: &mut Vec<u8>, value: &str) {
    // serde_json escapes exactly these bytes; anything else is copied as is.
    let plain = value.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\');
    if plain {
        out.push(b'"');
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a Vec cannot fail.
        serde_json::to_writer(&mut *out, value).expect("a string serialises");
    }
}

fn write_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn write_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn written(outcome: &ClaimOutcome) -> String {
        let mut out = Vec::new();
        write_claim_answer(&mut out, outcome);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn a_first_login_reads_as_documented() {
        let outcome = ClaimOutcome {
            generation: 1,
            prev_generation: 0,
            has_prev: false,
            prev_owner: None,
            kicked: false,
            kick_detail: None,
            replayed: false,
        };
        assert_eq!(
            written(&outcome),
            r#"{"gen":1,"prev_gen":0,"has_prev":false,"prev_owner":null,"kicked":false,"kick_detail":null,"replayed":false}"#
        );
    }

    #[test]
    fn kick_details_travel_by_name_and_an_unknown_name_is_refused() {
        for detail in KickDetail::ALL {
            let answer = LogoutAnswer {
                released: true,
                generation: 3,
                kicked: false,
                kick_detail: Some(detail),
            };
            let json = serde_json::to_string(&answer).unwrap();
            assert!(json.contains(&format!(r#""kick_detail":"{}""#, detail.as_str())));
            assert_eq!(serde_json::from_str::<LogoutAnswer>(&json).unwrap(), answer);
        }
        assert_eq!(detail_name::NAMES, KickDetail::ALL.map(KickDetail::as_str));
        let unknown = r#"{"released":true,"gen":3,"kicked":false,"kick_detail":"lost"}"#;
        let error = serde_json::from_str::<LogoutAnswer>(unknown).unwrap_err();
        assert!(
            error.to_string().contains("unknown variant `lost`"),
            "{error}"
        );
    }

    #[test]
    fn a_logout_answer_reads_as_documented() {
        let answer = LogoutAnswer::from(LogoutOutcome {
            released: true,
            generation: 4,
            kicked: false,
            kick_detail: Some(KickDetail::Timeout),
        });
        assert_eq!(
            serde_json::to_string(&answer).unwrap(),
            r#"{"released":true,"gen":4,"kicked":false,"kick_detail":"timeout"}"#
        );
    }

    #[test]
    fn a_logout_all_answer_reads_as_documented() {
        let answer = LogoutAllAnswer {
            sessions: vec![
                SlotLogoutEntry::new(
                    "#1",
                    LogoutOutcome {
                        released: true,
                        generation: 4,
                        kicked: false,
                        kick_detail: Some(KickDetail::Timeout),
                    },
                ),
                SlotLogoutEntry::new(
                    "mobile",
                    LogoutOutcome {
                        released: false,
                        generation: 2,
                        kicked: false,
                        kick_detail: None,
                    },
                ),
            ],
        };
        let json = serde_json::to_string(&answer).unwrap();
        assert_eq!(
            json,
            r##"{"sessions":[{"slot":"#1","released":true,"gen":4,"kicked":false,"kick_detail":"timeout"},{"slot":"mobile","released":false,"gen":2,"kicked":false,"kick_detail":null}]}"##
        );
        let back: LogoutAllAnswer = serde_json::from_str(&json).unwrap();
        assert_eq!(back, answer);
        let (slot, outcome) = back.sessions[0].clone().into_parts();
        assert_eq!((slot.as_str(), outcome.generation), ("#1", 4));
    }

    #[test]
    fn views_and_sessions_name_the_generation_gen() {
        let view = CurrentAnswer::from(CurrentView {
            generation: 7,
            owner: None,
            exists: true,
        });
        assert_eq!(
            serde_json::to_string(&view).unwrap(),
            r#"{"gen":7,"owner":null,"exists":true}"#
        );
        let entry = SessionEntry::from(UserSession {
            slot: "mobile".into(),
            generation: 2,
            owner: Owner::new("", "", "http://n"),
        });
        assert_eq!(
            serde_json::to_string(&entry).unwrap(),
            r#"{"slot":"mobile","gen":2,"owner":{"endpoint":"http://n"}}"#
        );
    }

    fn any_string() -> impl Strategy<Value = String> {
        // Plain text, the characters JSON escapes, and non-ASCII.
        prop_oneof![
            Just(String::new()),
            "[a-z0-9:/._-]{1,12}",
            "[\\x00-\\x1f\"\\\\a\u{7f}é\u{2028}😀]{1,6}",
        ]
    }

    fn any_outcome() -> impl Strategy<Value = ClaimOutcome> {
        let owner = proptest::option::of(
            (
                any_string(),
                any_string(),
                any_string(),
                any_string(),
                proptest::option::of(any::<u64>()),
            )
                .prop_map(|(region, cluster, endpoint, node, since)| Owner {
                    since,
                    node,
                    ..Owner::new(region, cluster, endpoint)
                }),
        );
        let detail = proptest::option::of(proptest::sample::select(KickDetail::ALL.to_vec()));
        (
            any::<i64>(),
            any::<i64>(),
            any::<bool>(),
            owner,
            any::<bool>(),
            detail,
            any::<bool>(),
        )
            .prop_map(
                |(
                    generation,
                    prev_generation,
                    has_prev,
                    prev_owner,
                    kicked,
                    kick_detail,
                    replayed,
                )| {
                    ClaimOutcome {
                        generation,
                        prev_generation,
                        has_prev,
                        prev_owner,
                        kicked,
                        kick_detail,
                        replayed,
                    }
                },
            )
    }

    proptest! {
        /// The writer's bytes are serde_json's for the answer, and they read back as the
        /// outcome they came from.
        #[test]
        fn identical_to_serde_json(outcome in any_outcome()) {
            let expected = serde_json::to_string(&ClaimAnswer::from(outcome.clone()))
                .expect("serialises");
            prop_assert_eq!(written(&outcome), expected.clone());
            let back: ClaimAnswer = serde_json::from_str(&expected).expect("reads back");
            prop_assert_eq!(ClaimOutcome::from(back), outcome);
        }

        /// The same for a pooled claim's answer.
        #[test]
        fn pooled_identical_to_serde_json(
            claim in any_outcome(),
            slot in "#[0-9]{1,3}",
            evicted in any::<bool>(),
        ) {
            let outcome = PooledOutcome { slot, evicted, claim };
            let expected = serde_json::to_string(&PooledClaimAnswer::from(outcome.clone()))
                .expect("serialises");
            let mut out = Vec::new();
            write_pooled_claim_answer(&mut out, &outcome);
            prop_assert_eq!(String::from_utf8(out).unwrap(), expected.clone());
            let back: PooledClaimAnswer = serde_json::from_str(&expected).expect("reads back");
            prop_assert_eq!(PooledOutcome::from(back), outcome);
        }
    }
}
