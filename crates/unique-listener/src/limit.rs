//! Connection caps: in total and per client address, released by a guard.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use metrics::Gauge;

/// Open connections, counted against the caps.
#[derive(Debug)]
pub(crate) struct ConnectionLimits {
    max_total: usize,
    max_per_ip: usize,
    open: Mutex<Open>,
    /// Follows `open.total` (incremented and decremented, so several loops in one process add up).
    gauge: Gauge,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// Which cap refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    Total = 0,
    PerIp = 1,
}

impl Refused {
    /// The flag of the cap, as the `reason` label of refused connections.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Total => "max-connections",
            Self::PerIp => "max-connections-per-ip",
        }
    }
}

/// One admitted connection; dropping it releases its place under both caps.
#[derive(Debug)]
pub(crate) struct ConnectionGuard {
    limits: Arc<ConnectionLimits>,
    ip: IpAddr,
}

impl ConnectionLimits {
    pub(crate) fn new(max_total: usize, max_per_ip: usize, gauge: Gauge) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            max_per_ip,
            open: Mutex::new(Open::default()),
            gauge,
        })
    }

    /// Counts a connection from `ip`, or says which cap it would exceed.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionGuard, Refused> {
        // An IPv4 client reaching an IPv6 socket arrives as ::ffff:a.b.c.d; count it as a.b.c.d.
        let ip = ip.to_canonical();
        let mut open = self.lock();
        if open.total >= self.max_total {
            return Err(Refused::Total);
        }
        let from_ip = open.per_ip.entry(ip).or_insert(0);
        if *from_ip >= self.max_per_ip {
            return Err(Refused::PerIp);
        }
        *from_ip += 1;
        open.total += 1;
        self.gauge.increment(1);
        Ok(ConnectionGuard {
            limits: Arc::clone(self),
            ip,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // The counts stay consistent under a panic elsewhere: every update is a single step.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn counts(&self, ip: IpAddr) -> (usize, usize, usize) {
        let open = self.lock();
        (
            open.total,
            open.per_ip.get(&ip).copied().unwrap_or(0),
            open.per_ip.len(),
        )
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let mut open = self.limits.lock();
        open.total -= 1;
        self.limits.gauge.decrement(1);
        if let Some(from_ip) = open.per_ip.get_mut(&self.ip) {
            *from_ip -= 1;
            if *from_ip == 0 {
                // No entry per address ever seen: the map holds open connections only.
                open.per_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

    #[test]
    fn the_per_ip_cap_refuses_one_address_and_not_another() {
        let limits = ConnectionLimits::new(10, 2, Gauge::noop());
        let a1 = limits.admit(A).unwrap();
        let _a2 = limits.admit(A).unwrap();
        assert_eq!(limits.admit(A).unwrap_err(), Refused::PerIp);
        let _b1 = limits.admit(B).unwrap();
        drop(a1);
        let _a3 = limits.admit(A).unwrap();
        assert_eq!(limits.counts(A), (3, 2, 2));
    }

    #[test]
    fn the_total_cap_refuses_everyone_until_a_guard_drops() {
        let limits = ConnectionLimits::new(2, 5, Gauge::noop());
        let a = limits.admit(A).unwrap();
        let _b = limits.admit(B).unwrap();
        assert_eq!(limits.admit(A).unwrap_err(), Refused::Total);
        drop(a);
        let _a = limits.admit(A).unwrap();
    }

    #[test]
    fn released_addresses_leave_no_entry_and_mapped_v4_counts_as_v4() {
        let limits = ConnectionLimits::new(10, 1, Gauge::noop());
        let mapped = IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x7f00, 1));
        let guard = limits.admit(mapped).unwrap();
        assert_eq!(limits.admit(A).unwrap_err(), Refused::PerIp);
        drop(guard);
        assert_eq!(limits.counts(A), (0, 0, 0));
    }
}
