//! The audit log: one record per session event, handed to a sink and made durable before the
//! answer is sent, and refused callers tallied.
//!
//! The service builds an [`AuditRecord`] for every first login, takeover, replay, superseded
//! retry, release and admin logout, and gives it to the [`AuditSink`] of
//! [`ArbiterService::with_audit`](crate::ArbiterService::with_audit), then waits for
//! [`AuditSink::sync`]. A record that cannot be written fails a session event closed (503
//! `unavailable`, see [`Auditor::session`]). Refused callers are tallied per source, reason,
//! path and token, one record per tally every [`REFUSAL_INTERVAL`] (`tally.rs`), so no caller
//! can fill the log, or the error log, with refusals.
//!
//! The line format ([`AuditRecord::write_json_line`]) is written here, once, so every sink
//! writes the same lines.
//!
//! By concern: [`AuditSink`] here; what a record says, [`AuditEvent`] (`event.rs`); a record
//! and its one-line JSON form, [`AuditRecord`] (`record.rs`); the service's handle on its sink
//! (`auditor.rs`); the refusal tallies and the error log's budget (`tally.rs`); and the file
//! sink of `unique-server --audit-log`, [`AuditFile`] (`file.rs`, with its rotation and group
//! commit in `commit.rs`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

mod auditor;
mod commit;
mod event;
mod file;
mod record;
mod tally;

pub(crate) use auditor::Auditor;
pub use event::{AuditEvent, RefusalReason};
pub use file::{AuditFile, DEFAULT_AUDIT_KEEP, DEFAULT_AUDIT_MAX_BYTES, Rotation};
pub use record::AuditRecord;
pub use tally::{LOGGED_FAILURES_PER_INTERVAL, MAX_REFUSAL_GROUPS, REFUSAL_INTERVAL};

/// What [`AuditSink::sync`] returns: resolves once the records taken before the call are
/// durable.
pub type AuditSync<'a> = Pin<Box<dyn Future<Output = io::Result<()>> + Send + 'a>>;

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
///   (a file sink: one `write(2)` of the complete line, not a buffer flushed later), and
///   [`sync`](Self::sync) resolves `Ok` only once every record taken before it was called
///   survives what the sink promises to survive (a file sink: an OS crash, by `fsync`),
///   because the service sends a session event's answer right after: an answered session
///   event has its record.
/// - It is called synchronously on the request's task, from many requests at once. It MUST
///   NOT interleave two records and SHOULD NOT block for longer than a local write.
/// - `Err` means the record is not (wholly) recorded. The service then answers the session
///   event 503 [`AUDIT_UNAVAILABLE`] and logs the error with the record; the error's text is
///   logged, never sent to the caller.
pub trait AuditSink: Send + Sync + 'static {
    /// Records `record`; see the trait's contract.
    fn record(&self, record: &AuditRecord<'_>) -> io::Result<()>;

    /// Resolves once every record this sink took before the call is durable; `Err` when
    /// they may not be (the service then answers the session event 503 as for a failed
    /// `record`). Concurrent callers SHOULD share the work (a file sink: one `fsync` for
    /// every record written before it started). The default resolves at once: a sink whose
    /// `record` is already as durable as it gets.
    fn sync(&self) -> AuditSync<'_> {
        Box::pin(std::future::ready(Ok(())))
    }
}

impl<T: AuditSink + ?Sized> AuditSink for Arc<T> {
    fn record(&self, record: &AuditRecord<'_>) -> io::Result<()> {
        (**self).record(record)
    }

    fn sync(&self) -> AuditSync<'_> {
        (**self).sync()
    }
}

impl<T: AuditSink + ?Sized> AuditSink for Box<T> {
    fn record(&self, record: &AuditRecord<'_>) -> io::Result<()> {
        (**self).record(record)
    }

    fn sync(&self) -> AuditSync<'_> {
        (**self).sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(dead_code)]
    fn object_safe(_: Box<dyn AuditSink>) {}
}
