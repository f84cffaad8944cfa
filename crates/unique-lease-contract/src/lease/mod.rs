//! Single-caller cases of the `Directory` contract (D1–D7, D9–D11).
//!
//! Time passes only on the store's clock ([`Subject::pass`]); callers pass
//! [`Subject::now`] unless a case says their clocks disagree.

mod expiry;
mod grant;
mod inputs;
mod release;
mod steps;
mod verify;

use std::time::Duration;

pub use self::expiry::*;
pub use self::grant::*;
pub use self::inputs::*;
pub use self::release::*;
pub use self::steps::*;
pub use self::verify::*;
use crate::{Subject, stored};
use unique_lease::Lease;

pub(super) const MS: Duration = Duration::from_millis(1);

/// D4: `new`, a lease granted after `old` ended, carries a higher epoch.
#[track_caller]
pub(super) fn ensure_higher_epoch(new: &Lease, old: &Lease) {
    ensure!(
        new.epoch > old.epoch,
        "D4",
        "a new lease must carry a higher epoch",
        "epoch {} after {}",
        new.epoch,
        old.epoch
    );
}

/// The time the store says `room`'s stored lease has left.
pub(super) async fn stored_left(s: &Subject, room: &str) -> Duration {
    stored(&*s.directory, room).await.ttl_left
}
