#![doc = include_str!("../README.md")]

use std::any::Any;
use std::collections::BTreeSet;
use std::fmt::{self, Write as _};
use std::future::Future;
use std::io::Write;
use std::sync::{Mutex, PoisonError};

/// The environment variable naming the file [`run_case`] appends its JSON lines to.
pub const REPORT_ENV: &str = "UNIQUE_SUITE_REPORT";

/// Every clause a violation has named in this process, so a failure's message can be read back
/// into its clause even when the clause has spaces (`Kick payload`).
static CLAUSES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// Fails the case with a violation: the clause it breaks, the rule in words, then what was seen
/// (`D4 a new lease must carry a higher epoch: epoch 3 after 3`). The clause comes first, which is
/// how [`Failure::clause`] and `cargo xtask contract` tell which rule a failure breaks.
///
/// # Panics
///
/// Always: the panic is the violation.
#[track_caller]
pub fn violated(clause: &'static str, rule: &str, seen: fmt::Arguments<'_>) -> ! {
    CLAUSES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(clause);
    panic!("{clause} {rule}: {seen}")
}

/// The violation of [`ensure_eq!`]: `<clause> <rule>: [<context>: ]expected <want>, got <got>`.
///
/// # Panics
///
/// Always: the panic is the violation.
#[track_caller]
pub fn unequal(
    clause: &'static str,
    rule: &str,
    context: &str,
    got: &dyn fmt::Debug,
    want: &dyn fmt::Debug,
) -> ! {
    let context = if context.is_empty() {
        String::new()
    } else {
        format!("{context}: ")
    };
    violated(
        clause,
        rule,
        format_args!("{context}expected {want:?}, got {got:?}"),
    )
}

/// `ensure!(condition, "D4", "the rule in words", "what was seen {x}")`: fails the case with a
/// violation of the clause unless `condition` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $clause:literal, $rule:literal, $($seen:tt)+) => {
        if !$cond {
            $crate::violated($clause, $rule, format_args!($($seen)+))
        }
    };
}

/// `ensure_eq!(got, want, "D4", "the rule in words"[, "context {x}"])`: fails the case with a
/// violation of the clause unless `got == want`, showing both.
#[macro_export]
macro_rules! ensure_eq {
    ($got:expr, $want:expr, $clause:literal, $rule:literal $(,)?) => {
        $crate::ensure_eq!($got, $want, $clause, $rule, "")
    };
    ($got:expr, $want:expr, $clause:literal, $rule:literal, $($context:tt)+) => {
        match (&$got, &$want) {
            (got, want) => {
                if *got != *want {
                    $crate::unequal($clause, $rule, &format!($($context)+), got, want)
                }
            }
        }
    };
}

/// The message of a panic payload (what `panic!` formatted).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else {
        "a panic without a message".to_owned()
    }
}

/// The clause a violation's message starts with: the longest clause a violation named in this
/// process that the message starts with, followed by a space; `harness` for a suite's own setup
/// failure; `?` for any other panic (an `unwrap` in a case, a backend's panic).
pub fn clause_of(message: &str) -> &str {
    let named = CLAUSES.lock().unwrap_or_else(PoisonError::into_inner);
    named
        .iter()
        .filter(|clause| {
            message
                .strip_prefix(**clause)
                .is_some_and(|rest| rest.starts_with(' '))
        })
        .max_by_key(|clause| clause.len())
        .map_or_else(
            || {
                if message.starts_with("harness ") {
                    "harness"
                } else {
                    "?"
                }
            },
            |clause| &message[..clause.len()],
        )
}

/// Runs one case on a task of its own; its violation, if it failed.
async fn outcome<C>(run: C) -> Result<(), String>
where
    C: Future<Output = ()> + Send + 'static,
{
    match tokio::spawn(run).await {
        Ok(()) => Ok(()),
        Err(e) if e.is_panic() => Err(panic_message(&*e.into_panic())),
        Err(e) => Err(format!("the case's task was cancelled: {e}")),
    }
}

/// Runs one case of `suite` as its own test: records how it ended (see [`REPORT_ENV`]) and
/// panics with its violation when it failed, so libtest reports it too. What each test a suite's
/// `*_contract_tests!` macro generates calls; suites checked against broken backends run cases
/// through a [`Report`] instead, which records nothing.
///
/// # Panics
///
/// When the case fails, or the report file cannot be written.
pub async fn run_case<C>(suite: &'static str, case: &'static str, run: C)
where
    C: Future<Output = ()> + Send + 'static,
{
    let result = outcome(run).await;
    record(suite, case, result.as_ref().err().map(String::as_str));
    if let Err(message) = result {
        panic!("{message}");
    }
}

/// Appends the case's line to the report file, when one is named.
fn record(suite: &str, case: &str, failure: Option<&str>) {
    let Some(path) = std::env::var_os(REPORT_ENV) else {
        return;
    };
    let line = report_line(suite, case, failure);
    // One write of one line to a file opened for appending: lines of tests running in
    // parallel never interleave.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .unwrap_or_else(|e| {
            panic!(
                "cannot append to {REPORT_ENV} {}: {e}",
                std::path::Path::new(&path).display()
            )
        });
}

/// A case's JSON line, newline included.
fn report_line(suite: &str, case: &str, failure: Option<&str>) -> String {
    let mut line = format!(
        r#"{{"suite":{},"case":{},"passed":{}"#,
        json_string(suite),
        json_string(case),
        failure.is_none()
    );
    if let Some(message) = failure {
        line.push_str(",\"clause\":");
        line.push_str(&json_string(clause_of(message)));
        line.push_str(",\"message\":");
        line.push_str(&json_string(message));
    }
    line.push_str("}\n");
    line
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// What a run of many cases found: a failing case does not stop the run.
#[derive(Debug)]
pub struct Report {
    /// The suite's name in the summary line (`store`, `kicker`, `lease`).
    suite: &'static str,
    /// The cases that passed.
    pub passed: Vec<&'static str>,
    /// The cases that failed, in the order they ran.
    pub failures: Vec<Failure>,
}

impl Report {
    /// An empty report of `suite`.
    pub fn new(suite: &'static str) -> Self {
        Self {
            suite,
            passed: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// Runs one case on its own task and records how it ended.
    pub async fn run<C>(&mut self, case: &'static str, run: C)
    where
        C: Future<Output = ()> + Send + 'static,
    {
        match outcome(run).await {
            Ok(()) => self.passed.push(case),
            Err(message) => self.failures.push(Failure { case, message }),
        }
    }

    /// The clauses the failures name, each once, in order of first appearance.
    pub fn clauses(&self) -> Vec<&str> {
        let mut clauses: Vec<&str> = Vec::new();
        for clause in self.failures.iter().map(Failure::clause) {
            if !clauses.contains(&clause) {
                clauses.push(clause);
            }
        }
        clauses
    }

    /// Panics with the report when any case failed.
    ///
    /// # Panics
    ///
    /// When a case failed: the message lists every failure, one per line.
    #[track_caller]
    pub fn assert_passed(&self) {
        assert!(self.failures.is_empty(), "{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.passed.len() + self.failures.len();
        write!(
            f,
            "{} of {total} {} contract cases failed",
            self.failures.len(),
            self.suite
        )?;
        for failure in &self.failures {
            write!(f, "\n  {failure}")?;
        }
        Ok(())
    }
}

/// One failed case: its name and its violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The case.
    pub case: &'static str,
    /// The violation: `<clause> <rule>: <what was seen>`.
    pub message: String,
}

impl Failure {
    /// The clause the failure breaks (see [`clause_of`]).
    pub fn clause(&self) -> &str {
        clause_of(&self.message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.case, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_report_lists_every_failure_with_its_clause() {
        let mut report = Report::new("demo");
        report.run("fine", async {}).await;
        report
            .run("spaced", async {
                ensure!(1 + 1 == 3, "Kick payload", "sums must be odd", "got {}", 2);
            })
            .await;
        report
            .run("short", async {
                ensure_eq!(1, 2, "D4", "one is two");
            })
            .await;
        report
            .run("unwrap", async {
                panic!("no value");
            })
            .await;
        assert_eq!(report.passed, ["fine"]);
        assert_eq!(report.clauses(), ["Kick payload", "D4", "?"]);
        assert_eq!(
            report.to_string(),
            "3 of 4 demo contract cases failed\n  \
             spaced: Kick payload sums must be odd: got 2\n  \
             short: D4 one is two: expected 2, got 1\n  \
             unwrap: no value"
        );
    }

    #[test]
    fn json_strings_escape_what_json_needs() {
        assert_eq!(json_string("a\"b\\c\nd\u{1}é"), r#""a\"b\\c\nd\u0001é""#);
    }

    #[test]
    fn a_case_line_carries_its_outcome_clause_and_message() {
        assert_eq!(
            report_line("demo", "ok_case", None),
            "{\"suite\":\"demo\",\"case\":\"ok_case\",\"passed\":true}\n"
        );
        CLAUSES.lock().unwrap().insert("C5");
        assert_eq!(
            report_line("demo", "bad_case", Some("C5 keep \"gen\": lost")),
            "{\"suite\":\"demo\",\"case\":\"bad_case\",\"passed\":false,\"clause\":\"C5\",\
             \"message\":\"C5 keep \\\"gen\\\": lost\"}\n"
        );
    }
}
