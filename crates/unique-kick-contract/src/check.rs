//! The checks every case makes: a failed check is a violation that names the
//! clause it breaks (`Kicker`, `Kick payload`: a heading of `docs/design.md`)
//! and the rule in words, then what was seen.
//!
//! Declared first in `lib.rs` with `#[macro_use]`, so every module of cases
//! can use `ensure!` and `ensure_eq!`.
//!
//! A copy of `unique-store-contract`'s `check.rs`, kept on purpose (as in
//! `unique-lease-contract`): a shared crate would be published for two small
//! macros, and a macro exported from one suite would make every kicker
//! compile the store suite. `cargo xtask contract` reads only the message's
//! shape (the clause first), so the copies need only agree on that.

use std::fmt;

/// Fails the case with a violation: the clause it breaks, the rule in words,
/// then what was seen (`Kicker a 2xx answer must be confirmed: a 204
/// answer: expected Confirmed, got Failed(Non2xx)`). The first word of every violation is its clause, which is how
/// `cargo xtask contract` tells which rule a failure breaks (a heading
/// with spaces, `Kick payload`, is read whole).
#[track_caller]
pub(crate) fn violated(clause: &str, rule: &str, seen: fmt::Arguments<'_>) -> ! {
    panic!("{clause} {rule}: {seen}")
}

/// `ensure!(condition, "Kicker", "the rule in words", "what was seen {x}")`:
/// fails the case with a violation of the clause unless `condition` holds.
macro_rules! ensure {
    ($cond:expr, $clause:literal, $rule:literal, $($seen:tt)+) => {
        if !$cond {
            $crate::check::violated($clause, $rule, format_args!($($seen)+))
        }
    };
}

/// `ensure_eq!(got, want, "Kicker", "the rule in words"[, "context {x}"])`:
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
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else {
        "a panic without a message".to_owned()
    }
}
