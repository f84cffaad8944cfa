//! The audit log: one record per session event, handed to a sink before the answer is sent.
//!
//! The service builds an [`AuditRecord`] for every first login, takeover, replay, superseded
//! retry, release, admin logout and refused caller, and gives it to the [`AuditSink`] of
//! [`ArbiterService::with_audit`](crate::ArbiterService::with_audit). A record that cannot be
//! written fails a session event closed (503 `unavailable`, see [`Auditor::session`]); a
//! refused caller is refused all the same and the failure is logged.
//!
//! The line format ([`AuditRecord::write_json_line`]) is written here, once, so every sink
//! writes the same lines.
//!
//! By concern: [`AuditSink`] here; what a record says, [`AuditEvent`] (`event.rs`); a record
//! and its one-line JSON form, [`AuditRecord`] (`record.rs`); the service's handle on its sink
//! (`auditor.rs`); and the file sink of `unique-server --audit-log`, [`AuditFile`] (`file.rs`).

use std::io;
use std::sync::Arc;

mod auditor;
mod event;
mod file;
mod record;

pub(crate) use auditor::Auditor;
pub use event::{AuditEvent, RefusalReason};
pub use file::AuditFile;
pub use record::AuditRecord;

/// Counter: audit records the sink could not write. Session events among them were answered
/// 503; refused callers were refused anyway.
pub const AUDIT_WRITE_ERRORS_TOTAL: &str = "unique_audit_write_errors_total";

/// The message of the 503 a session event gets when its record cannot be written.
pub const AUDIT_UNAVAILABLE: &str = "audit log cannot be written";

/// Where audit records go: a file (`unique-server --audit-log`), a collector, a test's list.
///
/// # Contract
///
/// - `record` returns `Ok` only once the record has been handed to its destination whole
///   (a file sink: one `write(2)` of the complete line, not a buffer flushed later), because
///   the service sends its answer right after: an answered session event has its record.
/// - It is called synchronously on the request's task, from many requests at once. It MUST
///   NOT interleave two records and SHOULD NOT block for longer than a local write.
/// - `Err` means the record is not (wholly) recorded. The service then answers the session
///   event 503 [`AUDIT_UNAVAILABLE`] and logs the error with the record; the error's text is
///   logged, never sent to the caller.
pub trait AuditSink: Send + Sync + 'static {
    /// Records `record`; see the trait's contract.
    fn record(&self, record: &AuditRecord<'_>) -> io::Result<()>;
}

impl<T: AuditSink + ?Sized> AuditSink for Arc<T> {
    fn record(&self, record: &AuditRecord<'_>) -> io::Result<()> {
        (**self).record(record)
    }
}

impl<T: AuditSink + ?Sized> AuditSink for Box<T> {
    fn record(&self, record: &AuditRecord<'_>) -> io::Result<()> {
        (**self).record(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(dead_code)]
    fn object_safe(_: Box<dyn AuditSink>) {}
}
