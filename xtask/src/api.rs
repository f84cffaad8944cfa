//! `cargo xtask api`: the public API of the crates a backend or a client builds on, listed
//! in `docs/api/<crate>.txt` and checked, so that no change to it goes unrecorded.
//!
//! Each listing is what `cargo public-api -ss` prints for the crate (every public item, its
//! signature, its trait implementations, blanket and auto-trait ones left out): one line per
//! item, sorted. It reads the crate's rustdoc JSON, which only a nightly rustdoc writes, so
//! the step needs a nightly toolchain (`cargo +nightly`); it installs the pinned
//! cargo-public-api with `cargo install --locked` when the machine has none.
//!
//! The check fails when
//! - a listing differs from the crate as built (the diff names each added and removed line);
//!   `cargo xtask api --bless` writes the listings anew; or
//! - a commit (or the working tree) changed a listing without changing `CHANGELOG.md`: a
//!   change to the API is recorded in the Unreleased section, a removed or changed line under
//!   "Breaking" with its one-line fix, an added one under "Added".
//!
//! A new nightly may print a signature differently; the diff then shows it, and blessing
//! it (with a changelog line saying nothing changed for users) records the new form.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::{Run, ensure_installed, root, subcommand};

/// The crates whose public API is listed: what a store or lease backend implements and
/// tests against, and what a client or node links.
pub(crate) const CRATES: &[&str] = &[
    "unique-core",
    "unique-store-contract",
    "unique-lease",
    "unique-wire",
    "unique-client",
    "unique-client-http",
    "unique-sessions",
];

/// Where the listings live, from the workspace root.
pub(crate) const DIR: &str = "docs/api";

/// The cargo-public-api release `api` installs when the machine has none (pinned, so its
/// output format is the one the listings were written in).
const CARGO_PUBLIC_API: &str = "cargo-public-api@0.52.0";

/// Checks every listing against the crates as built, or writes them (`--bless`).
pub(crate) fn run(run: &mut Run, args: &[String]) -> Result<(), String> {
    let bless = match args {
        [] => false,
        [flag] if flag == "--bless" => true,
        other => return Err(format!("api: unknown arguments {other:?} (only --bless)")),
    };
    ensure_installed(run, "public-api", CARGO_PUBLIC_API);
    let name = if bless {
        "api (docs/api listings written)"
    } else {
        "api (docs/api listings match the public API; each listing change has a CHANGELOG entry)"
    };
    eprintln!("\n==> xtask: {name}");
    let started = Instant::now();
    let problems = check(&root(), bless);
    for problem in &problems {
        eprintln!("{problem}");
    }
    run.record(name, problems.is_empty(), started.elapsed());
    Ok(())
}

/// Every problem found: listings that differ (or written, when `bless`), then the
/// changelog rule.
fn check(root: &Path, bless: bool) -> Vec<String> {
    if let Err(e) = nightly() {
        return vec![e];
    }
    let mut problems = Vec::new();
    for krate in CRATES {
        let built = match listing(krate) {
            Ok(built) => built,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let path = root.join(DIR).join(format!("{krate}.txt"));
        if bless {
            let written = std::fs::create_dir_all(root.join(DIR))
                .and_then(|()| std::fs::write(&path, &built));
            match written {
                Ok(()) => eprintln!("wrote {DIR}/{krate}.txt ({} lines)", built.lines().count()),
                Err(e) => problems.push(format!("cannot write {}: {e}", path.display())),
            }
            continue;
        }
        let recorded = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some(diff) = differ(krate, &recorded, &built) {
            problems.push(diff);
        }
    }
    if !bless {
        problems.extend(changelog_rule(root));
    }
    problems
}

/// `cargo +nightly` answers, or why the step cannot run.
fn nightly() -> Result<(), String> {
    let answered = Command::new("cargo")
        .args(["+nightly", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if answered {
        Ok(())
    } else {
        Err(
            "the API listings need a nightly toolchain (rustdoc JSON is nightly only): \
             `rustup toolchain install nightly`, then run `cargo xtask api` again"
                .to_owned(),
        )
    }
}

/// The crate's public API as `cargo public-api -ss` lists it.
fn listing(krate: &str) -> Result<String, String> {
    let output = subcommand(&["public-api", "-p", krate, "-ss", "--color", "never"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo public-api: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo public-api -p {krate} failed ({}): see its output above",
            output.status
        ));
    }
    String::from_utf8(output.stdout)
        .map_err(|_| format!("cargo public-api -p {krate} printed something that is not UTF-8"))
}

/// The lines only in `recorded` (removed from the API) and only in `built` (added), with
/// what to do; `None` when they match.
fn differ(krate: &str, recorded: &str, built: &str) -> Option<String> {
    if recorded == built {
        return None;
    }
    let recorded_lines: BTreeSet<&str> = recorded.lines().collect();
    let built_lines: BTreeSet<&str> = built.lines().collect();
    let mut text = format!(
        "the public API of {krate} differs from {DIR}/{krate}.txt{}:\n",
        if recorded.is_empty() {
            " (no listing yet)"
        } else {
            ""
        }
    );
    for removed in recorded_lines.difference(&built_lines) {
        let _ = writeln!(text, "  - {removed}");
    }
    for added in built_lines.difference(&recorded_lines) {
        let _ = writeln!(text, "  + {added}");
    }
    text.push_str(
        "record it: `cargo xtask api --bless` rewrites the listing, and CHANGELOG.md's Unreleased \
         section says what changed (a removed or changed line under \"Breaking\" with its \
         one-line fix, an added one under \"Added\"), in the same commit",
    );
    Some(text)
}

/// Every commit that changed a listing changed `CHANGELOG.md` too, and so does the working
/// tree (against `HEAD`).
fn changelog_rule(root: &Path) -> Vec<String> {
    let git = |args: &[&str]| -> Result<String, String> {
        let output = Command::new("git")
            .args(args)
            .current_dir(root)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run git: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!("git {} failed ({})", args.join(" "), output.status))
        }
    };
    let mut touched = Vec::new();
    let log = git(&["log", "--format=%h", "--", DIR]);
    let commits = match log {
        Ok(log) => log,
        Err(e) => return vec![format!("cannot read the listings' history: {e}")],
    };
    for commit in commits.split_whitespace() {
        match git(&["diff-tree", "--no-commit-id", "--name-only", "-r", commit]) {
            Ok(files) => touched.push((commit.to_owned(), files)),
            Err(e) => return vec![e],
        }
    }
    // The working tree: changed files and new ones (a first listing is new).
    let changed = git(&["diff", "--name-only", "HEAD"]).and_then(|changed| {
        let new = git(&["ls-files", "--others", "--exclude-standard"])?;
        Ok(changed + &new)
    });
    match changed {
        Ok(files) => touched.push(("the working tree".to_owned(), files)),
        Err(e) => return vec![e],
    }
    unrecorded(&touched)
}

/// The commits (or the working tree) among `touched` (name, files changed) that changed a
/// listing without changing `CHANGELOG.md`.
fn unrecorded(touched: &[(String, String)]) -> Vec<String> {
    touched
        .iter()
        .filter(|(_, files)| {
            let mut files = files.lines();
            let listing = files
                .clone()
                .any(|f| f.starts_with(DIR) && Path::new(f).extension() == Some("txt".as_ref()));
            listing && !files.any(|f| f == "CHANGELOG.md")
        })
        .map(|(name, _)| {
            format!(
                "{name} changed a listing in {DIR}/ but not CHANGELOG.md: say in its Unreleased \
                 section what changed for users of the API (\"Breaking\" with the one-line fix \
                 for a removed or changed item)"
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_that_matches_is_no_problem() {
        assert_eq!(differ("c", "pub fn c::a()\n", "pub fn c::a()\n"), None);
    }

    #[test]
    fn the_diff_names_removed_and_added_lines() {
        let diff = differ(
            "c",
            "pub fn c::a()\npub fn c::b()\n",
            "pub fn c::b()\npub fn c::d(i64)\n",
        )
        .expect("they differ");
        assert!(diff.starts_with("the public API of c differs from docs/api/c.txt:\n"));
        assert!(diff.contains("  - pub fn c::a()\n  + pub fn c::d(i64)\n"));
        assert!(diff.contains("cargo xtask api --bless"));
    }

    #[test]
    fn a_listing_change_needs_a_changelog_change() {
        let touched = [
            (
                "aaa".to_owned(),
                "CHANGELOG.md\ndocs/api/unique-core.txt\n".to_owned(),
            ),
            ("bbb".to_owned(), "docs/api/unique-core.txt\n".to_owned()),
            (
                "ccc".to_owned(),
                "crates/unique-core/src/lib.rs\n".to_owned(),
            ),
            ("ddd".to_owned(), "docs/api/README.md\n".to_owned()),
        ];
        let problems = unrecorded(&touched);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("bbb changed a listing in docs/api/"));
    }
}
