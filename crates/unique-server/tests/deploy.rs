//! The deployment files in `deploy/`: the Prometheus rules pass `promtool` and their own unit
//! tests and name only series the server exports, as does every query of the Grafana dashboard
//! (its promised panels among them: sessions online, lease takeovers); the systemd unit passes `systemd-analyze
//! verify` with the real binary, sets only settings the server has, leaves file descriptors
//! for every connection it allows, serves TLS on 7420, rereads its secrets in place on a reload
//! and keeps `systemd-analyze security`'s exposure in its best band.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use unique_testsupport::{ChildGuard, promtool, systemd, workspace_root};

use common::{BIN, announced_addr, request};

fn deploy(dir: &str) -> PathBuf {
    workspace_root().join("deploy").join(dir)
}

#[test]
fn prometheus_rules_load_and_pass_their_unit_tests() {
    let dir = deploy("prometheus");
    let checked = promtool::run_in(&dir, &["check", "rules", "unique-rules.yml"])
        .unwrap_or_else(|problems| panic!("{problems}"));
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool::run_in(&dir, &["test", "rules", "unique-rules.test.yml"])
        .unwrap_or_else(|problems| panic!("{problems}"));
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// The `unique_*` metric names an expression text mentions (histogram series by their base name).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("unique_") {
        // `unique:claims:rate5m` is a recorded series, not an exported one; a name starts where
        // no identifier character precedes it.
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            let name = &tail[..len];
            names.insert(name.strip_suffix("_bucket").unwrap_or(name).to_owned());
        }
        rest = &tail[len..];
    }
    names
}

/// The metric families a real server exposes on `/metrics` (every `# TYPE` line).
fn exported_metrics() -> (BTreeSet<String>, String) {
    let mut child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--insecure-no-auth",
        ])
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = announced_addr(&mut child);
    let _server = ChildGuard::new(child, "unique-server");
    // unique_sessions_online appears once the first count (started with the server, not
    // awaited before it listens) has answered.
    let start = std::time::Instant::now();
    let exposition = loop {
        let exposition = request(&addr, "GET", "/metrics", "");
        if exposition.contains("# TYPE unique_sessions_online ")
            || start.elapsed() > unique_testsupport::net::PATIENCE
        {
            break exposition;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let exported = exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|line| line.split(' ').next())
        .map(str::to_owned)
        .collect();
    (exported, exposition)
}

#[test]
fn prometheus_rules_name_only_metrics_the_server_exports() {
    let rules = std::fs::read_to_string(deploy("prometheus").join("unique-rules.yml")).unwrap();
    let used = metric_names(&rules);
    assert!(used.len() >= 5, "{used:?}");
    let (exported, exposition) = exported_metrics();
    let missing: Vec<_> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the rules name series the server does not export: {missing:?}\n{exposition}"
    );
}

/// Every `expr` of every panel's targets in a Grafana dashboard, with the panel's title.
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"]
        .as_array()
        .expect("the dashboard has panels")
    {
        let title = panel["title"].as_str().unwrap_or("?").to_owned();
        let targets = panel["targets"].as_array();
        assert!(
            targets.is_some_and(|t| !t.is_empty()),
            "panel {title:?} has no query"
        );
        for target in targets.into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .expect("a Prometheus target has an expr");
            queries.push((title.clone(), expr.to_owned()));
        }
    }
    queries
}

#[test]
fn grafana_dashboard_queries_only_metrics_the_server_exports() {
    let text = std::fs::read_to_string(deploy("grafana").join("unique.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 6, "{queries:?}");
    let (exported, exposition) = exported_metrics();
    for (title, expr) in &queries {
        let used = metric_names(expr);
        assert!(
            !used.is_empty(),
            "panel {title:?} queries no unique_ metric: {expr}"
        );
        let missing: Vec<_> = used.difference(&exported).collect();
        assert!(
            missing.is_empty(),
            "panel {title:?} queries series the server does not export: {missing:?} in {expr}\n\
             {exposition}"
        );
    }
    // The panels the dashboard promises, by the series behind them.
    let all: String = queries.iter().map(|(_, expr)| expr.as_str()).collect();
    for promised in [
        "unique_claims_total",
        "unique_claim_duration_seconds_bucket",
        "unique_kicks_total",
        "unique_store_errors_total",
        "unique_sessions_online",
        "unique_lease_takeovers_total",
    ] {
        assert!(all.contains(promised), "no panel queries {promised}");
    }
}

/// `Environment=NAME=value` settings of a unit, in order.
fn environment(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .filter_map(|line| line.strip_prefix("Environment="))
        .filter_map(|setting| setting.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

fn setting<'a>(unit: &'a str, name: &str) -> Option<&'a str> {
    unit.lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix('='))
        .next_back()
}

#[test]
fn systemd_unit_verifies_with_the_real_binary() {
    let unit = std::fs::read_to_string(deploy("systemd").join("unique-server.service")).unwrap();
    assert_eq!(
        setting(&unit, "ExecStart"),
        Some("/usr/local/bin/unique-server")
    );
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("unique-server.service");
    std::fs::write(&local, unit.replace("/usr/local/bin/unique-server", BIN)).unwrap();
    systemd::verify(&local).unwrap_or_else(|problems| panic!("{problems}"));

    // The same check must be able to fail: a value systemd cannot parse (it exits 0 then).
    let broken = dir.path().join("broken.service");
    std::fs::write(
        &broken,
        std::fs::read_to_string(&local)
            .unwrap()
            .replace("ProtectSystem=strict", "ProtectSystem=bogus"),
    )
    .unwrap();
    let problems = systemd::verify(&broken).unwrap_err();
    assert!(problems.contains("bogus"), "{problems}");
}

#[test]
fn systemd_unit_sets_only_real_settings_and_enough_file_descriptors() {
    let unit = std::fs::read_to_string(deploy("systemd").join("unique-server.service")).unwrap();
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let settings = environment(&unit);
    assert!(settings.len() >= 5, "{settings:?}");
    for (name, _) in &settings {
        assert!(
            help.contains(&format!("[env: {name}=")),
            "the unit sets {name}, which unique-server --help does not list"
        );
    }
    for hardening in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "DynamicUser=yes",
        "StateDirectory=unique",
    ] {
        assert!(unit.contains(hardening), "{hardening} missing");
    }
    let max_connections: u64 = settings
        .iter()
        .rfind(|(name, _)| name == "UNIQUE_MAX_CONNECTIONS")
        .map(|(_, value)| value.parse().unwrap())
        .expect("the unit states the connection cap");
    let files: u64 = setting(&unit, "LimitNOFILE").unwrap().parse().unwrap();
    assert!(
        files >= max_connections + 1024,
        "LimitNOFILE={files} leaves too little beside {max_connections} connections"
    );
    // The store lives in the state directory.
    let env = |name: &str| {
        settings
            .iter()
            .rfind(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(env("UNIQUE_STORE"), Some("fjall"));
    assert_eq!(env("UNIQUE_FJALL_DIR"), Some("%S/unique/unique.fjall"));
}

#[test]
fn systemd_unit_serves_tls_on_7420_and_rereads_its_secrets_in_place_on_reload() {
    let unit = std::fs::read_to_string(deploy("systemd").join("unique-server.service")).unwrap();
    let settings = environment(&unit);
    let env = |name: &str| {
        settings
            .iter()
            .rfind(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(env("UNIQUE_LISTEN"), Some("0.0.0.0:7420"));
    assert_eq!(env("UNIQUE_TLS_CERT"), Some("/etc/unique/tls-cert.pem"));
    assert_eq!(env("UNIQUE_TLS_KEY"), Some("/etc/unique/tls-key.pem"));
    assert_eq!(
        setting(&unit, "ExecReload"),
        Some("/bin/kill -HUP $MAINPID")
    );
    // Read where they live, so a SIGHUP sees the rotated file: no credential copies.
    assert_eq!(env("UNIQUE_AUTH_TOKENS"), Some("/etc/unique/tokens.json"));
    assert_eq!(
        env("UNIQUE_KICK_SIGNING_KEYS"),
        Some("/etc/unique/kick-keys.json")
    );
    for copying in ["LoadCredential", "LoadCredentialEncrypted", "SetCredential"] {
        assert_eq!(
            setting(&unit, copying),
            None,
            "{copying}= copies the secrets"
        );
    }
    // The dynamic user reads the root-owned 0440 files through their group.
    assert_eq!(setting(&unit, "SupplementaryGroups"), Some("unique"));
}

#[test]
fn systemd_unit_exposure_stays_low() {
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("unique-server.service");
    std::fs::copy(deploy("systemd").join("unique-server.service"), &local).unwrap();
    let analyze = systemd::analyze_path();
    let output = Command::new(&analyze)
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&local)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    let score: f64 = report
        .lines()
        .find_map(|line| line.split("unique-server.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|score| score.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{report}"));
    // systemd rates 0-10; below 2 is its best band ("OK"). The unit scores 1.3 today.
    assert!(score < 2.0, "exposure {score}:\n{report}");
}

#[test]
fn metric_names_are_read_from_expressions() {
    let names = metric_names(
        "sum(rate(unique_claims_total[5m])) / unique:claims:rate5m + x_unique_other + \
         rate(unique_claim_duration_seconds_bucket[1m])",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["unique_claim_duration_seconds", "unique_claims_total"]
    );
}

/// The operations of the `aws-sdk-dynamodb` release in Cargo.lock: the modules of its
/// `src/operation` (one per operation, `get_item`, `batch_get_item`, ...), in cargo's registry.
fn dynamodb_operations() -> BTreeSet<String> {
    let lock = std::fs::read_to_string(workspace_root().join("Cargo.lock")).unwrap();
    let version = lock
        .split("[[package]]")
        .find(|package| package.contains("name = \"aws-sdk-dynamodb\"\n"))
        .and_then(|package| package.split("version = \"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .expect("aws-sdk-dynamodb in Cargo.lock");
    let home = std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"),
        PathBuf::from,
    );
    let registry = home.join("registry").join("src");
    let operations = std::fs::read_dir(&registry)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", registry.display()))
        .map(|index| {
            index
                .unwrap()
                .path()
                .join(format!("aws-sdk-dynamodb-{version}/src/operation"))
        })
        .find(|dir| dir.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no aws-sdk-dynamodb-{version}/src/operation under {}",
                registry.display()
            )
        });
    std::fs::read_dir(operations)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// The DynamoDB operations the store's code calls: every `.op()` called on a value named
/// `client` (the `aws_sdk_dynamodb::Client` field of the session store and the lease
/// directory) that is an operation of the SDK, as `dynamodb:Op` IAM action names.
fn dynamodb_actions_called(dir: &Path) -> BTreeSet<String> {
    let operations = dynamodb_operations();
    assert!(operations.len() > 40, "{operations:?}");
    let mut actions = BTreeSet::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let code = std::fs::read_to_string(&path).unwrap();
                actions.extend(
                    client_calls(&code)
                        .into_iter()
                        .filter(|call| operations.contains(call))
                        .map(|op| iam_action(&op)),
                );
            }
        }
    }
    actions
}

/// The methods called on `client` in `code` (`client.get_item()`, or across lines
/// `.client\n    .query()`).
fn client_calls(code: &str) -> Vec<String> {
    let mut calls = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("client") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + "client".len()..];
        rest = after;
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let Some(call) = after.trim_start().strip_prefix('.') else {
            continue;
        };
        let call = call.trim_start();
        let len = call
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(call.len());
        if len > 0 && call[len..].starts_with("()") {
            calls.push(call[..len].to_owned());
        }
    }
    calls
}

/// `batch_get_item` -> `dynamodb:BatchGetItem`.
fn iam_action(operation: &str) -> String {
    let pascal: String = operation
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect();
    format!("dynamodb:{pascal}")
}

#[test]
fn dynamodb_iam_policy_allows_exactly_the_operations_the_store_calls() {
    let text = std::fs::read_to_string(deploy("dynamodb").join("iam-policy.json")).unwrap();
    let policy: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut allowed = BTreeSet::new();
    for statement in policy["Statement"].as_array().expect("statements") {
        assert_eq!(statement["Effect"], "Allow", "{statement}");
        for action in statement["Action"].as_array().expect("an action list") {
            allowed.insert(action.as_str().unwrap().to_owned());
        }
        for resource in statement["Resource"].as_array().expect("a resource list") {
            let resource = resource.as_str().unwrap();
            assert!(
                resource.starts_with("arn:aws:dynamodb:") && resource.contains(":table/"),
                "{resource}: tables only, never *"
            );
        }
    }
    let called =
        dynamodb_actions_called(&workspace_root().join("crates/unique-store-dynamodb/src"));
    // The scan itself must see the calls it is meant to find.
    for known in ["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query"] {
        assert!(called.contains(known), "{called:?}");
    }
    let unlisted: Vec<_> = called.difference(&allowed).collect();
    let unused: Vec<_> = allowed.difference(&called).collect();
    assert!(
        unlisted.is_empty() && unused.is_empty(),
        "deploy/dynamodb/iam-policy.json: the store calls {unlisted:?}, which the policy does \
         not allow; the policy allows {unused:?}, which the store never calls"
    );
}

#[test]
fn client_calls_are_read_across_lines() {
    let code = "let out = self\n    .client\n    .batch_get_item()\n    .send();\n\
                my_client.scan(); client.get_item().key(k); client.config();";
    assert_eq!(client_calls(code), ["batch_get_item", "get_item", "config"]);
    assert_eq!(iam_action("batch_get_item"), "dynamodb:BatchGetItem");
}
