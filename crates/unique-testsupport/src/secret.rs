//! Secret files (caller tokens, kick signing keys) written the way `unique-server` accepts them.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `text` to `path` readable and writable by its owner only (`0600`: the server refuses
/// a secret file open to group or others). The text goes to a file beside `path` first, then
/// replaces `path` at once (rename), so a server reloading on SIGHUP never reads half of it.
///
/// Errors: the staged file cannot be written, or the rename fails.
pub fn write_secret(path: &Path, text: &str) -> io::Result<()> {
    let staged = path.with_extension("staged");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&staged)?;
    file.write_all(text.as_bytes())?;
    drop(file);
    std::fs::rename(&staged, path)
}
