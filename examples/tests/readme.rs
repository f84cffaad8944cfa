//! Runs every shell block of the top-level README, in order, against the real binaries, so
//! the README's commands cannot drift from what the server and the CLI do.
//!
//! What it changes, and nothing else:
//!
//! - `cargo run [--release] -p unique-server [--]` and `... -p unique-cli [--]` become the
//!   `unique-server` and `unique` binaries cargo built beside this test (`cargo test
//!   --workspace` and `cargo xtask ci` build them; alone, `cargo build -p unique-server -p
//!   unique-cli` first), which are also first on `PATH`. Any other `cargo` command in a
//!   shell block fails the test: it would build or test inside a test.
//! - The ports the README names become free loopback ports: the server's 7420 through
//!   `UNIQUE_LISTEN` and `UNIQUE_SERVER` (the server's and the CLI's variables), 7420, 9001 and
//!   9002 wherever they appear in a block.
//! - Every block runs in one scratch directory (the server's `./unique.fjall` lands there),
//!   as `bash -euo pipefail`, and must exit 0 within [`BLOCK_LIMIT`]. A block whose first line
//!   ends with `(keeps running)` holds one command that stays up, as in a terminal of its
//!   own: it is started, the next block runs once it prints a line saying it is `listening`,
//!   and it is stopped at the end.
//!
//! Then the quick start's promise is checked: the kick receiver printed the kick that ended
//! the first session.
//!
//! A second test starts from a clean clone: it `git clone`s the repository's committed `HEAD`
//! and runs the quick start's shell blocks in the clone as a new user would, `cargo run
//! --release` and all, changing only the ports (to free ones, as above) and pointing
//! `CARGO_TARGET_DIR` at this workspace's target directory, so the release build reuses the
//! dependencies already built there instead of starting from scratch. The workspace's own
//! crates are compiled again each run (a fresh clone's files are new to cargo): about three
//! and a half minutes on two cores. The clone lands at `target/readme-clone/unique`.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use unique_testsupport::{ChildGuard, free_port};

/// The most one block may take (the server starts in well under a second).
const BLOCK_LIMIT: Duration = Duration::from_mins(1);

/// The most a clean clone's block may take: the first one builds the release binaries.
const BUILD_LIMIT: Duration = Duration::from_mins(40);

/// The README's ports that name loopback services a block starts.
const PORTS: [&str; 3] = ["7420", "9001", "9002"];

/// One fenced block: the line it starts on, its info string, its text.
#[derive(Debug)]
struct Block {
    line: usize,
    info: String,
    text: String,
}

/// The fenced blocks of a Markdown text (``` fences, not nested).
fn fenced_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => {
                open = Some(Block {
                    line: n + 1,
                    info: info.trim().to_owned(),
                    text: String::new(),
                });
            }
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some(block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed code block in the README");
    blocks
}

/// Whether a block is a shell block, and so one this test runs; other shell spellings are
/// refused, so that no shell block escapes the test.
fn is_shell(block: &Block) -> bool {
    let language = block.info.split([' ', ',']).next().unwrap_or_default();
    assert!(
        !matches!(
            language,
            "bash" | "shell" | "console" | "zsh" | "shell-session"
        ),
        "README line {}: spell a shell block ```sh (this test runs every one)",
        block.line
    );
    language == "sh"
}

/// The block as this test runs it: ports substituted, and unless `literal`, the binaries.
fn substitute(block: &Block, ports: &[(&str, String)], literal: bool) -> String {
    let mut text = block.text.clone();
    for (port, free) in ports {
        text = text.replace(port, free);
    }
    if literal {
        return text;
    }
    for profile in ["--release ", ""] {
        for (package, binary) in [("unique-server", "unique-server"), ("unique-cli", "unique")] {
            let run = format!("cargo run {profile}-p {package}");
            text = text.replace(&format!("{run} --"), binary);
            text = text.replace(&run, binary);
        }
    }
    let cargo = text.lines().find(|l| {
        let command = l.split('#').next().unwrap_or_default();
        command.split_whitespace().any(|word| word == "cargo")
    });
    assert!(
        cargo.is_none(),
        "README line {}: a shell block runs {:?}, which this test cannot (put it in prose)",
        block.line,
        cargo.unwrap_or_default()
    );
    text
}

/// The directory of this test's executable's profile (`target/debug`), where cargo puts the
/// workspace's binaries; checked to hold `names`.
fn binary_dir(names: &[&str]) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    for name in names {
        let bin = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
        assert!(
            bin.is_file(),
            "{} is missing: build it with `cargo build -p unique-server -p unique-cli`",
            bin.display()
        );
    }
    dir
}

/// Where the blocks run, and what they share.
struct Shell {
    dir: PathBuf,
    path: String,
    server: String,
    listen: String,
    /// How long one block may take, or a block that keeps running to say it is listening.
    limit: Duration,
    /// Set for the blocks' commands (`CARGO_TARGET_DIR` in a clean clone).
    env: Vec<(&'static str, PathBuf)>,
}

impl Shell {
    /// `bash -euo pipefail -c script` in the scratch directory; under `timeout` when `limit`
    /// is given (coreutils' `timeout`, so a hung block ends with status 124).
    fn command(&self, script: &str, limit: Option<Duration>) -> Command {
        let mut command = match limit {
            Some(limit) => {
                let mut timeout = Command::new("timeout");
                timeout.arg(limit.as_secs().to_string()).arg("bash");
                timeout
            }
            None => Command::new("bash"),
        };
        command
            .args(["-euo", "pipefail", "-c", script])
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .current_dir(&self.dir)
            .env("PATH", &self.path)
            .env("UNIQUE_LISTEN", &self.listen)
            .env("UNIQUE_SERVER", &self.server)
            .env_remove("UNIQUE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }
}

/// What a running block printed (stdout and stderr, line by line), and how many of the two
/// streams have closed; `changed` is notified at each line and at each close.
#[derive(Default)]
struct Printed {
    state: Mutex<(String, usize)>,
    changed: Condvar,
}

impl Printed {
    /// Waits up to `limit` until `done(text, closed streams)`; whether it came, and the text.
    fn wait(&self, limit: Duration, done: impl Fn(&str, usize) -> bool) -> (bool, String) {
        let state = self.state.lock().unwrap();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, limit, |(text, closed)| !done(text, *closed))
            .unwrap();
        (done(&state.0, state.1), state.0.clone())
    }

    fn read(self: Arc<Self>, stream: impl Read + Send + 'static) {
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let mut state = self.state.lock().unwrap();
                state.0.push_str(&line);
                state.0.push('\n');
                self.changed.notify_all();
            }
            self.state.lock().unwrap().1 += 1;
            self.changed.notify_all();
        });
    }
}

/// A block that keeps running, and what it printed. It runs in a process group of its own,
/// killed whole when it is dropped: `cargo run` leaves its child running when it is killed.
struct Running {
    script: String,
    printed: Arc<Printed>,
    group: u32,
    _guard: ChildGuard,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.group)])
            .status();
    }
}

/// Starts a `(keeps running)` block and waits until it prints that it is `listening`.
fn start(shell: &Shell, block: &Block, script: &str) -> Running {
    let commands: Vec<&str> = script
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let [command] = commands[..] else {
        panic!(
            "README line {}: a block that keeps running holds one command",
            block.line
        );
    };
    // `exec`: the guard then stops the command itself, not a shell around it.
    let mut child = shell
        .command(&format!("exec {command}"), None)
        .process_group(0)
        .spawn()
        .expect("start bash");
    let group = child.id();
    let printed = Arc::new(Printed::default());
    Arc::clone(&printed).read(child.stdout.take().unwrap());
    Arc::clone(&printed).read(child.stderr.take().unwrap());
    let guard = ChildGuard::new(child, "a README block that keeps running");
    // Both streams closed: the command exited.
    let (up, text) = printed.wait(shell.limit, |text, closed| {
        text.contains("listening") || closed == 2
    });
    assert!(
        up && text.contains("listening"),
        "README line {}: `{command}` exited or did not say it was `listening` within \
         {:?}:\n{text}",
        block.line,
        shell.limit
    );
    Running {
        script: command.to_owned(),
        printed,
        group,
        _guard: guard,
    }
}

/// Runs a block to its end; it must exit 0.
fn run(shell: &Shell, block: &Block, script: &str) {
    let output = shell
        .command(script, Some(shell.limit))
        .output()
        .expect("run bash under timeout");
    assert!(
        output.status.success(),
        "README line {}: the block failed ({}):\n{script}\nstdout:\n{}\nstderr:\n{}",
        block.line,
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Free ports for the README's, and the shell its blocks run in.
fn shell_in(dir: PathBuf, path: String, limit: Duration) -> (Shell, Vec<(&'static str, String)>) {
    let ports: Vec<(&str, String)> = PORTS
        .iter()
        .map(|port| (*port, free_port().to_string()))
        .collect();
    let server_port = &ports[0].1;
    let shell = Shell {
        dir,
        path,
        server: format!("http://127.0.0.1:{server_port}"),
        listen: format!("127.0.0.1:{server_port}"),
        limit,
        env: Vec::new(),
    };
    (shell, ports)
}

/// Runs `blocks` in order in `shell`; the blocks still running at the end.
fn run_blocks(
    shell: &Shell,
    blocks: &[&Block],
    ports: &[(&str, String)],
    literal: bool,
) -> Vec<Running> {
    let mut running = Vec::new();
    for block in blocks {
        let script = substitute(block, ports, literal);
        let first = block.text.lines().next().unwrap_or_default();
        if first.trim_end().ends_with("(keeps running)") {
            running.push(start(shell, block, &script));
        } else {
            run(shell, block, &script);
        }
    }
    running
}

/// The quick start's promise: its kick receiver printed the kick that ended the first session.
fn assert_kick_printed(running: &[Running]) {
    let receiver = running
        .iter()
        .find(|r| r.script.contains("listen-kicks"))
        .expect("the quick start starts `unique listen-kicks`");
    let (kicked, printed) = receiver
        .printed
        .wait(BLOCK_LIMIT, |text, _| text.contains("login-elsewhere"));
    assert!(kicked, "the kick receiver printed no kick:\n{printed}");
}

#[test]
fn every_shell_block_of_the_readme_runs_against_the_real_server() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&readme).expect("read the README");
    let bin = binary_dir(&["unique-server", "unique"]);
    let scratch = tempfile::tempdir().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (shell, ports) = shell_in(scratch.path().to_owned(), path, BLOCK_LIMIT);
    let blocks = fenced_blocks(&readme);
    let shell_blocks: Vec<&Block> = blocks.iter().filter(|b| is_shell(b)).collect();
    let running = run_blocks(&shell, &shell_blocks, &ports, false);
    let ran = shell_blocks.len();
    assert!(
        ran >= 3,
        "the README has {ran} shell blocks: expected the quick start's"
    );

    assert_kick_printed(&running);
}

/// The shell blocks of the README's "Quick start" section (up to the next `## ` heading).
fn quick_start(readme: &str, blocks: &[Block]) -> Vec<usize> {
    let lines: Vec<&str> = readme.lines().collect();
    let start = lines
        .iter()
        .position(|l| *l == "## Quick start")
        .expect("the README has a `## Quick start` section")
        + 1;
    let end = lines[start..]
        .iter()
        .position(|l| l.starts_with("## "))
        .map_or(lines.len(), |n| start + n);
    blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b.line > start && b.line <= end && is_shell(b))
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn a_clean_clone_follows_the_quick_start_literally_and_sees_the_kick() {
    let root = unique_testsupport::workspace_root();
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let clone = target.join("readme-clone").join("unique");
    if clone.exists() {
        std::fs::remove_dir_all(&clone).expect("remove the last run's clone");
    }
    let cloned = Command::new("git")
        .args(["clone", "--quiet"])
        .arg(&root)
        .arg(&clone)
        .output()
        .expect("run git clone");
    assert!(
        cloned.status.success(),
        "git clone {} failed: {}",
        root.display(),
        String::from_utf8_lossy(&cloned.stderr)
    );
    // The README as the clone has it: HEAD's, not the working tree's.
    let readme = std::fs::read_to_string(clone.join("README.md")).expect("the clone's README");
    let blocks = fenced_blocks(&readme);
    let steps: Vec<&Block> = quick_start(&readme, &blocks)
        .into_iter()
        .map(|i| &blocks[i])
        .collect();
    assert!(
        steps.len() >= 3,
        "the quick start has {} shell blocks",
        steps.len()
    );
    let path = std::env::var("PATH").unwrap_or_default();
    let (mut shell, ports) = shell_in(clone, path, BUILD_LIMIT);
    shell.env.push(("CARGO_TARGET_DIR", target));
    let running = run_blocks(&shell, &steps, &ports, true);
    assert_kick_printed(&running);
}
