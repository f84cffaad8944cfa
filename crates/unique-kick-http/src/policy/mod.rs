//! The kick-endpoint policy (`docs/design.md#kick-endpoint-policy`): which hosts and
//! addresses a kick may be sent to. Pure, so every branch has a unit test; the
//! kicker applies it before connecting to an IP literal and, through its resolver,
//! to every address a host name resolves to.

mod address;
mod reserved;
mod rule;

use std::net::IpAddr;

pub use self::reserved::ReservedRange;
pub use self::rule::{EndpointRule, RuleError};

use self::address::{canonical, ip_literal, numeric_name, strip_brackets};
use self::reserved::RESERVED;

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

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn rule(text: &str) -> EndpointRule {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
    }

    pub(super) fn rules(texts: &[&str]) -> Vec<EndpointRule> {
        texts.iter().map(|t| rule(t)).collect()
    }

    pub(super) fn ip(text: &str) -> IpAddr {
        text.parse().expect("an ip address")
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
