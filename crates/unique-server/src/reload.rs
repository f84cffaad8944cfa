//! SIGHUP rereads the secret files (`--auth-tokens`, `--kick-signing-keys`) and puts each
//! new set in force whole, without a restart and without touching a connection; it also
//! reopens the audit log (`--audit-log`), for log rotation.
//!
//! Each file is reread on its own, in the way startup reads it ([`crate::secrets`]). A file
//! that cannot be used (unreadable, open to group or others, invalid) leaves its previous
//! set in force and is logged at error level with the reason; a good one replaces the set
//! and is logged at info level with what changed: token counts and names added and removed,
//! key ids (`unique_kick_signature::KeyId`), never a token or a key. An audit log that
//! cannot be reopened stays on its current file ([`AuditFile::reopen`]).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use unique_arbiter_http::{AuditFile, SharedTokens};
use unique_kick_http::SigningKeys;

use crate::kicker::SigningKicker;
use crate::secrets;

/// The sets a reload may replace, with the file each is read from.
#[derive(Default)]
pub(crate) struct Reloader {
    tokens: Option<(PathBuf, SharedTokens)>,
    keys: Option<(PathBuf, SigningKicker)>,
    audit: Option<Arc<AuditFile>>,
}

/// What a reload did with one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The new set is in force (the audit log: reopened).
    Replaced,
    /// The file holds the set already in force.
    Unchanged,
    /// The file could not be used; the previous set stays in force (the audit log: the
    /// current file stays in use).
    Kept,
}

/// What one reload did, per file (`None`: that file is not configured).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) tokens: Option<Outcome>,
    pub(crate) keys: Option<Outcome>,
    pub(crate) audit: Option<Outcome>,
}

impl Reloader {
    /// Reloads the caller tokens of `shared` from `path`.
    pub(crate) fn tokens(mut self, path: PathBuf, shared: SharedTokens) -> Self {
        self.tokens = Some((path, shared));
        self
    }

    /// Reloads the signing keys of `kicker` from `path`.
    pub(crate) fn keys(mut self, path: PathBuf, kicker: SigningKicker) -> Self {
        self.keys = Some((path, kicker));
        self
    }

    /// Reopens the audit log `file`.
    pub(crate) fn audit(mut self, file: Arc<AuditFile>) -> Self {
        self.audit = Some(file);
        self
    }

    /// Rereads every configured file and puts each good one in force; reopens the audit log.
    pub(crate) fn reload(&self) -> Report {
        if self.tokens.is_none() && self.keys.is_none() && self.audit.is_none() {
            tracing::info!(
                "nothing to reload: no --auth-tokens, --kick-signing-keys or --audit-log"
            );
        }
        Report {
            tokens: self
                .tokens
                .as_ref()
                .map(|(path, shared)| reload_tokens(path, shared)),
            keys: self
                .keys
                .as_ref()
                .map(|(path, kicker)| reload_keys(path, kicker)),
            audit: self.audit.as_deref().map(reopen_audit),
        }
    }
}

fn reopen_audit(file: &AuditFile) -> Outcome {
    let path = file.path().display();
    match file.reopen() {
        Ok(()) => {
            tracing::info!(%path, "audit log reopened");
            Outcome::Replaced
        }
        Err(error) => {
            tracing::error!(
                %path,
                %error,
                "audit log not reopened: lines go on to the file open until now"
            );
            Outcome::Kept
        }
    }
}

fn reload_tokens(path: &Path, shared: &SharedTokens) -> Outcome {
    let old = shared.get();
    let new = match secrets::reload_tokens(path) {
        Ok(new) => new,
        Err(error) => {
            tracing::error!(
                path = %path.display(),
                %error,
                tokens = old.len(),
                "caller tokens not reloaded: the previous ones stay in force"
            );
            return Outcome::Kept;
        }
    };
    let diff = old.diff(&new);
    if diff.is_empty() {
        tracing::info!(path = %path.display(), tokens = new.len(), "caller tokens unchanged");
        return Outcome::Unchanged;
    }
    let count = new.len();
    shared.replace(new);
    if count == 0 {
        tracing::error!(
            path = %path.display(),
            previous = old.len(),
            removed = ?diff.removed,
            "caller tokens reloaded: the file lists no token, so every /v1 request is now \
             refused 401 until a reload brings one back"
        );
        return Outcome::Replaced;
    }
    tracing::info!(
        path = %path.display(),
        tokens = count,
        previous = old.len(),
        added = ?diff.added,
        removed = ?diff.removed,
        "caller tokens reloaded"
    );
    Outcome::Replaced
}

fn reload_keys(path: &Path, kicker: &SigningKicker) -> Outcome {
    let old = kicker.keys();
    let kept = |error: &str| {
        tracing::error!(
            path = %path.display(),
            %error,
            signing = %old.signing_id(),
            "kick signing keys not reloaded: the previous ones stay in force"
        );
        Outcome::Kept
    };
    let new = match secrets::load_signing_keys(path) {
        Ok(new) => new,
        Err(error) => return kept(&error),
    };
    if new.ids() == old.ids() {
        tracing::info!(path = %path.display(), signing = %new.signing_id(), "kick signing keys unchanged");
        return Outcome::Unchanged;
    }
    let (signing, ids) = (new.signing_id(), ids(&new));
    kicker.replace_keys(new);
    tracing::info!(
        path = %path.display(),
        %signing,
        keys = %ids,
        previous_signing = %old.signing_id(),
        previous_keys = %self::ids(&old),
        "kick signing keys reloaded"
    );
    Outcome::Replaced
}

/// The ids of `keys`, comma-separated, the signing key's first.
pub(crate) fn ids(keys: &SigningKeys) -> String {
    keys.ids()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The loop that reloads on each SIGHUP of `signals` (registered at the start of startup,
/// so an early SIGHUP waits for this loop instead of ending the process, SIGHUP's default);
/// spawn it. Reading the files runs on the blocking pool.
pub(crate) fn on_sighup(
    reloader: Reloader,
    #[cfg(unix)] mut hangup: tokio::signal::unix::Signal,
) -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        let reloader = Arc::new(reloader);
        async move {
            while hangup.recv().await.is_some() {
                tracing::info!("SIGHUP: rereading the secret files, reopening the audit log");
                let reloader = Arc::clone(&reloader);
                if let Err(e) = tokio::task::spawn_blocking(move || reloader.reload()).await {
                    tracing::error!(error = %e, "the reload failed; every set in force stays");
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        // No SIGHUP: the files are read at startup only.
        drop(reloader);
        std::future::pending()
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use http::HeaderMap;

    use super::*;
    use crate::kicker::KickerConfig;

    const T1: &str = "reload-token-one-0123456789";
    const T2: &str = "reload-token-two-0123456789";
    const K1: &str = "reload-key-one-0123456789abcdef0123456789";
    const K2: &str = "reload-key-two-0123456789abcdef0123456789";

    fn tokens_json(list: &[(&str, &str)]) -> String {
        let entries: Vec<String> = list
            .iter()
            .map(|(name, token)| {
                format!(r#"{{"name": "{name}", "token": "{token}", "projects": ["game"]}}"#)
            })
            .collect();
        format!(r#"{{"tokens": [{}]}}"#, entries.join(","))
    }

    /// Writes `text` to `path` with `mode`, as an operator's editor would (in place).
    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn accepts(shared: &SharedTokens, token: &str) -> bool {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        shared.get().authenticate(&headers).is_ok()
    }

    #[test]
    fn a_bad_tokens_file_keeps_the_old_set_and_a_good_one_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        write(&path, &tokens_json(&[("one", T1)]), 0o600);
        let shared = SharedTokens::new(secrets::load_tokens(&path).unwrap());
        let reloader = Reloader::default().tokens(path.clone(), shared.clone());
        let tokens_only = |tokens| Report {
            tokens: Some(tokens),
            keys: None,
            audit: None,
        };

        assert_eq!(reloader.reload(), tokens_only(Outcome::Unchanged));
        for (text, mode) in [
            ("{\"tokens\": [", 0o600),                   // invalid JSON
            (&*tokens_json(&[("two", T2)]), 0o644),      // good, but open to others
            (&*tokens_json(&[("two", "short")]), 0o600), // a bad token
        ] {
            write(&path, text, mode);
            assert_eq!(
                reloader.reload(),
                tokens_only(Outcome::Kept),
                "{text} {mode:o}"
            );
            assert!(accepts(&shared, T1) && !accepts(&shared, T2), "{text}");
        }
        std::fs::remove_file(&path).unwrap();
        assert_eq!(reloader.reload(), tokens_only(Outcome::Kept));
        assert!(accepts(&shared, T1));

        write(&path, &tokens_json(&[("one", T1), ("two", T2)]), 0o600);
        assert_eq!(reloader.reload(), tokens_only(Outcome::Replaced));
        assert!(accepts(&shared, T1) && accepts(&shared, T2));
        write(&path, &tokens_json(&[("two", T2)]), 0o400);
        assert_eq!(reloader.reload(), tokens_only(Outcome::Replaced));
        assert!(!accepts(&shared, T1) && accepts(&shared, T2));
        // No token: the last one is revoked, every caller refused.
        write(&path, r#"{"tokens": []}"#, 0o600);
        assert_eq!(reloader.reload(), tokens_only(Outcome::Replaced));
        assert!(!accepts(&shared, T1) && !accepts(&shared, T2));
    }

    #[test]
    fn a_bad_keys_file_keeps_the_old_keys_and_a_good_one_replaces_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kick.keys");
        write(&path, &format!("{K1}\n"), 0o600);
        let config = KickerConfig::default();
        let kicker =
            SigningKicker::new(&config, secrets::load_signing_keys(&path).unwrap()).unwrap();
        let reloader = Reloader::default().keys(path.clone(), kicker.clone());
        let keys_only = |keys| Report {
            tokens: None,
            keys: Some(keys),
            audit: None,
        };
        let k1 = SigningKeys::new([K1]).unwrap().signing_id();
        let k2 = SigningKeys::new([K2]).unwrap().signing_id();

        assert_eq!(reloader.reload(), keys_only(Outcome::Unchanged));
        for (text, mode) in [
            ("# nothing yet\n".to_owned(), 0o600),
            ("too-short-key\n".to_owned(), 0o600),
            (format!("{K2}\n{K1}\n"), 0o604),
        ] {
            write(&path, &text, mode);
            assert_eq!(reloader.reload(), keys_only(Outcome::Kept), "{mode:o}");
            assert_eq!(kicker.keys().ids(), [k1]);
        }
        write(&path, &format!("# rotated\n{K2}\n{K1}\n"), 0o600);
        assert_eq!(reloader.reload(), keys_only(Outcome::Replaced));
        assert_eq!(kicker.keys().ids(), [k2, k1]);
        write(&path, &format!("{K2}\n"), 0o600);
        assert_eq!(reloader.reload(), keys_only(Outcome::Replaced));
        assert_eq!(kicker.keys().ids(), [k2]);
    }

    #[test]
    fn both_files_reload_on_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let (tokens, keys) = (dir.path().join("tokens.json"), dir.path().join("kick.keys"));
        write(&tokens, &tokens_json(&[("one", T1)]), 0o600);
        write(&keys, &format!("{K1}\n"), 0o600);
        let shared = SharedTokens::new(secrets::load_tokens(&tokens).unwrap());
        let config = KickerConfig::default();
        let kicker =
            SigningKicker::new(&config, secrets::load_signing_keys(&keys).unwrap()).unwrap();
        let reloader = Reloader::default()
            .tokens(tokens.clone(), shared.clone())
            .keys(keys.clone(), kicker.clone());
        write(&tokens, "not json", 0o600);
        write(&keys, &format!("{K2}\n"), 0o600);
        let report = reloader.reload();
        assert_eq!(
            report,
            Report {
                tokens: Some(Outcome::Kept),
                keys: Some(Outcome::Replaced),
                audit: None,
            }
        );
        assert!(accepts(&shared, T1));
        assert_eq!(
            kicker.keys().signing_id(),
            SigningKeys::new([K2]).unwrap().signing_id()
        );
    }

    #[test]
    fn the_audit_log_is_reopened_and_a_failed_reopen_keeps_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        let path = logs.join("audit.log");
        let file = Arc::new(AuditFile::open(&path).unwrap());
        let reloader = Reloader::default().audit(Arc::clone(&file));
        let audit_only = |audit| Report {
            tokens: None,
            keys: None,
            audit: Some(audit),
        };
        std::fs::rename(&path, logs.join("audit.log.1")).unwrap();
        assert_eq!(reloader.reload(), audit_only(Outcome::Replaced));
        assert!(path.exists(), "reopening creates the file at the path");
        std::fs::rename(&logs, dir.path().join("gone")).unwrap();
        assert_eq!(reloader.reload(), audit_only(Outcome::Kept));
    }
}
