//! The package check: every publishable crate packaged, then built from its package.
//!
//! `cargo publish --dry-run --workspace` verifies each package in a build of its own, resolving
//! that crate's features alone, so a dependency such as tokio compiled once per distinct feature
//! set (twelve times for this workspace) and the step took longer than any other in `ci`. Here
//! `cargo package --no-verify` writes the packages, and one build of a scratch workspace made of
//! the unpacked packages compiles each crate from exactly what the registry would receive, every
//! dependency once. What the per-crate builds also showed, that each crate compiles with only
//! the features it asks for itself, `ci`'s `features` step checks: cargo-hack compiles every
//! crate alone, without dev-dependencies, with its default features, with none and with each
//! feature by itself.
//!
//! The scratch workspace (`target/package-check/`) holds the unpacked crates as path members,
//! with the workspace's lockfile, and each dependency on another of our crates patched to its
//! unpacked copy. Its files are unpacked afresh each run; path members are rebuilt when their
//! files change, so a stale build is never reused.
//!
//! `cargo package` resolves each package's dependencies on our other crates through a local
//! registry, whose sources it unpacks under `$CARGO_HOME/registry/src/<registry>/NAME-VERSION`
//! and never unpacks again while that directory exists. Our crates keep version 0.1.0 until
//! they are released, so a later run would read the manifests of an earlier one; before each
//! run [`clear_unpacked`] removes those copies (directories of registries named without a host:
//! they start with `-`). crates.io's unpacked sources are never touched.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The publishable packages (`name`, `version`) `cargo metadata` lists: those without
/// `publish = false`.
pub(crate) fn publishable(metadata: &Value) -> Vec<(String, String)> {
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| !p["publish"].as_array().is_some_and(Vec::is_empty))
        .filter_map(|p| {
            Some((
                p["name"].as_str()?.to_owned(),
                p["version"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// `cargo package --no-verify` for `packages`, run by `cargo` (a command for the workspace
/// root): writes `target/package/NAME-VERSION.crate` for each.
pub(crate) fn package_command(mut cargo: Command, packages: &[(String, String)]) -> Command {
    cargo.args(["package", "--no-verify", "--allow-dirty"]);
    for (name, _) in packages {
        cargo.args(["-p", name]);
    }
    cargo
}

/// Unpacks each package from `target/package/` into `scratch` and writes the scratch
/// workspace's manifest and lockfile; the manifest's path.
pub(crate) fn unpack(
    root: &Path,
    packages: &[(String, String)],
    scratch: &Path,
) -> Result<PathBuf, String> {
    if let Err(e) = std::fs::remove_dir_all(scratch)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        return Err(format!("cannot empty {}: {e}", scratch.display()));
    }
    std::fs::create_dir_all(scratch)
        .map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
    let crate_files = root.join("target").join("package");
    for (name, version) in packages {
        let file = crate_files.join(format!("{name}-{version}.crate"));
        // `-m`: the unpacked files are new, whatever times the package recorded.
        let status = Command::new("tar")
            .arg("-xzmf")
            .arg(&file)
            .arg("-C")
            .arg(scratch)
            .status()
            .map_err(|e| format!("cannot run tar: {e}"))?;
        if !status.success() {
            return Err(format!("cannot unpack {} ({status})", file.display()));
        }
    }
    let manifest = scratch.join("Cargo.toml");
    std::fs::write(&manifest, scratch_manifest(packages))
        .map_err(|e| format!("cannot write {}: {e}", manifest.display()))?;
    std::fs::copy(root.join("Cargo.lock"), scratch.join("Cargo.lock"))
        .map_err(|e| format!("cannot copy the lockfile: {e}"))?;
    Ok(manifest)
}

/// The scratch workspace: every unpacked package a member, and every dependency on one of
/// them (which a package names by version, as the registry would serve it) patched to it.
fn scratch_manifest(packages: &[(String, String)]) -> String {
    let mut manifest = String::from(
        "# Written by `cargo xtask publish`: the packages as the registry would receive them.\n\
         [workspace]\nresolver = \"3\"\nmembers = [\n",
    );
    for (name, version) in packages {
        let _ = writeln!(manifest, "    \"{name}-{version}\",");
    }
    manifest.push_str("]\n\n[patch.crates-io]\n");
    for (name, version) in packages {
        let _ = writeln!(manifest, "{name} = {{ path = \"{name}-{version}\" }}");
    }
    manifest
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishable_leaves_out_publish_false() {
        let metadata: Value = serde_json::from_str(
            r#"{"packages":[
                {"name":"unique-core","version":"0.1.0","publish":null},
                {"name":"xtask","version":"0.1.0","publish":[]},
                {"name":"only-here","version":"0.2.0","publish":["internal"]}]}"#,
        )
        .unwrap();
        assert_eq!(
            publishable(&metadata),
            [
                ("unique-core".to_owned(), "0.1.0".to_owned()),
                ("only-here".to_owned(), "0.2.0".to_owned())
            ]
        );
    }

    #[test]
    fn the_scratch_workspace_patches_every_package_to_its_copy() {
        let manifest = scratch_manifest(&[("unique-core".into(), "0.1.0".into())]);
        assert!(manifest.contains("\"unique-core-0.1.0\","));
        assert!(manifest.contains("unique-core = { path = \"unique-core-0.1.0\" }"));
    }
}
