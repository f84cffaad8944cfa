//! A per-thread memo of the endpoints a kicker's policy accepted at claim time.
//!
//! [`Kicker::check_endpoint`](unique_core::Kicker::check_endpoint) runs on every claim, and
//! parsing the URI and classifying its host was about 2 000 instructions of a claim's 27 000
//! on the memory store (callgrind). A node sends the same endpoint with every login, so the
//! answer for the last few endpoints is kept: a policy never changes after the kicker is
//! built and the check looks at nothing but the string, so a remembered acceptance stays
//! true. Only acceptances are kept (a refusal carries a reason and is rare), per thread (no
//! lock on the claim path), and per kicker: each kicker has its own id, so kickers with
//! different policies never share an answer.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many endpoints each thread remembers across all kickers.
const REMEMBERED: usize = 8;
/// Longer endpoints are checked every time rather than copied into the memo.
const LONGEST_REMEMBERED: usize = 256;

static NEXT_KICKER: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// `(kicker id, endpoint)`, the oldest replaced first.
    static ACCEPTED: RefCell<Recent> = const { RefCell::new(Recent { entries: Vec::new(), next: 0 }) };
}

struct Recent {
    entries: Vec<(u64, Box<str>)>,
    /// The slot the next acceptance replaces once `entries` is full.
    next: usize,
}

/// One kicker's view of the memo.
#[derive(Debug)]
pub(crate) struct AcceptedEndpoints {
    kicker: u64,
}

impl AcceptedEndpoints {
    pub(crate) fn new() -> Self {
        Self {
            kicker: NEXT_KICKER.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Whether this kicker accepted `endpoint` recently on this thread.
    pub(crate) fn contains(&self, endpoint: &str) -> bool {
        ACCEPTED.with_borrow(|recent| {
            recent
                .entries
                .iter()
                .any(|(kicker, known)| *kicker == self.kicker && **known == *endpoint)
        })
    }

    /// Remembers that this kicker's policy accepted `endpoint`.
    pub(crate) fn remember(&self, endpoint: &str) {
        if endpoint.len() > LONGEST_REMEMBERED {
            return;
        }
        ACCEPTED.with_borrow_mut(|recent| {
            let entry = (self.kicker, Box::from(endpoint));
            if recent.entries.len() < REMEMBERED {
                recent.entries.push(entry);
            } else {
                let slot = recent.next;
                recent.entries[slot] = entry;
                recent.next = (slot + 1) % REMEMBERED;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acceptance_is_remembered_for_its_kicker_only() {
        let one = AcceptedEndpoints::new();
        let other = AcceptedEndpoints::new();
        one.remember("http://a/kick");
        assert!(one.contains("http://a/kick"));
        assert!(!one.contains("http://b/kick"));
        assert!(!other.contains("http://a/kick"));
    }

    #[test]
    fn the_oldest_is_forgotten_first_and_long_endpoints_never_kept() {
        let kicker = AcceptedEndpoints::new();
        let endpoints: Vec<String> = (0..=REMEMBERED)
            .map(|i| format!("http://n{i}/kick"))
            .collect();
        for endpoint in &endpoints {
            kicker.remember(endpoint);
        }
        assert!(!kicker.contains(&endpoints[0]));
        assert!(endpoints[1..].iter().all(|e| kicker.contains(e)));

        let long = format!("http://{}/kick", "h".repeat(LONGEST_REMEMBERED));
        kicker.remember(&long);
        assert!(!kicker.contains(&long));
    }
}
