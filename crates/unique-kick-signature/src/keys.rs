//! [`SigningKeys`]: loading keys, signing with the first, verifying with any; [`KeyId`]: a
//! key's name for logs.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::hmac;

use crate::Rejection;
use crate::header;

/// The shortest key accepted, in bytes: the output size of SHA-256, below which HMAC-SHA256
/// is weaker than its hash.
pub const MIN_KEY_BYTES: usize = 32;

/// Why keys could not be loaded. No message ever holds a key or a part of one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key file could not be read (missing, unreadable, not UTF-8).
    #[error("cannot read signing keys from {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What reading it failed with.
        #[source]
        source: io::Error,
    },
    /// No key at all: an empty list, or a file of only blank lines and comments.
    #[error("no signing key given")]
    Empty,
    /// The key on this line (1-based) of a file or text is shorter than [`MIN_KEY_BYTES`].
    #[error("signing key on line {line} is shorter than {MIN_KEY_BYTES} bytes")]
    ShortLine {
        /// Its line number, from 1.
        line: usize,
    },
    /// The key at this position (1-based) of a list is shorter than [`MIN_KEY_BYTES`].
    #[error("signing key {position} is shorter than {MIN_KEY_BYTES} bytes")]
    Short {
        /// Its position in the list, from 1.
        position: usize,
    },
}

/// A key's public name, for logs and for telling two key files apart: the first 8 bytes of
/// HMAC-SHA256 of the fixed label `unique-kick-signature key id` under the key, shown as 16
/// lower-case hex digits.
///
/// It is a signature like any signed kick's, over a label no kick carries, so it tells
/// nothing about the key that one captured kick does not; two sides holding the same key
/// log the same id. Two different keys get the same id with a chance of about 2^-64.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId([u8; 8]);

/// What a key id is the HMAC of.
const KEY_ID_LABEL: &[u8] = b"unique-kick-signature key id";

impl KeyId {
    fn of(key: &hmac::Key) -> Self {
        let tag = hmac::sign(key, KEY_ID_LABEL);
        let mut id = [0; 8];
        id.copy_from_slice(&tag.as_ref()[..8]);
        Self(id)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// One or more HMAC-SHA256 keys: [`sign`](Self::sign) uses the first,
/// [`verify`](Self::verify) accepts a signature made with any of them.
///
/// That is how a key is rotated without refusing a single kick: give every receiver the
/// new key *after* the old one (they accept both), then make the new key first at the
/// signer (it signs with the new one), then drop the old key everywhere.
///
/// Cloning is cheap (the keys are shared). `Debug` shows how many keys there are, never a
/// key.
#[derive(Clone)]
pub struct SigningKeys {
    keys: Arc<[hmac::Key]>,
}

impl SigningKeys {
    /// Keys from bytes, first one signing. Each must be at least [`MIN_KEY_BYTES`] long.
    ///
    /// Errors: [`KeyError::Empty`] for no key, [`KeyError::Short`] for a short one.
    pub fn new<I>(keys: I) -> Result<Self, KeyError>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        Self::collect(
            keys.into_iter()
                .enumerate()
                .map(|(at, key)| (key, KeyError::Short { position: at + 1 })),
        )
    }

    /// Keys from text: one key per line, first one signing. A key is the line's bytes
    /// with the whitespace around them removed (so a key never starts or ends with
    /// whitespace), at least [`MIN_KEY_BYTES`] of them; blank lines and lines starting
    /// with `#` are skipped. `openssl rand -hex 32` prints a good key.
    ///
    /// Errors: [`KeyError::Empty`] when no line holds a key, [`KeyError::ShortLine`] for a
    /// short one.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        Self::collect(
            text.lines()
                .enumerate()
                .map(|(at, line)| (line.trim(), at + 1))
                .filter(|(line, _)| !line.is_empty() && !line.starts_with('#'))
                .map(|(key, line)| (key, KeyError::ShortLine { line })),
        )
    }

    /// Keys from the file at `path`, in the format of [`parse`](Self::parse).
    ///
    /// Errors: [`KeyError::Read`], and those of [`parse`](Self::parse).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, KeyError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Checks every key's length, then keeps them all.
    fn collect<K: AsRef<[u8]>>(
        keys: impl Iterator<Item = (K, KeyError)>,
    ) -> Result<Self, KeyError> {
        let keys = keys
            .map(|(key, short)| {
                let key = key.as_ref();
                if key.len() < MIN_KEY_BYTES {
                    Err(short)
                } else {
                    Ok(hmac::Key::new(hmac::HMAC_SHA256, key))
                }
            })
            .collect::<Result<Arc<[_]>, _>>()?;
        if keys.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(Self { keys })
    }

    /// The id of every key, in the order of the file or list: the first is the signing
    /// key's ([`signing_id`](Self::signing_id)).
    pub fn ids(&self) -> Vec<KeyId> {
        self.keys.iter().map(KeyId::of).collect()
    }

    /// The id of the key [`sign`](Self::sign) signs with (the first).
    pub fn signing_id(&self) -> KeyId {
        KeyId::of(&self.keys[0])
    }

    /// How many keys there are (at least one).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Always `false`: a `SigningKeys` holds at least one key (the constructors refuse
    /// none). Here for symmetry with [`len`](Self::len).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The `Unique-Signature` header value for `body` sent at `now`:
    /// `t=<unix seconds>,v1=<hex of HMAC-SHA256(first key, "<t>.<body>")>`.
    ///
    /// Sign the exact bytes that go on the wire: any change to them, even whitespace,
    /// makes the signature fail. A `now` before 1970 counts as 0.
    pub fn sign(&self, body: &[u8], now: SystemTime) -> String {
        let timestamp = unix_seconds(now).to_string();
        let tag = hmac::sign(&self.keys[0], &signed_message(&timestamp, body));
        header::format(&timestamp, tag.as_ref())
    }

    /// Checks a request's `Unique-Signature` header (`None` when it has none) against its
    /// exact body bytes: some `v1` entry must be the HMAC of `"<t>.<body>"` under one of the
    /// keys (compared in constant time), and `t` must be within `window` of `now` either way
    /// (in whole seconds; the boundary is inside).
    ///
    /// Authenticity is checked before freshness, so [`Rejection::Stale`] and
    /// [`Rejection::Future`] only ever describe genuine signatures: they point at a replay
    /// or a clock, never at a key.
    ///
    /// Errors: [`Rejection::Missing`], [`Rejection::Malformed`],
    /// [`Rejection::BadSignature`], [`Rejection::Stale`], [`Rejection::Future`], checked in
    /// that order.
    pub fn verify(
        &self,
        header: Option<&str>,
        body: &[u8],
        now: SystemTime,
        window: Duration,
    ) -> Result<(), Rejection> {
        let parsed = header::parse(header.ok_or(Rejection::Missing)?)?;
        let message = signed_message(parsed.timestamp, body);
        let genuine = parsed.tags.iter().any(|tag| {
            self.keys
                .iter()
                .any(|key| hmac::verify(key, &message, tag).is_ok())
        });
        if !genuine {
            return Err(Rejection::BadSignature);
        }
        let (now, window) = (unix_seconds(now), window.as_secs());
        if parsed.seconds < now.saturating_sub(window) {
            Err(Rejection::Stale)
        } else if parsed.seconds > now.saturating_add(window) {
            Err(Rejection::Future)
        } else {
            Ok(())
        }
    }
}

impl fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKeys")
            .field("count", &self.keys.len())
            .finish_non_exhaustive()
    }
}

/// What is signed: the timestamp as sent, a dot, the body.
fn signed_message(timestamp: &str, body: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(timestamp.len() + 1 + body.len());
    message.extend_from_slice(timestamp.as_bytes());
    message.push(b'.');
    message.extend_from_slice(body);
    message
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DEFAULT_WINDOW;

    const OLD: &str = "old-key-0123456789abcdef0123456789abcdef";
    const NEW: &str = "new-key-0123456789abcdef0123456789abcdef";
    const BODY: &[u8] = br#"{"project":"game","env":"prod","uid":42,"gen":7}"#;

    fn keys(list: &[&str]) -> SigningKeys {
        SigningKeys::new(list).unwrap()
    }

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    const NOW: u64 = 1_700_000_000;

    fn verify(receiver: &SigningKeys, header: Option<&str>, body: &[u8]) -> Result<(), Rejection> {
        receiver.verify(header, body, at(NOW), DEFAULT_WINDOW)
    }

    #[test]
    fn a_signature_verifies_and_has_the_webhook_shape() {
        let k = keys(&[NEW]);
        let header = k.sign(BODY, at(NOW));
        let (t, v1) = header.split_once(',').unwrap();
        assert_eq!(t, "t=1700000000");
        let hex = v1.strip_prefix("v1=").unwrap();
        assert_eq!(hex.len(), 64);
        assert!(
            hex.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(verify(&k, Some(&header), BODY), Ok(()));
    }

    #[test]
    fn the_tag_is_hmac_sha256_of_timestamp_dot_body() {
        // Computed independently: the message is "<t>.<body>" and nothing else.
        let k = keys(&[NEW]);
        let expected = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, NEW.as_bytes()),
            b"1700000000.{}",
        );
        assert_eq!(
            k.sign(b"{}", at(NOW)),
            header::format("1700000000", expected.as_ref())
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_refused() {
        let k = keys(&[NEW]);
        assert_eq!(verify(&k, None, BODY), Err(Rejection::Missing));
        assert_eq!(verify(&k, Some(""), BODY), Err(Rejection::Malformed));
        assert_eq!(verify(&k, Some("t=1"), BODY), Err(Rejection::Malformed));
    }

    #[test]
    fn a_wrong_key_is_a_bad_signature() {
        let header = keys(&[OLD]).sign(BODY, at(NOW));
        assert_eq!(
            verify(&keys(&[NEW]), Some(&header), BODY),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn a_changed_body_or_timestamp_is_a_bad_signature() {
        let k = keys(&[NEW]);
        let header = k.sign(BODY, at(NOW));
        let changed = br#"{"project":"game","env":"prod","uid":42,"gen":8}"#;
        assert_eq!(
            verify(&k, Some(&header), changed),
            Err(Rejection::BadSignature)
        );
        let spaced = br#"{"project":"game","env":"prod","uid":42,"gen":7} "#;
        assert_eq!(
            verify(&k, Some(&header), spaced),
            Err(Rejection::BadSignature)
        );
        // Moving the timestamp (to dodge the window) breaks the tag.
        let moved = header.replace("t=1700000000", "t=1700000001");
        assert_eq!(verify(&k, Some(&moved), BODY), Err(Rejection::BadSignature));
        // So does writing the same number differently: the digits as sent are signed.
        let padded = header.replace("t=1700000000", "t=01700000000");
        assert_eq!(
            verify(&k, Some(&padded), BODY),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn stale_and_future_timestamps_are_refused_at_the_window_and_accepted_inside() {
        let k = keys(&[NEW]);
        let window = DEFAULT_WINDOW.as_secs();
        for (signed_at, expected) in [
            (NOW - window - 1, Err(Rejection::Stale)),
            (NOW - window, Ok(())),
            (NOW, Ok(())),
            (NOW + window, Ok(())),
            (NOW + window + 1, Err(Rejection::Future)),
        ] {
            let header = k.sign(BODY, at(signed_at));
            assert_eq!(
                verify(&k, Some(&header), BODY),
                expected,
                "signed at {signed_at}"
            );
        }
    }

    #[test]
    fn the_window_is_configurable() {
        let k = keys(&[NEW]);
        let header = k.sign(BODY, at(NOW - 10));
        let check = |window| k.verify(Some(&header), BODY, at(NOW), window);
        assert_eq!(check(Duration::from_secs(9)), Err(Rejection::Stale));
        assert_eq!(check(Duration::from_secs(10)), Ok(()));
        assert_eq!(
            k.verify(Some(&header), BODY, at(NOW - 20), Duration::from_secs(9)),
            Err(Rejection::Future)
        );
    }

    #[test]
    fn a_forged_stale_header_is_reported_as_forged() {
        let header = keys(&[OLD]).sign(BODY, at(NOW - 3600));
        assert_eq!(
            verify(&keys(&[NEW]), Some(&header), BODY),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn any_v1_entry_may_match() {
        let k = keys(&[NEW]);
        let good = k.sign(BODY, at(NOW));
        let (t, v1) = good.split_once(',').unwrap();
        let forged = keys(&[OLD]).sign(BODY, at(NOW));
        let forged_v1 = forged.split_once(',').unwrap().1;
        let header = format!("{t},{forged_v1},{v1}");
        assert_eq!(verify(&k, Some(&header), BODY), Ok(()));
        let only_forged = format!("{t},{forged_v1},{forged_v1}");
        assert_eq!(
            verify(&k, Some(&only_forged), BODY),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn rotation_signs_with_the_first_key_and_accepts_any() {
        // Signed with the old key; a receiver holding new + old accepts.
        let by_old = keys(&[OLD]).sign(BODY, at(NOW));
        assert_eq!(verify(&keys(&[NEW, OLD]), Some(&by_old), BODY), Ok(()));
        // A receiver holding only the new key refuses.
        assert_eq!(
            verify(&keys(&[NEW]), Some(&by_old), BODY),
            Err(Rejection::BadSignature)
        );
        // A signer holding [new, old] signs with new: a receiver with only old refuses.
        let by_rotated = keys(&[NEW, OLD]).sign(BODY, at(NOW));
        assert_eq!(verify(&keys(&[NEW]), Some(&by_rotated), BODY), Ok(()));
        assert_eq!(
            verify(&keys(&[OLD]), Some(&by_rotated), BODY),
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn a_clock_before_1970_counts_as_zero() {
        let k = keys(&[NEW]);
        let header = k.sign(BODY, UNIX_EPOCH - Duration::from_secs(5));
        assert!(header.starts_with("t=0,v1="), "{header}");
    }

    #[test]
    fn keys_from_bytes_need_one_and_each_at_least_32_bytes() {
        assert!(SigningKeys::new([[7u8; 32]]).is_ok());
        assert!(matches!(
            SigningKeys::new(Vec::<&[u8]>::new()),
            Err(KeyError::Empty)
        ));
        let short = "x".repeat(MIN_KEY_BYTES - 1);
        assert!(matches!(
            SigningKeys::new([NEW, short.as_str()]),
            Err(KeyError::Short { position: 2 })
        ));
    }

    #[test]
    fn text_skips_comments_and_blank_lines_and_trims() {
        let text = format!("# signing key\n\n  {NEW}  \r\n   # old one\n{OLD}\n");
        let k = SigningKeys::parse(&text).unwrap();
        assert_eq!(format!("{k:?}"), "SigningKeys { count: 2, .. }");
        // The first key signs, the trimmed bytes are the key.
        let by_new = keys(&[NEW]).sign(BODY, at(NOW));
        assert_eq!(k.sign(BODY, at(NOW)), by_new);
        let by_old = keys(&[OLD]).sign(BODY, at(NOW));
        assert_eq!(verify(&k, Some(&by_old), BODY), Ok(()));
    }

    #[test]
    fn text_errors_name_the_line_and_never_the_key() {
        let secret = "short-secret-value";
        let err = SigningKeys::parse(&format!("# c\n{NEW}\n\n{secret}\n")).unwrap_err();
        assert!(matches!(err, KeyError::ShortLine { line: 4 }), "{err:?}");
        let shown = format!("{err} {err:?}");
        assert_eq!(
            err.to_string(),
            "signing key on line 4 is shorter than 32 bytes"
        );
        assert!(!shown.contains(secret), "{shown}");

        for empty in ["", "\n\n", "# only a comment\n   \n"] {
            let err = SigningKeys::parse(empty).unwrap_err();
            assert!(matches!(err, KeyError::Empty), "{empty:?}: {err:?}");
        }
    }

    #[test]
    fn debug_never_shows_a_key() {
        let k = keys(&[NEW, OLD]);
        let shown = format!("{k:?} {k:#?}");
        assert!(
            !shown.contains("new-key") && !shown.contains("old-key"),
            "{shown}"
        );
    }

    #[test]
    fn key_ids_name_each_key_without_showing_it() {
        let k = keys(&[NEW, OLD]);
        let ids = k.ids();
        assert_eq!(ids.len(), 2);
        assert_eq!(k.len(), 2);
        assert!(!k.is_empty());
        assert_eq!(k.signing_id(), ids[0]);
        assert_ne!(ids[0], ids[1]);
        // The same key gives the same id wherever it is loaded, in any position.
        assert_eq!(keys(&[OLD]).signing_id(), ids[1]);
        // The id is the first 8 bytes of the HMAC of the label, in hex.
        let tag = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, NEW.as_bytes()),
            KEY_ID_LABEL,
        );
        let expected = tag.as_ref()[..8]
            .iter()
            .fold(String::new(), |hex, b| hex + &format!("{b:02x}"));
        let shown = ids[0].to_string();
        assert_eq!(shown, expected);
        assert_eq!(shown.len(), 16);
        assert_eq!(format!("{:?}", ids[0]), format!("KeyId({expected})"));
        for id in &ids {
            let shown = format!("{id} {id:?}");
            assert!(!shown.contains("key-0123"), "{shown}");
        }
    }

    #[test]
    fn keys_load_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kick.keys");
        std::fs::write(&path, format!("# rotated 2025-01\n{NEW}\n{OLD}\n")).unwrap();
        let k = SigningKeys::from_file(&path).unwrap();
        let by_old = keys(&[OLD]).sign(BODY, at(NOW));
        assert_eq!(verify(&k, Some(&by_old), BODY), Ok(()));

        std::fs::write(&path, "# nothing yet\n").unwrap();
        assert!(matches!(
            SigningKeys::from_file(&path),
            Err(KeyError::Empty)
        ));

        let missing = dir.path().join("missing.keys");
        let err = SigningKeys::from_file(&missing).unwrap_err();
        assert!(matches!(err, KeyError::Read { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("cannot read signing keys from "),
            "{err}"
        );

        std::fs::write(&path, [0xff, 0xfe, b'\n']).unwrap();
        assert!(matches!(
            SigningKeys::from_file(&path),
            Err(KeyError::Read { .. })
        ));
    }
}
