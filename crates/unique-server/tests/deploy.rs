//! The deployment files in `deploy/`: the Prometheus rules pass `promtool` and their own unit
//! tests and name only series the server exports; the systemd unit passes `systemd-analyze
//! verify` with the real binary, sets only settings the server has, and leaves file descriptors
//! for every connection it allows.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
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

#[test]
fn prometheus_rules_name_only_metrics_the_server_exports() {
    let rules = std::fs::read_to_string(deploy("prometheus").join("unique-rules.yml")).unwrap();
    let used = metric_names(&rules);
    assert!(used.len() >= 5, "{used:?}");

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
    let exposition = request(&addr, "GET", "/metrics", "");
    let exported: BTreeSet<String> = exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|line| line.split(' ').next())
        .map(str::to_owned)
        .collect();
    let missing: Vec<_> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the rules name series the server does not export: {missing:?}\n{exposition}"
    );
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
    // The store lives in the state directory, the secrets come in as credentials.
    let env = |name: &str| {
        settings
            .iter()
            .rfind(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(env("UNIQUE_STORE"), Some("fjall"));
    assert_eq!(env("UNIQUE_FJALL_DIR"), Some("%S/unique/unique.fjall"));
    assert_eq!(env("UNIQUE_AUTH_TOKENS"), Some("%d/tokens.json"));
    assert_eq!(env("UNIQUE_KICK_SIGNING_KEYS"), Some("%d/kick-keys.json"));
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
