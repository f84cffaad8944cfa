//! The checks every case makes: a failed check is a violation that names the
//! clause it breaks (`C5`, `I3`, …, a heading of `docs/design.md`) and the
//! rule in words, then what was seen.
//!
//! Declared first in `lib.rs` with `#[macro_use]`, so every module of cases
//! can use `ensure!` and `ensure_eq!`.

use std::any::Any;
use std::fmt;

/// Fails the case with a violation: the clause it breaks, the rule in words,
/// then what was seen (`C5 release must keep gen: released gen 1, read back
/// gen 0`). The first word of every violation is its clause, which is how
/// [`Failure::clause`](crate::Failure::clause) and `cargo xtask contract` tell
/// which rule a failure breaks.
#[track_caller]
pub(crate) fn violated(clause: &str, rule: &str, seen: fmt::Arguments<'_>) -> ! {
    panic!("{clause} {rule}: {seen}")
}

/// `ensure!(condition, "C5", "the rule in words", "what was seen {x}")`:
/// fails the case with a violation of the clause unless `condition` holds.
macro_rules! ensure {
    ($cond:expr, $clause:literal, $rule:literal, $($seen:tt)+) => {
        if !$cond {
            $crate::check::violated($clause, $rule, format_args!($($seen)+))
        }
    };
}

/// `ensure_eq!(got, want, "C5", "the rule in words"[, "context {x}"])`:
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
