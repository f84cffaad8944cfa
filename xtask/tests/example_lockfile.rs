//! The out-of-tree backend example keeps a lockfile of its own, and `cargo xtask ci`
//! builds it `--locked`: a workspace change that moves its dependencies (a new crate
//! the suites use, a bumped version) must update that lockfile in the same commit.
//! This test says so in a plain `cargo test`, before CI's contract step does.

use std::path::Path;
use std::process::Command;

#[test]
fn the_out_of_tree_examples_lockfile_is_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root");
    let manifest = root.join("examples/out-of-tree-store/Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--locked",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(&manifest)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "examples/out-of-tree-store/Cargo.lock is out of date: run `cargo metadata \
         --format-version 1 --manifest-path {}` (it updates the lockfile as little as it can) \
         and commit the lockfile\n{}",
        manifest.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}
