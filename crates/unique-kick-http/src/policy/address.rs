//! Addresses as the policy reads them: CIDR blocks, IPv4-mapped and -compatible IPv6
//! forms, and the IP literals and numeric hosts a URL may carry.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::rule::RuleReason;

/// A CIDR block with its host bits clear; an IPv4-mapped block is kept as IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cidr {
    pub(super) network: IpAddr,
    pub(super) prefix: u8,
}

impl Cidr {
    pub(super) const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Self {
        Self {
            network: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            prefix,
        }
    }

    pub(super) const fn v6(first: u16, prefix: u8) -> Self {
        Self {
            network: IpAddr::V6(Ipv6Addr::new(first, 0, 0, 0, 0, 0, 0, 0)),
            prefix,
        }
    }

    /// One IPv6 address, a `/128`.
    pub(super) const fn v6_host(s: [u16; 8]) -> Self {
        Self {
            network: IpAddr::V6(Ipv6Addr::new(
                s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
            )),
            prefix: 128,
        }
    }

    /// `address`, or `address/prefix`; a bare address is a single-address block.
    pub(super) fn parse(text: &str) -> Result<Self, RuleReason> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let bare = strip_brackets(address);
        let address = if bare.len() == address.len() {
            ip_literal(address)
        } else {
            // Brackets hold IPv6 only, as in a URL.
            bare.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
        }
        .ok_or(RuleReason::NotAnAddress)?;
        let max = match address {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let prefix = match prefix {
            None => max,
            // `u8::from_str` would take a leading `+`; only digits are a prefix.
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or(RuleReason::BadPrefix { max })?,
            Some(_) => return Err(RuleReason::BadPrefix { max }),
        };
        let block = match (address, canonical(address)) {
            (IpAddr::V6(_), v4 @ IpAddr::V4(_)) if prefix >= 96 => Self {
                network: v4,
                prefix: prefix - 96,
            },
            _ => Self {
                network: address,
                prefix,
            },
        };
        let network = block.masked(block.network);
        if network != block.network {
            return Err(RuleReason::HostBits {
                network,
                prefix: block.prefix,
            });
        }
        Ok(block)
    }

    /// `address` with the bits past this block's prefix cleared.
    fn masked(&self, address: IpAddr) -> IpAddr {
        let prefix = u32::from(self.prefix);
        match address {
            IpAddr::V4(v4) => {
                let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from_bits(v4.to_bits() & mask))
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & mask))
            }
        }
    }

    /// `address` (canonical) is in this block; IPv4 and IPv6 never mix.
    pub(super) fn contains(&self, address: IpAddr) -> bool {
        address.is_ipv4() == self.network.is_ipv4() && self.masked(address) == self.network
    }

    /// This block lies entirely inside `outer`.
    pub(super) fn within(&self, outer: &Self) -> bool {
        self.prefix >= outer.prefix && outer.contains(self.network)
    }
}

/// IPv4-mapped (`::ffff:a.b.c.d`) and IPv4-compatible (`::a.b.c.d`) addresses as
/// their IPv4 address; `::` and `::1` stay IPv6 (unspecified and loopback).
pub(super) fn canonical(address: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = address else {
        return address;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    match u32::try_from(v6.to_bits()) {
        Ok(low) if low > 1 => IpAddr::V4(Ipv4Addr::from_bits(low)),
        _ => address,
    }
}

/// A name whose last label is a number (decimal, or hex with `0x`): never a host
/// name (no top-level domain is numeric), but an address in `inet_aton`'s eyes.
pub(super) fn numeric_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    let last = host.rsplit('.').next().unwrap_or_default();
    let (digits, radix) = match last.strip_prefix("0x").or_else(|| last.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (last, 10),
    };
    !last.is_empty() && digits.chars().all(|c| c.is_digit(radix))
}

/// A host without the brackets of an IPv6 literal.
pub(super) fn strip_brackets(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// The host as an IP literal, exactly as hyper-util's connector reads one (it
/// connects to such a host without calling the resolver): dotted-quad IPv4, or IPv6.
pub(super) fn ip_literal(host: &str) -> Option<IpAddr> {
    host.parse().ok()
}
