//! The passes of a run: which targets run under which CPU placement and key choice,
//! how a pass and the resident-memory measure start their servers, pin the client and
//! report.

use crate::COMPARED;
use crate::args::Args;
use crate::keys::{KeyChoice, Keys};
use crate::load::{LoadPlan, Measurement};
use crate::pin::{self, Placement, Unpinned};
use crate::redis_client;
use crate::report::{self, Role, Row};
use crate::resident;
use crate::target::{Running, Target};

/// One set of targets measured under one placement and key choice, on servers of its own.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pass {
    /// `pinned (the headline table)`, `unpinned`, ...: the first words of the pass's report.
    title: &'static str,
    placement: Placement,
    targets: Vec<Target>,
    keys: KeyChoice,
}

/// The passes of a run: pinned, then the `--unpinned-targets` of `--targets` unpinned
/// (unless `--pinned-only`); or one unpinned pass when the run cannot or may not pin. With
/// random users and `--fixed-keys N`, the same again for the like-for-like targets on N keys.
pub(crate) fn passes(
    args: &Args,
    placement: &Placement,
    keys: KeyChoice,
) -> Result<Vec<Pass>, String> {
    if args.rounds == 0 {
        return Ok(Vec::new());
    }
    let mut passes = placed_passes(args, placement, &args.targets, keys, false);
    if args.keys == Keys::Random && args.fixed_keys > 0 {
        let like_for_like: Vec<Target> = args
            .targets
            .iter()
            .copied()
            .filter(|t| Target::LIKE_FOR_LIKE.contains(t))
            .collect();
        let fixed = KeyChoice::uniform(args.fixed_keys)?;
        passes.extend(placed_passes(args, placement, &like_for_like, fixed, true));
    }
    Ok(passes)
}

impl Pass {
    /// The pass's column in the side-by-side ratios: `pinned, random users`.
    pub(crate) fn column(&self) -> String {
        let placement = if self.placement.is_pinned() {
            "pinned"
        } else {
            "unpinned"
        };
        format!("{placement}, {}", self.keys.short())
    }
}

/// `targets` on `keys`: pinned then unpinned, or unpinned alone. `fixed_keys` names the
/// `--fixed-keys` passes.
fn placed_passes(
    args: &Args,
    placement: &Placement,
    targets: &[Target],
    keys: KeyChoice,
    fixed_keys: bool,
) -> Vec<Pass> {
    if targets.is_empty() {
        return Vec::new();
    }
    let title = |pinned: bool| match (pinned, fixed_keys) {
        (true, false) => "pinned (the headline table)",
        (true, true) => "pinned, fixed keys",
        (false, false) if placement.is_pinned() => "unpinned (as with --no-pin)",
        (false, false) => "unpinned",
        (false, true) => "unpinned, fixed keys",
    };
    if !placement.is_pinned() {
        return vec![Pass {
            title: title(false),
            placement: placement.clone(),
            targets: targets.to_vec(),
            keys,
        }];
    }
    let mut passes = vec![Pass {
        title: title(true),
        placement: placement.clone(),
        targets: targets.to_vec(),
        keys,
    }];
    let again: Vec<Target> = targets
        .iter()
        .copied()
        .filter(|t| args.unpinned_targets.contains(t))
        .collect();
    if !args.pinned_only && !again.is_empty() {
        passes.push(Pass {
            title: title(false),
            placement: Placement::Unpinned(Unpinned::Asked),
            targets: again,
            keys,
        });
    }
    passes
}

/// What every pass shares.
pub(crate) struct PassContext<'a> {
    pub(crate) args: &'a Args,
    pub(crate) plan: &'a LoadPlan,
    pub(crate) server_bin: Option<&'a std::path::Path>,
    /// The CPUs the process started with (restored after a pinned pass).
    pub(crate) allowed: Option<&'a [usize]>,
}

/// Starts the pass's servers (on the server CPU when pinned), measures them in rounds
/// (from the client CPU when pinned), stops them, and returns the pass's report with its
/// [`COMPARED`] ratios.
pub(crate) fn run_pass(
    context: &PassContext<'_>,
    pass: &Pass,
) -> Result<(String, Vec<String>), String> {
    let args = context.args;
    let mut placement = pass.placement.describe(context.allowed);
    eprintln!("unique-bench: {}: {placement}", pass.title);
    if let Placement::Pinned { server, .. } = pass.placement {
        // Every server started from here on, and all it forks, inherits this CPU.
        pin::move_self(&[server])?;
    }
    // Every server runs for the whole pass; the ones not being measured sit idle.
    let running = pass
        .targets
        .iter()
        .map(|&target| {
            Running::start(
                target,
                context.server_bin,
                args.server_workers,
                args.server_audit_log,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    pinned_client(&pass.placement, &running, &mut placement)?;
    let runtime = client_runtime(args.client_threads)?;
    let pass_plan = LoadPlan {
        keys: pass.keys,
        ..context.plan.clone()
    };
    let describe = format!(
        "{}: {}",
        pass.title,
        report::plan_line(
            &pass_plan,
            args.rounds,
            args.client_threads,
            args.server_workers,
            &placement
        )
    );
    eprintln!("{describe}");
    let mut rounds: Vec<Vec<Measurement>> = running.iter().map(|_| Vec::new()).collect();
    for round in 1..=args.rounds {
        let plan = LoadPlan {
            round,
            ..pass_plan.clone()
        };
        for (target, measured) in running.iter().zip(&mut rounds) {
            let label = format!("{} {round}/{}", target.target.label(), args.rounds);
            measured.push(target.measure(&runtime, &label, &plan));
        }
    }
    let rows: Vec<Row> = running
        .iter()
        .zip(rounds)
        .map(|(target, rounds)| Row {
            label: target.target.label(),
            role: match target.target {
                Target::Redis => Role::Baseline,
                Target::RedisAof => Role::DurableBaseline,
                Target::Memory => Role::Memory,
                Target::MemoryNoMetrics
                | Target::MemoryGuarded
                | Target::SqliteFull
                | Target::SqliteNormal
                | Target::Fjall
                | Target::MemoryPooled
                | Target::FjallPooled
                | Target::Postgres
                | Target::HttpFloor => Role::Other,
            },
            rounds,
        })
        .collect();
    drop(runtime);
    drop(running);
    if pass.placement.is_pinned() {
        let original = context.allowed.ok_or("pinned without a known CPU set")?;
        pin::move_self(original)?;
    }
    let row_of = |target: Target| {
        pass.targets
            .iter()
            .position(|&t| t == target)
            .map(|i| &rows[i])
    };
    let ratios = COMPARED
        .iter()
        .map(|&(row, base, _)| match (row_of(row), row_of(base)) {
            (Some(row), Some(base)) => report::ratio_text(row, base),
            _ => "-".to_owned(),
        })
        .collect();
    Ok((format!("{describe}\n{}", report::table(&rows)), ratios))
}

/// Loads `--resident-sessions` sessions into fresh servers of the memory measure's targets
/// (started on the server CPU when `placement` pins, as a pass's are; the load from the client
/// CPU) and returns its table.
pub(crate) fn run_resident(
    context: &PassContext<'_>,
    placement: &Placement,
) -> Result<String, String> {
    let args = context.args;
    let mut described = placement.describe(context.allowed);
    eprintln!("unique-bench: resident memory: {described}");
    if let Placement::Pinned { server, .. } = placement {
        pin::move_self(&[*server])?;
    }
    // Redis twice: as the throughput passes run it, and with hashes of values up to 128 bytes
    // kept as listpacks, which the bench's 67-byte owner otherwise is not (default 64).
    let shapes = [
        (Target::Redis, resident::Role::Baseline),
        (Target::Redis, resident::Role::Listpack),
        (Target::Memory, resident::Role::Other),
        (Target::SqliteFull, resident::Role::Other),
        (Target::Fjall, resident::Role::Other),
    ];
    let running = shapes
        .iter()
        .map(|&(target, _)| {
            Running::start(
                target,
                context.server_bin,
                args.server_workers,
                args.server_audit_log,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    pinned_client(placement, &running, &mut described)?;
    let runtime = client_runtime(args.client_threads)?;
    let heading = format!(
        "resident memory and disk per session: {} sessions on fresh servers (distinct uids \
         spread over 1..=10^8, one owner endpoint, a fresh claim_id each), {} connections; \
         client {} threads, unique-server {} workers; {described}",
        args.resident_sessions,
        args.resident_connections,
        args.client_threads,
        if args.server_workers == 0 {
            "the server's default of".to_owned()
        } else {
            args.server_workers.to_string()
        },
    );
    eprintln!("{heading}");
    let mut rows = Vec::new();
    for (target, &(_, role)) in running.iter().zip(&shapes) {
        let label = match role {
            resident::Role::Listpack => {
                let addr = target
                    .redis_addr
                    .ok_or("a Redis target without an address")?;
                runtime
                    .block_on(redis_client::config_set(
                        addr,
                        "hash-max-listpack-value",
                        &resident::LISTPACK_VALUE.to_string(),
                    ))
                    .map_err(|f| f.kind)?;
                "redis, listpack values to 128 B"
            }
            _ => target.target.label(),
        };
        let loaded = resident::measure(
            &runtime,
            target,
            args.resident_sessions,
            args.resident_connections,
        )?;
        rows.push(resident::Row {
            label,
            files: target.target.store_files_described(),
            loaded,
            role,
        });
    }
    drop(runtime);
    drop(running);
    if placement.is_pinned() {
        let original = context.allowed.ok_or("pinned without a known CPU set")?;
        pin::move_self(original)?;
    }
    Ok(resident::table(&rows, &heading))
}

/// When `placement` pins: reads every server's CPUs back (a warning in `described` names any
/// not on the server CPU), then moves the bench to the client CPU, so the client runtime built
/// next inherits it.
fn pinned_client(
    placement: &Placement,
    running: &[Running],
    described: &mut String,
) -> Result<(), String> {
    let Placement::Pinned { server, client } = *placement else {
        return Ok(());
    };
    let stray: Vec<String> = running
        .iter()
        .filter_map(|r| {
            let cpus = pin::allowed(Some(r.pid));
            (cpus.as_deref() != Some(&[server][..])).then(|| {
                format!(
                    "{} (pid {}) on CPUs {}",
                    r.target.label(),
                    r.pid,
                    cpus.as_deref()
                        .map_or_else(|| "?".to_owned(), pin::format_list)
                )
            })
        })
        .collect();
    if stray.is_empty() {
        described.push_str(" (read back from every server process)");
    } else {
        let warning = format!("NOT PINNED: {}", stray.join(", "));
        eprintln!("unique-bench: warning: {warning}");
        *described = format!("{described}; {warning}");
    }
    pin::move_self(&[client])
}

/// The load generator's runtime, on the CPUs the bench runs on when it is built.
fn client_runtime(threads: usize) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the client runtime: {e}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::args::Dist;

    fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("unique-bench").chain(args.iter().copied())).unwrap()
    }

    const PINNED: Placement = Placement::Pinned {
        server: 0,
        client: 1,
    };

    fn passes_of(args: &Args, placement: &Placement) -> Vec<Pass> {
        let keys = KeyChoice::from_keys(args.keys).unwrap();
        passes(args, placement, keys).unwrap()
    }

    #[test]
    fn the_defaults_are_random_users_then_fixed_keys_each_pinned_then_unpinned() {
        let args = parse(&[]);
        assert_eq!(args.keys, Keys::Random);
        assert_eq!(args.dist, Dist::Uniform);
        assert!(!args.no_pin && !args.pinned_only);
        let passes = passes_of(&args, &pin::plan(args.no_pin, Some(&[0, 1])));
        let random = KeyChoice::random();
        let fixed = KeyChoice::uniform(10_000).unwrap();
        let unpinned = Placement::Unpinned(Unpinned::Asked);
        let shape: Vec<_> = passes
            .iter()
            .map(|p| (p.placement.clone(), p.targets.clone(), p.keys, p.column()))
            .collect();
        assert_eq!(
            shape,
            [
                (
                    PINNED,
                    Target::ALL.to_vec(),
                    random,
                    "pinned, random users".to_owned()
                ),
                (
                    unpinned.clone(),
                    Target::UNPINNED.to_vec(),
                    random,
                    "unpinned, random users".to_owned()
                ),
                (
                    PINNED,
                    Target::LIKE_FOR_LIKE.to_vec(),
                    fixed,
                    "pinned, 10000 keys".to_owned()
                ),
                (
                    unpinned,
                    Target::LIKE_FOR_LIKE.to_vec(),
                    fixed,
                    "unpinned, 10000 keys".to_owned()
                ),
            ]
        );
        assert_eq!(
            passes.iter().map(|p| p.title).collect::<Vec<_>>(),
            [
                "pinned (the headline table)",
                "unpinned (as with --no-pin)",
                "pinned, fixed keys",
                "unpinned, fixed keys"
            ]
        );
        // Every compared ratio's two targets are in each pass.
        for pass in &passes {
            for (row, base, _) in COMPARED {
                assert!(pass.targets.contains(&row) && pass.targets.contains(&base));
            }
        }
    }

    #[test]
    fn fixed_keys_0_or_a_key_count_run_no_fixed_key_passes() {
        let skipped = parse(&["--fixed-keys", "0"]);
        assert_eq!(passes_len(&skipped, &PINNED), 2);
        let count = parse(&["--keys", "500"]);
        assert_eq!(passes_len(&count, &PINNED), 2);
        let pinned_only = parse(&["--pinned-only", "--fixed-keys", "20"]);
        let passes = passes_of(&pinned_only, &PINNED);
        assert_eq!(passes.len(), 2);
        assert_eq!(passes[1].keys, KeyChoice::uniform(20).unwrap());
        assert_eq!(passes[1].column(), "pinned, 20 keys");
        // Only like-for-like targets of --targets go to the fixed-key passes.
        let few = parse(&["--targets", "postgres,memory"]);
        let passes = passes_of(&few, &PINNED);
        assert_eq!(passes.len(), 4);
        assert_eq!(passes[2].targets, [Target::Memory]);
        let none = parse(&["--targets", "postgres"]);
        assert_eq!(passes_len(&none, &PINNED), 1);
    }

    #[test]
    fn no_pin_and_a_key_count_are_the_unpinned_hot_key_bench() {
        let args = parse(&["--no-pin", "--keys", "10000"]);
        assert_eq!(args.keys, Keys::Count(10_000));
        let passes = passes_of(&args, &pin::plan(args.no_pin, Some(&[0, 1])));
        assert_eq!(
            passes,
            [Pass {
                title: "unpinned",
                placement: Placement::Unpinned(Unpinned::Asked),
                targets: Target::ALL.to_vec(),
                keys: KeyChoice::uniform(10_000).unwrap(),
            }]
        );
        // Connection i seeded i + 1 in every round, as before.
        let keys = KeyChoice::from_keys(args.keys).unwrap();
        assert_eq!((keys.seed(0, 1), keys.seed(0, 2)), (1, 1));
    }

    #[test]
    fn the_unpinned_pass_measures_the_chosen_targets_in_the_run_order() {
        let args = parse(&[
            "--targets",
            "sqlite-full,memory,postgres",
            "--unpinned-targets",
            "memory,sqlite-full,redis",
        ]);
        let passes = passes_of(&args, &PINNED);
        assert_eq!(
            passes[1].targets,
            [Target::SqliteFull, Target::Memory],
            "only targets of --targets, in their order"
        );
        let none = parse(&["--targets", "postgres"]);
        assert_eq!(passes_len(&none, &PINNED), 1, "nothing to measure again");
        let only = parse(&["--pinned-only", "--fixed-keys", "0"]);
        assert_eq!(passes_len(&only, &PINNED), 1);
    }

    fn passes_len(args: &Args, placement: &Placement) -> usize {
        passes_of(args, placement).len()
    }

    #[test]
    fn a_machine_that_cannot_pin_runs_one_unpinned_pass() {
        let args = parse(&[]);
        let one_cpu = pin::plan(false, Some(&[0]));
        let passes = passes_of(&args, &one_cpu);
        assert_eq!(passes.len(), 2, "random users, then the fixed keys");
        assert_eq!(passes[0].placement, one_cpu);
        assert_eq!(passes[0].targets, Target::ALL);
        assert_eq!(passes[0].title, "unpinned");
        assert_eq!(passes[1].targets, Target::LIKE_FOR_LIKE);
        assert_eq!(passes[1].title, "unpinned, fixed keys");
    }

    #[test]
    fn rounds_0_runs_no_pass_and_the_memory_measure_is_on_by_default() {
        let args = parse(&[]);
        assert_eq!(args.resident_sessions, 1_000_000);
        let only = parse(&["--rounds", "0"]);
        assert_eq!(passes_len(&only, &PINNED), 0);
        assert_eq!(passes_len(&only, &Placement::Unpinned(Unpinned::Asked)), 0);
        assert_eq!(parse(&["--resident-sessions", "0"]).resident_sessions, 0);
    }

    #[test]
    fn bad_flags_are_refused() {
        let parse_err = |args: &[&str]| {
            Args::try_parse_from(std::iter::once("unique-bench").chain(args.iter().copied()))
                .is_err()
        };
        assert!(parse_err(&["--no-pin", "--pinned-only"]));
        assert!(parse_err(&["--keys", "0"]));
        assert!(parse_err(&["--keys", "everyone"]));
        assert!(parse_err(&["--unpinned-targets", "nothing"]));
        assert!(parse_err(&["--resident-sessions", "100000001"]));
    }
}
