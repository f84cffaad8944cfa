//! The kick-endpoint policy (`docs/design.md#kick-endpoint-policy`): which hosts and
//! addresses a kick may be sent to. Pure, so every branch has a unit test; the
//! kicker applies it before connecting to an IP literal and, through its resolver,
//! to every address a host name resolves to.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Which kick endpoints an [`HttpKicker`](crate::HttpKicker) may reach.
///
/// A connection to `address` for the URL host `host` is decided in this order:
///
/// Before any lookup, a numeric host that is not a dotted-quad or IPv6 literal
/// (`2852039166`, `0xa9fea9fe`, `127.1`) is refused ([`Refusal::NumericHost`]): the
/// system resolver would read it as an address the URL does not show.
///
/// 1. **Deny list**: a host rule matching the URL's host name, or a CIDR rule
///    containing the address → refused ([`Refusal::Denied`]).
/// 2. **Default refusals**: an unspecified (`0.0.0.0/8`, `::`), link-local
///    (`169.254.0.0/16`, `fe80::/10`), multicast (`224.0.0.0/4`, `ff00::/8`) or
///    broadcast (`255.255.255.255`) address, or one of the fixed cloud metadata
///    addresses outside those ranges ([`ReservedRange::CloudMetadata`]), is refused
///    ([`Refusal::Reserved`]) unless an allow CIDR rule *inside* that range contains
///    it: allowing `169.254.10.0/24` opens that part of the link-local range on
///    purpose, and only a rule naming a metadata address itself (`168.63.129.16`)
///    opens that address, while a wide rule such as `0.0.0.0/0` or `100.64.0.0/10`
///    opens nothing reserved, and a host rule never does (a name's records can
///    change under you).
/// 3. **Allow list**: when it is empty every other address is allowed; when it is
///    not, only a matching host rule or CIDR rule allows ([`Refusal::NotAllowed`]
///    otherwise).
///
/// IPv4-mapped (`::ffff:a.b.c.d`) and IPv4-compatible (`::a.b.c.d`, except `::` and
/// `::1`) addresses are classified as their IPv4 address, by the default refusals and
/// by every rule; IPv6 rules never match them.
///
/// ```
/// use unique_kick_http::{EndpointPolicy, EndpointRule};
///
/// let rule = |text: &str| text.parse::<EndpointRule>().expect("a valid rule");
/// let policy = EndpointPolicy::new()
///     .deny([rule("10.1.0.0/16")])
///     .allow([rule("10.0.0.0/8"), rule("*.nodes.internal")]);
///
/// assert!(policy.check_host("10.2.3.4").is_ok());
/// assert!(policy.check_host("10.1.3.4").is_err()); // denied
/// assert!(policy.check_host("192.0.2.1").is_err()); // not on the allow list
/// assert!(policy.check_host("[::ffff:169.254.169.254]").is_err()); // link-local
/// assert!(policy.check_host("[fd00:ec2::254]").is_err()); // AWS metadata over IPv6
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct EndpointPolicy {
    allow: Vec<EndpointRule>,
    deny: Vec<EndpointRule>,
}

impl EndpointPolicy {
    /// The default policy: empty lists, only the default refusals.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `rules` to the allow list.
    pub fn allow(mut self, rules: impl IntoIterator<Item = EndpointRule>) -> Self {
        self.allow.extend(rules);
        self
    }

    /// Adds `rules` to the deny list.
    pub fn deny(mut self, rules: impl IntoIterator<Item = EndpointRule>) -> Self {
        self.deny.extend(rules);
        self
    }

    /// Decides a URL host before any DNS lookup (`host` as in the URL: a name, an IPv4
    /// literal or a bracketed IPv6 literal). An IP literal is decided completely. A
    /// name is refused when a deny host rule matches it, or when the allow list is
    /// not empty and could not allow it (no host rule matches and there is no CIDR
    /// rule its addresses could fall in); otherwise the verdict waits for its
    /// addresses ([`check_address`](Self::check_address)).
    ///
    /// # Errors
    ///
    /// The [`Refusal`] when the host is refused.
    pub fn check_host(&self, host: &str) -> Result<(), Refusal> {
        let bare = strip_brackets(host);
        if let Some(address) = ip_literal(bare) {
            return self.check_address(None, address);
        }
        if numeric_name(bare) {
            return Err(Refusal::NumericHost);
        }
        if self.deny.iter().any(|rule| rule.matches_name(bare)) {
            return Err(Refusal::Denied);
        }
        let could_allow = |rule: &EndpointRule| rule.is_cidr() || rule.matches_name(bare);
        if !self.allow.is_empty() && !self.allow.iter().any(could_allow) {
            return Err(Refusal::NotAllowed);
        }
        Ok(())
    }

    /// Decides one address to connect to: `host` is the URL's host name it was
    /// resolved from (`None` for an IP literal, which host rules never match).
    ///
    /// # Errors
    ///
    /// The [`Refusal`] when the address is refused.
    pub fn check_address(&self, host: Option<&str>, address: IpAddr) -> Result<(), Refusal> {
        let address = canonical(address);
        if self.deny.iter().any(|rule| rule.matches(host, address)) {
            return Err(Refusal::Denied);
        }
        if let Some(range) = RESERVED.iter().find(|r| r.block.contains(address)) {
            let opened = self.allow.iter().any(|rule| rule.opens(range, address));
            return if opened {
                Ok(())
            } else {
                Err(Refusal::Reserved(range.kind))
            };
        }
        if self.allow.is_empty() || self.allow.iter().any(|rule| rule.matches(host, address)) {
            Ok(())
        } else {
            Err(Refusal::NotAllowed)
        }
    }
}

/// Why the policy refused an endpoint. The message names the rule that refused,
/// never the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// A deny rule matches the host or the address.
    #[error("matches the kick-endpoint deny list")]
    Denied,
    /// The allow list is not empty and nothing on it matches.
    #[error("not on the kick-endpoint allow list")]
    NotAllowed,
    /// The host is numeric but not a dotted-quad or IPv6 literal (`2852039166`,
    /// `0xa9fea9fe`, `127.1`): the system resolver would read it as an address the
    /// URL's host does not show, so it is refused outright.
    #[error("a numeric host that is not a dotted-quad or IPv6 address")]
    NumericHost,
    /// The address is in a range refused by default and no allow rule opens it.
    #[error("{0} address, refused by default")]
    Reserved(ReservedRange),
}

/// The address ranges refused by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReservedRange {
    /// `0.0.0.0/8` ("this network"; `0.0.0.0` connects to the local host) and `::`.
    Unspecified,
    /// `169.254.0.0/16` (cloud metadata services live here) and `fe80::/10`.
    LinkLocal,
    /// `224.0.0.0/4` and `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// A fixed address where a cloud provider serves instance metadata or
    /// credentials, outside the link-local range (which holds most of them,
    /// `169.254.169.254` first): `100.100.100.200` (Alibaba Cloud), `168.63.129.16`
    /// (Azure WireServer), and on IPv6 `fd00:ec2::254` and `fd00:ec2::23` (AWS
    /// instance metadata, EKS Pod Identity Agent), `fd20:ce::254` (Google Cloud),
    /// `fd00:c1::a9fe:a9fe` (Oracle Cloud), `fd00:100::100:200` (Alibaba Cloud),
    /// `fd00:42::42` (Scaleway) and `fd00:a9fe:a9fe::1` (Akamai / Linode). Each is
    /// one address: its neighbours (the rest of `100.64.0.0/10`, of `fd00::/8`) are
    /// not refused by default.
    CloudMetadata,
}

impl fmt::Display for ReservedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unspecified => "an unspecified",
            Self::LinkLocal => "a link-local",
            Self::Multicast => "a multicast",
            Self::Broadcast => "a broadcast",
            Self::CloudMetadata => "a cloud metadata",
        })
    }
}

/// One entry of an allow or deny list: a CIDR block (`10.0.0.0/8`, `fd00::/8`, or a
/// single address, `127.0.0.2`, `[::1]`), or a host name, exact (`node-7.internal`)
/// or with a leading `*.` for every name below it (`*.nodes.internal` matches
/// `a.nodes.internal` and `a.b.nodes.internal`, not `nodes.internal`).
///
/// CIDR rules match the address connected to; host rules match the URL's host name
/// (ASCII case-insensitive, a trailing dot ignored) before resolution, and never an
/// IP-literal host. An IPv4-mapped block (`::ffff:10.0.0.0/104`) is read as its IPv4
/// block (`10.0.0.0/8`).
///
/// Parsing fails, with the entry and the reason, for an empty entry, an address that
/// does not parse, a prefix longer than the address, a block with host bits set
/// (`10.0.0.1/8`), a port, a misplaced `*`, or a name with an empty, over-long or
/// numeric-last label or a character other than letters, digits, `-` and `_`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointRule(Rule);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    Cidr(Cidr),
    /// Lower case, without a trailing dot.
    Host {
        name: String,
        subdomains: bool,
    },
}

impl EndpointRule {
    fn is_cidr(&self) -> bool {
        matches!(self.0, Rule::Cidr(_))
    }

    /// `address` is canonical; `host` is `None` for an IP literal.
    fn matches(&self, host: Option<&str>, address: IpAddr) -> bool {
        match &self.0 {
            Rule::Cidr(block) => block.contains(address),
            Rule::Host { .. } => host.is_some_and(|host| self.matches_name(host)),
        }
    }

    fn matches_name(&self, host: &str) -> bool {
        let Rule::Host { name, subdomains } = &self.0 else {
            return false;
        };
        let host = host.strip_suffix('.').unwrap_or(host).as_bytes();
        let name = name.as_bytes();
        if !subdomains {
            return host.eq_ignore_ascii_case(name);
        }
        host.len() > name.len() + 1
            && host[host.len() - name.len() - 1] == b'.'
            && host[host.len() - name.len()..].eq_ignore_ascii_case(name)
    }

    /// Whether this allow rule opens the reserved `range` for `address`: a CIDR rule
    /// lying inside the range and containing the address.
    fn opens(&self, range: &Reserved, address: IpAddr) -> bool {
        match &self.0 {
            Rule::Cidr(block) => block.contains(address) && block.within(&range.block),
            Rule::Host { .. } => false,
        }
    }
}

impl FromStr for EndpointRule {
    type Err = RuleError;

    fn from_str(entry: &str) -> Result<Self, RuleError> {
        let text = entry.trim();
        let error = |reason| RuleError {
            entry: entry.to_owned(),
            reason,
        };
        if text.is_empty() {
            return Err(error(RuleReason::Empty));
        }
        let looks_like_cidr = text.contains('/') || ip_literal(strip_brackets(text)).is_some();
        let rule = if looks_like_cidr {
            Rule::Cidr(Cidr::parse(text).map_err(error)?)
        } else {
            parse_host(text).map_err(error)?
        };
        Ok(Self(rule))
    }
}

impl fmt::Display for EndpointRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Rule::Cidr(block) => write!(f, "{}/{}", block.network, block.prefix),
            Rule::Host { name, subdomains } => {
                write!(f, "{}{name}", if *subdomains { "*." } else { "" })
            }
        }
    }
}

/// An allow or deny entry that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid kick-endpoint rule {entry:?}: {reason}")]
pub struct RuleError {
    entry: String,
    reason: RuleReason,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum RuleReason {
    #[error("empty entry")]
    Empty,
    #[error("not an IP address")]
    NotAnAddress,
    #[error("the prefix length must be a number from 0 to {max}")]
    BadPrefix { max: u8 },
    #[error("host bits are set; the block is {network}/{prefix}")]
    HostBits { network: IpAddr, prefix: u8 },
    #[error("a rule has no port")]
    Port,
    #[error("a wildcard is only allowed as a leading `*.`")]
    Wildcard,
    #[error("not a host name (labels of letters, digits, `-` and `_`, the last not numeric)")]
    NotAName,
}

fn parse_host(text: &str) -> Result<Rule, RuleReason> {
    if text.contains(':') {
        return Err(RuleReason::Port);
    }
    let lower = text.to_ascii_lowercase();
    let lower = lower.strip_suffix('.').unwrap_or(&lower);
    let (subdomains, name) = match lower.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, lower),
    };
    if name.contains('*') {
        return Err(RuleReason::Wildcard);
    }
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    // A numeric last label is a mistyped address (`10.0.0.256`), never a name.
    let numeric_last = name
        .rsplit('.')
        .next()
        .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()));
    if name.len() > 253 || !name.split('.').all(label_ok) || numeric_last {
        return Err(RuleReason::NotAName);
    }
    Ok(Rule::Host {
        name: name.to_owned(),
        subdomains,
    })
}

/// A CIDR block with its host bits clear; an IPv4-mapped block is kept as IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Self {
        Self {
            network: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            prefix,
        }
    }

    const fn v6(first: u16, prefix: u8) -> Self {
        Self {
            network: IpAddr::V6(Ipv6Addr::new(first, 0, 0, 0, 0, 0, 0, 0)),
            prefix,
        }
    }

    /// One IPv6 address, a `/128`.
    const fn v6_host(s: [u16; 8]) -> Self {
        Self {
            network: IpAddr::V6(Ipv6Addr::new(
                s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
            )),
            prefix: 128,
        }
    }

    /// `address`, or `address/prefix`; a bare address is a single-address block.
    fn parse(text: &str) -> Result<Self, RuleReason> {
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
    fn contains(&self, address: IpAddr) -> bool {
        address.is_ipv4() == self.network.is_ipv4() && self.masked(address) == self.network
    }

    /// This block lies entirely inside `outer`.
    fn within(&self, outer: &Self) -> bool {
        self.prefix >= outer.prefix && outer.contains(self.network)
    }
}

/// A range refused by default.
struct Reserved {
    block: Cidr,
    kind: ReservedRange,
}

/// Checked in order; no two blocks overlap. The cloud metadata addresses are those
/// documented as fixed by their provider (SECURITY.md lists each with its source).
const RESERVED: [Reserved; 16] = [
    Reserved {
        block: Cidr::v4(0, 0, 0, 0, 8),
        kind: ReservedRange::Unspecified,
    },
    Reserved {
        block: Cidr::v4(169, 254, 0, 0, 16),
        kind: ReservedRange::LinkLocal,
    },
    Reserved {
        block: Cidr::v4(224, 0, 0, 0, 4),
        kind: ReservedRange::Multicast,
    },
    Reserved {
        block: Cidr::v4(255, 255, 255, 255, 32),
        kind: ReservedRange::Broadcast,
    },
    Reserved {
        block: Cidr::v6(0, 128),
        kind: ReservedRange::Unspecified,
    },
    Reserved {
        block: Cidr::v6(0xfe80, 10),
        kind: ReservedRange::LinkLocal,
    },
    Reserved {
        block: Cidr::v6(0xff00, 8),
        kind: ReservedRange::Multicast,
    },
    // Alibaba Cloud ECS instance metadata, inside the shared address space
    // 100.64.0.0/10, the rest of which stays allowed.
    metadata(Cidr::v4(100, 100, 100, 200, 32)),
    // Azure WireServer (a Microsoft public address every Azure VM reaches).
    metadata(Cidr::v4(168, 63, 129, 16, 32)),
    // AWS instance metadata (IMDS) on Nitro instances.
    metadata(Cidr::v6_host([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254])),
    // AWS EKS Pod Identity Agent (hands out IAM credentials).
    metadata(Cidr::v6_host([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23])),
    // Google Cloud metadata server for IPv6-only instances.
    metadata(Cidr::v6_host([0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254])),
    // Oracle Cloud instance metadata (IMDS).
    metadata(Cidr::v6_host([0xfd00, 0xc1, 0, 0, 0, 0, 0xa9fe, 0xa9fe])),
    // Alibaba Cloud ECS instance metadata.
    metadata(Cidr::v6_host([0xfd00, 0x100, 0, 0, 0, 0, 0x100, 0x200])),
    // Scaleway instance metadata.
    metadata(Cidr::v6_host([0xfd00, 0x42, 0, 0, 0, 0, 0, 0x42])),
    // Akamai Cloud (Linode) metadata service.
    metadata(Cidr::v6_host([0xfd00, 0xa9fe, 0xa9fe, 0, 0, 0, 0, 1])),
];

const fn metadata(block: Cidr) -> Reserved {
    Reserved {
        block,
        kind: ReservedRange::CloudMetadata,
    }
}

/// IPv4-mapped (`::ffff:a.b.c.d`) and IPv4-compatible (`::a.b.c.d`) addresses as
/// their IPv4 address; `::` and `::1` stay IPv6 (unspecified and loopback).
fn canonical(address: IpAddr) -> IpAddr {
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
fn numeric_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    let last = host.rsplit('.').next().unwrap_or_default();
    let (digits, radix) = match last.strip_prefix("0x").or_else(|| last.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (last, 10),
    };
    !last.is_empty() && digits.chars().all(|c| c.is_digit(radix))
}

/// A host without the brackets of an IPv6 literal.
fn strip_brackets(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// The host as an IP literal, exactly as hyper-util's connector reads one (it
/// connects to such a host without calling the resolver): dotted-quad IPv4, or IPv6.
fn ip_literal(host: &str) -> Option<IpAddr> {
    host.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> EndpointRule {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
    }

    fn rules(texts: &[&str]) -> Vec<EndpointRule> {
        texts.iter().map(|t| rule(t)).collect()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an ip address")
    }

    fn reason(text: &str) -> RuleReason {
        match text.parse::<EndpointRule>() {
            Ok(rule) => panic!("{text:?} parsed as {rule}"),
            Err(e) => e.reason,
        }
    }

    /// Asserts the default policy refuses each of `refused` as its range and allows
    /// each of `allowed`.
    fn assert_defaults(refused: &[(&str, ReservedRange)], allowed: &[&str]) {
        let policy = EndpointPolicy::new();
        for &(address, kind) in refused {
            let verdict = policy.check_address(None, ip(address));
            assert_eq!(verdict, Err(Refusal::Reserved(kind)), "{address}");
        }
        for &address in allowed {
            assert_eq!(policy.check_address(None, ip(address)), Ok(()), "{address}");
        }
    }

    #[test]
    fn the_default_refuses_the_edges_of_every_ipv4_range_and_nothing_next_to_them() {
        use ReservedRange::*;
        assert_defaults(
            &[
                ("0.0.0.0", Unspecified),
                ("0.255.255.255", Unspecified),
                ("169.254.0.0", LinkLocal),
                ("169.254.169.254", LinkLocal),
                ("169.254.255.255", LinkLocal),
                ("224.0.0.0", Multicast),
                ("239.255.255.255", Multicast),
                ("255.255.255.255", Broadcast),
            ],
            &[
                "1.0.0.0",
                "127.0.0.1",
                "127.0.0.2",
                "10.0.0.1",
                "169.253.255.255",
                "169.255.0.0",
                "223.255.255.255",
                "240.0.0.0",
                "255.255.255.254",
            ],
        );
    }

    #[test]
    fn the_default_refuses_the_edges_of_every_ipv6_range_and_nothing_next_to_them() {
        use ReservedRange::*;
        assert_defaults(
            &[
                ("::", Unspecified),
                ("fe80::", LinkLocal),
                ("fe80::1", LinkLocal),
                ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", LinkLocal),
                ("ff00::", Multicast),
                ("ff02::1", Multicast),
                ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Multicast),
            ],
            &[
                "::1",
                "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "fec0::",
                "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "fd00::1",
                "2001:db8::1",
            ],
        );
    }

    /// Every fixed metadata address is refused, in every spelling the classifier
    /// reads as that address; the addresses next to each are not.
    #[test]
    fn the_default_refuses_each_cloud_metadata_address_and_nothing_next_to_it() {
        use ReservedRange::CloudMetadata;
        assert_defaults(
            &[
                // Alibaba Cloud, then Azure WireServer, with their IPv4-mapped (dotted
                // and hex) and IPv4-compatible forms.
                ("100.100.100.200", CloudMetadata),
                ("::ffff:100.100.100.200", CloudMetadata),
                ("::ffff:6464:64c8", CloudMetadata),
                ("::100.100.100.200", CloudMetadata),
                ("168.63.129.16", CloudMetadata),
                ("::ffff:168.63.129.16", CloudMetadata),
                ("::ffff:a83f:8110", CloudMetadata),
                ("::168.63.129.16", CloudMetadata),
                // AWS IMDS and EKS Pod Identity, long, upper-case and dotted-tail forms.
                ("fd00:ec2::254", CloudMetadata),
                ("FD00:EC2::254", CloudMetadata),
                ("fd00:0ec2:0000:0000:0000:0000:0000:0254", CloudMetadata),
                ("fd00:ec2::0.0.2.84", CloudMetadata),
                ("fd00:ec2::23", CloudMetadata),
                ("fd20:ce::254", CloudMetadata),
                ("fd20:ce:0:0:0:0:0:254", CloudMetadata),
                ("fd00:c1::a9fe:a9fe", CloudMetadata),
                ("fd00:c1::169.254.169.254", CloudMetadata),
                ("fd00:100::100:200", CloudMetadata),
                ("fd00:42::42", CloudMetadata),
                ("fd00:a9fe:a9fe::1", CloudMetadata),
            ],
            &[
                // The rest of the shared address space (100.64.0.0/10) stays allowed.
                "100.64.0.1",
                "100.100.100.100",
                "100.100.100.199",
                "100.100.100.201",
                "168.63.129.15",
                "168.63.129.17",
                "::ffff:168.63.129.17",
                // AWS's IPv6 DNS resolver and NTP server are not HTTP services.
                "fd00:ec2::253",
                "fd00:ec2::123",
                "fd00:ec2::22",
                "fd00:ec2::24",
                "fd00:ec2::255",
                "fd00:ec2:0:1::254",
                "fd20:ce::253",
                "fd20:ce::255",
                "fd00:c1::a9fe:a9fd",
                "fd00:100::100:201",
                "fd00:42::43",
                "fd00:a9fe:a9fe::2",
            ],
        );
    }

    #[test]
    fn check_host_refuses_every_spelling_of_a_metadata_host() {
        let policy = EndpointPolicy::new();
        let metadata = Err(Refusal::Reserved(ReservedRange::CloudMetadata));
        for host in [
            "100.100.100.200",
            "[::ffff:100.100.100.200]",
            "[::ffff:6464:64c8]",
            "[::100.100.100.200]",
            "168.63.129.16",
            "[::ffff:168.63.129.16]",
            "[fd00:ec2::254]",
            "[FD00:EC2::254]",
            "[fd00:ec2::0.0.2.84]",
            "[fd00:ec2::23]",
            "[fd20:ce::254]",
            "[fd00:c1::a9fe:a9fe]",
            "[fd00:100::100:200]",
            "[fd00:42::42]",
            "[fd00:a9fe:a9fe::1]",
        ] {
            assert_eq!(policy.check_host(host), metadata, "{host}");
        }
        // Decimal, hex, octal and short (`a.b.c`, `a.b`) forms, as `inet_aton` reads
        // them: refused before any lookup, like every numeric host.
        for host in [
            "1684301000",
            "0x646464c8",
            "0144.0144.0144.0310",
            "0x64.0x64.0x64.0xc8",
            "100.100.25800",
            "100.6579400",
            "2822734096",
            "0xa83f8110",
            "0250.077.0201.020",
            "168.63.33040",
            "168.4161808",
        ] {
            assert_eq!(policy.check_host(host), Err(Refusal::NumericHost), "{host}");
        }
    }

    /// Only an allow rule naming a metadata address itself opens it; a wider block
    /// holding it, the whole address space or a host rule does not, and a deny rule
    /// still wins.
    #[test]
    fn only_an_allow_rule_for_the_metadata_address_itself_opens_it() {
        let metadata = Err(Refusal::Reserved(ReservedRange::CloudMetadata));
        let wide = EndpointPolicy::new().allow(rules(&[
            "100.64.0.0/10",
            "168.63.0.0/16",
            "fd00::/8",
            "0.0.0.0/0",
            "::/0",
            "metadata.internal",
        ]));
        for address in ["100.100.100.200", "168.63.129.16", "fd00:ec2::254"] {
            assert_eq!(wide.check_address(None, ip(address)), metadata, "{address}");
        }
        assert_eq!(
            wide.check_address(Some("metadata.internal"), ip("fd20:ce::254")),
            metadata
        );
        assert_eq!(wide.check_address(None, ip("100.100.100.201")), Ok(()));

        let exact = EndpointPolicy::new().allow(rules(&["168.63.129.16", "[fd00:ec2::254]"]));
        assert_eq!(exact.check_address(None, ip("168.63.129.16")), Ok(()));
        assert_eq!(
            exact.check_address(None, ip("::ffff:168.63.129.16")),
            Ok(())
        );
        assert_eq!(exact.check_address(None, ip("fd00:ec2::254")), Ok(()));
        assert_eq!(exact.check_address(None, ip("fd00:ec2::23")), metadata);
        assert_eq!(exact.check_address(None, ip("100.100.100.200")), metadata);

        let denied = exact.deny(rules(&["168.63.129.16"]));
        assert_eq!(
            denied.check_address(None, ip("168.63.129.16")),
            Err(Refusal::Denied)
        );
    }

    #[test]
    fn mapped_and_compatible_ipv6_forms_are_classified_by_their_ipv4_address() {
        use ReservedRange::*;
        assert_defaults(
            &[
                ("::ffff:169.254.169.254", LinkLocal),
                ("::ffff:a9fe:a9fe", LinkLocal),
                ("::169.254.169.254", LinkLocal),
                ("::ffff:0.0.0.0", Unspecified),
                ("::ffff:224.0.0.1", Multicast),
                ("::ffff:255.255.255.255", Broadcast),
                ("::255.255.255.255", Broadcast),
                ("::0.0.0.2", Unspecified),
            ],
            &["::ffff:127.0.0.1", "::127.0.0.1", "::ffff:10.0.0.1"],
        );
        // `::` and `::1` are IPv6's own unspecified and loopback addresses.
        assert_eq!(canonical(ip("::")), ip("::"));
        assert_eq!(canonical(ip("::1")), ip("::1"));
        assert_eq!(canonical(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical(ip("::1.2.3.4")), ip("1.2.3.4"));
    }

    #[test]
    fn cidr_rules_match_their_block_edges_only() {
        let policy = EndpointPolicy::new().deny(rules(&["10.0.0.0/8", "fd00::/8", "127.0.0.2"]));
        for denied in [
            "10.0.0.0",
            "10.255.255.255",
            "fd00::",
            "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "127.0.0.2",
            "::ffff:10.1.2.3",
        ] {
            assert_eq!(
                policy.check_address(None, ip(denied)),
                Err(Refusal::Denied),
                "{denied}"
            );
        }
        for allowed in [
            "9.255.255.255",
            "11.0.0.0",
            "fc00::",
            "fe00::",
            "127.0.0.1",
            "127.0.0.3",
        ] {
            assert_eq!(policy.check_address(None, ip(allowed)), Ok(()), "{allowed}");
        }
    }

    #[test]
    fn zero_length_prefixes_match_one_family_only() {
        let v4 = EndpointPolicy::new().deny(rules(&["0.0.0.0/0"]));
        assert_eq!(
            v4.check_address(None, ip("192.0.2.1")),
            Err(Refusal::Denied)
        );
        assert_eq!(v4.check_address(None, ip("2001:db8::1")), Ok(()));
        let v6 = EndpointPolicy::new().deny(rules(&["::/0"]));
        assert_eq!(
            v6.check_address(None, ip("2001:db8::1")),
            Err(Refusal::Denied)
        );
        // A mapped address is IPv4: IPv6 rules never match it.
        assert_eq!(v6.check_address(None, ip("::ffff:192.0.2.1")), Ok(()));
    }

    #[test]
    fn a_non_empty_allow_list_allows_only_what_it_matches() {
        let policy = EndpointPolicy::new().allow(rules(&["10.0.0.0/8", "node.internal"]));
        assert_eq!(policy.check_address(None, ip("10.9.9.9")), Ok(()));
        assert_eq!(
            policy.check_address(None, ip("192.0.2.1")),
            Err(Refusal::NotAllowed)
        );
        assert_eq!(
            policy.check_address(Some("node.internal"), ip("192.0.2.1")),
            Ok(())
        );
        assert_eq!(
            policy.check_address(Some("other.internal"), ip("192.0.2.1")),
            Err(Refusal::NotAllowed)
        );
        assert_eq!(
            policy.check_address(None, ip("::1")),
            Err(Refusal::NotAllowed)
        );
    }

    #[test]
    fn deny_wins_over_allow() {
        let policy = EndpointPolicy::new()
            .allow(rules(&["10.0.0.0/8", "*.internal"]))
            .deny(rules(&["10.1.0.0/16", "bad.internal"]));
        assert_eq!(
            policy.check_address(None, ip("10.1.0.1")),
            Err(Refusal::Denied)
        );
        assert_eq!(
            policy.check_address(Some("bad.internal"), ip("10.2.0.1")),
            Err(Refusal::Denied)
        );
        // An allowed name resolving to a denied address is refused.
        assert_eq!(
            policy.check_address(Some("good.internal"), ip("10.1.0.1")),
            Err(Refusal::Denied)
        );
        assert_eq!(
            policy.check_address(Some("good.internal"), ip("10.2.0.1")),
            Ok(())
        );
    }

    #[test]
    fn an_allow_cidr_inside_a_reserved_range_opens_it_and_nothing_else_does() {
        let opened = EndpointPolicy::new().allow(rules(&["169.254.10.0/24", "fe80::/64"]));
        assert_eq!(opened.check_address(None, ip("169.254.10.7")), Ok(()));
        assert_eq!(
            opened.check_address(None, ip("::ffff:169.254.10.7")),
            Ok(())
        );
        assert_eq!(opened.check_address(None, ip("fe80::7")), Ok(()));
        assert_eq!(
            opened.check_address(None, ip("169.254.169.254")),
            Err(Refusal::Reserved(ReservedRange::LinkLocal))
        );

        // A wide rule allows everything it contains except the reserved ranges.
        let wide = EndpointPolicy::new().allow(rules(&["0.0.0.0/0", "::/0"]));
        assert_eq!(wide.check_address(None, ip("192.0.2.1")), Ok(()));
        assert_eq!(
            wide.check_address(None, ip("169.254.169.254")),
            Err(Refusal::Reserved(ReservedRange::LinkLocal))
        );
        assert_eq!(
            wide.check_address(None, ip("::")),
            Err(Refusal::Reserved(ReservedRange::Unspecified))
        );

        // A host rule never opens a reserved range.
        let by_name = EndpointPolicy::new().allow(rules(&["metadata.internal"]));
        assert_eq!(
            by_name.check_address(Some("metadata.internal"), ip("169.254.169.254")),
            Err(Refusal::Reserved(ReservedRange::LinkLocal))
        );

        // The whole range named explicitly opens it; a deny still wins.
        let whole = EndpointPolicy::new()
            .allow(rules(&["255.255.255.255/32", "169.254.0.0/16"]))
            .deny(rules(&["169.254.169.254"]));
        assert_eq!(whole.check_address(None, ip("255.255.255.255")), Ok(()));
        assert_eq!(whole.check_address(None, ip("169.254.1.1")), Ok(()));
        assert_eq!(
            whole.check_address(None, ip("169.254.169.254")),
            Err(Refusal::Denied)
        );
    }

    #[test]
    fn host_rules_match_names_exactly_or_below_a_wildcard_ignoring_case_and_a_trailing_dot() {
        let exact = rule("Node-7.Internal.");
        for host in ["node-7.internal", "NODE-7.INTERNAL", "node-7.internal."] {
            assert!(exact.matches_name(host), "{host}");
        }
        for host in ["a.node-7.internal", "node-7.internal.evil", "node-7", ""] {
            assert!(!exact.matches_name(host), "{host}");
        }

        let below = rule("*.nodes.internal");
        for host in [
            "a.nodes.internal",
            "a.b.NODES.internal",
            "a.nodes.internal.",
        ] {
            assert!(below.matches_name(host), "{host}");
        }
        for host in [
            "nodes.internal",
            "anodes.internal",
            ".nodes.internal",
            "ä.nodes",
        ] {
            assert!(!below.matches_name(host), "{host}");
        }
        // Host rules never match an IP-literal host, only CIDR rules do.
        assert!(!rule("localhost").matches(None, ip("127.0.0.1")));
    }

    #[test]
    fn check_host_decides_literals_fully_and_names_as_far_as_names_go() {
        let policy = EndpointPolicy::new().deny(rules(&["localhost", "127.0.0.2"]));
        assert_eq!(policy.check_host("localhost"), Err(Refusal::Denied));
        assert_eq!(policy.check_host("LOCALHOST."), Err(Refusal::Denied));
        assert_eq!(policy.check_host("127.0.0.2"), Err(Refusal::Denied));
        assert_eq!(policy.check_host("127.0.0.1"), Ok(()));
        assert_eq!(policy.check_host("node.internal"), Ok(()));
        assert_eq!(
            policy.check_host("[fe80::1]"),
            Err(Refusal::Reserved(ReservedRange::LinkLocal))
        );
        assert_eq!(
            policy.check_host("[::ffff:169.254.169.254]"),
            Err(Refusal::Reserved(ReservedRange::LinkLocal))
        );
        assert_eq!(policy.check_host("[::1]"), Ok(()));
        for numeric in [
            "2852039166",
            "0xa9fea9fe",
            "0XA9FEA9FE",
            "127.1",
            "10.0.0.0x1",
            "1.",
        ] {
            assert_eq!(
                policy.check_host(numeric),
                Err(Refusal::NumericHost),
                "{numeric}"
            );
        }
        for name in ["10.0.0.1.nip.io", "0xnode", "x10", "node-1"] {
            assert_eq!(policy.check_host(name), Ok(()), "{name}");
        }

        // An allow list of names only refuses every other name before resolution.
        let names = EndpointPolicy::new().allow(rules(&["*.nodes.internal"]));
        assert_eq!(names.check_host("a.nodes.internal"), Ok(()));
        assert_eq!(names.check_host("other.internal"), Err(Refusal::NotAllowed));
        // With a CIDR on it, any name may resolve into the block: decided per address.
        let cidrs = names.allow(rules(&["10.0.0.0/8"]));
        assert_eq!(cidrs.check_host("other.internal"), Ok(()));
    }

    #[test]
    fn rules_parse_to_their_canonical_form() {
        for (text, canonical) in [
            ("10.0.0.0/8", "10.0.0.0/8"),
            (" 127.0.0.2 ", "127.0.0.2/32"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("::1", "::1/128"),
            ("[::1]", "::1/128"),
            ("fd00::/8", "fd00::/8"),
            ("::/0", "::/0"),
            ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
            ("::ffff:169.254.169.254", "169.254.169.254/32"),
            ("::ffff:0:0/96", "0.0.0.0/0"),
            ("localhost", "localhost"),
            ("Node_7.Internal.", "node_7.internal"),
            ("*.Nodes.internal", "*.nodes.internal"),
            ("10.0.0.1.nip.io", "10.0.0.1.nip.io"),
        ] {
            assert_eq!(rule(text).to_string(), canonical, "{text:?}");
        }
    }

    #[test]
    fn bad_rules_are_refused_with_their_reason() {
        use RuleReason::*;
        for (text, expected) in [
            ("", Empty),
            ("  ", Empty),
            ("10.0.0.0/33", BadPrefix { max: 32 }),
            ("::/129", BadPrefix { max: 128 }),
            ("10.0.0.0/", BadPrefix { max: 32 }),
            ("10.0.0.0/+8", BadPrefix { max: 32 }),
            ("10.0.0.0/8/8", BadPrefix { max: 32 }),
            ("10.0.0.0/x", BadPrefix { max: 32 }),
            ("10.0.0.0/-1", BadPrefix { max: 32 }),
            ("10.0.0.0/300", BadPrefix { max: 32 }),
            ("10.0.0.256/32", NotAnAddress),
            ("10.0.0/8", NotAnAddress),
            ("node/8", NotAnAddress),
            ("/8", NotAnAddress),
            ("[10.0.0.1]/8", NotAnAddress),
            (
                "10.0.0.1/8",
                HostBits {
                    network: ip("10.0.0.0"),
                    prefix: 8,
                },
            ),
            (
                "fd00::1/8",
                HostBits {
                    network: ip("fd00::"),
                    prefix: 8,
                },
            ),
            ("node.internal:8080", Port),
            ("10.0.0.1:80", Port),
            ("a.*.internal", Wildcard),
            ("*", Wildcard),
            ("*.", Wildcard),
            ("*node.internal", Wildcard),
            ("10.0.0.256", NotAName),
            ("10.0.0", NotAName),
            ("node..internal", NotAName),
            (".internal", NotAName),
            ("node internal", NotAName),
            ("nöde.internal", NotAName),
        ] {
            assert_eq!(reason(text), expected, "{text:?}");
        }
        let long_label = format!("{}.internal", "a".repeat(64));
        assert_eq!(reason(&long_label), NotAName);
    }

    #[test]
    fn a_rule_error_names_the_entry_and_the_reason() {
        let error = "10.0.0.1/8".parse::<EndpointRule>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid kick-endpoint rule \"10.0.0.1/8\": host bits are set; the block is 10.0.0.0/8"
        );
    }

    #[test]
    fn refusals_name_the_rule_not_the_endpoint() {
        assert_eq!(
            Refusal::Reserved(ReservedRange::LinkLocal).to_string(),
            "a link-local address, refused by default"
        );
        assert_eq!(
            Refusal::Reserved(ReservedRange::CloudMetadata).to_string(),
            "a cloud metadata address, refused by default"
        );
        assert_eq!(
            Refusal::Denied.to_string(),
            "matches the kick-endpoint deny list"
        );
        assert_eq!(
            Refusal::NotAllowed.to_string(),
            "not on the kick-endpoint allow list"
        );
        assert_eq!(
            Refusal::NumericHost.to_string(),
            "a numeric host that is not a dotted-quad or IPv6 address"
        );
    }
}
