//! Runs the `duel` example as a process: its story checks the specification as it goes
//! and exits non-zero on any deviation, so this keeps the example honest in `cargo test`.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Far above the story's own bounds (every wait in it is at most 10 s).
const LIMIT: Duration = Duration::from_mins(2);

#[test]
fn the_duel_tells_the_story_the_specification_tells() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_duel"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the duel example");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    // The pipe closes when the duel exits (or is killed).
    let Ok(output) = rx.recv_timeout(LIMIT) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the duel did not finish within {LIMIT:?}");
    };
    let status = child.wait().expect("reap the duel");
    assert!(status.success(), "the duel failed ({status}):\n{output}");
    for expected in [
        "[A] logged in: gen 1 (prev gen 0, has_prev false",
        "[A] session gen 1 destroyed by the kick",
        "[A] kick received for gen 2 -> answered 200 (destroyed)",
        "[B] logged in: gen 2 (prev gen 1, has_prev true, kicked true, kick_detail none",
        "[B] logged out gen 2: released true",
        "[A] logged in: gen 3 (prev gen 2, has_prev false, kicked false",
        "[B] logged in: gen 4 (prev gen 3, has_prev true, kicked false, kick_detail connect-error",
        "[A] heartbeat evicted session gen 3: gen-mismatch",
        "The duel went as the specification says.",
    ] {
        assert!(
            output.contains(expected),
            "missing {expected:?} in:\n{output}"
        );
    }
}
