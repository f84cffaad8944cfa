//! Whether a kick receiver and the server that kicks it agree on signatures, read from the
//! server's `GET /v1/info` before the receiver serves: a receiver that verifies facing a
//! server that does not sign would refuse every kick (401), and one that does not verify
//! facing a server that signs has keys to use and does not.

use std::io;

use unique_kick_signature::SigningKeys;
use unique_wire::InfoAnswer;

/// `Ok` when a receiver verifying with `keys` (`None`: not verifying) agrees with the server
/// `info` describes; otherwise an [`io::ErrorKind::InvalidInput`] error naming the flag or
/// option to set.
pub(crate) fn check(keys: Option<&SigningKeys>, info: &InfoAnswer) -> io::Result<()> {
    let refused = |message: String| Err(io::Error::new(io::ErrorKind::InvalidInput, message));
    if !info.features.sessions {
        return refused(
            "the server serves leases only (unique-server --no-sessions): it logs no user in \
             and sends no kick; point the node at a server that serves sessions"
                .to_owned(),
        );
    }
    let signing = info
        .kicks
        .signing_key_id
        .as_deref()
        .or_else(|| info.kicks.key_ids.first().map(String::as_str));
    match (keys, info.kicks.signed) {
        (None, false) => Ok(()),
        (Some(_), false) => refused(
            "the server sends unsigned kicks and this kick receiver verifies signatures: it \
             would refuse every kick (401) and no session here would end on a takeover; start \
             unique-server with --kick-signing-keys FILE holding this receiver's keys, or \
             build the receiver without signing_keys (loopback only, or with \
             insecure_unsigned_kicks() where every host that can reach it is trusted)"
                .to_owned(),
        ),
        (None, true) => refused(format!(
            "the server signs kicks (key {}) and this kick receiver does not verify them: give \
             the receiver the server's --kick-signing-keys file \
             (signing_keys(SigningKeys::from_file(..)))",
            signing.unwrap_or("unnamed")
        )),
        (Some(keys), true) => {
            let ours: Vec<String> = keys.ids().iter().map(ToString::to_string).collect();
            match signing {
                Some(id) if !ours.iter().any(|our| our == id) => refused(format!(
                    "the server signs kicks with key {id}, which this kick receiver's keys ({}) \
                     do not hold: it would refuse every kick (401); give the receiver the \
                     server's --kick-signing-keys file (while rotating, the new key after the \
                     old one)",
                    ours.join(", ")
                )),
                _ => Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use unique_wire::{InfoAuth, InfoFeatures, InfoKicks, InfoLimits};

    use super::*;

    const K1: &str = "agreement-k1-0123456789abcdef0123456789";
    const K2: &str = "agreement-k2-0123456789abcdef0123456789";

    fn info(kicks: InfoKicks, sessions: bool) -> InfoAnswer {
        InfoAnswer {
            version: "0.1.0".into(),
            auth: InfoAuth { required: false },
            kicks,
            features: InfoFeatures {
                sessions,
                leases: true,
                store: None,
                push_kicks: false,
            },
            limits: InfoLimits {
                max_request_body_bytes: 1,
                max_batch_keys: 1,
                max_sessions_page: 1,
                max_slots_per_user: None,
                session_limit: Some(1),
                project_session_limits: std::collections::BTreeMap::new(),
                max_name_chars: 1,
                max_claim_id_chars: 1,
                max_endpoint_chars: 1,
                max_lease_ttl_ms: 1,
                max_lease_id_chars: 1,
            },
        }
    }

    fn signed_by(keys: &SigningKeys) -> InfoKicks {
        InfoKicks {
            signed: true,
            signing_key_id: Some(keys.signing_id().to_string()),
            key_ids: keys.ids().iter().map(ToString::to_string).collect(),
        }
    }

    fn refusal(keys: Option<&SigningKeys>, info: &InfoAnswer) -> String {
        let error = check(keys, info).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        error.to_string()
    }

    #[test]
    fn agreeing_sides_pass() {
        let k1 = SigningKeys::new([K1]).unwrap();
        let rotating = SigningKeys::new([K2, K1]).unwrap();
        check(None, &info(InfoKicks::default(), true)).unwrap();
        check(Some(&k1), &info(signed_by(&k1), true)).unwrap();
        // A receiver holding the server's signing key among others (a rotation).
        check(Some(&rotating), &info(signed_by(&k1), true)).unwrap();
    }

    #[test]
    fn each_disagreement_names_what_to_set() {
        let k1 = SigningKeys::new([K1]).unwrap();
        let k2 = SigningKeys::new([K2]).unwrap();
        let unsigned = refusal(Some(&k1), &info(InfoKicks::default(), true));
        assert!(unsigned.contains("--kick-signing-keys FILE"), "{unsigned}");
        let unverified = refusal(None, &info(signed_by(&k1), true));
        assert!(
            unverified.contains("--kick-signing-keys file")
                && unverified.contains(&k1.signing_id().to_string()),
            "{unverified}"
        );
        let other = refusal(Some(&k2), &info(signed_by(&k1), true));
        assert!(
            other.contains(&k1.signing_id().to_string())
                && other.contains(&k2.signing_id().to_string()),
            "{other}"
        );
        let leases_only = refusal(None, &info(InfoKicks::default(), false));
        assert!(leases_only.contains("--no-sessions"), "{leases_only}");
    }
}
