//! Every validation rule of SPEC section 2, at and just past each boundary, through
//! the Arbiter: an invalid input is `InvalidParams` with no store call at all.

mod common;

use common::{RecordingObserver, ScriptedStore, input};
use unique_core::{Arbiter, ClaimInput, Error, Key, Owner, OwnerState, ValidationLimits};

/// Claims `claim` under `limits`. The store is scripted for one first login, so a
/// valid input succeeds; an invalid one must fail before touching the store.
async fn verdict_with(limits: ValidationLimits, claim: &ClaimInput) -> Result<(), Error> {
    let store = ScriptedStore::new()
        .read(Ok(OwnerState::absent()))
        .cas(Ok(1));
    let observer = RecordingObserver::default();
    let arbiter = Arbiter::builder(store)
        .observer(observer.clone())
        .validation_limits(limits)
        .build();
    let result = arbiter.claim(claim).await;
    let claims = observer.claims();
    assert_eq!(claims.len(), 1, "on_claim once per claim");
    match result {
        Ok(outcome) => {
            assert_eq!(outcome.generation, 1);
            Ok(())
        }
        Err(e) => {
            assert!(e.is_invalid_params(), "{claim:?}: {e}");
            assert!(
                arbiter.store().calls().is_empty(),
                "{claim:?}: store touched"
            );
            assert_eq!(
                claims[0].attempts, 0,
                "validation failures count no attempt"
            );
            assert_eq!(claims[0].result, Err("invalid_params"));
            assert!(observer.kicks().is_empty());
            Err(e)
        }
    }
}

async fn verdict(claim: &ClaimInput) -> Result<(), Error> {
    verdict_with(ValidationLimits::default(), claim).await
}

/// The fields a test can set, each reached by one setter.
#[derive(Clone, Copy, Debug)]
enum Field {
    Project,
    Env,
    ClaimId,
    Region,
    Cluster,
    Endpoint,
}

const ALL_FIELDS: [Field; 6] = [
    Field::Project,
    Field::Env,
    Field::ClaimId,
    Field::Region,
    Field::Cluster,
    Field::Endpoint,
];

fn with(field: Field, value: &str) -> ClaimInput {
    set(input(), field, value)
}

/// The smallest valid input, so tiny custom limits only bind the field under test.
fn minimal() -> ClaimInput {
    ClaimInput {
        key: Key::new("p", "e", 1),
        owner: Owner::new("", "", "http://h"),
        claim_id: "c".to_owned(),
    }
}

fn set(mut claim: ClaimInput, field: Field, value: &str) -> ClaimInput {
    let slot = match field {
        Field::Project => &mut claim.key.project,
        Field::Env => &mut claim.key.env,
        Field::ClaimId => &mut claim.claim_id,
        Field::Region => &mut claim.owner.region,
        Field::Cluster => &mut claim.owner.cluster,
        Field::Endpoint => &mut claim.owner.endpoint,
    };
    value.clone_into(slot);
    claim
}

/// A valid value of exactly `chars` characters for `field`, made of the one-character
/// `unit` (an endpoint keeps its `http://h/` prefix).
fn sized(field: Field, unit: char, chars: usize) -> String {
    let prefix = if matches!(field, Field::Endpoint) {
        "http://h/"
    } else {
        ""
    };
    let value: String = prefix
        .chars()
        .chain(std::iter::repeat_n(unit, chars - prefix.len()))
        .collect();
    assert_eq!(value.chars().count(), chars);
    value
}

fn limit(field: Field, limits: ValidationLimits) -> usize {
    match field {
        Field::Project | Field::Env | Field::Region | Field::Cluster => limits.tenant,
        Field::ClaimId => limits.claim_id,
        Field::Endpoint => limits.endpoint,
    }
}

async fn check_length_boundaries(limits: ValidationLimits) {
    for field in ALL_FIELDS {
        let max = limit(field, limits);
        // 'é' is 2 bytes, '€' 3 and '😀' 4: limits count characters, not bytes.
        for unit in ['a', 'é', '€', '😀'] {
            let at = sized(field, unit, max);
            verdict_with(limits, &set(minimal(), field, &at))
                .await
                .unwrap_or_else(|e| panic!("{field:?} of {max} characters ({unit}) refused: {e}"));
            let over = sized(field, unit, max + 1);
            assert!(
                verdict_with(limits, &set(minimal(), field, &over))
                    .await
                    .is_err(),
                "{field:?} of {} characters ({unit}) accepted",
                max + 1
            );
        }
    }
}

#[tokio::test]
async fn every_field_accepts_its_character_limit_and_refuses_one_more() {
    check_length_boundaries(ValidationLimits::default()).await;
}

#[tokio::test]
async fn multi_byte_values_count_characters_not_bytes() {
    // 64 characters, 128 and 256 bytes: within the 64-character tenant limit.
    verdict(&with(Field::Project, &"é".repeat(64)))
        .await
        .unwrap();
    verdict(&with(Field::Env, &"😀".repeat(64))).await.unwrap();
    // 65 characters, though fewer bytes than the 64 four-byte ones above.
    let env = "é".repeat(64) + "a";
    let e = verdict(&with(Field::Env, &env)).await.unwrap_err();
    assert!(
        e.to_string().contains("env must be at most 64 characters"),
        "{e}"
    );
}

#[tokio::test]
async fn custom_limits_move_every_boundary() {
    check_length_boundaries(ValidationLimits {
        tenant: 5,
        claim_id: 7,
        endpoint: 12,
    })
    .await;
}

#[tokio::test]
async fn custom_limits_can_allow_longer_values_than_the_defaults() {
    let limits = ValidationLimits {
        tenant: 100,
        claim_id: 300,
        endpoint: 4096,
    };
    let project = "p".repeat(100);
    assert!(verdict(&with(Field::Project, &project)).await.is_err());
    verdict_with(limits, &with(Field::Project, &project))
        .await
        .unwrap();
    check_length_boundaries(limits).await;
}

#[tokio::test]
async fn required_fields_refuse_empty() {
    for field in [Field::Project, Field::Env, Field::ClaimId, Field::Endpoint] {
        assert!(verdict(&with(field, "")).await.is_err(), "{field:?}");
    }
}

#[tokio::test]
async fn region_and_cluster_may_be_empty() {
    let mut claim = with(Field::Region, "");
    claim.owner.cluster.clear();
    verdict(&claim).await.unwrap();
}

#[tokio::test]
async fn control_characters_are_refused_in_every_string_field() {
    // ASCII controls (NUL, TAB, LF, ESC, US), DEL and the U+0080–U+009F block (NEL, CSI).
    for control in [
        '\0', '\t', '\n', '\u{1b}', '\u{1f}', '\u{7f}', '\u{85}', '\u{9b}',
    ] {
        for field in ALL_FIELDS {
            let value = if matches!(field, Field::Endpoint) {
                format!("http://h/a{control}b")
            } else {
                format!("a{control}b")
            };
            assert!(
                verdict(&with(field, &value)).await.is_err(),
                "{field:?} with {control:?} accepted"
            );
        }
    }
}

#[tokio::test]
async fn printable_unicode_is_accepted_in_every_string_field() {
    for field in ALL_FIELDS {
        let value = if matches!(field, Field::Endpoint) {
            "http://h/ünï€ødé-😀"
        } else {
            "ünï€ødé-😀 with space"
        };
        verdict(&with(field, value))
            .await
            .unwrap_or_else(|e| panic!("{field:?}: {e}"));
    }
}

#[tokio::test]
async fn hash_is_refused_in_project_and_env_only() {
    for field in [Field::Project, Field::Env] {
        for value in ["#", "a#b", "#a", "a#"] {
            assert!(
                verdict(&with(field, value)).await.is_err(),
                "{field:?} {value}"
            );
        }
    }
    for field in [Field::ClaimId, Field::Region, Field::Cluster] {
        verdict(&with(field, "a#b"))
            .await
            .unwrap_or_else(|e| panic!("{field:?}: {e}"));
    }
    verdict(&with(Field::Endpoint, "http://h/kick#frag"))
        .await
        .unwrap();
}

#[tokio::test]
async fn uid_must_be_at_least_one() {
    for uid in [0, -1, i64::MIN] {
        let mut claim = input();
        claim.key.uid = uid;
        assert!(verdict(&claim).await.is_err(), "uid {uid} accepted");
    }
    for uid in [1, i64::MAX] {
        let mut claim = input();
        claim.key.uid = uid;
        verdict(&claim).await.unwrap();
    }
}

#[tokio::test]
async fn endpoint_must_be_an_absolute_http_or_https_url() {
    for bad in [
        "ftp://node/kick",
        "ws://node/kick",
        "file:///kick",
        "/kick",
        "kick",
        "node:9000/kick",
        "//node/kick",
        "http:/node/kick",
        "http://",
        "http:///kick",
        "https://:443/kick",
        "http://user@/kick",
    ] {
        assert!(verdict(&with(Field::Endpoint, bad)).await.is_err(), "{bad}");
    }
    for good in [
        "http://node",
        "https://node:8443/kick?token=x",
        "HTTPS://NODE/kick",
        "http://10.0.0.7:9000/kick",
        "http://[::1]:9000/kick",
    ] {
        verdict(&with(Field::Endpoint, good))
            .await
            .unwrap_or_else(|e| panic!("{good}: {e}"));
    }
}

#[tokio::test]
async fn endpoint_with_whitespace_is_refused() {
    for bad in [
        " http://node/kick",
        "http://node/kick ",
        "http://node /kick",
        "http://node/k ick",
        "http://node/k\u{a0}ick",
        "http://node/k\u{3000}ick",
    ] {
        assert!(
            verdict(&with(Field::Endpoint, bad)).await.is_err(),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn refusal_never_echoes_the_endpoint_query_string() {
    let err = verdict(&with(Field::Endpoint, "ftp://node/kick?token=hunter2"))
        .await
        .unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let long = format!("http://node/kick?token=hunter2{}", "x".repeat(3000));
    let err = verdict(&with(Field::Endpoint, &long)).await.unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[tokio::test]
async fn refusal_names_the_field() {
    for (field, name) in [
        (Field::Project, "project"),
        (Field::Env, "env"),
        (Field::ClaimId, "claim_id"),
        (Field::Region, "owner.region"),
        (Field::Cluster, "owner.cluster"),
        (Field::Endpoint, "owner.endpoint"),
    ] {
        let err = verdict(&with(field, "a\nb")).await.unwrap_err();
        assert!(err.to_string().contains(name), "{field:?}: {err}");
    }
}

#[tokio::test]
async fn current_and_release_validate_the_key_before_any_store_call() {
    let mut bad_keys = Vec::new();
    for (field, value) in [
        (Field::Project, ""),
        (Field::Env, "a#b"),
        (Field::Project, "a\u{7f}"),
    ] {
        bad_keys.push(with(field, value).key);
    }
    let mut zero_uid = input().key;
    zero_uid.uid = 0;
    bad_keys.push(zero_uid);
    bad_keys.push(with(Field::Env, &"e".repeat(65)).key);

    for key in bad_keys {
        let observer = RecordingObserver::default();
        let arbiter = Arbiter::builder(ScriptedStore::new())
            .observer(observer.clone())
            .build();
        assert!(arbiter.current(&key).await.unwrap_err().is_invalid_params());
        for generation in [5, 0, -1] {
            let err = arbiter.release(&key, generation).await.unwrap_err();
            assert!(err.is_invalid_params(), "{key:?} gen {generation}: {err}");
        }
        assert!(arbiter.store().calls().is_empty(), "{key:?}");
        assert!(observer.releases().is_empty(), "{key:?}: not a release");
    }
}
