//! `node-check`: `unique-node-check`'s library, with the output and exit statuses of its
//! binary (0 every clause passed, 1 a clause failed, 2 a usage or key file error), of a kick
//! receiver at `--url` or, with `--push`, of a push node.

use std::time::Duration;

use unique_node_check::{Answer, DEFAULT_WAIT, NodeCheck, Report, SigningKeys};

use crate::cli::NodeCheckArgs;
use crate::exit::{Failure, INVALID};

/// The check `args` describe; `timeout` is the global `--timeout`, per request (with
/// `--push`, per kick's ack). In push mode the address it listens on goes to stderr.
pub(crate) fn check(args: &NodeCheckArgs, timeout: Option<Duration>) -> Result<NodeCheck, Failure> {
    let keys = SigningKeys::from_file(&args.signing_keys)
        .map_err(|e| Failure::new(INVALID, format!("--signing-keys: {e}")))?;
    let mut check = match (&args.url, &args.listen) {
        (Some(url), _) => {
            NodeCheck::new(url, keys).map_err(|e| Failure::new(INVALID, format!("--url: {e}")))?
        }
        (None, Some(listen)) => push(args, listen, keys)?,
        (None, None) => return Err(Failure::new(INVALID, "--url or --push is required")),
    };
    if let Some(project) = &args.project {
        check = check.project(project.clone());
    }
    if let Some(env) = &args.env {
        check = check.env(env.clone());
    }
    if let Some(window) = args.window {
        check = check.window(window);
    }
    if let Some(timeout) = timeout {
        check = check.timeout(timeout);
    }
    Ok(check)
}

/// The check of a push node listening on `listen`, with `--node` and `--wait`.
fn push(args: &NodeCheckArgs, listen: &str, keys: SigningKeys) -> Result<NodeCheck, Failure> {
    let invalid =
        |flag: &str, e: &dyn std::fmt::Display| Failure::new(INVALID, format!("{flag}: {e}"));
    let mut check = NodeCheck::push(listen, keys).map_err(|e| invalid("--listen", &e))?;
    if let Some(node) = &args.node {
        check = check
            .node(node.clone())
            .map_err(|e| invalid("--node", &e))?;
    }
    let wait = args.wait.unwrap_or(DEFAULT_WAIT);
    check = check.wait(wait);
    if let Ok(Some(addr)) = check.local_addr() {
        eprintln!(
            "unique: listening on http://{addr}; waiting up to {wait:?} for a node to open its \
             kick stream"
        );
    }
    Ok(check)
}

/// The exit status of a run: 0 when every clause passed, 1 otherwise.
pub(crate) fn status(report: &Report) -> u8 {
    u8::from(!report.passed())
}

/// `{"passed","failed":[names],"clauses":[{"clause","passed","expected","line","answers":
/// [{"variant","status","body"} | {"variant","no_answer"}]}]}`.
pub(crate) fn json(report: &Report) -> String {
    let clauses: Vec<serde_json::Value> = report
        .results()
        .iter()
        .map(|result| {
            let answers: Vec<serde_json::Value> = result
                .answers()
                .iter()
                .map(|(variant, answer)| match answer {
                    Answer::Status { status, body } => {
                        serde_json::json!({"variant": variant, "status": status, "body": body})
                    }
                    Answer::NoAnswer(why) => {
                        serde_json::json!({"variant": variant, "no_answer": why})
                    }
                })
                .collect();
            serde_json::json!({
                "clause": result.clause().name(),
                "passed": result.passed(),
                "expected": result.clause().expected().to_string(),
                "line": result.to_string(),
                "answers": answers,
            })
        })
        .collect();
    let failed: Vec<&str> = report.failed().iter().map(|c| c.name()).collect();
    serde_json::json!({"passed": report.passed(), "failed": failed, "clauses": clauses}).to_string()
}
