//! The workspace's tests, built once and run several test binaries at a time.
//!
//! `cargo test --workspace` runs its test binaries one after another, and many of them spend
//! much of their time waiting on servers, sockets and timers, so `ci` builds them with `cargo
//! test --workspace --no-run` and runs them itself, [`jobs`] at a time (on 2 CPUs, 4 at a time
//! kept them 157 % busy and took the run from about 400 s to 330 s). Each binary still runs as
//! `cargo test` would run it: one process per binary (its tests share that process's servers),
//! libtest's own threads inside it, started in its package's directory with
//! `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME` set. Its output is kept whole and printed when it
//! finishes, so the log reads binary by binary. The doctests run after them through `cargo test
//! --doc`.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// One executable the test build produced.
#[derive(Debug)]
pub(crate) struct Artifact {
    /// The package it belongs to.
    pub package: String,
    /// The target's name (`lib`'s crate name, the test file's stem, the binary's name).
    pub target: String,
    /// Whether it is a libtest harness to run (unit or integration tests) rather than a binary
    /// target built for the integration tests to start.
    pub is_test: bool,
    /// Whether the target is an integration test (a `tests/` file).
    pub is_integration: bool,
    pub executable: PathBuf,
    pub manifest_dir: PathBuf,
}

/// Builds every test target of the workspace with `command` (a `cargo test ... --no-run
/// --message-format=json-render-diagnostics`; the diagnostics go to stderr as usual) and lists
/// the executables it produced for the packages of `metadata` (`cargo metadata` of the
/// workspace): the test harnesses and the binaries built beside them.
pub(crate) fn build(mut command: Command, metadata: &Value) -> Result<Vec<Artifact>, String> {
    let names = package_names(metadata);
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run the test build: {e}"))?;
    let stdout = child.stdout.take().expect("stdout was piped");
    let mut artifacts = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("cannot read cargo's messages: {e}"))?;
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue; // a build script's or a tool's stray line, not a cargo message
        };
        if let Some(artifact) = artifact(&message, &names) {
            artifacts.push(artifact);
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("cannot wait for the test build: {e}"))?;
    if !status.success() {
        return Err(format!("the test build failed ({status})"));
    }
    Ok(artifacts)
}

/// Each workspace package's name by its id, from `cargo metadata`.
fn package_names(metadata: &Value) -> HashMap<&str, &str> {
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
        .collect()
}

/// The executable a `compiler-artifact` message names, if it names one of a package in
/// `names` (a dependency's build script is not ours to run).
fn artifact(message: &Value, names: &HashMap<&str, &str>) -> Option<Artifact> {
    if message["reason"] != "compiler-artifact" {
        return None;
    }
    let package = names.get(message["package_id"].as_str()?)?;
    let executable = PathBuf::from(message["executable"].as_str()?);
    let kinds = message["target"]["kind"].as_array()?;
    let manifest = Path::new(message["manifest_path"].as_str()?);
    Some(Artifact {
        package: (*package).to_owned(),
        target: message["target"]["name"].as_str()?.to_owned(),
        is_test: message["profile"]["test"].as_bool()?,
        is_integration: kinds.iter().any(|kind| kind == "test"),
        executable,
        manifest_dir: manifest.parent()?.to_path_buf(),
    })
}

/// The variables that point the tests at servers someone else runs (CONTRIBUTING.md's
/// "Servers you already run"): shared by every binary, and some tests use fixed table names on
/// them.
const SHARED_SERVERS: &[&str] = &[
    "UNIQUE_TEST_REDIS_URL",
    "UNIQUE_TEST_DATABASE_URL",
    "UNIQUE_TEST_DYNAMODB_ENDPOINT",
];

/// How many test binaries run at once: `UNIQUE_TEST_JOBS` when set; one when the tests use
/// shared servers; else twice the CPUs, since the binaries also wait on servers and timers.
pub(crate) fn jobs() -> usize {
    if let Some(jobs) = std::env::var("UNIQUE_TEST_JOBS")
        .ok()
        .and_then(|jobs| jobs.parse().ok())
        .filter(|&jobs: &usize| jobs > 0)
    {
        return jobs;
    }
    if SHARED_SERVERS
        .iter()
        .any(|var| std::env::var_os(var).is_some())
    {
        return 1;
    }
    thread::available_parallelism().map_or(2, |cpus| 2 * cpus.get())
}

/// What running the test binaries came to.
pub(crate) struct Outcome {
    pub ran: usize,
    pub failed: Vec<String>,
    /// Each binary's label and wall time, slowest first.
    pub times: Vec<(String, Duration)>,
}

/// Runs every test harness among `artifacts`, `jobs` at a time, printing each one's output
/// when it finishes. The known long ones start first (`LONGEST_FIRST`), then the integration
/// tests: they start servers and run longest. The binaries `alone` names (package, test
/// target) run after the others, one at a time: their runs last a fixed time and must do enough work in it, so they need the machine to themselves.
pub(crate) fn run(artifacts: &[Artifact], jobs: usize, alone: &[(&str, &str)]) -> Outcome {
    let mut tests: Vec<&Artifact> = artifacts.iter().filter(|a| a.is_test).collect();
    tests.sort_by_key(|a| (start_rank(a), !a.is_integration, &a.package, &a.target));
    let (solo, shared): (Vec<&Artifact>, Vec<&Artifact>) = tests.into_iter().partition(|a| {
        alone
            .iter()
            .any(|(package, target)| a.package == *package && a.target == *target)
    });
    let ran = solo.len() + shared.len();
    let results = Mutex::new(Vec::new());
    run_queue(shared, jobs, &results);
    run_queue(solo, 1, &results);
    let mut results = results.into_inner().expect("results lock");
    results.sort_by_key(|result| std::cmp::Reverse(result.took));
    Outcome {
        ran,
        failed: results
            .iter()
            .filter(|result| !result.ok)
            .map(|result| result.label.clone())
            .collect(),
        times: results
            .into_iter()
            .map(|result| (result.label, result.took))
            .collect(),
    }
}

/// The binaries that ran longest in the last CI runs (package, test target), longest first:
/// they start first, so the phase does not end waiting on one started late.
const LONGEST_FIRST: &[(&str, &str)] = &[
    ("unique-server", "openapi_schemathesis"),
    ("unique-store-dynamodb", "lease_contract"),
    ("unique-kickrecv", "flood"),
    ("xtask", "path_builds"),
    ("unique-store-dynamodb", "contract"),
    ("unique-store-postgres", "icu_contract"),
    ("unique-store-postgres", "contract"),
];

/// Where `artifact` stands in `LONGEST_FIRST`, or after all of them.
fn start_rank(artifact: &Artifact) -> usize {
    LONGEST_FIRST
        .iter()
        .position(|(package, target)| artifact.package == *package && artifact.target == *target)
        .unwrap_or(LONGEST_FIRST.len())
}

/// Runs `queue` in order, `jobs` at a time, adding each result to `results`.
fn run_queue(queue: Vec<&Artifact>, jobs: usize, results: &Mutex<Vec<Ran>>) {
    let queue = Mutex::new(queue.into_iter().collect::<VecDeque<_>>());
    let print = Mutex::new(());
    thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let Some(artifact) = queue.lock().expect("queue lock").pop_front() else {
                        break;
                    };
                    let result = run_one(artifact);
                    let _printing = print.lock().expect("print lock");
                    eprint!("{}", result.output);
                    eprintln!(
                        "--> {} {} in {:.1}s",
                        result.label,
                        if result.ok { "passed" } else { "FAILED" },
                        result.took.as_secs_f64()
                    );
                    results.lock().expect("results lock").push(result);
                }
            });
        }
    });
}

struct Ran {
    label: String,
    ok: bool,
    took: Duration,
    output: String,
}

/// One test binary, as `cargo test` starts it: in its package's directory, with the package's
/// cargo variables, stdout and stderr into one file so their order survives.
fn run_one(artifact: &Artifact) -> Ran {
    let label = format!("{} {}", artifact.package, artifact.target);
    let started = Instant::now();
    let outcome = output_file(artifact).and_then(|mut file| {
        let status = Command::new(&artifact.executable)
            .current_dir(&artifact.manifest_dir)
            .env("CARGO_MANIFEST_DIR", &artifact.manifest_dir)
            .env("CARGO_PKG_NAME", &artifact.package)
            .stdin(Stdio::null())
            .stdout(file.try_clone().map_err(|e| e.to_string())?)
            .stderr(file.try_clone().map_err(|e| e.to_string())?)
            .status()
            .map_err(|e| format!("cannot start {}: {e}", artifact.executable.display()))?;
        let mut output = String::new();
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_string(&mut output))
            .map_err(|e| format!("cannot read the output back: {e}"))?;
        Ok((status.success(), output))
    });
    let (ok, output) = outcome.unwrap_or_else(|e| (false, format!("xtask: {e}\n")));
    Ran {
        output: format!(
            "\n     Running {label} ({})\n{output}",
            artifact.executable.display()
        ),
        label,
        ok,
        took: started.elapsed(),
    }
}

/// An unnamed scratch file for one binary's output. A file rather than a pipe: a server a test
/// started and left running would hold a pipe open, and reading it would never end.
fn output_file(artifact: &Artifact) -> Result<File, String> {
    let path = crate::fresh_temp_path("test-output", &artifact.package, &artifact.target, "out")?;
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    // Unlinked at once: the open handles keep it until the binary is done.
    let _ = std::fs::remove_file(&path);
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_artifact_message_names_its_executable() {
        let message: Value = serde_json::from_str(
            r#"{"reason":"compiler-artifact",
                "package_id":"path+file:///w/crates/unique-core#0.1.0",
                "manifest_path":"/w/crates/unique-core/Cargo.toml",
                "target":{"kind":["test"],"name":"queue"},
                "profile":{"test":true},
                "executable":"/w/target/debug/deps/queue-0123"}"#,
        )
        .unwrap();
        let names = HashMap::from([
            ("path+file:///w/crates/unique-core#0.1.0", "unique-core"),
            ("x 0.1.0 (path)", "x"),
        ]);
        let queue = artifact(&message, &names).unwrap();
        assert_eq!(queue.package, "unique-core");
        assert_eq!(queue.target, "queue");
        assert!(queue.is_test && queue.is_integration);
        assert_eq!(queue.manifest_dir, Path::new("/w/crates/unique-core"));

        let library: Value = serde_json::from_str(
            r#"{"reason":"compiler-artifact","package_id":"x 0.1.0 (path)",
                "manifest_path":"/w/x/Cargo.toml","target":{"kind":["lib"],"name":"x"},
                "profile":{"test":false},"executable":null}"#,
        )
        .unwrap();
        assert!(
            artifact(&library, &names).is_none(),
            "a library has no executable"
        );
        let dependency = message.to_string().replace("unique-core#", "elsewhere#");
        let dependency: Value = serde_json::from_str(&dependency).unwrap();
        assert!(
            artifact(&dependency, &names).is_none(),
            "a package outside the workspace is not run"
        );
    }

    #[test]
    fn every_binary_named_to_start_first_exists() {
        for (package, target) in LONGEST_FIRST {
            let dir = if *package == "xtask" {
                crate::root().join("xtask")
            } else {
                crate::root().join("crates").join(package)
            };
            let file = dir.join("tests").join(format!("{target}.rs"));
            assert!(
                file.is_file(),
                "LONGEST_FIRST names {package} {target}: no {}",
                file.display()
            );
        }
    }
}
