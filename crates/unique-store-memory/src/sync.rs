//! The synchronisation primitives the table uses: `std::sync` in normal builds,
//! `loom::sync` under `--cfg loom`, so the loom models check the real code.

#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, ignoring poison. Every critical section in this crate leaves
/// the map consistent (each write is one assignment or insert), so a panic in
/// another thread cannot have left a half-written record behind.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
