//! `unique-node-check --url URL --signing-keys FILE`: checks the kick receiver at URL against
//! the kick contract and prints one line per clause; exits 0 when every clause passed, 1
//! when one failed (the last line names each), 2 on a usage error.

use std::process::ExitCode;
use std::time::Duration;

use unique_node_check::{NodeCheck, SigningKeys};

const USAGE: &str = "\
usage: unique-node-check --url URL --signing-keys FILE [options]

Sends real kicks to the kick receiver at URL (its owner endpoint, http only) and checks
each answer against the kick contract; prints one line per clause. Every kick names
project and env `node-check` and a random uid at gen 1: a receiver destroys nothing.

  --url URL             the receiver's URL, e.g. http://127.0.0.1:9001/kick
  --signing-keys FILE   the key file the receiver verifies with (one key per line; the
                        first one signs, as the arbiter's kicker does)
  --project NAME        the project of every kick (default node-check)
  --env NAME            the env of every kick (default node-check)
  --window SECS         the receiver's signature window (default 300)
  --timeout SECS        how long one request may take (default 5)
  -h, --help            this text

exit status: 0 every clause passed, 1 a clause failed, 2 usage or key file error";

/// What the command line asked for.
#[derive(Debug, Default, PartialEq, Eq)]
struct Args {
    url: String,
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
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(None);
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
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    parsed.url = url.ok_or("--url is required")?;
    parsed.signing_keys = keys.ok_or("--signing-keys is required")?;
    Ok(Some(parsed))
}

fn seconds(flag: &str, value: &str) -> Result<Duration, String> {
    value
        .parse()
        .map(Duration::from_secs)
        .map_err(|_| format!("{flag} takes whole seconds, got {value:?}"))
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("unique-node-check: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let keys = match SigningKeys::from_file(&args.signing_keys) {
        Ok(keys) => keys,
        Err(e) => {
            eprintln!("unique-node-check: --signing-keys: {e}");
            return ExitCode::from(2);
        }
    };
    let mut check = match NodeCheck::new(&args.url, keys) {
        Ok(check) => check,
        Err(e) => {
            eprintln!("unique-node-check: --url: {e}");
            return ExitCode::from(2);
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
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("unique-node-check: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
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
                url: "http://127.0.0.1:9001/kick".into(),
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
            Err("--url is required".into())
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
}
