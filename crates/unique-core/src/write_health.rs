//! Whether an embedded store can commit now, for its readiness check (see
//! [`Store::check_ready`](crate::Store::check_ready)): the state its writer keeps, and the
//! probe that tells when a directory takes writes again after a full disk.

use std::io::Write as _;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use crate::Error;

/// Why writes fail now (`None`: they succeed), shared by a store's writer and its
/// readiness check.
#[derive(Debug, Default)]
pub struct WriteHealth(Mutex<Option<String>>);

impl WriteHealth {
    /// Records that writes fail, and why (the operator reads it from `/readyz`'s log).
    pub fn failing(&self, why: impl Into<String>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(why.into());
    }

    /// Records that writes succeed.
    pub fn healthy(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Whether writes were last seen failing.
    pub fn is_failing(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// `Unavailable` with the reason while writes fail.
    ///
    /// # Errors
    ///
    /// `Unavailable` while writes fail.
    pub fn check(&self) -> Result<(), Error> {
        match &*self.0.lock().unwrap_or_else(PoisonError::into_inner) {
            None => Ok(()),
            Some(why) => Err(Error::unavailable(why.clone())),
        }
    }
}

/// The bytes [`probe_writable`] writes: room for a few groups of claims in a journal.
pub const WRITE_PROBE_BYTES: usize = 256 * 1024;

/// Whether `dir` takes writes again: a file of [`WRITE_PROBE_BYTES`] written, fsynced and
/// removed. A full disk fails it until space returns.
///
/// # Errors
///
/// The I/O error of the write, the fsync or the removal.
pub fn probe_writable(dir: &Path) -> std::io::Result<()> {
    let file_path = dir.join("write-probe");
    let result = (|| {
        let mut file = std::fs::File::create(&file_path)?;
        file.write_all(&vec![0; WRITE_PROBE_BYTES])?;
        file.sync_all()
    })();
    // Removed whether or not it was written whole: a probe never keeps the space it took.
    let removed = std::fs::remove_file(&file_path);
    result.and(removed.or_else(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Ok(())
        } else {
            Err(e)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_reports_the_last_state_with_its_reason() {
        let health = WriteHealth::default();
        assert!(health.check().is_ok());
        health.failing("disk is full");
        assert!(health.is_failing());
        let e = health.check().unwrap_err();
        assert!(e.to_string().contains("disk is full"), "{e}");
        health.healthy();
        assert!(health.check().is_ok());
    }

    #[test]
    fn the_probe_leaves_nothing_behind_and_fails_where_it_cannot_write() {
        let dir = std::env::temp_dir().join(format!("unique-core-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        probe_writable(&dir).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert!(probe_writable(&dir.join("missing")).is_err());
        std::fs::remove_dir(&dir).unwrap();
    }
}
