//! What keeps a flood of refused callers from costing a line each: refusals tallied per
//! source, reason, path and token for an interval ([`Tally`]); the error log's budget for
//! records the sink did not take is a [`unique_core::LogBudget`] of
//! [`LOGGED_FAILURES_PER_INTERVAL`] lines per [`REFUSAL_INTERVAL`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use super::RefusalReason;

/// How long refusals are tallied before their records are written (and at shutdown, see
/// [`ArbiterService::flush_audit`](crate::ArbiterService::flush_audit)); the error log's
/// budget for unwritten records is per interval too.
pub const REFUSAL_INTERVAL: Duration = Duration::from_secs(10);

/// Most tallies (distinct source, reason, path and token) kept in one interval. Refusals
/// from further sources are tallied with the source unknown (`null`), so an interval writes
/// at most this many refusal records plus one per reason, path and token.
pub const MAX_REFUSAL_GROUPS: usize = 1024;

/// Records of session events the sink did not take that the error log holds whole in one
/// interval; past it they are counted, and one line at the interval's end says how many
/// were left out.
pub const LOGGED_FAILURES_PER_INTERVAL: u64 = 20;

/// What one refusal record stands for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Group {
    pub(crate) source: Option<IpAddr>,
    pub(crate) reason: RefusalReason,
    pub(crate) path: &'static str,
    /// The caller's token name (a 403); bounded by the configured tokens.
    pub(crate) token: Option<Box<str>>,
}

/// The refusals of one group so far in the interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Count {
    pub(crate) refusals: u64,
    pub(crate) first: SystemTime,
    pub(crate) last: SystemTime,
    /// The first refusal's request id, to find it in the request log.
    pub(crate) request_id: String,
}

/// The refusals of the current interval.
#[derive(Default)]
pub(crate) struct Tally {
    groups: Mutex<HashMap<Group, Count>>,
}

impl Tally {
    /// Counts one refusal of `group` at `at`.
    pub(crate) fn add(&self, mut group: Group, at: SystemTime, request_id: &impl ToString) {
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        if groups.len() >= MAX_REFUSAL_GROUPS && !groups.contains_key(&group) {
            // Past the cap, new sources share one group per reason, path and token: an
            // attacker with many addresses still costs a bounded number of lines.
            group.source = None;
        }
        groups
            .entry(group)
            .and_modify(|count| {
                count.refusals += 1;
                count.last = count.last.max(at);
            })
            .or_insert_with(|| Count {
                refusals: 1,
                first: at,
                last: at,
                request_id: request_id.to_string(),
            });
    }

    /// The interval's tallies, oldest first; the next interval starts empty.
    pub(crate) fn take(&self) -> Vec<(Group, Count)> {
        let groups =
            std::mem::take(&mut *self.groups.lock().unwrap_or_else(PoisonError::into_inner));
        let mut groups: Vec<_> = groups.into_iter().collect();
        groups.sort_by(|a, b| (a.1.first, &a.1.request_id).cmp(&(b.1.first, &b.1.request_id)));
        groups
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn group(source: u8, reason: RefusalReason) -> Group {
        Group {
            source: Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, source))),
            reason,
            path: "/v1/claim",
            token: None,
        }
    }

    #[test]
    fn refusals_are_counted_per_group_with_their_first_and_last_time() {
        let tally = Tally::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        for n in 0..1000 {
            tally.add(
                group(1, RefusalReason::Unknown),
                t0 + Duration::from_millis(n),
                &n,
            );
        }
        tally.add(group(2, RefusalReason::Unknown), t0, &"x");
        tally.add(group(1, RefusalReason::Missing), t0, &"y");
        let taken = tally.take();
        assert_eq!(taken.len(), 3, "{taken:?}");
        let flood = taken
            .iter()
            .find(|(g, _)| *g == group(1, RefusalReason::Unknown))
            .unwrap();
        assert_eq!(
            flood.1,
            Count {
                refusals: 1000,
                first: t0,
                last: t0 + Duration::from_millis(999),
                request_id: "0".into()
            }
        );
        assert!(tally.take().is_empty(), "the next interval starts empty");
    }

    #[test]
    fn sources_past_the_cap_share_one_unknown_source() {
        let tally = Tally::default();
        let t0 = SystemTime::UNIX_EPOCH;
        let sources = MAX_REFUSAL_GROUPS + 5000;
        for n in 0..sources {
            let ip = IpAddr::V6(std::net::Ipv6Addr::from(n as u128 + 1));
            let group = Group {
                source: Some(ip),
                ..group(0, RefusalReason::Unknown)
            };
            tally.add(group, t0, &n);
        }
        let taken = tally.take();
        assert_eq!(taken.len(), MAX_REFUSAL_GROUPS + 1);
        let total: u64 = taken.iter().map(|(_, c)| c.refusals).sum();
        assert_eq!(total, sources as u64);
        let unknown = taken.iter().find(|(g, _)| g.source.is_none()).unwrap();
        assert_eq!(unknown.1.refusals, 5000);
    }
}
