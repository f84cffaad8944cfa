//! Refused kick signatures are counted by reason through the `metrics` facade.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use unique_client::{KickHandler, KickOptions};
use unique_kick_signature::{HEADER, SigningKeys};
use unique_kickrecv::{KICK_SIGNATURE_REJECTIONS_TOTAL, KickService};

const KEY: &str = "key-a-0123456789abcdef0123456789abcdef";
const WRONG: &str = "key-x-0123456789abcdef0123456789abcdef";
const BODY: &str = r#"{"project":"game","env":"prod","uid":42,"gen":2}"#;

fn kick(signature: Option<&str>) -> Request<Full<Bytes>> {
    let mut request = Request::post("/kick");
    if let Some(signature) = signature {
        request = request.header(HEADER, signature);
    }
    request
        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
        .unwrap()
}

#[test]
fn each_refused_signature_is_counted_under_its_reason() {
    let recorder = DebuggingRecorder::new();
    let keys = SigningKeys::new([KEY]).unwrap();
    let wrong = SigningKeys::new([WRONG]).unwrap();
    let now = SystemTime::now();
    let hour = Duration::from_hours(1);
    metrics::with_local_recorder(&recorder, || {
        // No session here: a verified kick is answered 200 `no-session`.
        let handler = KickHandler::new(|_| None, |_, _| async {}, KickOptions::default());
        let service = KickService::new(handler).signing_keys(keys.clone());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let cases = [
                (None, 401),
                (Some("t=1,v1=zz".to_owned()), 401),
                (Some(wrong.sign(BODY.as_bytes(), now)), 401),
                (Some(keys.sign(BODY.as_bytes(), now - hour)), 401),
                (Some(keys.sign(BODY.as_bytes(), now + hour)), 401),
                (Some(wrong.sign(BODY.as_bytes(), now)), 401),
                (Some(keys.sign(BODY.as_bytes(), now)), 200),
            ];
            for (signature, status) in cases {
                let answer = service.respond(kick(signature.as_deref())).await;
                assert_eq!(answer.status(), status, "{signature:?}");
            }
        });
    });
    let mut counts: Vec<(String, u64)> = recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            assert_eq!(key.key().name(), KICK_SIGNATURE_REJECTIONS_TOTAL);
            let reason = key.key().labels().next().unwrap().value().to_owned();
            let DebugValue::Counter(count) = value else {
                panic!("{reason}: {value:?}");
            };
            (reason, count)
        })
        .collect();
    counts.sort();
    let expected = [
        ("bad-signature", 2),
        ("future", 1),
        ("malformed", 1),
        ("missing", 1),
        ("stale", 1),
    ];
    assert_eq!(counts, expected.map(|(reason, n)| (reason.to_owned(), n)));
}
