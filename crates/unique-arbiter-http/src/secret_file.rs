//! The secret files of a server: `unique-server`'s `--auth-tokens` (a [`Tokens`](crate::Tokens)
//! file) and `--kick-signing-keys`, read by the server at startup and on every reload, and read
//! and replaced by the `unique` CLI. Both read them here, so the CLI refuses exactly what the
//! server refuses.
//!
//! On Unix a secret file that other users may read or write is refused, as ssh refuses such a
//! private key: whoever else can read it can call as any of its tokens or forge kicks, and
//! whoever else can write it can add their own. The mode is checked on the file that was opened,
//! so a symbolic link is judged by its target and a file swapped between the check and the read
//! cannot slip in. A file passes when it is owner-only (`mode & 0o077` is 0: `0600`, `0400`), or
//! when its group may only read it (`0640`, `0440`), others nothing, and its group is one of
//! this process's own (its effective gid or a supplementary group): that is how Kubernetes hands
//! a Secret to a pod (`defaultMode: 0440` under the pod's `fsGroup`), and the group then holds
//! no one the process does not already trust with its own files. A group that may write the
//! file, or a group the process is not in, is refused. The process's groups are read from
//! `/proc/self/status` on Linux; where they cannot be read, only owner-only files pass. On other
//! platforms the mode is not checked.

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
    /// Its mode lets others in, or lets its group write or execute it. The message names the file, the mode and the fix:
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
    /// Its mode lets its group read it (and do nothing else, others nothing), but the group is
    /// not one of this process's own. The message names the file, the mode, the group and the
    /// fix.
    #[error(
        "refusing {path}: its mode {mode:04o} lets group {group} read it, and this process is \
         not in that group; run `chmod 600 {path}`, or give it a group of this process",
        path = path.display()
    )]
    ForeignGroup {
        /// The file.
        path: PathBuf,
        /// Its permission bits (`mode & 0o7777`).
        mode: u32,
        /// The file's group id.
        group: u32,
    },
}

/// The groups a process belongs to: its effective group id and its supplementary groups, what
/// a group-readable secret file's group must be one of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessGroups {
    groups: Vec<u32>,
}

impl ProcessGroups {
    /// These group ids (effective and supplementary, in any order).
    #[must_use]
    pub fn new(groups: impl IntoIterator<Item = u32>) -> Self {
        Self {
            groups: groups.into_iter().collect(),
        }
    }

    /// This process's groups, from `/proc/self/status` (its `Gid:` line's effective gid and its
    /// `Groups:` line); none where that cannot be read (not Linux), so only owner-only files
    /// pass there.
    #[must_use]
    pub fn of_this_process() -> Self {
        std::fs::read_to_string("/proc/self/status")
            .map(|status| Self::from_proc_status(&status))
            .unwrap_or_default()
    }

    /// The groups a `/proc/PID/status` text names: the second field of `Gid:` (the effective
    /// gid) and every field of `Groups:`.
    #[must_use]
    pub fn from_proc_status(status: &str) -> Self {
        let mut groups = Vec::new();
        for line in status.lines() {
            let ids = |rest: &str| {
                rest.split_whitespace()
                    .filter_map(|id| id.parse::<u32>().ok())
                    .collect::<Vec<_>>()
            };
            if let Some(rest) = line.strip_prefix("Gid:") {
                groups.extend(ids(rest).get(1));
            } else if let Some(rest) = line.strip_prefix("Groups:") {
                groups.extend(ids(rest));
            }
        }
        Self { groups }
    }

    /// Whether `group` is one of them.
    #[must_use]
    pub fn contains(&self, group: u32) -> bool {
        self.groups.contains(&group)
    }
}

/// Reads the secret file at `path` once its mode and group show that no one but its owner, or
/// the group of this process that owns it, may read it, and no one but its owner may write it
/// ([`check_private`] with [`ProcessGroups::of_this_process`]). The mode and the group are
/// taken from the open file, and the text read from the same one.
///
/// # Errors
///
/// [`SecretFileError::OpenToOthers`] or [`SecretFileError::ForeignGroup`] for a file
/// [`check_private`] refuses (the file is not read), [`SecretFileError::Read`] when it cannot be
/// opened or read.
pub fn read_owner_only(path: &Path) -> Result<SecretFile, SecretFileError> {
    let mut file = File::open(path).map_err(SecretFileError::Read)?;
    let mode = mode_of(&file).map_err(SecretFileError::Read)?;
    if let Some((mode, group)) = mode {
        check_private(path, mode, group, &ProcessGroups::of_this_process())?;
    }
    let mode = mode.map(|(mode, _)| mode);
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

/// Refuses a file at `path` with permission bits `mode` (`st_mode`; file-type bits are ignored)
/// and group id `group` unless it is owner-only, or its group may only read it, others nothing,
/// and `group` is one of `groups`.
///
/// # Errors
///
/// [`SecretFileError::ForeignGroup`] for a group-readable file (`mode & 0o077 == 0o040`) whose
/// group is not in `groups`; [`SecretFileError::OpenToOthers`] for any other mode
/// [`check_owner_only`] refuses.
pub fn check_private(
    path: &Path,
    mode: u32,
    group: u32,
    groups: &ProcessGroups,
) -> Result<(), SecretFileError> {
    let group_reads_only = mode & 0o077 == 0o040;
    if !group_reads_only {
        return check_owner_only(path, mode);
    }
    if groups.contains(group) {
        return Ok(());
    }
    Err(SecretFileError::ForeignGroup {
        path: path.to_owned(),
        mode: mode & 0o7777,
        group,
    })
}

/// The open file's permission bits and group id.
#[cfg(unix)]
fn mode_of(file: &File) -> io::Result<Option<(u32, u32)>> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    Ok(Some((meta.mode() & 0o7777, meta.gid())))
}

#[cfg(not(unix))]
fn mode_of(_: &File) -> io::Result<Option<(u32, u32)>> {
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
        set(0o660);
        let refused = read_owner_only(&path).unwrap_err();
        assert!(
            matches!(refused, SecretFileError::OpenToOthers { mode: 0o660, .. }),
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

    #[test]
    fn a_group_that_may_only_read_passes_when_it_is_the_process_own() {
        let path = Path::new("/var/run/secrets/unique/tokens.json");
        let ours = ProcessGroups::new([1000, 2000]);
        for mode in [0o440, 0o640, 0o100_440] {
            assert!(check_private(path, mode, 2000, &ours).is_ok(), "{mode:o}");
        }
        // Owner-only passes whatever the group.
        assert!(check_private(path, 0o600, 7, &ours).is_ok());
        // A group the process is not in.
        let refused = check_private(path, 0o440, 7, &ours).unwrap_err();
        assert!(
            matches!(
                refused,
                SecretFileError::ForeignGroup {
                    mode: 0o440,
                    group: 7,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert_eq!(
            refused.to_string(),
            "refusing /var/run/secrets/unique/tokens.json: its mode 0440 lets group 7 read it, \
             and this process is not in that group; run \
             `chmod 600 /var/run/secrets/unique/tokens.json`, or give it a group of this process"
        );
        // Others, or a group that may write or execute, are refused even for the own group.
        for mode in [
            0o444, 0o644, 0o660, 0o460, 0o450, 0o470, 0o441, 0o442, 0o420,
        ] {
            assert!(
                matches!(
                    check_private(path, mode, 2000, &ours),
                    Err(SecretFileError::OpenToOthers { .. })
                ),
                "{mode:o}"
            );
        }
        // No groups known (not Linux): only owner-only passes.
        assert!(check_private(path, 0o440, 2000, &ProcessGroups::default()).is_err());
    }

    #[test]
    fn the_process_groups_are_read_from_proc_status() {
        let status = "Name:\tunique-server\nUid:\t10001\t10001\t10001\t10001\n\
                      Gid:\t10001\t10002\t10001\t10001\nFDSize:\t64\nGroups:\t2000 3000 \n";
        let groups = ProcessGroups::from_proc_status(status);
        assert_eq!(groups, ProcessGroups::new([10002, 2000, 3000]));
        // The real gid is not the effective one: it does not count.
        assert!(!groups.contains(10001));
        let empty = ProcessGroups::from_proc_status("Gid:\t5\t6\t5\t5\nGroups:\t\n");
        assert_eq!(empty, ProcessGroups::new([6]));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_group_readable_file_of_the_process_own_group_is_read() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        std::fs::write(&path, "secret\n").unwrap();
        // A new file takes this process's effective gid (or the directory's, which it is in).
        let group = std::fs::metadata(&path).unwrap().gid();
        assert!(ProcessGroups::of_this_process().contains(group));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o440)).unwrap();
        let read = read_owner_only(&path).unwrap();
        assert_eq!((read.text.as_str(), read.mode), ("secret\n", Some(0o440)));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        assert!(matches!(
            read_owner_only(&path),
            Err(SecretFileError::OpenToOthers { mode: 0o444, .. })
        ));
    }
}
