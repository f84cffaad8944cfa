//! The smoke runner: S1–S6 of the specification with `unique-server` and `smoke-client`
//! as real processes on loopback ports. `cargo xtask smoke` runs it.
//!
//! Run: `cargo run -p unique-examples --bin smoke [-- --store memory --verbose]` (add
//! `--release` for optimised processes)
//!
//! It first builds `unique-server` and this package with its own profile through cargo (the
//! `CARGO` variable cargo sets, else `cargo`), then finds both binaries next to its own.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use unique_examples::smoke::{self, Options, StoreKind};

/// S1-S6 over real processes: one unique-server, smoke-client nodes.
#[derive(Debug, Parser)]
#[command(name = "smoke")]
struct Args {
    /// The server's store.
    #[arg(long, value_enum, default_value_t = Store::Fjall)]
    store: Store,
    /// The server's kick timeout.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    kick_timeout: Duration,
    /// Every client's heartbeat interval.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    heartbeat: Duration,
    /// Do not build; use the binaries next to this one as they are.
    #[arg(long)]
    no_build: bool,
    /// Echo every child's event lines to stderr.
    #[arg(long)]
    verbose: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Store {
    /// Embedded fjall directory in a scratch directory (the server's default store).
    Fjall,
    /// Embedded SQLite file in a scratch directory.
    Sqlite,
    /// In-memory store.
    Memory,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let bin_dir = match std::env::current_exe() {
        Ok(exe) => exe.parent().map(PathBuf::from).unwrap_or_default(),
        Err(e) => {
            eprintln!("smoke: cannot locate its own binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !args.no_build
        && let Err(e) = build()
    {
        eprintln!("smoke: {e}");
        return ExitCode::FAILURE;
    }
    for binary in ["unique-server", "smoke-client"] {
        if !bin_dir.join(binary).is_file() {
            eprintln!(
                "smoke: {binary} not found in {}; build it with `cargo build --release -p unique-server -p unique-examples`",
                bin_dir.display()
            );
            return ExitCode::FAILURE;
        }
    }
    let options = Options {
        bin_dir,
        store: match args.store {
            Store::Fjall => StoreKind::Fjall,
            Store::Sqlite => StoreKind::Sqlite,
            Store::Memory => StoreKind::Memory,
        },
        kick_timeout: args.kick_timeout,
        heartbeat_interval: args.heartbeat,
        verbose: args.verbose,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("smoke: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if runtime.block_on(smoke::run(options)) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Builds the server and the clients with this runner's own profile (release or
/// dev), so they land next to this binary.
fn build() -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(&cargo);
    command.args(["build", "-p", "unique-server", "-p", "unique-examples"]);
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    let status = command
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build failed with {status}"))
    }
}
