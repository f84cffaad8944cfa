//! The `unique-server` binary: the Arbiter over HTTP on a configurable store.
//!
//! `main` parses the command line, starts the log, the metrics recorder and the async
//! runtime, and `run` starts the server in order: the flags are checked, the secret files read
//! and the audit log opened (`exposure`, `secrets`, `unique_arbiter_http::AuditFile`), then the
//! store and its lease directory are opened (`stores`, `leases`), and `served` builds the
//! arbiter and serves it.
//! Whatever stops startup is a [`StartupError`], printed once, here.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use metrics_exporter_prometheus::PrometheusHandle;
use unique_arbiter_http::{AuditFile, Rotation, SharedTokens};

use crate::args::Args;
use crate::error::StartupError;
use crate::exposure::{Auth, Kicks};
use crate::served::Served;
use crate::stores::OpenedStore;

mod args;
mod counts;
mod error;
mod exposition;
mod exposure;
mod kicker;
mod leases;
mod logging;
mod peers;
mod reload;
mod secrets;
mod served;
mod signals;
mod stores;
mod sweep;

// mimalloc: about 40 % of the instructions of glibc's malloc and free on the claim
// path, which allocates a few times per request (see BENCHMARKS.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    logging::init(args.log_format);
    // Before anything registers a metric: handles bind to the recorder in force when made.
    let metrics = if args.no_metrics {
        None
    } else {
        match exposition::install() {
            Ok(handle) => Some(handle),
            Err(error) => return failed(&error),
        }
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    runtime.worker_threads(args.worker_threads());
    let runtime = match runtime.build() {
        Ok(rt) => rt,
        Err(e) => return failed(&format!("cannot start the async runtime: {e}").into()),
    };
    // The message is printed before the runtime drops: its shutdown waits for blocking work.
    match runtime.block_on(run(args, metrics)) {
        Ok(Stopped::Served) => ExitCode::SUCCESS,
        Ok(Stopped::BeforeServing) => {
            // A store still opening may hold a blocking thread (a file, a connection): do
            // not wait for it, the process ends now.
            runtime.shutdown_background();
            ExitCode::SUCCESS
        }
        Err(error) => failed(&error),
    }
}

/// How a run that did not fail ended.
enum Stopped {
    /// Served until a shutdown signal.
    Served,
    /// A shutdown signal came while the store or its lease directory was opening.
    BeforeServing,
}

/// Says on stderr why the server did not start; the process exits 1.
fn failed(error: &StartupError) -> ExitCode {
    eprintln!("unique-server: {error}");
    ExitCode::FAILURE
}

async fn run(args: Args, metrics: Option<PrometheusHandle>) -> Result<Stopped, StartupError> {
    // First: a SIGTERM from here on ends startup cleanly, a slow store open included.
    let mut signals = signals::install()?;
    // Configuration mistakes stop startup before the store is opened.
    let warnings = exposure::check(
        args.listen,
        Auth::of(args.auth_tokens.is_some(), args.insecure_no_auth),
        Kicks::of(
            args.kick_signing_keys.is_some(),
            args.insecure_unsigned_kicks,
            args.no_sessions,
        ),
    )?;
    let tokens = args
        .auth_tokens
        .as_deref()
        .map(secrets::load_tokens)
        .transpose()?;
    if let Some(tokens) = &tokens {
        tracing::info!(tokens = tokens.len(), "caller authentication on");
    }
    let keys = args
        .kick_signing_keys
        .as_deref()
        .map(secrets::load_signing_keys)
        .transpose()?;
    let peer_secret = peers::secret(&args)?;
    let audit = args
        .audit_log
        .as_deref()
        .map(|path| {
            let rotation = Rotation {
                max_bytes: args.audit_log_max_bytes,
                keep: args.audit_log_keep,
            };
            AuditFile::with_rotation(path, rotation)
                .map_err(|e| format!("cannot open the audit log {}: {e}", path.display()))
        })
        .transpose()?
        .map(Arc::new);
    if let Some(audit) = &audit {
        let rotation = audit.rotation();
        tracing::info!(
            path = %audit.path().display(),
            max_bytes = rotation.max_bytes,
            keep = rotation.keep,
            "audit log open"
        );
    }
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    let options = args.serve_options()?;
    let shutdown = &mut signals.shutdown;
    // Boxed: a store's opening is a large future.
    let opening = Box::pin(stores::open_store(&args));
    let Some(opened) = signals::unless_stopped(shutdown, "the store was opening", opening).await
    else {
        return Ok(Stopped::BeforeServing);
    };
    let opened = opened?;
    let leases = if args.no_leases {
        tracing::info!("lease routes off (--no-leases)");
        None
    } else {
        let opening = Box::pin(leases::open_leases(&args, &opened));
        let Some(leases) =
            signals::unless_stopped(shutdown, "the lease directory was opening", opening).await
        else {
            return Ok(Stopped::BeforeServing);
        };
        Some(leases?)
    };
    let _sweeper = leases.as_ref().and_then(|leases| {
        let rows = leases.rows.clone()?;
        sweep::spawn(rows, *args.lease_sweep_grace, *args.lease_sweep_interval)
    });
    let leases = leases.map(|leases| leases.service);
    let served = Served {
        tokens: tokens.map(SharedTokens::new),
        keys,
        audit,
        leases,
        peer_secret,
        options,
        metrics,
        signals,
    };
    // Each store gets its own monomorphised server: the Arbiter calls the store
    // directly instead of through a `dyn Store` (one boxed future fewer per call).
    match opened {
        OpenedStore::Memory(store) => served.run(store, &args).await,
        OpenedStore::Sqlite(store) => served.run(store, &args).await,
        OpenedStore::Fjall(store) => served.run(store, &args).await,
        OpenedStore::Dynamodb(store) => served.run(store, &args).await,
        OpenedStore::Postgres(store) => served.run(store, &args).await,
    }?;
    Ok(Stopped::Served)
}
