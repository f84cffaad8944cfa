//! The service's handle on its sink: session events fail closed, refused callers are refused
//! all the same, and a record the sink does not take is logged and counted.

use std::io;
use std::sync::{Arc, OnceLock};

use metrics::Counter;
use unique_core::{Error, Key};

use super::{
    AUDIT_UNAVAILABLE, AUDIT_WRITE_ERRORS_TOTAL, AuditEvent, AuditRecord, AuditSink, RefusalReason,
};
use crate::auth::Grant;
use crate::request_id::RequestId;

/// The service's handle on its sink.
#[derive(Clone)]
pub(crate) struct Auditor {
    sink: Arc<dyn AuditSink>,
}

impl Auditor {
    pub(crate) fn new(sink: impl AuditSink) -> Self {
        write_errors();
        Self {
            sink: Arc::new(sink),
        }
    }

    /// Records a session event (a claim's outcome, a release, an admin logout) before its
    /// answer. Fails closed: a record that cannot be written is `Unavailable` (503
    /// [`AUDIT_UNAVAILABLE`]) even though the event already took effect in the store, so no
    /// caller is told of a session event the log does not hold. The error log keeps the
    /// record.
    pub(crate) fn session(
        &self,
        event: AuditEvent,
        key: &Key,
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) -> Result<(), Error> {
        let request_id = request_id.to_string();
        let record = AuditRecord::new(event, Some(key), grant.map(Grant::name), &request_id);
        self.sink.record(&record).map_err(|error| {
            failed(&record, &error, "answering 503: the event took effect");
            Error::unavailable(AUDIT_UNAVAILABLE)
        })
    }

    /// Records a refused caller. The caller is refused whether or not the record is written;
    /// a failure is logged and counted.
    pub(crate) fn refused(
        &self,
        reason: RefusalReason,
        path: &'static str,
        key: Option<&Key>,
        grant: Option<&Grant>,
        request_id: &RequestId,
    ) {
        let request_id = request_id.to_string();
        let event = AuditEvent::Refused { reason, path };
        let record = AuditRecord::new(event, key, grant.map(Grant::name), &request_id);
        if let Err(error) = self.sink.record(&record) {
            failed(&record, &error, "the caller is refused all the same");
        }
    }
}

/// Logs and counts a record the sink did not take, with the line it would have written.
fn failed(record: &AuditRecord<'_>, error: &io::Error, then: &str) {
    write_errors().increment(1);
    let line = record.to_json_line();
    tracing::error!(
        event = record.event.name(),
        request_id = record.request_id,
        %error,
        line = %String::from_utf8_lossy(line.trim_ascii_end()),
        "audit log cannot be written; {then}"
    );
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
        async fn refused_reads_are_recorded_with_their_path() {
            let sink = Arc::new(Lines::default());
            let service = service(&sink);
            let batch = json!({"keys": [key(), {"project": "other", "env": "prod", "uid": 2}]});
            let (status, _) = call(&service, "/v1/current/batch", Some(TOKEN), &batch).await;
            assert_eq!(status, StatusCode::FORBIDDEN);
            let (status, _) = call(&service, "/v1/current", Some("not-a-token"), &key()).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            let lines = sink.lines.lock().unwrap();
            assert_eq!(lines.len(), 2, "{lines:?}");
            let forbidden = &lines[0];
            assert_eq!(
                (
                    &forbidden["path"],
                    &forbidden["status"],
                    &forbidden["project"],
                    &forbidden["uid"],
                    &forbidden["token"]
                ),
                (
                    &json!("/v1/current/batch"),
                    &json!(403),
                    &json!("other"),
                    &json!(2),
                    &json!("game")
                )
            );
            let unknown = &lines[1];
            assert_eq!(
                (&unknown["path"], &unknown["reason"], &unknown["token"]),
                (&json!("/v1/current"), &json!("unknown"), &Value::Null)
            );
        }
    }
}
