//! `CASES` (from which `run_all` and `store_contract_tests!` are generated)
//! lists exactly the case functions in the sources, so a new case cannot be
//! forgotten.

use std::collections::BTreeSet;
use std::path::Path;

use unique_store_contract::{CASES, ONLINE_COUNT_CASES};

/// Every `pub async fn NAME(subject: Subject)` in `src/<module>.rs`, as `module::NAME`.
fn cases_in_sources() -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(&src).expect("read src/") {
        let path = entry.expect("dir entry").path();
        let module = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("utf-8 name")
            .to_owned();
        let text = std::fs::read_to_string(&path).expect("read source");
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix("pub async fn ") else {
                continue;
            };
            if let Some((name, args)) = rest.split_once('(')
                && args.starts_with("subject: Subject)")
            {
                found.insert(format!("{module}::{name}"));
            }
        }
    }
    found
}

#[test]
fn cases_list_matches_sources() {
    let all: Vec<&str> = CASES.iter().chain(ONLINE_COUNT_CASES).copied().collect();
    let listed: BTreeSet<String> = all.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(listed.len(), all.len(), "a case is listed twice");
    let sources = cases_in_sources();
    let missing: Vec<_> = sources.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&sources).collect();
    assert!(
        missing.is_empty(),
        "cases not in __store_contract_cases! nor __online_count_cases!: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "listed cases without a function: {stale:?}"
    );
}

#[test]
fn every_clause_has_cases() {
    assert!(CASES.len() >= 30, "only {} cases", CASES.len());
    for module in [
        "linearizability",
        "strong_reads",
        "fence_forms",
        "atomic_increment",
        "fenced_release",
        "cid_presence",
        "corrupt_owner",
        "error_classification",
        "traps",
        "invariants",
        "slots",
        "listing",
        "vacant_claims",
        "arbiter",
    ] {
        let count = CASES
            .iter()
            .filter(|c| c.starts_with(&format!("{module}::")))
            .count();
        assert!(count >= 2, "module {module} has {count} cases");
    }
}
