//! libfaketime: a child process whose wall clock the test steps while its monotonic clock
//! runs on (`FAKETIME_DONT_FAKE_MONOTONIC`), as an operator's `date -s` or an NTP step does
//! to a host. Debian's `libfaketime` is installed when missing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::apt::find_or_install;

const LIBRARY: &str = "libfaketime.so.1";

/// Where Debian puts the library.
fn find() -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime",
        "/usr/lib/aarch64-linux-gnu/faketime",
        "/usr/lib/faketime",
    ]
    .iter()
    .map(|dir| Path::new(dir).join(LIBRARY))
    .find(|candidate| candidate.is_file())
}

/// A wall-clock offset a test moves: the file libfaketime reads on every clock call.
#[derive(Debug)]
pub struct FakeClock {
    library: PathBuf,
    file: PathBuf,
}

impl FakeClock {
    /// A clock at the real time (offset zero), its file in `dir`.
    ///
    /// # Panics
    ///
    /// When libfaketime is missing and cannot be installed, or the file cannot be written.
    pub fn new(dir: &Path) -> Self {
        let library = find_or_install(LIBRARY, "libfaketime", find)
            .unwrap_or_else(|e| panic!("libfaketime: {e}"));
        let clock = Self {
            library,
            file: dir.join("faketime-offset"),
        };
        clock.set_offset(0);
        clock
    }

    /// Runs `command` on this clock: its wall clock (`CLOCK_REALTIME`) is the real time
    /// plus the offset, its monotonic clock untouched.
    pub fn apply<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        command
            .env("LD_PRELOAD", &self.library)
            .env("FAKETIME_TIMESTAMP_FILE", &self.file)
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
    }

    /// Steps the wall clock of every process on this clock to the real time plus `secs`
    /// (negative: behind), from its next clock reading on.
    ///
    /// # Panics
    ///
    /// When the file cannot be written.
    pub fn set_offset(&self, secs: i64) {
        // Written whole, then renamed: a reader never sees half a line.
        let partial = self.file.with_extension("partial");
        fs::write(&partial, format!("{secs:+}\n")).expect("write the faketime offset");
        fs::rename(&partial, &self.file).expect("move the faketime offset into place");
    }
}
