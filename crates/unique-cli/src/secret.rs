//! Secret material: fresh random values, and the owner-only files `unique-server` reads
//! (`--auth-tokens`, `--kick-signing-keys`), read and replaced the way it accepts them.
//!
//! The server refuses a secret file whose mode lets its group or others in (`mode & 0o077`);
//! these helpers read through the same check, [`unique_arbiter_http::secret_file`], and refuse
//! it too, with the same hint, instead of widening or narrowing anyone's permissions behind the
//! operator's back. A file is replaced
//! whole: the new text goes to a new owner-only file beside it, which is then renamed over it,
//! so a server reloading on SIGHUP reads the old file or the new one, never half of either.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use ring::rand::{SecureRandom, SystemRandom};
use unique_arbiter_http::secret_file::{self, SecretFile, SecretFileError};

use crate::exit::Failure;

/// How many random bytes a token or a key holds: 32 (256 bits), printed as 64 hex digits,
/// what `openssl rand -hex 32` prints.
pub(crate) const RANDOM_BYTES: usize = 32;

/// [`RANDOM_BYTES`] bytes from the operating system's CSPRNG, as lower-case hex.
pub(crate) fn random_hex() -> Result<String, Failure> {
    let mut bytes = [0u8; RANDOM_BYTES];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Failure::file("the system random number generator failed"))?;
    let mut hex = String::with_capacity(2 * RANDOM_BYTES);
    for byte in bytes {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    Ok(hex)
}

/// A secret file as found: its text and mode, or nothing there yet.
#[derive(Debug)]
pub(crate) struct Existing {
    pub(crate) text: String,
    /// The permission bits (`0o600`, `0o400`); `None` where modes are not checked.
    pub(crate) mode: Option<u32>,
}

/// Reads the secret file at `path`, or `None` when there is none. Refuses a symbolic link
/// (replacing it would put a file where the link was, and leave its target as it was) and,
/// on Unix, a file its group or others may read or write, as the server does.
pub(crate) fn read_existing(path: &Path) -> Result<Option<Existing>, Failure> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Failure::file(format!("cannot read {shown}: {e}"))),
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(Failure::file(format!(
                "refusing {shown}: it is a symbolic link; name the file it points to"
            )));
        }
        Ok(meta) if !meta.is_file() => {
            return Err(Failure::file(format!(
                "refusing {shown}: not a regular file"
            )));
        }
        Ok(_) => {}
    }
    match secret_file::read_owner_only(path) {
        Ok(SecretFile { text, mode }) => Ok(Some(Existing { text, mode })),
        Err(SecretFileError::Read(e)) => Err(Failure::file(format!("cannot read {shown}: {e}"))),
        Err(refused) => Err(as_failure(&refused)),
    }
}

/// The server's refusal, and that the server would refuse the file too.
fn as_failure(refused: &SecretFileError) -> Failure {
    Failure::file(format!("{refused} first: the server would refuse it too"))
}

/// Replaces (or creates) the file at `path` with `text`, owner-only: mode `0600` for a new
/// file, the old file's own (owner-only) mode for a replaced one. Written to a new file in the
/// same directory first, flushed to disk, then renamed over `path`.
pub(crate) fn replace(path: &Path, text: &str, mode: Option<u32>) -> Result<(), Failure> {
    let shown = path.display();
    let staged = staged_path(path);
    let failed = |e: io::Error| Failure::file(format!("cannot write {shown}: {e}"));
    let written = (|| {
        let mut file = create_owner_only(&staged, mode.unwrap_or(0o600))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&staged);
        return Err(failed(e));
    }
    if let Err(e) = std::fs::rename(&staged, path) {
        let _ = std::fs::remove_file(&staged);
        return Err(failed(e));
    }
    // The rename is durable once the directory is; a failure here leaves the new file in
    // place, so it is not reported as a failed write.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(dir) = File::open(dir)
    {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// `.<name>.unique-<pid>` beside `path`: hidden, and one per process.
fn staged_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "secret".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.unique-{}", std::process::id()))
}

#[cfg(unix)]
fn create_owner_only(path: &Path, mode: u32) -> io::Result<File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    // The umask may only have narrowed 0600; a 0400 original is kept 0400.
    file.set_permissions(std::fs::Permissions::from_mode(mode & 0o700))?;
    Ok(file)
}

#[cfg(not(unix))]
fn create_owner_only(path: &Path, _: u32) -> io::Result<File> {
    OpenOptions::new().write(true).create_new(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_hex_is_64_fresh_hex_digits() {
        let a = random_hex().unwrap();
        let b = random_hex().unwrap();
        assert_eq!(a.len(), 64);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(a, b);
    }

    #[test]
    fn only_owner_only_modes_pass() {
        let owner_only = |path, mode| {
            secret_file::check_owner_only(path, mode).map_err(|refused| as_failure(&refused))
        };
        let path = Path::new("/etc/unique/tokens.json");
        for mode in [0o600, 0o400, 0o700, 0o200] {
            assert!(owner_only(path, mode).is_ok(), "{mode:o}");
        }
        for mode in [0o644, 0o640, 0o604, 0o660, 0o602, 0o610, 0o601] {
            let refused = owner_only(path, mode).unwrap_err();
            assert!(
                refused.message.contains(&format!("{mode:04o}")),
                "{refused:?}"
            );
            assert!(
                refused
                    .message
                    .contains("chmod 600 /etc/unique/tokens.json"),
                "{refused:?}"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn replace_writes_owner_only_and_keeps_an_owner_only_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kick.keys");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        replace(&path, "one\n", None).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\n");
        assert_eq!(mode(&path), 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        replace(&path, "two\n", Some(0o400)).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
        assert_eq!(mode(&path), 0o400);
        // Nothing staged is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn read_existing_refuses_links_and_open_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        assert!(read_existing(&path).unwrap().is_none());
        std::fs::write(&path, "x").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = read_existing(&path).unwrap_err();
        assert!(refused.message.contains("mode 0644"), "{refused:?}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let found = read_existing(&path).unwrap().unwrap();
        assert_eq!((found.text.as_str(), found.mode), ("x", Some(0o600)));
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let refused = read_existing(&link).unwrap_err();
        assert!(refused.message.contains("symbolic link"), "{refused:?}");
    }
}
