//! The service's handle on its sink: session events fail closed (written and made durable
//! before the answer), refused callers are refused all the same and tallied, and a record the
//! sink does not take is counted and logged within the error log's budget.

use std::io;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Instant, SystemTime};

use metrics::Counter;
use unique_core::{Error, Key, LogBudget, LogVerdict};

use super::tally::{Group, LOGGED_FAILURES_PER_INTERVAL, Tally};
use super::{
    AUDIT_UNAVAILABLE, AUDIT_WRITE_ERRORS_TOTAL, AuditEvent, AuditRecord, AuditSink,
    REFUSAL_INTERVAL, RefusalReason,
};
use crate::auth::Grant;
use crate::request_id::RequestId;

/// The service's handle on its sink.
#[derive(Clone)]
pub(crate) struct Auditor {
    inner: Arc<Inner>,
}

struct Inner {
    sink: Arc<dyn AuditSink>,
    refusals: Tally,
    budget: LogBudget,
    /// Set once the task that writes the tallies every interval runs.
    flusher: OnceLock<()>,
}

impl Auditor {
    pub(crate) fn new(sink: impl AuditSink) -> Self {
        write_errors();
        Self {
            inner: Arc::new(Inner {
                sink: Arc::new(sink),
                refusals: Tally::default(),
                budget: LogBudget::new(LOGGED_FAILURES_PER_INTERVAL, REFUSAL_INTERVAL),
                flusher: OnceLock::new(),
            }),
        }
    }

    /// Records a session event (a claim's outcome, a release, an admin logout) and waits
    /// until the sink says it is durable ([`AuditSink::sync`]), before its answer. Fails
    /// closed: a record that cannot be written or made durable is `Unavailable` (503
    /// [`AUDIT_UNAVAILABLE`]) even though the event already took effect in the store, so no
    /// caller is told of a session event the log does not hold. The error log keeps the
    /// record, within its budget.
    pub(crate) async fn session(
        &self,
        event: AuditEvent,
        key: &Key,
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<(), Error> {
        let request_id = request_id.to_string();
        let record = AuditRecord::new(event, Some(key), grant.map(Grant::name), &request_id);
        let sink = &self.inner.sink;
        let written = match sink.record(&record) {
            Ok(()) => sink.sync().await,
            Err(error) => Err(error),
        };
        written.map_err(|error| {
            self.inner
                .failed(&record, &error, "answering 503: the event took effect");
            Error::unavailable(AUDIT_UNAVAILABLE)
        })
    }

    /// Tallies a refused caller; the tallies are written every [`REFUSAL_INTERVAL`] and by
    /// [`flush`](Self::flush). The caller is refused whether or not they are written.
    pub(crate) fn refused(
        &self,
        reason: RefusalReason,
        path: &'static str,
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) {
        let group = Group {
            source: request_id.source(),
            reason,
            path,
            token: grant.map(|grant| grant.name().into()),
        };
        self.inner
            .refusals
            .add(group, SystemTime::now(), request_id);
        self.inner.flusher.get_or_init(|| self.spawn_flusher());
    }

    /// Writes the refusals tallied so far and makes them durable.
    pub(crate) async fn flush(&self) {
        self.inner.write_refusals();
        if let Err(error) = self.inner.sink.sync().await {
            tracing::error!(%error, "audit log: the refusal records may not be durable");
        }
        let left_out = self.inner.budget.close(Instant::now());
        left_out_line(left_out);
    }

    /// Writes the tallies every interval while the service lives, on the runtime it runs in
    /// (without one, they are written by [`flush`](Self::flush) and when the service is
    /// dropped).
    fn spawn_flusher(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(REFUSAL_INTERVAL).await;
                let Some(inner) = weak.upgrade() else { return };
                Self { inner }.flush().await;
            }
        });
    }
}

impl Inner {
    /// Writes the interval's tallies, one record each; a failure is counted per record and
    /// logged once.
    fn write_refusals(&self) {
        let now = SystemTime::now();
        let mut lost = (0_u64, 0_u64);
        let mut last_error = None;
        for (group, count) in self.refusals.take() {
            let event = AuditEvent::Refused {
                reason: group.reason,
                path: group.path,
                source: group.source,
                count: count.refusals,
                first: count.first,
                last: count.last,
            };
            let record =
                AuditRecord::new(event, None, group.token.as_deref(), &count.request_id).at(now);
            if let Err(error) = self.sink.record(&record) {
                write_errors().increment(1);
                lost = (lost.0 + 1, lost.1 + count.refusals);
                last_error = Some(error);
            }
        }
        if let Some(error) = last_error {
            tracing::error!(
                records = lost.0,
                refusals = lost.1,
                %error,
                "audit log cannot be written: refusal records lost (the callers were refused)"
            );
        }
    }

    /// Counts a record the sink did not take and logs it with the line it would have
    /// written, while the interval's budget lasts.
    fn failed(&self, record: &AuditRecord<'_>, error: &io::Error, then: &str) {
        write_errors().increment(1);
        let LogVerdict::Log { left_out } = self.budget.spend(Instant::now()) else {
            return;
        };
        left_out_line(left_out);
        let line = record.to_json_line();
        tracing::error!(
            event = record.event.name(),
            request_id = record.request_id,
            %error,
            line = %String::from_utf8_lossy(line.trim_ascii_end()),
            "audit log cannot be written; {then}"
        );
    }
}

impl Drop for Inner {
    /// The last tallies are not lost with the service (not made durable: no runtime to wait
    /// on here; [`Auditor::flush`] does both).
    fn drop(&mut self) {
        self.write_refusals();
    }
}

/// Says how many unwritten records an interval left out of the error log.
fn left_out_line(left_out: u64) {
    if left_out > 0 {
        tracing::error!(
            left_out,
            "audit log cannot be written: {left_out} more unwritten records were not logged \
             (unique_audit_write_errors_total counts them all)"
        );
    }
}

/// The handle, registered with the recorder in force when the first auditor is made.
fn write_errors() -> &'static Counter {
    static HANDLE: OnceLock<Counter> = OnceLock::new();
    HANDLE.get_or_init(|| {
        metrics::describe_counter!(
            AUDIT_WRITE_ERRORS_TOTAL,
            "Audit records the audit sink could not write"
        );
        metrics::counter!(AUDIT_WRITE_ERRORS_TOTAL)
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};

    use super::*;

    /// Keeps every line; fails every write while `broken` is set.
    #[derive(Default)]
    struct Lines {
        lines: Mutex<Vec<Value>>,
        broken: std::sync::atomic::AtomicBool,
    }

    impl AuditSink for Lines {
        fn record(&self, record: &AuditRecord<'_>) -> io::Result<()> {
            if self.broken.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(io::Error::from(io::ErrorKind::StorageFull));
            }
            let value = serde_json::from_slice(&record.to_json_line()).unwrap();
            self.lines.lock().unwrap().push(value);
            Ok(())
        }
    }

    mod service {
        use std::sync::atomic::Ordering;

        use bytes::Bytes;
        use http::{Request, StatusCode};
        use http_body_util::{BodyExt, Full};
        use unique_core::Arbiter;
        use unique_store_memory::MemoryStore;

        use super::*;
        use crate::{ArbiterService, Tokens};

        const TOKEN: &str = "audit-unit-token-0123456789";

        fn service(sink: &Arc<Lines>) -> ArbiterService<MemoryStore> {
            let mut tokens = Tokens::new();
            tokens
                .add(TOKEN, Grant::new("game", vec!["game".into()], None))
                .unwrap();
            ArbiterService::new(Arbiter::new(MemoryStore::new()))
                .with_tokens(tokens)
                .with_audit(Arc::clone(sink))
        }

        async fn call(
            service: &ArbiterService<MemoryStore>,
            path: &str,
            token: Option<&str>,
            body: &Value,
        ) -> (StatusCode, Value) {
            let mut request = Request::post(path).header("x-request-id", "unit-1");
            if let Some(token) = token {
                request = request.header("authorization", format!("Bearer {token}"));
            }
            let request = request
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap();
            let answer = service.handle(request).await;
            let status = answer.status();
            let bytes = answer.into_body().collect().await.unwrap().to_bytes();
            (
                status,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            )
        }

        fn claim(project: &str, claim_id: &str) -> Value {
            json!({"project": project, "env": "prod", "uid": 7, "claim_id": claim_id,
                   "owner": {"endpoint": "http://127.0.0.1:1/kick"}})
        }

        fn key() -> Value {
            json!({"project": "game", "env": "prod", "uid": 7})
        }

        #[tokio::test]
        async fn a_claim_the_sink_cannot_record_is_answered_503_and_its_retry_replays() {
            let sink = Arc::new(Lines::default());
            let service = service(&sink);
            sink.broken.store(true, Ordering::SeqCst);
            let (status, body) =
                call(&service, "/v1/claim", Some(TOKEN), &claim("game", "a")).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
            assert_eq!(body["message"], AUDIT_UNAVAILABLE, "{body}");
            // The claim took effect: reads (never audited) show it.
            let (status, view) = call(&service, "/v1/current", Some(TOKEN), &key()).await;
            assert_eq!((status, view["gen"].clone()), (StatusCode::OK, json!(1)));
            // A release is answered 503 too; a refused caller is still refused.
            let release = json!({"project": "game", "env": "prod", "uid": 7, "gen": 1});
            let (status, _) = call(&service, "/v1/release", Some(TOKEN), &release).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            let (status, _) = call(&service, "/v1/claim", None, &claim("game", "a")).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            let (status, _) = call(&service, "/v1/claim", Some(TOKEN), &claim("other", "a")).await;
            assert_eq!(status, StatusCode::FORBIDDEN);
            assert!(sink.lines.lock().unwrap().is_empty());

            // The log works again: the retry is superseded by the logout it could not report
            // (released above), and that is what is recorded.
            sink.broken.store(false, Ordering::SeqCst);
            let (status, body) =
                call(&service, "/v1/claim", Some(TOKEN), &claim("game", "a")).await;
            assert_eq!(status, StatusCode::CONFLICT, "{body}");
            let (status, body) =
                call(&service, "/v1/claim", Some(TOKEN), &claim("game", "b")).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            let (status, body) =
                call(&service, "/v1/claim", Some(TOKEN), &claim("game", "b")).await;
            assert_eq!(
                (status, body["replayed"].clone()),
                (StatusCode::OK, json!(true))
            );
            let lines = sink.lines.lock().unwrap();
            let events: Vec<_> = lines
                .iter()
                .map(|l| (l["event"].as_str().unwrap(), l["gen"].clone()))
                .collect();
            assert_eq!(
                events,
                [
                    ("superseded", json!(1)),
                    ("first-login", json!(2)),
                    ("replay", json!(2))
                ]
            );
            assert_eq!(lines[1]["prev_gen"], 1, "after the tombstone: {}", lines[1]);
            assert!(lines.iter().all(|l| l["request_id"] == "unit-1"));
        }

        #[tokio::test]
        async fn reads_and_probes_are_not_recorded() {
            let sink = Arc::new(Lines::default());
            let service = service(&sink);
            let (status, _) = call(&service, "/v1/current", Some(TOKEN), &key()).await;
            assert_eq!(status, StatusCode::OK);
            let batch = json!({"keys": [key()]});
            let (status, _) = call(&service, "/v1/current/batch", Some(TOKEN), &batch).await;
            assert_eq!(status, StatusCode::OK);
            let health = Request::get("/healthz")
                .body(Full::new(Bytes::new()))
                .unwrap();
            assert_eq!(service.handle(health).await.status(), StatusCode::OK);
            assert!(sink.lines.lock().unwrap().is_empty());
        }

        #[tokio::test]
        async fn refused_reads_are_tallied_with_their_path() {
            let sink = Arc::new(Lines::default());
            let service = service(&sink);
            let batch = json!({"keys": [key(), {"project": "other", "env": "prod", "uid": 2}]});
            let (status, _) = call(&service, "/v1/current/batch", Some(TOKEN), &batch).await;
            assert_eq!(status, StatusCode::FORBIDDEN);
            let (status, _) = call(&service, "/v1/current", Some("not-a-token"), &key()).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            assert!(
                sink.lines.lock().unwrap().is_empty(),
                "tallied, not yet written"
            );
            service.flush_audit().await;
            let lines = sink.lines.lock().unwrap();
            assert_eq!(lines.len(), 2, "{lines:?}");
            let forbidden = &lines[0];
            assert_eq!(
                (
                    &forbidden["path"],
                    &forbidden["status"],
                    &forbidden["project"],
                    &forbidden["token"],
                    &forbidden["count"],
                    &forbidden["source"],
                ),
                (
                    &json!("/v1/current/batch"),
                    &json!(403),
                    &Value::Null,
                    &json!("game"),
                    &json!(1),
                    &Value::Null
                )
            );
            let unknown = &lines[1];
            assert_eq!(
                (&unknown["path"], &unknown["reason"], &unknown["token"]),
                (&json!("/v1/current"), &json!("unknown"), &Value::Null)
            );
        }

        /// Refusals from two sources, with three reasons: one line per source, reason, path
        /// and token, whose counts sum to the refusals sent.
        #[tokio::test]
        async fn refusals_are_tallied_per_source_and_the_counts_sum_to_the_refusals() {
            let sink = Arc::new(Lines::default());
            let service = service(&sink);
            let sources = ["127.0.0.7", "::1"];
            let mut sent = 0_u64;
            for n in 0..300_u64 {
                let source: std::net::IpAddr = sources[usize::from(n % 3 == 0)].parse().unwrap();
                let (token, body) = match n % 4 {
                    0 => (None, key()),
                    1 => (Some("not-a-token"), key()),
                    2 => (Some("Basic abc"), key()),
                    _ => (
                        Some(TOKEN),
                        json!({"project": "other", "env": "prod", "uid": n}),
                    ),
                };
                let mut request =
                    Request::post("/v1/current").header("x-request-id", format!("refused-{n}"));
                if let Some(token) = token {
                    let value = if token.starts_with("Basic") {
                        token.to_owned()
                    } else {
                        format!("Bearer {token}")
                    };
                    request = request.header("authorization", value);
                }
                let mut request = request
                    .body(Full::new(Bytes::from(body.to_string())))
                    .unwrap();
                let peer = std::net::SocketAddr::new(source, 40_000);
                request
                    .extensions_mut()
                    .insert(unique_listener::PeerAddr(peer));
                let status = service.handle(request).await.status();
                assert!(status == 401 || status == 403, "{status}");
                sent += 1;
            }
            service.flush_audit().await;
            let lines = sink.lines.lock().unwrap();
            // 2 sources x (missing, unknown, malformed, forbidden).
            assert_eq!(lines.len(), 8, "{lines:#?}");
            let total: u64 = lines.iter().map(|l| l["count"].as_u64().unwrap()).sum();
            assert_eq!(total, sent);
            let mut groups: Vec<(String, String)> = lines
                .iter()
                .map(|l| {
                    let text = |f: &str| l[f].as_str().unwrap().to_owned();
                    (text("source"), text("reason"))
                })
                .collect();
            groups.sort();
            groups.dedup();
            assert_eq!(groups.len(), 8, "one line per source and reason");
            for line in lines.iter() {
                assert!(
                    line["first_ts"].as_str() <= line["last_ts"].as_str(),
                    "{line}"
                );
                assert!(line["request_id"].as_str().unwrap().starts_with("refused-"));
            }
        }
    }
}
