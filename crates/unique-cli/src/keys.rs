//! `keys new`: a fresh kick signing key, printed or appended to a key file.
//!
//! A key file holds one key per line; the first signs, every key verifies
//! (`unique-kick-signature`). A new key is appended as the file's last line, which is the
//! first step of a rotation without a refused kick: every receiver holding the file accepts
//! kicks signed with it, and the signer keeps signing with the key that stays first. Putting
//! it first at the signer (`unique-server --kick-signing-keys`) is the second step, once
//! every node has it; see the README.

use std::path::Path;

use unique_kick_signature::SigningKeys;

use crate::exit::Failure;
use crate::secret;

/// What `keys new` made and did.
#[derive(Debug)]
pub(crate) enum Made {
    /// Printed, not written.
    Printed { key: String, id: String },
    /// Written to a file.
    Written {
        id: String,
        /// How many keys the file holds now.
        keys: usize,
        /// The id of the key that signs (the file's first).
        signing_id: String,
        created: bool,
    },
}

impl Made {
    /// stdout: the key alone (so `unique keys new` can feed another tool), or the id of the
    /// key written.
    pub(crate) fn text(&self) -> String {
        match self {
            Self::Printed { key, .. } => key.clone(),
            Self::Written { id, .. } => id.clone(),
        }
    }

    /// `{"key","id"}`, or `{"id","file","keys","signing_id"}` when written.
    pub(crate) fn json(&self, file: Option<&Path>) -> String {
        let value = match self {
            Self::Printed { key, id } => serde_json::json!({"key": key, "id": id}),
            Self::Written {
                id,
                keys,
                signing_id,
                ..
            } => serde_json::json!({
                "id": id,
                "file": file.map(|f| f.display().to_string()),
                "keys": keys,
                "signing_id": signing_id,
            }),
        };
        value.to_string()
    }

    /// For stderr: what the key is, and what was done.
    pub(crate) fn note(&self, file: Option<&Path>) -> String {
        match (self, file) {
            (Self::Printed { id, .. }, _) => format!(
                "a kick signing key, id {id}: put it in an owner-only file (chmod 600), or \
                 let `unique keys new --file PATH` write it"
            ),
            (
                Self::Written {
                    id, created: true, ..
                },
                Some(file),
            ) => format!(
                "created {} (owner-only) with key {id}: it signs and verifies",
                file.display()
            ),
            (
                Self::Written {
                    id,
                    keys,
                    signing_id,
                    ..
                },
                file,
            ) => format!(
                "appended key {id} to {} (key {keys} of {keys}): receivers holding the file \
                 accept it; the first key, {signing_id}, still signs (move the new key to \
                 the first line of the server's file, then SIGHUP it, once every node has it)",
                file.map_or_else(String::new, |f| f.display().to_string())
            ),
        }
    }
}

/// Makes a key; with `file`, appends it to that key file (created owner-only if missing).
pub(crate) fn new(file: Option<&Path>) -> Result<Made, Failure> {
    let key = secret::random_hex()?;
    let id = SigningKeys::new([key.as_str()])
        .map_err(|e| Failure::file(format!("a fresh key was refused: {e}")))?
        .signing_id()
        .to_string();
    let Some(path) = file else {
        return Ok(Made::Printed { key, id });
    };
    let shown = path.display();
    let existing = secret::read_existing(path)?;
    let mut text = existing
        .as_ref()
        .map(|e| e.text.clone())
        .unwrap_or_default();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&key);
    text.push('\n');
    // The whole new file must load as the server and the receivers load it; the message
    // names the line at fault, never a key.
    let keys =
        SigningKeys::parse(&text).map_err(|e| Failure::file(format!("refusing {shown}: {e}")))?;
    secret::replace(path, &text, existing.as_ref().and_then(|e| e.mode))?;
    Ok(Made::Written {
        id,
        keys: keys.len(),
        signing_id: keys.signing_id().to_string(),
        created: existing.is_none(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_printed_key_is_64_hex_digits_that_load_as_a_key() {
        let Made::Printed { key, id } = new(None).unwrap() else {
            panic!("no file, so printed")
        };
        assert_eq!(key.len(), 64);
        let keys = SigningKeys::parse(&key).unwrap();
        assert_eq!(keys.signing_id().to_string(), id);
    }

    #[test]
    fn keys_are_appended_and_the_first_keeps_signing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kick.keys");
        let Made::Written {
            id: first, created, ..
        } = new(Some(&path)).unwrap()
        else {
            panic!("written")
        };
        assert!(created);
        let Made::Written {
            id: second,
            keys,
            signing_id,
            created,
        } = new(Some(&path)).unwrap()
        else {
            panic!("written")
        };
        assert!(!created);
        assert_eq!((keys, signing_id.as_str()), (2, first.as_str()));
        let loaded = SigningKeys::from_file(&path).unwrap();
        let ids: Vec<String> = loaded.ids().iter().map(ToString::to_string).collect();
        assert_eq!(ids, [first, second]);
    }

    #[test]
    fn a_file_with_a_bad_key_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kick.keys");
        secret::replace(&path, "# old\nshort-key\n", None).unwrap();
        let refused = new(Some(&path)).unwrap_err();
        assert!(refused.message.contains("line 2"), "{refused:?}");
        assert!(!refused.message.contains("short-key"), "{refused:?}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# old\nshort-key\n"
        );
    }
}
