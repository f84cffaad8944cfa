//! The checks every case makes: a failed check is a violation that names the
//! clause it breaks (`D4`, `N2`, …, a heading of `docs/design.md`) and the
//! rule in words, then what was seen.
//!
//! Declared first in `lib.rs` with `#[macro_use]`, so every module of cases
//! can use `ensure!` and `ensure_eq!`.
//!
//! `ensure!`, `ensure_eq!`, [`violated`] and [`unequal`] are a copy of
//! `unique-store-contract`'s `check.rs`, kept on purpose: the two suites
//! depend on different cores (`unique-lease` has no `unique-core`), a shared
//! crate would be published for two small macros, and a macro exported from
//! one suite would make every lease backend compile the store suite.
//! `cargo xtask contract` reads only the message's shape (the clause first),
//! so the copies need only agree on that.

use std::any::Any;
use std::fmt;

/// Fails the case with a violation: the clause it breaks, the rule in words,
/// then what was seen (`D4 a new lease must carry a higher epoch: epoch 3
/// after 3`). The first word of every violation is its clause, which is how
/// `cargo xtask contract` tells which rule a failure breaks.
#[track_caller]
pub(crate) fn violated(clause: &str, rule: &str, seen: fmt::Arguments<'_>) -> ! {
    panic!("{clause} {rule}: {seen}")
}

/// `ensure!(condition, "D4", "the rule in words", "what was seen {x}")`:
/// fails the case with a violation of the clause unless `condition` holds.
macro_rules! ensure {
    ($cond:expr, $clause:literal, $rule:literal, $($seen:tt)+) => {
        if !$cond {
            $crate::check::violated($clause, $rule, format_args!($($seen)+))
        }
    };
}

/// `ensure_eq!(got, want, "D4", "the rule in words"[, "context {x}"])`:
/// fails the case with a violation of the clause unless `got == want`,
/// showing both.
macro_rules! ensure_eq {
    ($got:expr, $want:expr, $clause:literal, $rule:literal $(,)?) => {
        ensure_eq!($got, $want, $clause, $rule, "")
    };
    ($got:expr, $want:expr, $clause:literal, $rule:literal, $($context:tt)+) => {
        match (&$got, &$want) {
            (got, want) => {
                if *got != *want {
                    $crate::check::unequal($clause, $rule, &format!($($context)+), got, want)
                }
            }
        }
    };
}

/// The violation of `ensure_eq!`: `<clause> <rule>: [<context>: ]expected
/// <want>, got <got>`.
#[track_caller]
pub(crate) fn unequal(
    clause: &str,
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

/// A backend call's answer checked against the clause of its operation: a
/// valid call that fails breaks that clause (`D1 ensure_owner must answer a
/// valid call: d1-free: backend unavailable`).
pub(crate) trait Answer<T> {
    /// The answer, or a violation of `clause` naming `rule` and the error.
    fn answer(self, clause: &str, rule: &str) -> T;
}

impl<T, E: fmt::Display> Answer<T> for Result<T, E> {
    #[track_caller]
    fn answer(self, clause: &str, rule: &str) -> T {
        match self {
            Ok(value) => value,
            Err(e) => violated(clause, rule, format_args!("failed with {e}")),
        }
    }
}

/// `D9`/`N4`: a bad input must be refused as `InvalidParams`.
#[track_caller]
pub(crate) fn refused<T: fmt::Debug>(
    result: Result<T, unique_lease::LeaseError>,
    clause: &str,
    what: fmt::Arguments<'_>,
) {
    match result {
        Err(e) if e.is_invalid_params() => {}
        Err(e) => violated(
            clause,
            "a bad input must be refused as InvalidParams",
            format_args!("{what}: failed with another error: {e}"),
        ),
        Ok(value) => violated(
            clause,
            "a bad input must be refused as InvalidParams",
            format_args!("{what}: accepted, answered {value:?}"),
        ),
    }
}

/// The message of a panic payload (what `panic!` formatted).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else {
        "a panic without a message".to_owned()
    }
}
