//! The checks every case makes come from `unique-suite-kit`: `ensure!` and `ensure_eq!`
//! (in scope everywhere through `#[macro_use]` in `lib.rs`) and [`violated`], for a
//! violation found another way. A failed check names the clause it breaks, a heading of
//! `docs/design.md`, then the rule in words, then what was seen.

pub(crate) use unique_suite_kit::violated;
