//! The checks of the lease cases beyond `unique-suite-kit`'s `ensure!` and `ensure_eq!`: a
//! backend's answer to a valid call, and a refused bad input.

use std::fmt;

use unique_suite_kit::violated;

/// A backend call's answer checked against the clause of its operation: a
/// valid call that fails breaks that clause (`D1 ensure_owner must answer a
/// valid call: d1-free: backend unavailable`).
pub(crate) trait Answer<T> {
    /// The answer, or a violation of `clause` naming `rule` and the error.
    fn answer(self, clause: &'static str, rule: &str) -> T;
}

impl<T, E: fmt::Display> Answer<T> for Result<T, E> {
    #[track_caller]
    fn answer(self, clause: &'static str, rule: &str) -> T {
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
    clause: &'static str,
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
