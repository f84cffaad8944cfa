//! Pinning: the servers on one CPU, the load generator on another.
//!
//! redis-server executes commands on one thread, and the bench gives `unique-server` one worker
//! too; unpinned, the scheduler still moves the client, the server and the kernel's loopback work
//! between the cores, and a server can borrow the client's core for a while. Pinned, each side has
//! exactly one core: a like-for-like measure.
//!
//! How: before it starts any server, the bench pins its own threads to the server CPU, so every
//! server process, and whatever it forks later (PostgreSQL's backends), inherits that CPU; once
//! the servers run, it moves its own threads to the client CPU, and the client runtime it builds
//! then inherits that. Every server's affinity is read back from `/proc/<pid>/status` and reported.
//! The workspace forbids `unsafe` code, so `sched_setaffinity` is reached through `taskset`
//! (util-linux, an essential package on Debian); the CPUs the process may use are read from
//! `Cpus_allowed_list` in `/proc/self/status` (what `sched_getaffinity` returns).

use std::fmt::Write as _;
use std::process::Command;

/// Where the servers and the load generator run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Servers on `server`, the load generator on `client`.
    Pinned { server: usize, client: usize },
    /// Wherever the scheduler puts them, on the CPUs the process started with.
    Unpinned(Unpinned),
}

/// Why a run is not pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unpinned {
    /// `--no-pin`, or the unpinned pass of a pinned run.
    Asked,
    /// Fewer than two CPUs available to the process.
    OneCpu(Vec<usize>),
    /// The affinity set could not be read (not Linux, or no `/proc`).
    Unknown,
}

/// The placement for a run: pinned on the first two CPUs the process may use, unless
/// `no_pin` or fewer than two are available (`allowed`: the process's affinity set, `None`
/// when unreadable).
pub(crate) fn plan(no_pin: bool, allowed: Option<&[usize]>) -> Placement {
    if no_pin {
        return Placement::Unpinned(Unpinned::Asked);
    }
    match allowed {
        None => Placement::Unpinned(Unpinned::Unknown),
        Some([server, client, ..]) => Placement::Pinned {
            server: *server,
            client: *client,
        },
        Some(one) => Placement::Unpinned(Unpinned::OneCpu(one.to_vec())),
    }
}

impl Placement {
    /// Whether this placement pins.
    pub(crate) fn is_pinned(&self) -> bool {
        matches!(self, Placement::Pinned { .. })
    }

    /// How the report names the placement.
    pub(crate) fn describe(&self, allowed: Option<&[usize]>) -> String {
        let cpus = allowed.map_or_else(|| "?".to_owned(), format_list);
        match self {
            Placement::Pinned { server, client } => format!(
                "pinned: servers on CPU {server}, load generator on CPU {client} (of CPUs {cpus})"
            ),
            Placement::Unpinned(Unpinned::Asked) => {
                format!("unpinned: client and servers share CPUs {cpus}")
            }
            Placement::Unpinned(Unpinned::OneCpu(_)) => format!(
                "unpinned (only CPU {cpus} available, pinning needs two): client and servers share it"
            ),
            Placement::Unpinned(Unpinned::Unknown) => {
                "unpinned (the CPUs available could not be read): client and servers share the \
                 machine"
                    .to_owned()
            }
        }
    }
}

/// The CPUs a process may run on: `Cpus_allowed_list` of `/proc/<pid>/status` (`None` =
/// this process, that is its main thread); `None` when unreadable.
pub(crate) fn allowed(pid: Option<u32>) -> Option<Vec<usize>> {
    allowed_at(&pid.map_or_else(
        || "/proc/self/status".to_owned(),
        |pid| format!("/proc/{pid}/status"),
    ))
}

fn allowed_at(status: &str) -> Option<Vec<usize>> {
    let status = std::fs::read_to_string(status).ok()?;
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))?;
    parse_list(list.trim()).ok()
}

/// How many times [`move_self`] lists the threads before it gives up on their changing.
const MOVE_ATTEMPTS: usize = 10;

/// Moves every thread of this process to `cpus` (threads and processes started afterwards
/// inherit it), one `taskset -p -c` per thread, until every live thread reads back `cpus`.
/// Threads come and go meanwhile (a helper that read a server's first line exits), so a
/// thread gone before its turn is skipped, and the threads are listed again until a listing
/// finds none left to move.
pub(crate) fn move_self(cpus: &[usize]) -> Result<(), String> {
    let list = format_list(cpus);
    for _ in 0..MOVE_ATTEMPTS {
        let tasks = std::fs::read_dir("/proc/self/task")
            .map_err(|e| format!("cannot list the bench's threads in /proc/self/task: {e}"))?;
        let mut moved = 0;
        for task in tasks.flatten() {
            let tid = task.file_name().to_string_lossy().into_owned();
            let status = format!("/proc/self/task/{tid}/status");
            if allowed_at(&status).as_deref() == Some(cpus) {
                continue;
            }
            let output = Command::new("taskset")
                .args(["-p", "-c", &list, &tid])
                .output()
                .map_err(|e| {
                    format!(
                        "cannot run taskset to pin the bench ({e}): install util-linux, or pass \
                         --no-pin"
                    )
                })?;
            if !output.status.success() && std::path::Path::new(&status).exists() {
                return Err(format!(
                    "taskset -p -c {list} {tid} failed with {}: {}; pass --no-pin to run unpinned",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
            moved += 1;
        }
        if moved == 0 {
            return Ok(());
        }
    }
    Err(format!(
        "the bench's threads kept changing: not all on CPUs {list} after {MOVE_ATTEMPTS} tries"
    ))
}

/// `0-3,6,8-9` (the kernel's list format) as CPU numbers, ascending, without repeats.
pub(crate) fn parse_list(text: &str) -> Result<Vec<usize>, String> {
    let number = |s: &str| {
        s.trim()
            .parse::<usize>()
            .map_err(|_| format!("bad CPU number {s:?} in {text:?}"))
    };
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|part| !part.trim().is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (number(first)?, number(last)?);
                if first > last {
                    return Err(format!("bad CPU range {part:?} in {text:?}"));
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(number(part)?),
        }
    }
    if cpus.is_empty() {
        return Err(format!("no CPU in {text:?}"));
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// CPU numbers in the kernel's list format, runs collapsed: `[0, 1, 2, 5]` → `0-2,5`.
pub(crate) fn format_list(cpus: &[usize]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        let _ = if j > i {
            write!(out, "{}-{}", cpus[i], cpus[j])
        } else {
            write!(out, "{}", cpus[i])
        };
        i = j + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_pins_on_the_first_two_allowed_cpus() {
        assert_eq!(
            plan(false, Some(&[0, 1])),
            Placement::Pinned {
                server: 0,
                client: 1
            }
        );
        // A process confined to other CPUs (a cgroup, an outer taskset) pins inside its set.
        assert_eq!(
            plan(false, Some(&[2, 5, 7])),
            Placement::Pinned {
                server: 2,
                client: 5
            }
        );
    }

    #[test]
    fn the_plan_runs_unpinned_when_asked_or_when_it_cannot_pin() {
        assert_eq!(
            plan(true, Some(&[0, 1])),
            Placement::Unpinned(Unpinned::Asked)
        );
        assert_eq!(
            plan(false, Some(&[3])),
            Placement::Unpinned(Unpinned::OneCpu(vec![3]))
        );
        assert_eq!(plan(false, None), Placement::Unpinned(Unpinned::Unknown));
        let one = plan(false, Some(&[3]));
        assert!(!one.is_pinned());
        assert!(one.describe(Some(&[3])).contains("only CPU 3"), "{one:?}");
        assert_eq!(
            plan(false, Some(&[0, 1])).describe(Some(&[0, 1])),
            "pinned: servers on CPU 0, load generator on CPU 1 (of CPUs 0-1)"
        );
    }

    #[test]
    fn cpu_lists_parse_and_format_like_the_kernels() {
        assert_eq!(parse_list("0-1").unwrap(), [0, 1]);
        assert_eq!(parse_list("0-2,5,7-8").unwrap(), [0, 1, 2, 5, 7, 8]);
        assert_eq!(parse_list("4").unwrap(), [4]);
        assert_eq!(parse_list("3,1,1-2").unwrap(), [1, 2, 3]);
        assert!(parse_list("").is_err());
        assert!(parse_list("2-1").is_err());
        assert!(parse_list("a").is_err());
        assert_eq!(format_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(format_list(&[1]), "1");
        assert_eq!(format_list(&[0, 2]), "0,2");
    }

    #[test]
    fn this_process_has_an_affinity_set() {
        let cpus = allowed(None).expect("/proc/self/status on linux");
        assert!(!cpus.is_empty());
        assert_eq!(allowed(Some(std::process::id())), Some(cpus));
        assert_eq!(allowed(Some(u32::MAX)), None);
    }

    #[test]
    fn taskset_moves_every_thread_of_a_process() {
        // A child process of its own (this test binary, run as a helper): moving the test
        // process itself would confine the other tests running in it.
        if std::env::var_os("UNIQUE_BENCH_PIN_CHILD").is_some() {
            return;
        }
        let cpus = allowed(None).unwrap();
        let exe = std::env::current_exe().unwrap();
        let one = &cpus[cpus.len() - 1..];
        let status = Command::new("taskset")
            .args(["-c", &format_list(&cpus)])
            .arg(&exe)
            .args(["--exact", "pin::tests::move_self_in_a_child", "--nocapture"])
            .env("UNIQUE_BENCH_PIN_CHILD", format_list(one))
            .status()
            .unwrap();
        assert!(status.success(), "the child's move failed: {status}");
    }

    #[test]
    fn move_self_in_a_child() {
        // Runs only as the child of the test above, with its target CPU in the environment.
        let Some(target) = std::env::var_os("UNIQUE_BENCH_PIN_CHILD") else {
            return;
        };
        let target = parse_list(&target.to_string_lossy()).unwrap();
        // A thread parked across the move must be moved too, not only the caller.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let parked = std::thread::spawn(move || {
            let _ = rx.recv();
            allowed_at("/proc/thread-self/status")
        });
        move_self(&target).unwrap();
        assert_eq!(allowed(None).as_deref(), Some(&target[..]));
        drop(tx);
        assert_eq!(parked.join().unwrap().as_deref(), Some(&target[..]));
        // A thread started afterwards inherits the set.
        let later = std::thread::spawn(|| allowed_at("/proc/thread-self/status"));
        assert_eq!(later.join().unwrap().as_deref(), Some(&target[..]));
    }
}
