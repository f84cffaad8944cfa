#![doc = include_str!("../README.md")]
// Request counts and nanosecond latencies stay far below 2^52, where u64 → f64 is exact.
#![allow(clippy::cast_precision_loss)]

mod args;
mod conn;
mod cpu;
mod floor;
mod http_client;
mod io;
mod keys;
mod load;
mod pass;
mod pin;
mod redis_client;
mod report;
mod resident;
mod server;
mod target;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Args, Dist};
use crate::keys::KeyChoice;
use crate::load::LoadPlan;
use crate::pass::{PassContext, passes, run_pass, run_resident};
use crate::pin::{Placement, Unpinned};
use crate::target::Target;

fn main() -> ExitCode {
    let args = Args::parse();
    if args.serve_floor {
        return floor::serve();
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("unique-bench: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let keys = KeyChoice::from_keys(args.keys)?;
    let keys = match args.dist {
        Dist::Uniform => keys,
        Dist::Hot => keys.hot(args.hot_keys, args.hot_share)?,
    };
    if !(0.0..=1.0).contains(&args.replay_share) {
        return Err("--replay-share must be between 0 and 1".into());
    }
    if args.connections == 0 {
        return Err("--connections must be at least 1".into());
    }
    if args.resident_connections == 0 {
        return Err("--resident-connections must be at least 1".into());
    }
    if args.rounds == 0 && args.resident_sessions == 0 {
        return Err("--rounds 0 and --resident-sessions 0: nothing to measure".into());
    }
    let plan = LoadPlan {
        connections: args.connections,
        warmup: args.warmup,
        duration: args.duration,
        keys,
        replay_share: args.replay_share,
        round: 1,
    };
    let needs_server = args.resident_sessions > 0
        || (args.rounds > 0
            && args
                .targets
                .iter()
                .any(|t| !matches!(t, Target::Redis | Target::RedisAof | Target::HttpFloor)));
    // Built before anything is pinned: cargo gets every CPU.
    let server_bin = match (&args.server_bin, needs_server) {
        (Some(path), _) => Some(path.clone()),
        (None, true) => Some(unique_testsupport::build_release_server()?),
        (None, false) => None,
    };
    let allowed = pin::allowed(None);
    let placement = pin::plan(args.no_pin, allowed.as_deref());
    if let Placement::Unpinned(why @ (Unpinned::OneCpu(_) | Unpinned::Unknown)) = &placement {
        eprintln!(
            "unique-bench: running unpinned: {}",
            match why {
                Unpinned::OneCpu(_) => "pinning needs two CPUs, this process may use one",
                _ => "the CPUs this process may use could not be read",
            }
        );
    }
    let context = PassContext {
        args,
        plan: &plan,
        server_bin: server_bin.as_deref(),
        allowed: allowed.as_deref(),
    };
    let mut report = String::new();
    let mut compared = Vec::new();
    for pass in passes(args, &placement, keys)? {
        report.push('\n');
        let (table, ratios) = run_pass(&context, &pass)?;
        report.push_str(&table);
        compared.push((pass.column(), ratios));
    }
    if compared.len() > 1 {
        report.push('\n');
        let labels = COMPARED.map(|(_, _, label)| label);
        report.push_str(&report::ratios_side_by_side(&labels, &compared));
    }
    if args.resident_sessions > 0 {
        report.push('\n');
        report.push_str(&run_resident(&context, &placement)?);
    }
    print!("{report}");
    Ok(())
}

/// The throughput ratios printed side by side for every pass at the end of a run, each
/// with the bar it is held to.
const COMPARED: [(Target, Target, &str); 4] = [
    (
        Target::Memory,
        Target::Redis,
        "memory / redis script (bar 1.30x pinned)",
    ),
    (
        Target::Memory,
        Target::HttpFloor,
        "memory / http floor (bar 0.85x pinned)",
    ),
    (
        Target::Fjall,
        Target::RedisAof,
        "fjall / redis aof always (bar 1.00x)",
    ),
    (
        Target::SqliteFull,
        Target::RedisAof,
        "sqlite full / redis aof always",
    ),
];
