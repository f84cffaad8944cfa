//! `cargo xtask contract --path` builds each out-of-tree crate in a target
//! directory of its own: two copies of one backend never share a build.
//!
//! Two copies of `examples/out-of-tree-store` (in `<target>/xtask-path-builds`),
//! the second with a bug the store contract catches (a release resets gen to
//! 0) and files older than the first copy's build: with one target directory
//! for both, cargo would judge the second copy fresh by its file times and run
//! the first copy's code, and the broken backend would pass.
//!
//! It takes about a minute on two cores the first time (each copy builds the
//! unique crates, tokio and the rest in its own target directory), a few
//! seconds after that: the dependencies stay built, only the copies are compiled again.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

/// The example backend both copies are made from.
const EXAMPLE: &str = "examples/out-of-tree-store";

/// The bug: a release that writes the tombstone at gen 0 (C5: a release keeps gen).
const RELEASE: &str = "                record.claim_id = None;\n";
const BROKEN_RELEASE: &str =
    "                record.claim_id = None;\n                record.generation = 0;\n";

#[test]
fn a_broken_copy_of_a_backend_is_built_not_its_twins_build_reused() {
    let started = Instant::now();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root");
    // A place of its own in the target directory this test was built in, kept
    // between runs so the copies' dependencies are built once; one run at a time.
    let base = Path::new(env!("CARGO_BIN_EXE_xtask"))
        .ancestors()
        .nth(2)
        .expect("xtask is built in <target>/<profile>/")
        .join("xtask-path-builds");
    fs::create_dir_all(&base).unwrap();
    let lock = fs::File::create(base.join("lock")).unwrap();
    lock.lock().unwrap();
    let base = base.canonicalize().unwrap();

    // The same directory name for both, as two worktrees of one backend have.
    let good = base.join("copies/good/out-of-tree-store");
    let broken = base.join("copies/broken/out-of-tree-store");
    for copy in [&good, &broken] {
        if copy.exists() {
            fs::remove_dir_all(copy).unwrap();
        }
        copy_crate(&root.join(EXAMPLE), copy);
        absolute_paths(root, copy);
    }
    let lib = broken.join("src/lib.rs");
    let source = fs::read_to_string(&lib).unwrap();
    assert_eq!(
        source.matches(RELEASE).count(),
        1,
        "the example's release changed: pick another line for the bug"
    );
    fs::write(&lib, source.replace(RELEASE, BROKEN_RELEASE)).unwrap();

    // xtask's workspace target directory: everything the copies build (the
    // unique crates and their dependencies too) stays in `base`.
    let target = base.join("target");
    // The backend crate of an earlier run's builds goes, its dependencies stay:
    // each copy must be compiled in this run.
    for dir in fs::read_dir(target.join("contract-path"))
        .into_iter()
        .flatten()
    {
        clean_backend(&good, &dir.unwrap().path());
    }

    let run = contract(&good, &target);
    let output = text(&run);
    assert!(run.status.success(), "the good copy must pass\n{output}");
    assert!(
        output.contains(&compiling(&good)),
        "the good copy was not compiled\n{output}"
    );

    // Older than the good copy's build: only a build of its own sees the bug.
    let old = SystemTime::now() - Duration::from_hours(24);
    set_mtimes(&broken, old);
    let run = contract(&broken, &target);
    let output = text(&run);
    assert!(!run.status.success(), "the broken copy passed\n{output}");
    assert!(
        output.contains(&compiling(&broken)),
        "the broken copy was not compiled\n{output}"
    );
    assert!(
        output.contains("FAIL out-of-tree-store / contract: ") && output.contains(" (C5)"),
        "the broken copy's failure names no C5 case\n{output}"
    );
    eprintln!(
        "both copies built and checked in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// What cargo prints when it compiles the copy in `dir`.
fn compiling(dir: &Path) -> String {
    format!("Compiling out-of-tree-store v0.1.0 ({})", dir.display())
}

/// `cargo clean -p out-of-tree-store` in one target directory.
fn clean_backend(copy: &Path, target_dir: &Path) {
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "clean",
            "--quiet",
            "-p",
            "out-of-tree-store",
            "--manifest-path",
        ])
        .arg(copy.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo clean in {}", target_dir.display());
}

/// `xtask contract --path DIR`, its workspace target directory under the test's.
fn contract(dir: &Path, target: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["contract", "--path"])
        .arg(dir)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .expect("xtask runs")
}

fn text(output: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Copies a crate's sources, manifest and lock file (its `target/`, if any, left out).
fn copy_crate(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" {
            continue;
        }
        let (from, to) = (entry.path(), to.join(&name));
        if entry.file_type().unwrap().is_dir() {
            copy_crate(&from, &to);
        } else {
            fs::copy(&from, &to).unwrap();
        }
    }
}

/// The example names the unique crates by paths relative to itself
/// (`../../crates/…`); a copy elsewhere names them by absolute path.
fn absolute_paths(root: &Path, copy: &Path) {
    let manifest = copy.join("Cargo.toml");
    let text = fs::read_to_string(&manifest).unwrap();
    let relative = "path = \"../../crates/";
    assert!(
        text.contains(relative),
        "the example's path dependencies moved"
    );
    let absolute = format!("path = \"{}/crates/", root.display());
    let text = text.replace(relative, &absolute);
    assert!(
        !text.contains("path = \"../"),
        "a relative path the copy cannot resolve is left in\n{text}"
    );
    fs::write(&manifest, text).unwrap();
}

/// Sets the modification time of every file under `dir`.
fn set_mtimes(dir: &Path, time: SystemTime) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            set_mtimes(&entry.path(), time);
        } else {
            fs::File::options()
                .write(true)
                .open(entry.path())
                .and_then(|file| file.set_modified(time))
                .unwrap();
        }
    }
}
