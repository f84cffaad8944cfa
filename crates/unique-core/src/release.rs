//! Why a node released a session: [`ReleaseReason`], the optional `reason` of a release.

use std::fmt;

use crate::error::Error;

/// The most bytes of a release's `reason` on the wire.
pub const MAX_RELEASE_REASON_BYTES: usize = 32;

/// Why a node released a session, told to the server with the release so that it can count
/// and audit it (`docs/design.md#current-and-release`). A release without one is a plain
/// logout, as before the field.
///
/// On the wire a reason is a token: 1 to [`MAX_RELEASE_REASON_BYTES`] bytes of lower-case
/// ASCII letters, digits and `-`, starting with a letter. The server knows the names below;
/// a well-formed name it does not know (a newer node's) is read as no reason at all, so a
/// node may name a reason before its servers know it, while anything else is refused as
/// invalid. Only the known names are counted and recorded, which keeps the metric's labels
/// and the audit log's values a fixed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReleaseReason {
    /// `node-draining`: the node is draining for a deploy and hands every key back.
    NodeDraining,
}

impl ReleaseReason {
    /// Every reason this version knows, in a fixed order.
    pub const ALL: [Self; 1] = [Self::NodeDraining];

    /// What a reason must be, for error messages (after the field's name).
    pub const RULE: &'static str = "must be a token of 1 to 32 lower-case letters, digits and \
         '-', starting with a letter (known: node-draining)";

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NodeDraining => "node-draining",
        }
    }

    /// Reads a wire name: `Ok(Some(_))` for a known name, `Ok(None)` for a well-formed name
    /// this version does not know (read as no reason).
    ///
    /// # Errors
    ///
    /// `InvalidParams` for a name that is not a token (empty, longer than
    /// [`MAX_RELEASE_REASON_BYTES`], or holding anything but lower-case ASCII letters, digits
    /// and `-` after a leading letter). The message never echoes the value.
    pub fn from_wire(name: &str) -> Result<Option<Self>, Error> {
        let well_formed = name.len() <= MAX_RELEASE_REASON_BYTES
            && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !well_formed {
            return Err(Error::invalid(format!("reason {}", Self::RULE)));
        }
        Ok(Self::ALL.into_iter().find(|known| known.as_str() == name))
    }
}

impl fmt::Display for ReleaseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_names_read_back() {
        for reason in ReleaseReason::ALL {
            assert_eq!(
                ReleaseReason::from_wire(reason.as_str()).unwrap(),
                Some(reason)
            );
        }
    }

    #[test]
    fn well_formed_unknown_names_read_as_none() {
        let longest = format!("a{}", "-".repeat(MAX_RELEASE_REASON_BYTES - 1));
        for name in ["node-shutdown", "x", "a1-b2", longest.as_str()] {
            assert_eq!(ReleaseReason::from_wire(name).unwrap(), None, "{name:?}");
        }
    }

    #[test]
    fn malformed_names_are_invalid() {
        let long = "a".repeat(MAX_RELEASE_REASON_BYTES + 1);
        for name in [
            "",
            "Node-draining",
            "1node",
            "-node",
            "node draining",
            "nöde",
            &long,
        ] {
            let error = ReleaseReason::from_wire(name).unwrap_err();
            assert!(
                matches!(error, Error::InvalidParams(_)),
                "{name:?}: {error:?}"
            );
            assert!(
                error.to_string().contains("reason must be a token"),
                "{error}"
            );
        }
    }
}
