//! The secret files of a server: `unique-server`'s `--auth-tokens` (a [`Tokens`](crate::Tokens)
//! file) and `--kick-signing-keys`, read by the server at startup and on every reload, and read
//! and replaced by the `unique` CLI. Both read them here, so the CLI refuses exactly what the
//! server refuses.
//!
//! On Unix a secret file that its group or other users may read or write is refused, as ssh
//! refuses such a private key: whoever else can read it can call as any of its tokens or forge
//! kicks, and whoever else can write it can add their own. Only the mode is checked
//! (`mode & 0o077` must be 0: `0600` or `0400`), on the file that was opened, so a symbolic link
//! is judged by its target and a file swapped between the check and the read cannot slip in.
//! On other platforms the mode is not checked.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// A secret file's text, and the mode it was read with.
#[derive(Debug)]
pub struct SecretFile {
    /// The whole file.
    pub text: String,
    /// Its permission bits (`mode & 0o7777`: `0o600`, `0o400`); `None` where modes are not
    /// checked (not Unix).
    pub mode: Option<u32>,
}

/// Why a secret file was not read. The message never holds the file's contents.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretFileError {
    /// The file could not be opened, inspected or read (missing, unreadable, not UTF-8). The
    /// message is the I/O error's alone: the caller names the file and what it holds.
    #[error("{0}")]
    Read(#[source] io::Error),
    /// Its mode lets the group or others in. The message names the file, the mode and the fix:
    /// `refusing PATH: its mode 0644 lets group or others read or write it; run `chmod 600 PATH``.
    #[error(
        "refusing {path}: its mode {mode:04o} lets group or others read or write it; \
         run `chmod 600 {path}`",
        path = path.display()
    )]
    OpenToOthers {
        /// The file.
        path: PathBuf,
        /// Its permission bits (`mode & 0o7777`).
        mode: u32,
    },
}

/// Reads the secret file at `path` once its mode shows that no one but its owner may read or
/// write it. The mode is taken from the open file, and the text read from the same one.
///
/// # Errors
///
/// [`SecretFileError::OpenToOthers`] for a mode [`check_owner_only`] refuses (the file is not
/// read), [`SecretFileError::Read`] when it cannot be opened or read.
pub fn read_owner_only(path: &Path) -> Result<SecretFile, SecretFileError> {
    let mut file = File::open(path).map_err(SecretFileError::Read)?;
    let mode = mode_of(&file).map_err(SecretFileError::Read)?;
    if let Some(mode) = mode {
        check_owner_only(path, mode)?;
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(SecretFileError::Read)?;
    Ok(SecretFile { text, mode })
}

/// Refuses a mode (`st_mode`; file-type bits are ignored) that lets the group or others read,
/// write or execute the file at `path`.
///
/// # Errors
///
/// [`SecretFileError::OpenToOthers`] when `mode & 0o077 != 0`.
pub fn check_owner_only(path: &Path, mode: u32) -> Result<(), SecretFileError> {
    let open_to_others = mode & 0o077 != 0;
    if !open_to_others {
        return Ok(());
    }
    Err(SecretFileError::OpenToOthers {
        path: path.to_owned(),
        mode: mode & 0o7777,
    })
}

#[cfg(unix)]
fn mode_of(file: &File) -> io::Result<Option<u32>> {
    use std::os::unix::fs::PermissionsExt;
    Ok(Some(file.metadata()?.permissions().mode() & 0o7777))
}

#[cfg(not(unix))]
fn mode_of(_: &File) -> io::Result<Option<u32>> {
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_owner_only_modes_pass() {
        let path = Path::new("/etc/unique/tokens.json");
        for mode in [0o600, 0o400, 0o200, 0o700, 0o100_600, 0o104_600] {
            assert!(check_owner_only(path, mode).is_ok(), "{mode:o}");
        }
        for mode in [
            0o644, 0o640, 0o604, 0o660, 0o602, 0o620, 0o601, 0o610, 0o666, 0o100_640,
        ] {
            let refused = check_owner_only(path, mode).unwrap_err().to_string();
            let shown = format!("{:04o}", mode & 0o7777);
            assert!(refused.contains(&format!("mode {shown} ")), "{refused}");
            assert!(
                refused.ends_with("run `chmod 600 /etc/unique/tokens.json`"),
                "{refused}"
            );
            assert!(
                refused.starts_with("refusing /etc/unique/tokens.json: "),
                "{refused}"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn the_open_file_is_judged_and_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kick.keys");
        let set = |mode| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        assert!(matches!(
            read_owner_only(&path),
            Err(SecretFileError::Read(e)) if e.kind() == io::ErrorKind::NotFound
        ));
        std::fs::write(&path, "secret-key\n").unwrap();
        set(0o640);
        let refused = read_owner_only(&path).unwrap_err();
        assert!(
            matches!(refused, SecretFileError::OpenToOthers { mode: 0o640, .. }),
            "{refused:?}"
        );
        assert!(!refused.to_string().contains("secret-key"), "{refused}");
        set(0o400);
        let read = read_owner_only(&path).unwrap();
        assert_eq!(
            (read.text.as_str(), read.mode),
            ("secret-key\n", Some(0o400))
        );
        // A link is judged by its target.
        let link = dir.path().join("current.keys");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(read_owner_only(&link).unwrap().mode, Some(0o400));
        set(0o604);
        assert!(matches!(
            read_owner_only(&link),
            Err(SecretFileError::OpenToOthers { mode: 0o604, .. })
        ));
    }
}
