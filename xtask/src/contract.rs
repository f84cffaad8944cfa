//! `cargo xtask contract`: finds every contract suite by convention, runs each,
//! and prints one table of backends, cases passed and failed, and the clause
//! each failure names.
//!
//! The convention: **a test target named `contract`, or whose name ends in
//! `_contract`, runs a contract suite** — a backend's run of a suite
//! (`tests/contract.rs` of a store, `tests/redis_contract.rs` of a lease
//! backend), a run on a store wrapper (`metered_contract` of `unique-metrics`:
//! the claim contract and its forwarding cases on `MeteredStore` around the
//! memory store) or a suite checked against broken backends (`reference_contract`
//! of `unique-store-contract`, `broken_kickers_contract` of
//! `unique-kick-contract`). Targets are found with `cargo metadata`, in the
//! workspace or in the crate `--path` names, so a new backend needs no change here.
//!
//! Cases and clauses come from the suites' own report, not libtest's output:
//! every case a suite's generated test runs appends one JSON line to the file
//! `UNIQUE_SUITE_REPORT` names (`unique-suite-kit`'s `run_case`), with the
//! clause its violation names, a heading of `docs/design.md` (`C5`, `D4`,
//! `Kick payload`). libtest's exit status still decides whether the target
//! passed: a test outside the suite's cases can fail it too.

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
    /// Each failing case with the clause its violation names (`?` when none).
    pub(crate) failures: Vec<(String, String)>,
    /// Lines of the report that are not a case's record (a suite of another version).
    pub(crate) unreadable: usize,
}

/// Reads a suite's report: one JSON object per line,
/// `{"suite","case","passed"[,"clause","message"]}`.
pub(crate) fn parse_report(report: &str) -> Outcome {
    let mut outcome = Outcome::default();
    for line in report.lines().filter(|line| !line.trim().is_empty()) {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            outcome.unreadable += 1;
            continue;
        };
        match (record["case"].as_str(), record["passed"].as_bool()) {
            (Some(_), Some(true)) => outcome.passed += 1,
            (Some(case), Some(false)) => {
                let clause = record["clause"].as_str().unwrap_or("?");
                outcome.failures.push((case.to_owned(), clause.to_owned()));
            }
            _ => outcome.unreadable += 1,
        }
    }
    outcome
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
        let (status_ok, report) = match target_dir {
            Ok(target_dir) => run_one(suite, target_dir.as_deref(), locked),
            Err(e) => {
                eprintln!("xtask: {e}");
                (false, String::new())
            }
        };
        let outcome = parse_report(&report);
        // A target whose cases reported nothing ran no suite, whatever libtest says.
        let ok = status_ok
            && outcome.failures.is_empty()
            && outcome.passed > 0
            && outcome.unreadable == 0;
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

/// Runs one suite's test target, its output shown as it comes, and returns
/// whether it passed and the report its cases wrote; an out-of-tree suite builds
/// in `target_dir`.
fn run_one(suite: &Suite, target_dir: Option<&Path>, locked: bool) -> (bool, String) {
    let report =
        match crate::fresh_temp_path("suite-report", &suite.package, &suite.target, "jsonl") {
            Ok(path) => path,
            Err(e) => {
                eprintln!("xtask: {e}");
                return (false, String::new());
            }
        };
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
    cmd.args(["--test", &suite.target])
        .env("UNIQUE_SUITE_REPORT", &report);
    let ok = match cmd.status() {
        Ok(status) => status.success(),
        Err(e) => {
            eprintln!("xtask: cannot start {cmd:?}: {e}");
            false
        }
    };
    let written = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    (ok, written)
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
        let note = if outcome.unreadable > 0 {
            format!("{} report lines unreadable", outcome.unreadable)
        } else if !status_ok && outcome.failures.is_empty() {
            "did not build, or a test outside the cases failed: see its output above".to_owned()
        } else if outcome.passed == 0 && outcome.failures.is_empty() {
            "no case reported: the target runs no suite".to_owned()
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

    /// The claim contract over `MeteredStore` is one of the workspace's suites: a
    /// wrapper's run is found as a backend's is (issue 40).
    #[test]
    fn the_metered_store_run_is_a_suite() {
        let suites = discover(None).unwrap();
        for (package, target) in [
            ("unique-metrics", "metered_contract"),
            ("unique-store-memory", "contract"),
        ] {
            assert!(
                suites
                    .iter()
                    .any(|s| s.package == package && s.target == target),
                "{package} / {target} not found in {suites:?}"
            );
        }
    }

    #[test]
    fn reads_cases_and_the_clause_of_each_failure_from_the_report() {
        let report = r#"{"suite":"store","case":"fence_forms::double_pin_replaces_session","passed":true}
{"suite":"store","case":"fenced_release::release_never_resets_gen","passed":false,"clause":"C5","message":"C5 release must keep gen: released gen 1, read back gen 0"}

{"suite":"kicker","case":"confirmed_on_200","passed":false,"clause":"Kick payload","message":"Kick payload a kick body must be exactly the payload"}
{"suite":"lease","case":"unwrapped","passed":false}
"#;
        assert_eq!(
            parse_report(report),
            Outcome {
                passed: 1,
                failures: vec![
                    (
                        "fenced_release::release_never_resets_gen".to_owned(),
                        "C5".to_owned()
                    ),
                    ("confirmed_on_200".to_owned(), "Kick payload".to_owned()),
                    ("unwrapped".to_owned(), "?".to_owned()),
                ],
                unreadable: 0,
            }
        );
    }

    #[test]
    fn lines_that_are_not_case_records_are_counted() {
        let outcome = parse_report("test x ... ok\n{\"case\":1}\n");
        assert_eq!((outcome.passed, outcome.unreadable), (0, 2));
    }

    /// Every clause id a suite cites (`"C5"`, `"D10"`, `"I5a"` as a string of its own) is a
    /// heading of `docs/design.md`, so a report's clause always points somewhere.
    #[test]
    fn cited_clause_ids_are_design_headings() {
        let design = std::fs::read_to_string(root().join("docs/design.md")).unwrap();
        let headings: Vec<&str> = design
            .lines()
            .filter(|l| l.starts_with("### "))
            .filter_map(|l| l[4..].split_whitespace().next())
            .collect();
        let mut cited = 0;
        for suite in [
            "unique-store-contract",
            "unique-kick-contract",
            "unique-lease-contract",
        ] {
            // Sources in sub-directories too (a module split into `name/`).
            let mut dirs = vec![root().join("crates").join(suite).join("src")];
            let mut files = Vec::new();
            while let Some(dir) = dirs.pop() {
                for entry in std::fs::read_dir(&dir).unwrap() {
                    let path = entry.unwrap().path();
                    if path.is_dir() {
                        dirs.push(path);
                    } else {
                        files.push(path);
                    }
                }
            }
            for path in files {
                let text = std::fs::read_to_string(&path).unwrap();
                for id in text
                    .split('"')
                    .skip(1)
                    .step_by(2)
                    .filter(|s| is_clause_id(s))
                {
                    cited += 1;
                    assert!(
                        headings.contains(&id),
                        "{} cites {id}, which is no heading of docs/design.md",
                        path.display()
                    );
                }
            }
        }
        assert!(cited > 100, "only {cited} citations found");
    }

    /// `C5`, `D10`, `I5a`: a capital, digits, an optional `a` or `b`.
    fn is_clause_id(text: &str) -> bool {
        let mut chars = text.chars();
        let digits = text.get(1..).unwrap_or("").trim_end_matches(['a', 'b']);
        chars.next().is_some_and(|c| "CDIN".contains(c))
            && !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit())
    }
}
