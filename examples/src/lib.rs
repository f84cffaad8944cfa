//! Runnable examples of unique; see the binaries in `src/bin`.
