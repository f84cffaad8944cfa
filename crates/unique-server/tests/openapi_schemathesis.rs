//! `docs/openapi.yaml` against the real server binary, by schemathesis: every operation gets
//! at least 100 generated requests, valid and invalid, and `--checks all` holds each answer
//! to the document (a schema-valid request must not be refused, a schema-violating one must
//! be, statuses, bodies and headers as documented).
//!
//! The server (memory store, a bearer token for every project with the admin role, so the
//! auth checks see a 401 without it; the widest slot cap and session limit, 1000, since the
//! document types a pool's `limit` up to that bound and a schema-valid claim must be served) and schemathesis both run inside a network namespace
//! with only loopback up: no generated endpoint (a claim's owner URL is kicked when a later
//! claim replaces it) can reach anything off the machine. The seed is fixed, so a run is
//! repeatable; a failure prints schemathesis' report with a `curl` line per failure.
//!
//! One operation is left out: `nodeKicks` (`GET /v1/nodes/{node_id}/kicks`), a kick stream whose
//! answer never ends, so no request to it completes within schemathesis' timeout; its answers
//! are held to the document by unique-arbiter-http's tests/openapi.rs (refusals) and read by
//! tests/push_kicks.rs (the stream). Every other operation must be tested.
//!
//! Installing schemathesis (pinned, pip into `.tools/`) or making the namespace failing
//! fails the test with a message saying what is missing.

mod common;

use std::process::Command;

use unique_testsupport::schemathesis;

/// The token the server accepts, for every project, with the admin role.
const TOKEN: &str = "schemathesis-token-every-project";
/// Fixed, so every run generates the same requests.
const SEED: &str = "20261202";
/// Generated requests per operation in the fuzzing phase (the coverage phase adds its own).
const MAX_EXAMPLES: &str = "100";
/// The operation not run: a kick stream's body never ends (see the module's comment).
const EXCLUDED: &str = "nodeKicks";

/// Inside the namespace: loopback up and nothing else; the server on a free port, announced
/// on its first stdout line; schemathesis against it; the server stopped. Exit 90 when the
/// namespace is not as it must be, 91 when the server does not start.
const RUN: &str = r#"
set -u
"$IP" link set lo up || { echo "cannot bring up loopback in the namespace" >&2; exit 90; }
if "$IP" -o link show | grep -v ': lo:' | grep -q .; then
    echo "the namespace has a link other than lo" >&2; "$IP" -o link show >&2; exit 90
fi
echo "namespace: loopback only"
"$SERVER" --listen 127.0.0.1:0 --store memory --auth-tokens "$TOKENS" \
    --max-slots-per-user 1000 --session-limit 1000 > server.out 2> server.err &
server=$!
addr=""
for _ in $(seq 1 200); do
    addr=$(sed -n 's|^unique-server listening on http://||p' server.out)
    [ -n "$addr" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.05
done
if [ -z "$addr" ]; then
    echo "unique-server did not start:" >&2; cat server.out server.err >&2; exit 91
fi
"$ST" run "$DOC" --url "http://$addr" -H "Authorization: Bearer $TOKEN" \
    --checks all --max-examples "$MAX_EXAMPLES" --seed "$SEED" \
    --exclude-operation-id "$EXCLUDED" \
    --generation-database none --request-timeout 10 --no-color
status=$?
kill "$server"
wait "$server"
exit $status
"#;

#[test]
fn schemathesis_finds_no_failure_in_the_document() {
    let st = schemathesis::schemathesis_path();
    let (unshare, ip) = schemathesis::namespace_tools();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    common::write_secret(
        &tokens,
        &format!(
            r#"{{"tokens": [{{"name": "schemathesis", "token": "{TOKEN}", "projects": ["*"], "roles": ["admin"]}}]}}"#
        ),
    );
    let doc = unique_testsupport::workspace_root().join("docs/openapi.yaml");
    let text = std::fs::read_to_string(&doc).unwrap();
    let ids: Vec<&str> = text
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("operationId:"))
        .map(str::trim)
        .collect();
    assert!(
        ids.contains(&EXCLUDED),
        "no operation {EXCLUDED} to leave out"
    );
    let all = ids.len();
    let operations = all - 1;

    let output = Command::new(&unshare)
        .args(["-n", "sh", "-c", RUN])
        .current_dir(dir.path())
        .env("IP", &ip)
        .env("SERVER", common::BIN)
        .env("ST", &st)
        .env("DOC", &doc)
        .env("TOKENS", &tokens)
        .env("TOKEN", TOKEN)
        .env("SEED", SEED)
        .env("MAX_EXAMPLES", MAX_EXAMPLES)
        .env("EXCLUDED", EXCLUDED)
        .env("RUST_LOG", "error")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", unshare.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stdout.contains("namespace: loopback only"),
        "cannot make a network namespace with only loopback (`unshare -n`, then `ip link set lo \
         up`; needs root or CAP_SYS_ADMIN), {}: {stderr}",
        output.status
    );
    assert!(
        output.status.success(),
        "schemathesis found failures ({}), or the server did not start:\n{stdout}\n{stderr}",
        output.status
    );
    // Every operation of the document but the stream was tested, none skipped.
    let tested = format!("Tested: {operations}");
    assert!(
        stdout.contains(&format!("Selected: {operations}/{all}")) && stdout.contains(&tested),
        "schemathesis did not test {operations} of the {all} operations:\n{stdout}"
    );
    assert!(stdout.contains("No issues found"), "{stdout}");
    let generated = generated_cases(&stdout);
    assert!(
        generated >= 100 * operations,
        "only {generated} requests for {operations} operations:\n{stdout}"
    );
}

/// The `N generated` count of schemathesis' summary.
fn generated_cases(report: &str) -> usize {
    report
        .lines()
        .find_map(|line| line.trim().split_once(" generated"))
        .and_then(|(count, _)| count.trim().parse().ok())
        .unwrap_or_else(|| panic!("no generated count in the report:\n{report}"))
}
