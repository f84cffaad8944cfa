//! `cargo xtask node-check --url URL --signing-keys FILE`: the kick-receiver conformance
//! check (`unique-node-check`) against a running receiver; `cargo xtask node-check --push
//! --listen ADDR --signing-keys FILE` the same of a push node, the check playing the server.
//!
//! It runs the `unique-node-check` binary through `cargo run` rather than linking the
//! library, so xtask stays a small build (no hyper, no tokio); the arguments pass through,
//! with a relative `--signing-keys` path made absolute against the directory `cargo xtask`
//! was started from (cargo runs in the workspace root).

use std::path::Path;
use std::process::Command;

/// The package and binary it runs.
pub(crate) const PACKAGE: &str = "unique-node-check";

/// The flag whose value is a path.
const KEYS_FLAG: &str = "--signing-keys";

/// `args` for the binary: every argument as given, but the `--signing-keys` path (either
/// spelling) resolved against `cwd`.
pub(crate) fn forwarded(args: &[String], cwd: &Path) -> Vec<String> {
    let absolute = |path: &str| cwd.join(path).to_string_lossy().into_owned();
    let mut out = Vec::with_capacity(args.len());
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == KEYS_FLAG {
            out.push(arg.clone());
            if let Some(path) = args.next() {
                out.push(absolute(path));
            }
        } else if let Some(path) = arg
            .strip_prefix(KEYS_FLAG)
            .and_then(|rest| rest.strip_prefix('='))
        {
            out.push(format!("{KEYS_FLAG}={}", absolute(path)));
        } else {
            out.push(arg.clone());
        }
    }
    out
}

/// The command: `cargo run --quiet -p unique-node-check -- <args>` (`cargo` is the
/// workspace-rooted command of `main.rs`).
pub(crate) fn command(mut cargo: Command, args: &[String], cwd: &Path) -> Command {
    cargo
        .args(["run", "--quiet", "-p", PACKAGE, "--bin", PACKAGE, "--"])
        .args(forwarded(args, cwd));
    cargo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_key_path_is_made_absolute_in_both_spellings() {
        let cwd = Path::new("/home/me/node");
        assert_eq!(
            forwarded(
                &strings(&[
                    "--url",
                    "http://127.0.0.1:9001/kick",
                    "--signing-keys",
                    "kick.keys"
                ]),
                cwd
            ),
            strings(&[
                "--url",
                "http://127.0.0.1:9001/kick",
                "--signing-keys",
                "/home/me/node/kick.keys"
            ])
        );
        assert_eq!(
            forwarded(&strings(&["--signing-keys=../k", "--window", "60"]), cwd),
            strings(&["--signing-keys=/home/me/node/../k", "--window", "60"])
        );
        // An absolute path stays as it is.
        assert_eq!(
            forwarded(&strings(&["--signing-keys", "/etc/unique/kick.keys"]), cwd),
            strings(&["--signing-keys", "/etc/unique/kick.keys"])
        );
        // Push mode's flags pass as they are.
        let push = strings(&[
            "--push",
            "--listen",
            "127.0.0.1:0",
            "--node=n1",
            "--wait",
            "5",
        ]);
        assert_eq!(forwarded(&push, cwd), push);
        // A missing value is left for the binary to report.
        assert_eq!(
            forwarded(&strings(&["--signing-keys"]), cwd),
            strings(&["--signing-keys"])
        );
    }
}
