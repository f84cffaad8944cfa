//! The kick body a server POSTs to an old session's node, as it travels. Core's
//! [`KickPayload`] carries no wire names; [`encode_kick`] and [`decode_kick`] are the one
//! place its JSON is written and read, by the kicker and by every receiver.

use std::fmt;

use serde::{Deserialize, Serialize};
use unique_core::{KickPayload, KickReason};

/// `{"project","env","uid","slot"?,"gen","reason","message"?}`: a [`KickPayload`] on the wire.
///
/// `project`, `env`, `uid` and `gen` are required when reading; any other field is ignored,
/// so a field a newer arbiter adds never breaks an older receiver. `slot` is omitted for the
/// default slot and must be a string when present. The two optional fields never make a
/// kick fail: no `reason` (an older server) or `null` reads as
/// [`KickReason::LoginElsewhere`], a name this version does not know as
/// [`KickReason::Other`] with that name, a value that is not a string as `Other("")`; a
/// `message` that is not a string reads as none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KickBody {
    /// Project of the key.
    pub project: String,
    /// Env of the key.
    pub env: String,
    /// Uid of the key.
    pub uid: i64,
    /// Slot of the key; omitted for the default slot (`""`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub slot: String,
    /// The announced gen.
    #[serde(rename = "gen")]
    pub generation: i64,
    /// Why the kick was sent; always written.
    #[serde(default, with = "reason_name")]
    pub reason: KickReason,
    /// Text for the user whose session ends; omitted when none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "loose_text"
    )]
    pub message: Option<String>,
}

mirror!(KickBody <=> KickPayload { project, env, uid, slot, generation, reason, message });

/// The JSON body of a kick.
///
/// # Panics
///
/// Never: the body holds only strings, integers and a reason's name, which serialise
/// into a `Vec` without fail.
pub fn encode_kick(payload: &KickPayload) -> Vec<u8> {
    // Strings, integers and a name: serialising into a Vec cannot fail.
    serde_json::to_vec(&KickBody::from(payload.clone())).expect("a kick body serialises")
}

/// Reads a kick's JSON body, leniently as [`KickBody`] says.
///
/// # Errors
///
/// The body is not JSON, lacks `project`, `env`, `uid` or `gen`, or one of those (or
/// `slot`) has the wrong type.
pub fn decode_kick(body: &[u8]) -> Result<KickPayload, serde_json::Error> {
    serde_json::from_slice::<KickBody>(body).map(KickPayload::from)
}

/// A reason by its wire name ([`KickReason::as_str`]), read leniently.
mod reason_name {
    use super::{Loose, LooseVisitor};
    use unique_core::KickReason;

    pub(super) fn serialize<S: serde::Serializer>(
        reason: &KickReason,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(reason.as_str())
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<KickReason, D::Error> {
        Ok(match deserializer.deserialize_any(LooseVisitor)? {
            Loose::Text(name) => KickReason::from_wire(&name),
            Loose::Null => KickReason::LoginElsewhere,
            Loose::NotText => KickReason::Other(String::new()),
        })
    }
}

/// An optional text field read so that it never fails: a string is kept, anything else
/// (`null`, a number, an object) reads as none.
fn loose_text<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    Ok(match deserializer.deserialize_any(LooseVisitor)? {
        Loose::Text(text) => Some(text),
        Loose::Null | Loose::NotText => None,
    })
}

/// Any JSON value, sorted into what a lenient optional text field cares about.
enum Loose {
    Text(String),
    Null,
    NotText,
}

struct LooseVisitor;

impl<'de> serde::de::Visitor<'de> for LooseVisitor {
    type Value = Loose;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Loose, E> {
        Ok(Loose::Text(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Loose, E> {
        Ok(Loose::Text(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Loose, E> {
        Ok(Loose::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Loose, E> {
        Ok(Loose::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Loose, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Loose, E> {
        Ok(Loose::NotText)
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Loose, E> {
        Ok(Loose::NotText)
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Loose, E> {
        Ok(Loose::NotText)
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Loose, E> {
        Ok(Loose::NotText)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Loose, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Loose::NotText)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Loose, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Loose::NotText)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unique_core::Key;

    fn encoded(payload: &KickPayload) -> String {
        String::from_utf8(encode_kick(payload)).expect("utf-8")
    }

    #[test]
    fn kick_payload_carries_a_slot_only_off_the_default() {
        let key = Key::new("p", "e", 7).with_slot("pc");
        let sent = KickPayload::new(&key, 3, KickReason::LoginElsewhere);
        let json = encoded(&sent);
        assert_eq!(
            json,
            r#"{"project":"p","env":"e","uid":7,"slot":"pc","gen":3,"reason":"login-elsewhere"}"#
        );
        let back = decode_kick(json.as_bytes()).unwrap();
        assert_eq!(back.key(), key);
        assert!(
            decode_kick(r#"{"project":"p","env":"e","uid":7,"slot":5,"gen":3}"#.as_bytes())
                .is_err(),
            "a slot that is not a string never reads as the default slot"
        );
    }

    fn payload(reason: KickReason, message: Option<&str>) -> KickPayload {
        KickPayload {
            message: message.map(str::to_owned),
            ..KickPayload::new(&Key::new("p", "e", 7), 3, reason)
        }
    }

    #[test]
    fn kick_payload_uses_gen_on_the_wire_and_names_its_reason() {
        assert_eq!(
            encoded(&payload(KickReason::LoginElsewhere, None)),
            r#"{"project":"p","env":"e","uid":7,"gen":3,"reason":"login-elsewhere"}"#
        );
        assert_eq!(
            encoded(&payload(KickReason::Admin, Some("abuse \"x\""))),
            r#"{"project":"p","env":"e","uid":7,"gen":3,"reason":"admin","message":"abuse \"x\""}"#
        );
        for reason in [
            KickReason::LoginElsewhere,
            KickReason::Admin,
            KickReason::Other("maintenance".into()),
        ] {
            let sent = payload(reason.clone(), Some("m"));
            let json = encoded(&sent);
            assert_eq!(decode_kick(json.as_bytes()).unwrap(), sent);
            assert_eq!(KickReason::from_wire(reason.as_str()), reason);
            assert_eq!(reason.to_string(), reason.as_str());
        }
    }

    #[test]
    fn kick_payload_ignores_unknown_fields_and_requires_the_four() {
        let p =
            decode_kick(br#"{"project":"p","env":"e","uid":7,"gen":3,"extra":{"a":[1]}}"#).unwrap();
        assert_eq!(
            p,
            payload(KickReason::LoginElsewhere, None),
            "an older server's kick"
        );
        for (missing, json) in [
            ("project", r#"{"env":"e","uid":7,"gen":3,"extra":1}"#),
            ("env", r#"{"project":"p","uid":7,"gen":3,"extra":1}"#),
            ("uid", r#"{"project":"p","env":"e","gen":3,"extra":1}"#),
            ("gen", r#"{"project":"p","env":"e","uid":7,"extra":1}"#),
        ] {
            let err = decode_kick(json.as_bytes()).unwrap_err();
            assert!(
                err.to_string()
                    .contains(&format!("missing field `{missing}`")),
                "{json}: {err}"
            );
        }
    }

    #[test]
    fn no_reason_or_message_makes_a_kick_fail() {
        let read = |fields: &str| {
            let json = format!(r#"{{"project":"p","env":"e","uid":7,"gen":3,{fields}}}"#);
            let p = decode_kick(json.as_bytes()).unwrap_or_else(|e| panic!("{json}: {e}"));
            (p.reason, p.message)
        };
        let other = |name: &str| KickReason::Other(name.to_owned());
        for (fields, reason, message) in [
            (r#""reason":null"#, KickReason::LoginElsewhere, None),
            (
                r#""reason":"admin","message":null"#,
                KickReason::Admin,
                None,
            ),
            (r#""reason":"login""#, other("login"), None),
            (r#""reason":"""#, other(""), None),
            (r#""reason":5,"message":"m""#, other(""), Some("m")),
            (r#""reason":{"nested":[1,2,3]}"#, other(""), None),
            (r#""reason":["admin"],"message":7"#, other(""), None),
            (r#""reason":true,"message":{"a":{"b":[]}}"#, other(""), None),
            (r#""message":[1.5,"x"]"#, KickReason::LoginElsewhere, None),
        ] {
            assert_eq!(
                read(fields),
                (reason, message.map(str::to_owned)),
                "{fields}"
            );
        }
        // Still JSON: a broken value fails the whole payload, as before.
        assert!(
            decode_kick(r#"{"project":"p","env":"e","uid":7,"gen":3,"reason":{"a":}"#.as_bytes())
                .is_err()
        );
    }
}
