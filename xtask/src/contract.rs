//! `cargo xtask contract`: finds every contract suite by convention, runs each,
//! and prints one table of backends, cases passed and failed, and the clause
//! each failure names.
//!
//! The convention: **a test target named `contract`, or whose name ends in
//! `_contract`, runs a contract suite** — a backend's run of a suite
//! (`tests/contract.rs` of a store, `tests/redis_contract.rs` of a lease
//! backend) or a suite checked against broken backends (`reference_contract`
//! of `unique-store-contract`, `broken_kickers_contract` of
//! `unique-kick-contract`). Targets are found with `cargo metadata`, in the
//! workspace or in the crate `--path` names, so a new backend needs no change here.
//!
//! Clauses come from libtest's output: a failing case's panic message starts
//! with the clause it breaks, as every check of the suites writes it: an id
//! heading of `docs/design.md` (`C5 release must keep gen: …`, `D4 …`) or one
//! of its named headings in [`NAMED_CLAUSES`], written whole (`Kick payload a
//! kick body must be …`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{Run, cargo};

/// One contract test target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Suite {
    pub(crate) package: String,
    pub(crate) target: String,
    /// The crate's manifest when it lives outside the workspace (`--path`).
    pub(crate) manifest: Option<PathBuf>,
}

/// Whether a test target runs a contract suite (the naming convention).
pub(crate) fn is_contract_target(name: &str) -> bool {
    name == "contract" || name.ends_with("_contract")
}

/// The contract test targets of the workspace (`manifest = None`) or of the
/// crate (or workspace) whose manifest is given, sorted by package and target.
pub(crate) fn discover(manifest: Option<&Path>) -> Result<Vec<Suite>, String> {
    Ok(suites_in(&metadata(manifest)?, manifest))
}

/// `cargo metadata --no-deps` of the workspace (`manifest = None`) or of the given manifest.
pub(crate) fn metadata(manifest: Option<&Path>) -> Result<Value, String> {
    let mut cmd = cargo(&["metadata", "--format-version", "1", "--no-deps"]);
    if let Some(manifest) = manifest {
        cmd.arg("--manifest-path").arg(manifest);
    }
    let output = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo metadata failed ({})", output.status));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cargo metadata printed no JSON: {e}"))
}

/// The contract targets listed in `cargo metadata` output.
fn suites_in(metadata: &Value, manifest: Option<&Path>) -> Vec<Suite> {
    let mut suites = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let Some(name) = package["name"].as_str() else {
            continue;
        };
        for target in package["targets"].as_array().into_iter().flatten() {
            let is_test = target["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "test"));
            if let Some(target) = target["name"].as_str()
                && is_test
                && is_contract_target(target)
            {
                suites.push(Suite {
                    package: name.to_owned(),
                    target: target.to_owned(),
                    manifest: manifest.map(Path::to_path_buf),
                });
            }
        }
    }
    suites.sort_by(|a, b| (&a.package, &a.target).cmp(&(&b.package, &b.target)));
    suites
}

/// What one suite's run showed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) passed: usize,
    /// Each failing test with the clause its message names (`?` when none).
    pub(crate) failures: Vec<(String, String)>,
}

/// Reads libtest's human output: `test NAME ... ok|FAILED` lines count the
/// cases; in each `---- NAME stdout ----` block, the first line after a
/// `panicked at` line whose first word is a clause gives that case's clause.
pub(crate) fn parse(output: &str) -> Outcome {
    let mut outcome = Outcome::default();
    let mut failed = Vec::new();
    for line in output.lines() {
        let Some(rest) = line.strip_prefix("test ") else {
            continue;
        };
        if rest.ends_with(" ... ok") {
            outcome.passed += 1;
        } else if let Some(name) = rest.strip_suffix(" ... FAILED") {
            failed.push(name.to_owned());
        }
    }
    for name in failed {
        let clause = failure_block(output, &name)
            .and_then(clause_in)
            .unwrap_or("?");
        outcome.failures.push((name, clause.to_owned()));
    }
    outcome
}

/// The captured output libtest prints for the failed test `name`.
fn failure_block<'a>(output: &'a str, name: &str) -> Option<&'a str> {
    let header = format!("---- {name} stdout ----");
    let start = output.find(&header)? + header.len();
    let rest = &output[start..];
    let end = ["\n---- ", "\nfailures:\n"]
        .iter()
        .filter_map(|marker| rest.find(marker))
        .min()
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The clause of the first panic message in `block` that names one.
fn clause_in(block: &str) -> Option<&str> {
    let mut after_panic = false;
    for line in block.lines() {
        if line.contains("panicked at") {
            after_panic = true;
            continue;
        }
        if after_panic {
            // A case's message starts with its clause; `run_all`'s report lists
            // its failures indented, each as `module::case: <message>`.
            let line = line.trim_start();
            let after_case = line.split_once(": ").map(|(_, message)| message);
            if let Some(word) = clause_of(line).or_else(|| after_case.and_then(clause_of)) {
                return Some(word);
            }
        }
    }
    None
}

/// The headings of `docs/design.md` without an id that a check may cite,
/// longest first so that no name is read as a shorter one. A check cites one
/// whole, spaces included, as the first words of its message; the
/// `named_clauses_are_design_headings` test keeps the list true.
pub(crate) const NAMED_CLAUSES: &[&str] = &[
    "Kick-endpoint policy",
    "Kick receiver",
    "Kick payload",
    "Signed kicks",
    "Records",
    "Kicker",
];

/// The clause `message` starts with: a design id (`C5`, `I3`, `D4`, `N1`,
/// `I5a`) as its first word, a named heading of [`NAMED_CLAUSES`] followed by
/// a space, or `harness` (the suite's own setup failed, no clause broken).
fn clause_of(message: &str) -> Option<&str> {
    if let Some(name) = NAMED_CLAUSES.iter().find(|name| {
        message
            .strip_prefix(**name)
            .is_some_and(|rest| rest.starts_with(' '))
    }) {
        return Some(&message[..name.len()]);
    }
    let word = message.split_whitespace().next()?;
    let digits = word.get(1..)?.trim_end_matches(['a', 'b']);
    let is_id = word.starts_with(|c: char| c.is_ascii_uppercase())
        && !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit());
    (is_id || word == "harness").then_some(word)
}

/// Runs every suite (discovered in the workspace, or in each `--path` crate)
/// and prints the table.
pub(crate) fn run_suites(run: &mut Run, paths: &[PathBuf], locked: bool) {
    let mut suites = Vec::new();
    let sources: Vec<Option<PathBuf>> = if paths.is_empty() {
        vec![None]
    } else {
        paths.iter().map(|p| Some(p.join("Cargo.toml"))).collect()
    };
    for manifest in &sources {
        match discover(manifest.as_deref()) {
            Ok(found) if found.is_empty() => {
                let place = manifest
                    .as_deref()
                    .map_or_else(|| "the workspace".to_owned(), |m| m.display().to_string());
                eprintln!("xtask: no test target named `contract` or `*_contract` in {place}");
                run.record(
                    &format!("contract discovery in {place}"),
                    false,
                    Duration::ZERO,
                );
            }
            Ok(found) => suites.extend(found),
            Err(e) => {
                eprintln!("xtask: {e}");
                run.record("contract discovery", false, Duration::ZERO);
            }
        }
    }
    // Computed once, and only when an out-of-tree crate is to be built.
    let mut workspace_target = None;
    let mut rows = Vec::new();
    for suite in &suites {
        let started = Instant::now();
        eprintln!("\n==> xtask: contract {} / {}", suite.package, suite.target);
        let target_dir = match &suite.manifest {
            None => Ok(None),
            Some(manifest) => workspace_target
                .get_or_insert_with(workspace_target_dir)
                .clone()
                .and_then(|base| own_target_dir(&base, manifest).map(Some)),
        };
        let (status_ok, output) = match target_dir {
            Ok(target_dir) => run_one(suite, target_dir.as_deref(), locked),
            Err(e) => {
                eprintln!("xtask: {e}");
                (false, String::new())
            }
        };
        let outcome = parse(&output);
        let ok = status_ok && outcome.failures.is_empty() && outcome.passed > 0;
        run.record(
            &format!("contract {} / {}", suite.package, suite.target),
            ok,
            started.elapsed(),
        );
        rows.push((suite, status_ok, outcome));
    }
    print_table(&rows);
}

/// The workspace's target directory as cargo resolves it (`CARGO_TARGET_DIR`,
/// `build.target-dir`, or `target/` of the workspace root).
fn workspace_target_dir() -> Result<PathBuf, String> {
    metadata(None)?["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata names no target_directory".to_owned())
}

/// The target directory `contract --path` builds the crate of `manifest` in:
/// `<workspace target>/contract-path/<directory name>-<hash of its canonical path>`.
///
/// One per crate directory, never shared: cargo names a path package's
/// artifacts and fingerprints by its path relative to its own workspace root,
/// so two copies of one backend (two worktrees, a copy with a fix) built in
/// one target directory share one build, and cargo judges it fresh by file
/// times; a copy whose files are older than its twin's build would run the
/// twin's code. Keyed by the canonical path, a second copy gets a directory of
/// its own, and one path's build is reused from run to run.
pub(crate) fn own_target_dir(workspace_target: &Path, manifest: &Path) -> Result<PathBuf, String> {
    let dir = manifest.parent().unwrap_or(Path::new("."));
    let canonical = dir
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", dir.display()))?;
    Ok(workspace_target
        .join("contract-path")
        .join(target_dir_name(&canonical)))
}

/// `<sanitised directory name>-<FNV-1a of the path, 16 hex digits>`: the name
/// for a reader, the hash for uniqueness. FNV-1a, not std's hasher: the name
/// must not change with the toolchain, or each upgrade would rebuild from scratch.
fn target_dir_name(canonical: &Path) -> String {
    let name: String = canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = if name.is_empty() { "crate" } else { &name };
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in canonical.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{name}-{hash:016x}")
}

/// Runs one suite's test target, echoing libtest's output as it comes; an
/// out-of-tree suite builds in `target_dir`.
fn run_one(suite: &Suite, target_dir: Option<&Path>, locked: bool) -> (bool, String) {
    let mut cmd = cargo(&["test"]);
    match &suite.manifest {
        Some(manifest) => {
            cmd.arg("--manifest-path").arg(manifest);
        }
        None => {
            cmd.args(["-p", &suite.package]);
        }
    }
    if let Some(target_dir) = target_dir {
        cmd.env("CARGO_TARGET_DIR", target_dir);
    }
    if locked {
        cmd.arg("--locked");
    }
    cmd.args(["--test", &suite.target]).stdout(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("xtask: cannot start {cmd:?}: {e}");
            return (false, String::new());
        }
    };
    let mut output = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("{line}");
            output.push_str(&line);
            output.push('\n');
        }
    }
    let ok = child.wait().is_ok_and(|status| status.success());
    (ok, output)
}

fn print_table(rows: &[(&Suite, bool, Outcome)]) {
    let name = |s: &Suite| format!("{} / {}", s.package, s.target);
    let width = rows
        .iter()
        .map(|(s, _, _)| name(s).len())
        .max()
        .unwrap_or(0)
        .max("backend / test target".len());
    eprintln!("\n==> xtask contract summary");
    eprintln!(
        "  {:<width$}  {:>6}  {:>6}  clauses of failures",
        "backend / test target", "passed", "failed"
    );
    for (suite, status_ok, outcome) in rows {
        let mut clauses: Vec<&str> = Vec::new();
        for (_, clause) in &outcome.failures {
            if !clauses.contains(&clause.as_str()) {
                clauses.push(clause);
            }
        }
        let note = if !status_ok && outcome.failures.is_empty() {
            "did not build or run: see its output above".to_owned()
        } else {
            // A comma between clauses: a named one has spaces of its own.
            clauses.join(", ")
        };
        eprintln!(
            "  {:<width$}  {:>6}  {:>6}  {note}",
            name(suite),
            outcome.passed,
            outcome.failures.len()
        );
    }
    for (suite, _, outcome) in rows {
        for (test, clause) in &outcome.failures {
            eprintln!(
                "  FAIL {} / {}: {test} ({clause})",
                suite.package, suite.target
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::root;

    #[test]
    fn each_crate_directory_builds_in_a_target_dir_of_its_own() {
        let a = target_dir_name(Path::new("/work/a/my-store"));
        let b = target_dir_name(Path::new("/work/b/my-store"));
        assert!(
            a.starts_with("my-store-") && b.starts_with("my-store-"),
            "{a} {b}"
        );
        assert_ne!(a, b, "two copies of one crate share a target dir");
        assert_eq!(a, target_dir_name(Path::new("/work/a/my-store")));
        // Fixed by FNV-1a, not by the toolchain's hasher: a build outlives an upgrade.
        assert_eq!(target_dir_name(Path::new("/x")), "x-07d64e07b49caeb2");
        let odd = target_dir_name(Path::new("/work/my store.v2"));
        assert!(odd.starts_with("my_store_v2-"), "{odd}");
        assert!(target_dir_name(Path::new("/")).starts_with("crate-"));
    }

    #[test]
    fn an_out_of_tree_target_dir_lies_under_the_workspace_target() {
        let example = root().join("examples/out-of-tree-store/Cargo.toml");
        let dir = own_target_dir(Path::new("/t"), &example).unwrap();
        assert_eq!(dir.parent(), Some(Path::new("/t/contract-path")));
        assert!(own_target_dir(Path::new("/t"), Path::new("/no/such/dir/Cargo.toml")).is_err());
    }

    #[test]
    fn the_naming_convention() {
        for name in ["contract", "redis_contract", "reference_contract"] {
            assert!(is_contract_target(name), "{name}");
        }
        for name in ["contracts", "contract_cases", "case_list", "mycontract"] {
            assert!(!is_contract_target(name), "{name}");
        }
    }

    #[test]
    fn discovers_test_targets_by_name_only() {
        let metadata: Value = serde_json::from_str(
            r#"{"packages": [
                {"name": "b-store", "targets": [
                    {"name": "contract", "kind": ["test"]},
                    {"name": "b_store", "kind": ["lib"]},
                    {"name": "store", "kind": ["test"]}]},
                {"name": "a-lease", "targets": [
                    {"name": "redis_contract", "kind": ["test"]},
                    {"name": "memory_contract", "kind": ["test"]},
                    {"name": "contract", "kind": ["bench"]}]}
            ]}"#,
        )
        .unwrap();
        let found: Vec<(String, String)> = suites_in(&metadata, None)
            .into_iter()
            .map(|s| (s.package, s.target))
            .collect();
        let want = [
            ("a-lease", "memory_contract"),
            ("a-lease", "redis_contract"),
            ("b-store", "contract"),
        ]
        .map(|(p, t)| (p.to_owned(), t.to_owned()));
        assert_eq!(found, want);
    }

    /// libtest's output for two failures: one from a case test (the panic of
    /// a spawned task first, then the case's), one from `run_all`'s report.
    const LIBTEST: &str = "\
running 4 tests
test store_contract::fence_forms::double_pin_replaces_session ... ok
test store_contract::fenced_release::release_never_resets_gen ... FAILED
test run_all_passes ... FAILED
test store_contract::cid_presence::absent_cid_reads_as_none ... ok

failures:

---- store_contract::fenced_release::release_never_resets_gen stdout ----

thread 'tokio-runtime-worker' panicked at crates/unique-store-contract/src/support.rs:180:9:
C5 release must keep gen, empty the owner and remove the cid: released gen 1, read back gen 0
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

---- run_all_passes stdout ----

thread 'run_all_passes' panicked at crates/unique-store-contract/src/lib.rs:225:5:
2 of 54 store contract cases failed
  traps::stale_snapshot_loses: C3 a claim whose condition fails must lose the race: wrote gen 2

failures:
    store_contract::fenced_release::release_never_resets_gen
    run_all_passes

test result: FAILED. 2 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out
";

    #[test]
    fn parses_cases_and_the_clause_of_each_failure() {
        assert_eq!(
            parse(LIBTEST),
            Outcome {
                passed: 2,
                failures: vec![
                    (
                        "store_contract::fenced_release::release_never_resets_gen".to_owned(),
                        "C5".to_owned()
                    ),
                    ("run_all_passes".to_owned(), "C3".to_owned()),
                ],
            }
        );
    }

    #[test]
    fn a_failure_without_a_clause_is_marked() {
        let output = "test t ... FAILED\n\n---- t stdout ----\n\nthread 't' panicked at x.rs:1:1:\nassertion failed: ok\n\nfailures:\n";
        assert_eq!(parse(output).failures, [("t".to_owned(), "?".to_owned())]);
    }

    #[test]
    fn clause_words() {
        for word in ["C5", "I5a", "D4", "N1", "Records", "Kicker", "Kick payload"] {
            assert_eq!(clause_of(&format!("{word} rule: seen")), Some(word));
        }
        let messages = [
            "Case failed",
            "assertion failed",
            "C",
            "Cx rule",
            "2 of 54",
            "Kick",
            "Kickers rule",
            "Kick payloads rule",
        ];
        for message in messages {
            assert_eq!(clause_of(message), None, "{message}");
        }
    }

    #[test]
    fn named_clauses_are_design_headings() {
        let design = std::fs::read_to_string(root().join("docs/design.md")).unwrap();
        for name in NAMED_CLAUSES {
            let heading = format!(" {name}");
            assert!(
                design
                    .lines()
                    .any(|l| l.starts_with('#') && l.trim_start_matches('#') == heading),
                "{name} is not a heading of docs/design.md"
            );
        }
        let mut by_length = NAMED_CLAUSES.to_vec();
        by_length.sort_by_key(|name| std::cmp::Reverse(name.len()));
        assert_eq!(by_length, NAMED_CLAUSES, "longest first");
    }

    #[test]
    fn a_named_clause_in_a_report() {
        let output = "test run_all_passes ... FAILED\n\n---- run_all_passes stdout ----\n\nthread 'run_all_passes' panicked at lib.rs:1:1:\n1 of 20 kicker contract cases failed\n  confirmed_on_200: Kick payload a kick body must be exactly the payload: expected 1, got 2\n\nfailures:\n";
        assert_eq!(
            parse(output).failures,
            [("run_all_passes".to_owned(), "Kick payload".to_owned())]
        );
    }
}
