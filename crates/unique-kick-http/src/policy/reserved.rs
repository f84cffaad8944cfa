//! The default refusals: the [`ReservedRange`]s and the fixed table of blocks and cloud
//! metadata addresses each is made of.

use std::fmt;

use super::address::Cidr;

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

/// A range refused by default.
pub(super) struct Reserved {
    pub(super) block: Cidr,
    pub(super) kind: ReservedRange,
}

/// Checked in order; no two blocks overlap. The cloud metadata addresses are those
/// documented as fixed by their provider (SECURITY.md lists each with its source).
pub(super) const RESERVED: [Reserved; 16] = [
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

#[cfg(test)]
mod tests {
    use super::super::address::canonical;
    use super::super::tests::ip;
    use super::super::{EndpointPolicy, Refusal};
    use super::*;

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
}
