//! The entries of the allow and deny lists: [`EndpointRule`], how one matches a host
//! or an address, and how one is parsed ([`RuleError`] when it does not).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use super::address::{Cidr, ip_literal, strip_brackets};
use super::reserved::Reserved;

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
    pub(super) fn is_cidr(&self) -> bool {
        matches!(self.0, Rule::Cidr(_))
    }

    /// `address` is canonical; `host` is `None` for an IP literal.
    pub(super) fn matches(&self, host: Option<&str>, address: IpAddr) -> bool {
        match &self.0 {
            Rule::Cidr(block) => block.contains(address),
            Rule::Host { .. } => host.is_some_and(|host| self.matches_name(host)),
        }
    }

    pub(super) fn matches_name(&self, host: &str) -> bool {
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
    pub(super) fn opens(&self, range: &Reserved, address: IpAddr) -> bool {
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
pub(super) enum RuleReason {
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

#[cfg(test)]
mod tests {
    use super::super::tests::{ip, rule};
    use super::*;

    fn reason(text: &str) -> RuleReason {
        match text.parse::<EndpointRule>() {
            Ok(rule) => panic!("{text:?} parsed as {rule}"),
            Err(e) => e.reason,
        }
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
}
