//! Unit tests of `auth.rs`.
use http::HeaderValue;

use super::*;

const GAME: &str = "game-token-0123456789";
const OPS: &str = "ops-token-0123456789ab";

fn tokens() -> Tokens {
    Tokens::parse(&format!(
        r#"{{"tokens": [
            {{"name": "game", "token": "{GAME}", "projects": ["game"], "envs": ["prod"]}},
            {{"name": "ops", "token": "{OPS}", "projects": ["*"], "roles": ["admin"]}}
        ]}}"#
    ))
    .unwrap()
}

fn headers(authorization: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, HeaderValue::from_str(authorization).unwrap());
    headers
}

#[test]
fn a_known_token_gets_its_grant_and_scope() {
    let tokens = tokens();
    let game = tokens
        .authenticate(&headers(&format!("Bearer {GAME}")))
        .unwrap();
    assert_eq!(game.name(), "game");
    assert!(game.permits(&Key::new("game", "prod", 1)));
    assert!(!game.permits(&Key::new("game", "staging", 1)));
    assert!(!game.permits(&Key::new("chat", "prod", 1)));
    let ops = tokens
        .authenticate(&headers(&format!("bearer  {OPS} ")))
        .unwrap();
    assert!(ops.permits(&Key::new("anything", "at-all", 7)));
    assert!(ops.has_role(Role::Admin) && !game.has_role(Role::Admin));
}

#[test]
fn leases_need_the_project_with_every_env() {
    let all_envs = Grant::new("g", vec!["game".into()], None);
    assert!(all_envs.permits_project("game"));
    assert!(!all_envs.permits_project("chat"));
    let star = Grant::new("g", vec!["game".into()], Some(vec!["*".into()]));
    assert!(star.permits_project("game"));
    let prod_only = Grant::new("g", vec!["game".into()], Some(vec!["prod".into()]));
    assert!(!prod_only.permits_project("game"));
    assert!(Grant::new("ops", vec!["*".into()], None).permits_project("anything"));
}

#[test]
fn roles_are_read_from_the_file_and_only_known_ones_are_accepted() {
    let file = |roles: &str| {
        format!(r#"{{"tokens": [{{"name": "t", "token": "{OPS}", "projects": ["p"]{roles}}}]}}"#)
    };
    let grant_of = |tokens: &Tokens| {
        tokens
            .authenticate(&headers(&format!("Bearer {OPS}")))
            .unwrap()
            .clone()
    };
    for (roles, admin) in [
        ("", false),
        (r#", "roles": []"#, false),
        (r#", "roles": ["admin"]"#, true),
        (r#", "roles": ["admin", "admin"]"#, true),
    ] {
        let tokens = Tokens::parse(&file(roles)).unwrap();
        assert_eq!(grant_of(&tokens).has_role(Role::Admin), admin, "{roles}");
    }
    for (roles, needle) in [
        (r#", "roles": ["Admin"]"#, "unknown role (known: admin)"),
        (r#", "roles": ["admin", "root"]"#, "unknown role"),
        (r#", "roles": ["admn-secret-like-value"]"#, "unknown role"),
        (r#", "roles": "admin""#, "line 1"),
        (r#", "role": ["admin"]"#, "unknown field"),
    ] {
        let message = Tokens::parse(&file(roles)).unwrap_err().to_string();
        assert!(message.contains(needle), "{message:?} for {roles}");
        assert!(
            !message.contains("secret-like") && !message.contains(OPS),
            "{message:?}"
        );
    }
    // In code: adding a role twice holds it once; a role never widens the scope.
    let grant = Grant::new("g", vec!["game".into()], None)
        .with_role(Role::Admin)
        .with_role(Role::Admin);
    assert_eq!(
        grant,
        Grant::new("g", vec!["game".into()], None).with_role(Role::Admin)
    );
    assert!(!grant.permits(&Key::new("chat", "prod", 1)));
    assert_eq!(Role::from_name("admin"), Some(Role::Admin));
    assert_eq!(Role::Admin.to_string(), "admin");
    assert_eq!(Role::from_name("ADMIN"), None);
}

#[test]
fn missing_malformed_and_unknown_tokens_are_refused() {
    let tokens = tokens();
    assert_eq!(
        tokens.authenticate(&HeaderMap::new()),
        Err(Unauthenticated::Missing)
    );
    for malformed in ["Basic abc", "Bearer", "Bearer   ", GAME] {
        assert_eq!(
            tokens.authenticate(&headers(malformed)),
            Err(Unauthenticated::Malformed),
            "{malformed}"
        );
    }
    for unknown in [
        "Bearer game-token-012345678",
        "Bearer game-token-0123456789x",
        "Bearer GAME-TOKEN-0123456789",
    ] {
        assert_eq!(
            tokens.authenticate(&headers(unknown)),
            Err(Unauthenticated::Unknown),
            "{unknown}"
        );
    }
}

#[test]
fn bad_tokens_files_are_refused_without_echoing_a_token() {
    for (file, needle) in [
        ("{", "not valid"),
        (r#"{"tokens": []}"#, "no token"),
        (
            r#"{"tokens": [{"name": "a", "token": "short-secret", "projects": ["p"]}]}"#,
            "shorter than 16",
        ),
        (
            r#"{"tokens": [{"name": "a", "token": "has a space in it!", "projects": ["p"]}]}"#,
            "printable",
        ),
        (
            r#"{"tokens": [{"name": "a", "token": "long-enough-secret", "projects": []}]}"#,
            "no project",
        ),
        (
            r#"{"tokens": [{"name": "a", "token": "long-enough-secret", "project": ["p"]}]}"#,
            "unknown field",
        ),
        (
            r#"{"tokens": [{"name": "a", "token": 12345678901234567890, "projects": ["p"]}]}"#,
            "line 1",
        ),
        (
            r#"{"tokens": [{"name": "a", "token": "long-enough-secret", "projects": ["p"]},
                           {"name": "b", "token": "long-enough-secret", "projects": ["q"]}]}"#,
            "twice",
        ),
    ] {
        let message = Tokens::parse(file).unwrap_err().to_string();
        assert!(message.contains(needle), "{message:?} for {file}");
        assert!(!message.contains("secret"), "{message:?} echoes a token");
        assert!(
            !message.contains("1234567890"),
            "{message:?} echoes a token"
        );
    }
}

const NEW_GAME: &str = "game-token-rotated-0123";

fn tokens_of(list: &[(&str, &str, &str)]) -> Tokens {
    let mut tokens = Tokens::new();
    for (name, token, project) in list {
        tokens
            .add(token, Grant::new(*name, vec![(*project).to_owned()], None))
            .unwrap();
    }
    tokens
}

#[test]
fn a_role_granted_or_taken_shows_in_the_diff() {
    let plain = tokens_of(&[("ops", OPS, "ops")]);
    let mut admin = Tokens::new();
    admin
        .add(
            OPS,
            Grant::new("ops", vec!["ops".into()], None).with_role(Role::Admin),
        )
        .unwrap();
    let diff = plain.diff(&admin);
    assert_eq!(
        (diff.added, diff.removed),
        (vec!["ops".to_owned()], vec!["ops".to_owned()])
    );
    assert!(format!("{admin:?}").contains("Admin"));
}

#[test]
fn diff_names_added_and_removed_tokens_by_secret_and_scope() {
    let old = tokens_of(&[("game", GAME, "game"), ("ops", OPS, "ops")]);
    assert!(
        old.diff(&tokens_of(&[("ops", OPS, "ops"), ("game", GAME, "game")]))
            .is_empty()
    );
    let rotated = tokens_of(&[
        ("game", GAME, "game"),
        ("ops", OPS, "ops"),
        ("game-2", NEW_GAME, "game"),
    ]);
    let diff = old.diff(&rotated);
    assert_eq!(diff.added, ["game-2"]);
    assert!(diff.removed.is_empty());
    let dropped = tokens_of(&[("game-2", NEW_GAME, "game"), ("ops", OPS, "ops")]);
    assert_eq!(rotated.diff(&dropped).removed, ["game"]);
    assert!(rotated.diff(&dropped).added.is_empty());
    // The same name with another secret, or another scope, is both removed and added.
    let resecret = tokens_of(&[("game", NEW_GAME, "game"), ("ops", OPS, "ops")]);
    let diff = old.diff(&resecret);
    assert_eq!(
        (diff.added.as_slice(), diff.removed.as_slice()),
        (&["game".to_owned()][..], &["game".to_owned()][..])
    );
    let rescoped = tokens_of(&[("game", GAME, "chat"), ("ops", OPS, "ops")]);
    assert_eq!(old.diff(&rescoped).added, ["game"]);
    let shown = format!("{:?}", old.diff(&resecret));
    assert!(
        !shown.contains(GAME) && !shown.contains(NEW_GAME),
        "{shown}"
    );
}

#[test]
fn shared_tokens_swap_the_whole_set_for_every_clone() {
    let shared = SharedTokens::from(tokens_of(&[("game", GAME, "game")]));
    let clone = shared.clone();
    let before = clone.get();
    let old = shared.replace(tokens_of(&[("game-2", NEW_GAME, "game")]));
    assert_eq!(old.len(), 1);
    assert!(
        old.authenticate(&headers(&format!("Bearer {GAME}")))
            .is_ok()
    );
    // A holder of the old set (a request in flight) keeps it whole.
    assert!(
        before
            .authenticate(&headers(&format!("Bearer {GAME}")))
            .is_ok()
    );
    let now = clone.get();
    assert_eq!(
        now.authenticate(&headers(&format!("Bearer {GAME}"))),
        Err(Unauthenticated::Unknown)
    );
    assert_eq!(
        now.authenticate(&headers(&format!("Bearer {NEW_GAME}")))
            .unwrap()
            .name(),
        "game-2"
    );
    let shown = format!("{shared:?}");
    assert!(
        shown.contains("game-2") && !shown.contains(NEW_GAME),
        "{shown}"
    );
}

#[test]
fn debug_never_shows_a_token() {
    let shown = format!("{:?}", tokens());
    assert!(shown.contains("game") && shown.contains("ops"));
    assert!(!shown.contains(GAME) && !shown.contains(OPS));
}
