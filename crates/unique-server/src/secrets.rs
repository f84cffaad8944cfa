//! The secret files: `--auth-tokens` and `--kick-signing-keys`, read the same way at
//! startup and on every reload, owner-only or refused (the rule and the read are
//! [`unique_arbiter_http::secret_file`]'s, which the `unique` CLI reads them through too).

use std::path::Path;

use unique_arbiter_http::secret_file::{SecretFileError, read_owner_only};
use unique_arbiter_http::{PeerSecret, Tokens};
use unique_kick_http::SigningKeys;

/// The `--auth-tokens` file, checked and parsed; the error starts with the flag's name.
pub(crate) fn load_tokens(path: &Path) -> Result<Tokens, String> {
    let text = read_secret(path, "tokens").map_err(|e| format!("--auth-tokens: {e}"))?;
    Tokens::parse(&text).map_err(|e| format!("--auth-tokens: {e}"))
}

/// The `--auth-tokens` file as a reload reads it: as [`load_tokens`], but a file listing no
/// token is the empty set (every caller refused), so the last token can be revoked.
pub(crate) fn reload_tokens(path: &Path) -> Result<Tokens, String> {
    let text = read_secret(path, "tokens").map_err(|e| format!("--auth-tokens: {e}"))?;
    Tokens::parse_allowing_none(&text).map_err(|e| format!("--auth-tokens: {e}"))
}

/// The `--kick-signing-keys` file, checked and parsed; the error starts with the flag's name.
pub(crate) fn load_signing_keys(path: &Path) -> Result<SigningKeys, String> {
    let text =
        read_secret(path, "signing keys").map_err(|e| format!("--kick-signing-keys: {e}"))?;
    SigningKeys::parse(&text).map_err(|e| format!("--kick-signing-keys: {e}"))
}

/// The `--peer-secret-file` file, checked and parsed; the error starts with the flag's name.
pub(crate) fn load_peer_secret(path: &Path) -> Result<PeerSecret, String> {
    let text =
        read_secret(path, "the peer secret").map_err(|e| format!("--peer-secret-file: {e}"))?;
    PeerSecret::parse(&text).map_err(|e| format!("--peer-secret-file: {e}"))
}

/// The text of the secret file at `path` (holding `what`), once its mode shows no one but
/// its owner may read or write it.
fn read_secret(path: &Path, what: &str) -> Result<String, String> {
    match read_owner_only(path) {
        Ok(file) => Ok(file.text),
        Err(SecretFileError::Read(e)) => {
            Err(format!("cannot read {what} from {}: {e}", path.display()))
        }
        Err(refused) => Err(refused.to_string()),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const TOKENS: &str = r#"{"tokens": [{"name": "game", "token": "secret-token-0123456789", "projects": ["game"]}]}"#;
    const KEY: &str = "secret-key-0123456789abcdef0123456789abcdef";

    fn write(dir: &Path, name: &str, text: &str, mode: u32) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn both_files_are_refused_when_open_to_others_and_read_when_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = write(dir.path(), "tokens.json", TOKENS, 0o644);
        let keys = write(dir.path(), "kick.keys", KEY, 0o620);
        let refused = load_tokens(&tokens).unwrap_err();
        assert!(refused.starts_with("--auth-tokens: refusing "), "{refused}");
        assert!(
            refused.contains("mode 0644") && refused.contains("chmod 600"),
            "{refused}"
        );
        let refused = load_signing_keys(&keys).unwrap_err();
        assert!(
            refused.starts_with("--kick-signing-keys: refusing "),
            "{refused}"
        );
        assert!(refused.contains("mode 0620"), "{refused}");
        assert!(!refused.contains(KEY), "{refused}");

        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(load_tokens(&tokens).unwrap().len(), 1);
        assert_eq!(load_signing_keys(&keys).unwrap().len(), 1);
    }

    #[test]
    fn a_link_is_judged_by_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = write(dir.path(), "kick.keys", KEY, 0o644);
        let link = dir.path().join("current.keys");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(load_signing_keys(&link).unwrap_err().contains("mode 0644"));
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(load_signing_keys(&link).is_ok());
    }

    #[test]
    fn unreadable_and_invalid_files_name_the_flag_and_never_a_secret() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        let refused = load_tokens(&missing).unwrap_err();
        assert!(
            refused.starts_with("--auth-tokens: cannot read tokens from "),
            "{refused}"
        );
        let refused = load_signing_keys(&missing).unwrap_err();
        assert!(
            refused.starts_with("--kick-signing-keys: cannot read signing keys from "),
            "{refused}"
        );
        let bad = write(dir.path(), "bad.json", "{\"tokens\": [", 0o600);
        assert!(load_tokens(&bad).unwrap_err().contains("not valid"));
        let short = write(dir.path(), "short.keys", "short-secret\n", 0o600);
        let refused = load_signing_keys(&short).unwrap_err();
        assert!(
            refused.contains("line 1") && !refused.contains("short-secret"),
            "{refused}"
        );
    }
}
