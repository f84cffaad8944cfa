//! `unique-node-check --url URL --signing-keys FILE`: checks the kick receiver at URL against
//! the kick contract and prints one line per clause; exits 0 when every clause passed, 1
//! when one failed (the last line names each), 2 on a usage error.
//!
//! `unique-node-check --push --listen ADDR --signing-keys FILE`: the same for a node that
//! takes its kicks over a kick stream, the check playing the server.

use std::process::ExitCode;
use std::time::Duration;

use unique_node_check::{DEFAULT_WAIT, NodeCheck, SigningKeys};

const USAGE: &str = "\
usage: unique-node-check --url URL --signing-keys FILE [options]
       unique-node-check --push --listen ADDR --signing-keys FILE [options]

Sends real kicks to the kick receiver at URL (its owner endpoint, http only) and checks
each answer against the kick contract; prints one line per clause. Every kick names
project and env `node-check` and a random uid at gen 1: a receiver destroys nothing.

With --push, checks a node that has no receiver but opens a kick stream: the check plays
the server on ADDR (plain HTTP; point the node's server URL at http://ADDR), waits for the
node to open GET /v1/nodes/{node}/kicks, pushes each clause's kicks down the stream and
checks the status the node acknowledges each with. Only the clauses about the signature
and the payload run: a pushed kick has no method or framing of its own.

  --url URL             the receiver's URL, e.g. http://127.0.0.1:9001/kick
  --signing-keys FILE   the key file the node verifies with (one key per line; the
                        first one signs, as the arbiter's kicker does)
  --project NAME        the project of every kick (default node-check)
  --env NAME            the env of every kick (default node-check)
  --window SECS         the node's signature window (default 300)
  --timeout SECS        how long one request (with --push: one kick's ack) may take
                        (default 5)
  --push                check a push node instead of a receiver (needs --listen)
  --listen ADDR         with --push: the address to listen on, e.g. 127.0.0.1:9002
                        (port 0: any free port; the address is printed on stderr)
  --node ID             with --push: take only node ID's stream (default: any node's)
  --wait SECS           with --push: how long to wait for the stream (default 30)
  -h, --help            this text

exit status: 0 every clause passed, 1 a clause failed, 2 usage or key file error";

/// Which node the check is of.
#[derive(Debug, PartialEq, Eq)]
enum Mode {
    /// A kick receiver at a URL.
    Url(String),
    /// A push node, the check listening on `listen`.
    Push {
        listen: String,
        node: Option<String>,
        wait: Option<Duration>,
    },
}

impl Default for Mode {
    fn default() -> Self {
        Self::Url(String::new())
    }
}

/// What the command line asked for.
#[derive(Debug, Default, PartialEq, Eq)]
struct Args {
    mode: Mode,
    signing_keys: String,
    project: Option<String>,
    env: Option<String>,
    window: Option<Duration>,
    timeout: Option<Duration>,
}

/// Parses the arguments after the program name; `Ok(None)` for `--help`.
fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
    let mut parsed = Args::default();
    let (mut url, mut keys) = (None, None);
    let (mut push, mut listen, mut node, mut wait) = (false, None, None, None);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(None);
        }
        if arg == "--push" {
            push = true;
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--url" => url = Some(value()?),
            "--signing-keys" => keys = Some(value()?),
            "--project" => parsed.project = Some(value()?),
            "--env" => parsed.env = Some(value()?),
            "--window" => parsed.window = Some(seconds(&flag, &value()?)?),
            "--timeout" => parsed.timeout = Some(seconds(&flag, &value()?)?),
            "--listen" => listen = Some(value()?),
            "--node" => node = Some(value()?),
            "--wait" => wait = Some(seconds(&flag, &value()?)?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    parsed.mode = if push {
        if url.is_some() {
            return Err("--url and --push exclude each other: a push node has no URL".into());
        }
        Mode::Push {
            listen: listen.ok_or("--push needs --listen ADDR")?,
            node,
            wait,
        }
    } else {
        for (given, flag) in [
            (listen.is_some(), "--listen"),
            (node.is_some(), "--node"),
            (wait.is_some(), "--wait"),
        ] {
            if given {
                return Err(format!("{flag} is for --push"));
            }
        }
        Mode::Url(url.ok_or("--url is required (or --push)")?)
    };
    parsed.signing_keys = keys.ok_or("--signing-keys is required")?;
    Ok(Some(parsed))
}

fn seconds(flag: &str, value: &str) -> Result<Duration, String> {
    value
        .parse()
        .map(Duration::from_secs)
        .map_err(|_| format!("{flag} takes whole seconds, got {value:?}"))
}

/// Prints `why` as a usage or setup error: exit 2.
fn invalid(why: impl std::fmt::Display) -> ExitCode {
    eprintln!("unique-node-check: {why}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => return invalid(format!("{e}\n\n{USAGE}")),
    };
    let keys = match SigningKeys::from_file(&args.signing_keys) {
        Ok(keys) => keys,
        Err(e) => return invalid(format!("--signing-keys: {e}")),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return invalid(format!("cannot start a runtime: {e}")),
    };
    let mut check = match &args.mode {
        Mode::Url(url) => match NodeCheck::new(url, keys) {
            Ok(check) => check,
            Err(e) => return invalid(format!("--url: {e}")),
        },
        Mode::Push { listen, node, wait } => {
            let mut check = match NodeCheck::push(listen.as_str(), keys) {
                Ok(check) => check,
                Err(e) => return invalid(format!("--listen {listen}: {e}")),
            };
            if let Some(node) = node {
                check = match check.node(node.clone()) {
                    Ok(check) => check,
                    Err(e) => return invalid(format!("--node: {e}")),
                };
            }
            if let Some(wait) = *wait {
                check = check.wait(wait);
            }
            match check.local_addr() {
                Ok(Some(addr)) => eprintln!(
                    "unique-node-check: listening on http://{addr}; waiting up to {:?} for a \
                     node to open its kick stream",
                    wait.unwrap_or(DEFAULT_WAIT)
                ),
                Ok(None) => {}
                Err(e) => return invalid(format!("--listen {listen}: {e}")),
            }
            check
        }
    };
    if let Some(project) = args.project {
        check = check.project(project);
    }
    if let Some(env) = args.env {
        check = check.env(env);
    }
    if let Some(window) = args.window {
        check = check.window(window);
    }
    if let Some(timeout) = args.timeout {
        check = check.timeout(timeout);
    }
    let report = runtime.block_on(check.run());
    println!("{report}");
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Option<Args>, String> {
        parse(list.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn both_spellings_of_each_flag_parse() {
        let parsed = args(&[
            "--url",
            "http://127.0.0.1:9001/kick",
            "--signing-keys=kick.keys",
            "--project=game",
            "--env",
            "prod",
            "--window",
            "60",
            "--timeout=2",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            parsed,
            Args {
                mode: Mode::Url("http://127.0.0.1:9001/kick".into()),
                signing_keys: "kick.keys".into(),
                project: Some("game".into()),
                env: Some("prod".into()),
                window: Some(Duration::from_mins(1)),
                timeout: Some(Duration::from_secs(2)),
            }
        );
    }

    #[test]
    fn missing_and_unknown_arguments_are_errors() {
        assert_eq!(
            args(&["--signing-keys", "k"]),
            Err("--url is required (or --push)".into())
        );
        assert_eq!(
            args(&["--url", "http://x"]),
            Err("--signing-keys is required".into())
        );
        assert_eq!(args(&["--url"]), Err("--url needs a value".into()));
        assert_eq!(
            args(&["--discover"]),
            Err("unknown argument \"--discover\"".into())
        );
        assert!(args(&["--url", "u", "--signing-keys", "k", "--window", "5m"]).is_err());
        assert_eq!(args(&["--help"]), Ok(None));
    }

    #[test]
    fn push_mode_takes_listen_node_and_wait() {
        let parsed = args(&[
            "--push",
            "--listen",
            "127.0.0.1:0",
            "--signing-keys=k",
            "--node=n1",
            "--wait",
            "10",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            parsed.mode,
            Mode::Push {
                listen: "127.0.0.1:0".into(),
                node: Some("n1".into()),
                wait: Some(Duration::from_secs(10)),
            }
        );
        assert_eq!(
            args(&["--push", "--signing-keys", "k"]),
            Err("--push needs --listen ADDR".into())
        );
        assert_eq!(
            args(&[
                "--push",
                "--listen",
                "a",
                "--url",
                "u",
                "--signing-keys",
                "k"
            ]),
            Err("--url and --push exclude each other: a push node has no URL".into())
        );
        assert_eq!(
            args(&["--url", "u", "--signing-keys", "k", "--node", "n1"]),
            Err("--node is for --push".into())
        );
    }
}
