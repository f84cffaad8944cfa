//! Keeping `cargo publish --dry-run --workspace` honest across runs.
//!
//! The dry run verifies each package by building it from a local registry, whose sources cargo
//! unpacks under `$CARGO_HOME/registry/src/<registry>/NAME-VERSION` and never unpacks again while
//! that directory exists (it trusts its `.cargo-ok` marker). Our crates keep version 0.1.0 until
//! they are released, so a later dry run in a checkout at the same path built the sources of an
//! earlier one: a clean-clone CI run failed compiling a `unique-listener` that still imported what the
//! current one no longer uses. So before each dry run the unpacked copies of this workspace's
//! packages are removed from every local registry (those directories are named without a host:
//! they start with `-`); crates.io's unpacked sources are never touched. For the same reason the
//! dry run builds in a target directory of its own, emptied first (`main.rs`): cargo never
//! rebuilds a registry package it has already built.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Removes the unpacked sources of the workspace's packages from every local registry; how
/// many directories it removed.
pub(crate) fn clear_unpacked(metadata: &Value) -> Result<usize, String> {
    let packages: Vec<String> = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(format!(
                "{}-{}",
                p["name"].as_str()?,
                p["version"].as_str()?
            ))
        })
        .collect();
    let sources = cargo_home().join("registry").join("src");
    let Ok(registries) = std::fs::read_dir(&sources) else {
        return Ok(0); // nothing unpacked yet
    };
    let mut removed = 0;
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for package in &packages {
            let unpacked = registry.path().join(package);
            if unpacked.is_dir() {
                std::fs::remove_dir_all(&unpacked)
                    .map_err(|e| format!("cannot remove {}: {e}", unpacked.display()))?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME").map_or_else(
        || {
            let home = std::env::var_os("HOME").unwrap_or_default();
            Path::new(&home).join(".cargo")
        },
        PathBuf::from,
    )
}
