//! `cargo xtask`: the project's automation. Each subcommand is a function;
//! `cargo xtask ci` runs exactly what CI runs.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

mod architecture;
mod contract;
mod go;
mod guide;
mod node_check;
mod publish;
mod test_run;
mod tidy;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci        fmt check, tidy, clippy -D warnings, cargo-deny (bans, licenses, sources), unused
            dependencies (cargo-machete), docs (warnings denied), each optional feature
            compiled alone (cargo-hack), every test (doctests, contract suites and short
            history runs included), the out-of-tree backend example's contract run, loom
            models, smoke S1-S6, the Go module (`go`), benches compiled (not run), the
            package check
  test      every test: the test binaries of `cargo test --workspace --no-run`, several at a
            time (UNIQUE_TEST_JOBS, default twice the CPUs; one with a UNIQUE_TEST_* server),
            each as cargo test runs it, then the doctests
  machete   unused dependencies of every crate (installs cargo-machete when missing)
  docs      cargo doc --workspace --no-deps with rustdoc warnings denied
  features  cargo hack check --each-feature: every optional feature compiled alone, and
            none (installs cargo-hack when missing)
  publish   cargo package for every publishable crate, then one build of all of them from their
            packages (a scratch workspace in target/package-check)
  tidy      every clause or invariant id cited in the repository names a heading of
            docs/design.md, nothing cites a document outside the repository, and
            docs/backend-guide.md quotes the example backend verbatim and states the
            store contract's case count, and docs/architecture.md's crate map has one row
            per workspace crate and allows every normal and build dependency between them
  deny      cargo-deny's offline checks (installs cargo-deny when missing)
  contract  every contract suite (stores, kickers, lease backends, and the suites'
            own checks against broken backends): each test target named `contract` or
            `*_contract` in the workspace, then a table of cases passed, failed and the
            clause of each failure; `contract --path DIR` runs those of the crate in DIR
            instead (an out-of-tree backend), built in a target directory of its own,
            target/contract-path/<dir name>-<hash of DIR's canonical path>
  loom      the loom models: the memory store's fenced write, the claim queue, the connection
            activity word (one build in target/loom)
  node-check --url URL --signing-keys FILE [options]
            the kick-receiver conformance check (unique-node-check) against a running
            receiver in any language: real kicks for random uids, one line per clause,
            failing when one fails; options pass through (`--help` lists them)
  fuzz      the property-based fuzz targets (wire contract, kick receiver) with
            PROPTEST_CASES=20000 instead of the 256 cases per property `ci` runs
  smoke     S1-S6 with the server binary and client processes over loopback HTTP
  go        the Go module (clients/go): gofmt, go vet, go test against the real unique-server
            (unique-node-check included, on the Go kick receiver); installs Debian's golang-go
            with apt-get when go is missing
  chaos     the history runs (memory, SQLite with SIGKILL and restart, two and three servers
            on one DynamoDB table, DynamoDB dropping answers, two and three servers on one
            PostgreSQL table), and the lease histories (memory, Redis, servers on SQLite,
            memory, PostgreSQL and DynamoDB) for 60 s each instead of the 3 s `ci` runs, one
            at a time, printing each report; the broken-store checks run too
  bench     the load generator: unique-server (memory, fjall, sqlite, postgres) side by side with
            a redis script and a redis script on an fsync-always append-only file, random users
            (uids over 10^8), the servers pinned to one CPU and the load generator to another,
            then the like-for-like targets again unpinned, then both again on 10,000 fixed keys,
            the ratios of every pass side by side, and memory and disk per session at 10^6
            sessions (`--no-pin`: unpinned only; `--keys 10000`: the old key set alone; flags
            after `bench` go to unique-bench); then the batched heartbeat measure (HTTP
            requests and store round trips for 10,000 sessions)
  soak      --minutes N [options]
            the release unique-server on its default store (fjall, on a small tmpfs: needs
            root), with caller tokens, under steady mixed load for N minutes (logins,
            takeovers, logouts, leases, node registrations, requests with bad tokens),
            through a full disk and a SIGKILL with a restart on the same directory; one row
            per minute (claims/s, p99, RSS, fds, bytes on disk, errors by kind) and a
            verdict; fails when an acknowledged write was lost or the server did not recover
            (`--help` after `soak` lists the options; not part of `ci`)
";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::FAILURE;
    };
    let mut run = Run::default();
    match cmd.as_str() {
        "ci" => ci(&mut run),
        "contract" => match contract_paths(&args[1..]) {
            Ok(paths) => contract::run_suites(&mut run, &paths, false),
            Err(e) => {
                eprintln!("{e}\n\n{USAGE}");
                return ExitCode::FAILURE;
            }
        },
        "loom" => loom(&mut run),
        "test" => {
            test(&mut run);
        }
        "node-check" => {
            if let Err(e) = node_check(&mut run, &args[1..]) {
                eprintln!("{e}\n\n{USAGE}");
                return ExitCode::FAILURE;
            }
        }
        "fuzz" => fuzz(&mut run),
        "tidy" => tidy(&mut run),
        "deny" => deny(&mut run),
        "machete" => machete(&mut run),
        "docs" => docs(&mut run),
        "features" => features(&mut run),
        "publish" => publish(&mut run),
        "smoke" => smoke(&mut run),
        "chaos" => chaos(&mut run),
        "go" => go::run(&mut run),
        "bench" => bench(&mut run, &args[1..]),
        "soak" => soak(&mut run, &args[1..]),
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("unknown command {other:?}\n\n{USAGE}");
            return ExitCode::FAILURE;
        }
    }
    run.summary()
}

fn ci(run: &mut Run) {
    run.step("fmt", cargo(&["fmt", "--all", "--", "--check"]));
    tidy(run);
    run.step(
        "clippy",
        cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    );
    deny(run);
    machete(run);
    docs(run);
    features(run);
    let built = test(run);
    // The out-of-tree backend example: a crate outside the workspace runs the
    // store suite through the same command a backend's author uses, from its
    // committed lockfile.
    contract::run_suites(run, &[root().join(OUT_OF_TREE_EXAMPLE)], true);
    loom(run);
    match &built {
        Some(artifacts) => smoke_built(run, artifacts),
        None => smoke(run),
    }
    go::run(run);
    // Compiles every criterion bench; the dev profile reuses the test step's build
    // (a second, optimised build of the workspace would double CI time). `cargo xtask
    // bench` and `cargo bench` build them optimised to measure.
    run.step(
        "bench build",
        cargo(&[
            "bench",
            "--workspace",
            "--benches",
            "--no-run",
            "--profile",
            "dev",
        ]),
    );
    publish(run);
}

/// The out-of-tree backend example `ci` runs through `contract --path`.
const OUT_OF_TREE_EXAMPLE: &str = "examples/out-of-tree-store";

/// The cargo-deny release `deny` installs when the machine has none (pinned, so a
/// fresh machine checks with the same rules as this one).
const CARGO_DENY: &str = "cargo-deny@0.20.2";

/// The cargo-machete release `machete` installs when the machine has none.
const CARGO_MACHETE: &str = "cargo-machete@0.9.2";

/// The cargo-hack release `features` installs when the machine has none.
const CARGO_HACK: &str = "cargo-hack@0.6.46";

/// Installs the cargo subcommand `sub` from `release` (pinned, `--locked`) unless
/// `cargo <sub> --version` already answers.
fn ensure_installed(run: &mut Run, sub: &str, release: &str) {
    let installed = subcommand(&[sub, "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !installed {
        run.step(
            &format!("install {release}"),
            cargo(&["install", "--locked", release]),
        );
    }
}

/// cargo-deny's offline checks against `deny.toml`: bans, licenses, sources.
/// (`advisories` needs a network database, which CI cannot reach.)
fn deny(run: &mut Run) {
    ensure_installed(run, "deny", CARGO_DENY);
    run.step(
        "deny (bans, licenses, sources)",
        cargo(&["deny", "check", "bans", "licenses", "sources"]),
    );
}

/// Dependencies no crate uses (cargo-machete reads the sources, so it needs no build).
fn machete(run: &mut Run) {
    ensure_installed(run, "machete", CARGO_MACHETE);
    run.step(
        "unused dependencies (cargo-machete)",
        subcommand(&["machete"]),
    );
}

/// The API docs of every crate, with broken intra-doc links and other rustdoc
/// warnings as errors.
fn docs(run: &mut Run) {
    let mut cmd = cargo(&["doc", "--workspace", "--no-deps"]);
    cmd.env("RUSTDOCFLAGS", "-D warnings");
    run.step("docs (rustdoc warnings denied)", cmd);
}

/// Every optional feature compiled alone, and each crate without its default
/// features, so a feature that leans on another one fails here rather than in a
/// user's build. `--no-dev-deps`: dev-dependencies would switch features on.
fn features(run: &mut Run) {
    ensure_installed(run, "hack", CARGO_HACK);
    run.step(
        "features (each optional feature alone, cargo-hack)",
        cargo(&[
            "hack",
            "check",
            "--workspace",
            "--each-feature",
            "--no-dev-deps",
        ]),
    );
}

/// Packages every publishable crate (`publish = false` ones are left out) and builds them all
/// from their packages, as the registry would receive them, in one scratch workspace
/// (`publish.rs` says why one build, and which step checks each crate alone). `--allow-dirty`:
/// it checks what would be packaged, not whether the work is committed.
fn publish(run: &mut Run) {
    let name = "package check (every publishable crate packaged and built from its package)";
    let packages = match contract::metadata(None).and_then(|metadata| {
        match publish::clear_unpacked(&metadata)? {
            0 => {}
            n => eprintln!(
                "removed {n} unpacked copies of this workspace's crates left by earlier runs"
            ),
        }
        Ok(publish::publishable(&metadata))
    }) {
        Ok(packages) => packages,
        Err(message) => {
            eprintln!("\n==> xtask: {name}\nxtask: {message}");
            run.record(name, false, Duration::ZERO);
            return;
        }
    };
    eprintln!("\n==> xtask: {name}");
    let started = Instant::now();
    let ok = package_check(&packages);
    run.record(name, ok, started.elapsed());
}

fn package_check(packages: &[(String, String)]) -> bool {
    let written = publish::package_command(cargo(&[]), packages)
        .status()
        .is_ok_and(|status| status.success());
    if !written {
        eprintln!("xtask: cargo package failed");
        return false;
    }
    let scratch = root().join("target").join("package-check");
    let manifest = match publish::unpack(&root(), packages, &scratch) {
        Ok(manifest) => manifest,
        Err(message) => {
            eprintln!("xtask: {message}");
            return false;
        }
    };
    // Its own target directory: the scratch members' binaries must not replace the
    // workspace's own in target/debug. No debug info: nothing runs what this builds.
    let mut build = cargo(&["build", "--workspace", "--manifest-path"]);
    build
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", scratch.join("target"))
        .env("CARGO_PROFILE_DEV_DEBUG", "false");
    build.status().is_ok_and(|status| status.success())
}

fn tidy(run: &mut Run) {
    eprintln!("\n==> xtask: tidy");
    let started = Instant::now();
    let ok = match tidy::check(&root()) {
        Ok(files) => {
            eprintln!(
                "every citation in {files} files resolves in docs/design.md; {} matches the code; \
                 {} matches the workspace",
                guide::GUIDE,
                architecture::MAP
            );
            true
        }
        Err(dangling) => {
            for d in &dangling {
                eprintln!("{}:{}: {}", d.file, d.line, d.what);
            }
            eprintln!("{} problems", dangling.len());
            false
        }
    };
    run.record(
        "tidy (citations resolve in docs/design.md, the backend guide matches the code, the crate map matches the workspace)",
        ok,
        started.elapsed(),
    );
}

/// The crates `contract --path DIR` names (any number of times), resolved
/// against the directory `cargo xtask` was started from.
fn contract_paths(args: &[String]) -> Result<Vec<PathBuf>, String> {
    let mut paths = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let path = match arg.as_str() {
            "--path" => args.next().ok_or("--path needs a directory")?.as_str(),
            other => other
                .strip_prefix("--path=")
                .ok_or_else(|| format!("contract: unknown argument {other:?}"))?,
        };
        let path = Path::new(path);
        let dir = env::current_dir().map_err(|e| format!("no current directory: {e}"))?;
        paths.push(dir.join(path));
    }
    Ok(paths)
}

/// The property-based fuzz targets `fuzz` runs longer than `ci` does: (package, test target).
const FUZZ_TARGETS: &[(&str, &str)] =
    &[("unique-arbiter-http", "fuzz"), ("unique-kickrecv", "fuzz")];

/// Cases per property in `fuzz`; `ci` runs each target's default (256).
const FUZZ_CASES: &str = "20000";

fn fuzz(run: &mut Run) {
    for (package, target) in FUZZ_TARGETS {
        let mut cmd = cargo(&["test", "-p", package, "--test", target]);
        cmd.env("PROPTEST_CASES", FUZZ_CASES);
        run.step(&format!("fuzz {package} ({FUZZ_CASES} cases)"), cmd);
    }
}

/// The kick-receiver check against the receiver the arguments name (run as its binary, so
/// xtask's own build stays small).
fn node_check(run: &mut Run, args: &[String]) -> Result<(), String> {
    let cwd = env::current_dir().map_err(|e| format!("no current directory: {e}"))?;
    let cmd = node_check::command(cargo(&[]), args, &cwd);
    run.step(&format!("node-check ({})", node_check::PACKAGE), cmd);
    Ok(())
}

fn loom(run: &mut Run) {
    // One build for every crate with loom models (each crate's shim swaps in loom's
    // primitives): the memory store's fenced write, the claim queue in unique-core,
    // and the connection activity word in unique-listener.
    let mut cmd = cargo(&[
        "test",
        "--release",
        "-p",
        "unique-store-memory",
        "-p",
        "unique-core",
        "-p",
        "unique-listener",
        "--lib",
        "loom",
    ]);
    cmd.env("RUSTFLAGS", "--cfg loom")
        .env("CARGO_TARGET_DIR", root().join("target").join("loom"));
    run.step("loom", cmd);
}

/// Every test of the workspace, as `cargo test --workspace` runs them, with the test binaries
/// several at a time; the executables the build made, for the steps after it.
fn test(run: &mut Run) -> Option<Vec<test_run::Artifact>> {
    let built = test_build(run);
    if let Some(artifacts) = &built {
        test_binaries(run, artifacts);
    }
    run.step("doctests", cargo(&["test", "--workspace", "--doc"]));
    built
}

/// Builds every test target of the workspace, as `cargo test --workspace` would, and lists
/// the executables; `None` (the step recorded as failed) when the build fails.
fn test_build(run: &mut Run) -> Option<Vec<test_run::Artifact>> {
    let name = "test build (every test target of the workspace)";
    eprintln!("\n==> xtask: {name}");
    let started = Instant::now();
    let built = contract::metadata(None).and_then(|metadata| {
        let build = cargo(&[
            "test",
            "--workspace",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ]);
        test_run::build(build, &metadata)
    });
    run.record(name, built.is_ok(), started.elapsed());
    built.map_err(|e| eprintln!("xtask: {e}")).ok()
}

/// Runs the test binaries `test_build` listed, several at a time (`test_run::jobs`).
fn test_binaries(run: &mut Run, artifacts: &[test_run::Artifact]) {
    let jobs = test_run::jobs();
    let name = format!("test binaries ({jobs} at a time: unit, integration, contract suites)");
    eprintln!("\n==> xtask: {name}");
    let started = Instant::now();
    // The history runs last a fixed time and check they did enough in it: each has the machine.
    let outcome = test_run::run(artifacts, jobs, HISTORY_TESTS);
    eprintln!("\n{} test binaries ran; the slowest:", outcome.ran);
    for (label, took) in outcome.times.iter().take(8) {
        eprintln!("  {:>7.1}s  {label}", took.as_secs_f64());
    }
    for label in &outcome.failed {
        eprintln!("FAILED: {label}");
    }
    if outcome.ran == 0 {
        eprintln!("xtask: the test build listed no test binaries");
    }
    run.record(
        &name,
        outcome.ran > 0 && outcome.failed.is_empty(),
        started.elapsed(),
    );
}

/// S1-S6 with the binaries the test build made (the server, the smoke runner and its client,
/// built because their packages have integration tests), so smoke adds no build of its own;
/// the standalone `smoke` builds them itself.
fn smoke_built(run: &mut Run, artifacts: &[test_run::Artifact]) {
    let name = "smoke S1-S6";
    let binary = |package: &str, target: &str| {
        artifacts
            .iter()
            .find(|a| !a.is_test && a.package == package && a.target == target)
            .map(|a| a.executable.clone())
            .ok_or(format!("{package}'s binary {target}"))
    };
    let found = binary("unique-examples", "smoke").and_then(|runner| {
        // The runner starts the others from its own directory.
        for (package, target) in [
            ("unique-examples", "smoke-client"),
            ("unique-server", "unique-server"),
        ] {
            let other = binary(package, target)?;
            if other.parent() != runner.parent() {
                return Err(format!("{package}'s binary {target} beside the runner"));
            }
        }
        Ok(runner)
    });
    match found {
        Ok(runner) => {
            let mut cmd = Command::new(runner);
            cmd.arg("--no-build").current_dir(root());
            run.step(name, cmd);
        }
        Err(missing) => {
            eprintln!("\n==> xtask: {name}\nxtask: the test build made no {missing}");
            run.record(name, false, Duration::ZERO);
        }
    }
}

fn smoke(run: &mut Run) {
    run.step(
        "smoke S1-S6",
        // The dev profile reuses the test step's build; the processes' correctness,
        // not their speed, is what smoke checks.
        cargo(&["run", "-p", "unique-examples", "--bin", "smoke"]),
    );
}

/// The history tests `chaos` runs long: (package, test target). `ci` runs them short as part
/// of the workspace tests, each after the other test binaries and alone (`test_binaries`).
const HISTORY_TESTS: &[(&str, &str)] = &[
    ("unique-history", "histories"),
    ("unique-history", "lease_histories"),
    ("unique-server", "history"),
    ("unique-server", "lease_history"),
];

/// Seconds each history run lasts in `chaos` (`UNIQUE_HISTORY_SECS`).
const CHAOS_SECS: &str = "60";

fn chaos(run: &mut Run) {
    for (package, target) in HISTORY_TESTS {
        // One run at a time, so each has the machine, and every report printed.
        let mut cmd = cargo(&[
            "test",
            "-p",
            package,
            "--test",
            target,
            "--",
            "--nocapture",
            "--test-threads=1",
        ]);
        cmd.env("UNIQUE_HISTORY_SECS", CHAOS_SECS);
        run.step(
            &format!("chaos {package} {target} ({CHAOS_SECS} s per run)"),
            cmd,
        );
    }
}

/// The claim load generator (its arguments passed through), then the batched-heartbeat
/// measure: 10,000 sessions at a 5 s interval, per-session against batched.
fn bench(run: &mut Run, extra: &[String]) {
    let mut cmd = cargo(&[
        "run",
        "--release",
        "-p",
        "unique-bench",
        "--bin",
        "unique-bench",
        "--",
    ]);
    cmd.args(extra);
    run.step("bench", cmd);
    run.step(
        "bench heartbeats (10,000 sessions, 5 s interval)",
        cargo(&[
            "run",
            "--release",
            "-p",
            "unique-bench",
            "--bin",
            "heartbeats",
        ]),
    );
}

/// The soak (`unique-bench`'s `soak` binary, its arguments passed through): it builds the
/// release server itself, as the bench does.
fn soak(run: &mut Run, extra: &[String]) {
    let mut cmd = cargo(&[
        "run",
        "--release",
        "-p",
        "unique-bench",
        "--bin",
        "soak",
        "--",
    ]);
    cmd.args(extra);
    run.step("soak", cmd);
}

/// A path under the system's temporary directory for one run of `package`'s `target`, named by
/// `kind` and this process, with nothing at it.
fn fresh_temp_path(
    kind: &str,
    package: &str,
    target: &str,
    extension: &str,
) -> Result<PathBuf, String> {
    let path = env::temp_dir().join(format!(
        "unique-{kind}-{}-{package}-{target}.{extension}",
        std::process::id()
    ));
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(path),
        Err(e) => Err(format!("cannot clear {}: {e}", path.display())),
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(args).current_dir(root());
    cmd
}

/// `cargo` running a third-party subcommand. Without `CARGO_PKG_NAME`, which
/// `cargo run` sets for xtask: cargo-machete takes its presence to mean it was
/// started by a build, not as `cargo machete`, and then reads "machete" as a path.
fn subcommand(args: &[&str]) -> Command {
    let mut cmd = cargo(args);
    cmd.env_remove("CARGO_PKG_NAME");
    cmd
}

/// The steps that ran, for the summary.
#[derive(Default)]
struct Run {
    steps: Vec<(String, bool, Duration)>,
}

impl Run {
    fn step(&mut self, name: &str, mut cmd: Command) {
        eprintln!("\n==> xtask: {name}");
        let started = Instant::now();
        let ok = match cmd.status() {
            Ok(status) => status.success(),
            Err(e) => {
                eprintln!("xtask: cannot start {cmd:?}: {e}");
                false
            }
        };
        self.record(name, ok, started.elapsed());
    }

    fn record(&mut self, name: &str, ok: bool, took: Duration) {
        self.steps.push((name.to_owned(), ok, took));
    }

    fn summary(&self) -> ExitCode {
        eprintln!("\n==> xtask summary");
        for (name, ok, took) in &self.steps {
            let mark = if *ok { "ok  " } else { "FAIL" };
            eprintln!("  {mark} {:>7.1}s  {name}", took.as_secs_f64());
        }
        let failed = self.steps.iter().filter(|(_, ok, _)| !ok).count();
        if failed == 0 {
            eprintln!("all {} steps passed", self.steps.len());
            ExitCode::SUCCESS
        } else {
            eprintln!("{failed} of {} steps failed", self.steps.len());
            ExitCode::FAILURE
        }
    }
}
