//! `cargo xtask`: the project's automation. Each subcommand is a function;
//! `cargo xtask ci` runs exactly what CI runs.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

mod tidy;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci        fmt check, tidy, clippy -D warnings, cargo-deny (bans, licenses, sources), every test
            (doctests and contract suites included), loom models, smoke S1-S6, benches
            compiled (not run)
  tidy      every clause or invariant id cited in the repository names a heading of
            docs/design.md, and nothing cites a document outside the repository
  deny      cargo-deny's offline checks (installs cargo-deny when missing)
  contract  the store, kicker and lease contract suites against every in-tree backend
  loom      the loom models of the memory store's fenced write
  fuzz      the property-based fuzz targets (wire contract, kick receiver) with
            PROPTEST_CASES=20000 instead of the 256 cases per property `ci` runs
  smoke     S1-S6 with the server binary and client processes over loopback HTTP
  bench     the load generator: unique-server (memory, sqlite, postgres) side by side with a redis script
";

/// The contract suites `contract` runs: every in-tree store backend (DynamoDB on a
/// real dynalite, PostgreSQL on a private server), the store suite's own check against deliberately broken stores,
/// the kicker contract on `HttpKicker` and the kicker suite's own check against
/// broken kickers, and the lease backends (Redis on a real redis-server).
/// Each entry: (package, test target).
const CONTRACT_SUITES: &[(&str, &str)] = &[
    ("unique-store-memory", "contract"),
    ("unique-store-sqlite", "contract"),
    ("unique-store-dynamodb", "contract"),
    ("unique-store-postgres", "contract"),
    ("unique-store-contract", "reference"),
    ("unique-kick-http", "contract"),
    ("unique-kick-contract", "broken_kickers"),
    ("unique-lease", "memory_contract"),
    ("unique-lease", "redis_contract"),
];

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::FAILURE;
    };
    let mut run = Run::default();
    match cmd.as_str() {
        "ci" => ci(&mut run),
        "contract" => contract(&mut run),
        "loom" => loom(&mut run),
        "fuzz" => fuzz(&mut run),
        "tidy" => tidy(&mut run),
        "deny" => deny(&mut run),
        "smoke" => smoke(&mut run),
        "bench" => bench(&mut run, &args[1..]),
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
    run.step(
        "test (workspace: unit, integration, doctests, contract suites)",
        cargo(&["test", "--workspace"]),
    );
    loom(run);
    smoke(run);
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
}

/// The cargo-deny release `deny` installs when the machine has none (pinned, so a
/// fresh machine checks with the same rules as this one).
const CARGO_DENY: &str = "cargo-deny@0.20.2";

/// cargo-deny's offline checks against `deny.toml`: bans, licenses, sources.
/// (`advisories` needs a network database, which CI cannot reach.)
fn deny(run: &mut Run) {
    let installed = cargo(&["deny", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !installed {
        run.step(
            "install cargo-deny",
            cargo(&["install", "--locked", CARGO_DENY]),
        );
    }
    run.step(
        "deny (bans, licenses, sources)",
        cargo(&["deny", "check", "bans", "licenses", "sources"]),
    );
}

fn tidy(run: &mut Run) {
    eprintln!("\n==> xtask: tidy");
    let started = Instant::now();
    let ok = match tidy::check(&root()) {
        Ok(files) => {
            eprintln!("every citation in {files} files resolves in docs/design.md");
            true
        }
        Err(dangling) => {
            for d in &dangling {
                eprintln!("{}:{}: {}", d.file, d.line, d.what);
            }
            eprintln!("{} dangling citations", dangling.len());
            false
        }
    };
    run.record(
        "tidy (citations resolve in docs/design.md)",
        ok,
        started.elapsed(),
    );
}

fn contract(run: &mut Run) {
    for (package, target) in CONTRACT_SUITES {
        run.step(
            &format!("contract {package}"),
            cargo(&["test", "-p", package, "--test", target]),
        );
    }
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

fn loom(run: &mut Run) {
    let mut cmd = cargo(&[
        "test",
        "--release",
        "-p",
        "unique-store-memory",
        "--lib",
        "loom",
    ]);
    cmd.env("RUSTFLAGS", "--cfg loom")
        .env("CARGO_TARGET_DIR", root().join("target").join("loom"));
    run.step("loom", cmd);
}

fn smoke(run: &mut Run) {
    run.step(
        "smoke S1-S6",
        // The dev profile reuses the test step's build; the processes' correctness,
        // not their speed, is what smoke checks.
        cargo(&["run", "-p", "unique-examples", "--bin", "smoke"]),
    );
}

fn bench(run: &mut Run, extra: &[String]) {
    let mut cmd = cargo(&["run", "--release", "-p", "unique-bench", "--"]);
    cmd.args(extra);
    run.step("bench", cmd);
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
