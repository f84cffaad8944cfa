//! Input validation, run by the [`Arbiter`](crate::Arbiter) before any store call.
//!
//! Error messages name the field and the rule, never the offending value, so an
//! endpoint's query string (which may hold a secret) is never echoed.
//!
//! Lengths count characters (Unicode scalar values), as JSON Schema's `maxLength` does, so
//! `docs/openapi.yaml` states them exactly. A character is at most 4 bytes in UTF-8: the
//! stores' byte limits are sized for 4 × these (see docs/design.md, "Wire contract").

use crate::error::Error;
use crate::types::{Key, Owner, UserKey};

/// The most characters of an admin logout's `reason` ([`LogoutInput::reason`](crate::LogoutInput)):
/// free text for the user, carried to the node in the kick's `message`. Short, so a kick
/// stays far below a receiver's 4 KiB body limit (at most 1 KiB of UTF-8) and a node holds
/// little of it.
pub const MAX_LOGOUT_REASON_CHARS: usize = 256;

/// The most characters of a node id (`owner.node`, the `{node}` of the kick-stream routes).
pub const MAX_NODE_ID_CHARS: usize = 64;

/// The owner rule's message when a claiming owner names both or neither of endpoint and node.
pub const OWNER_TARGET_RULE: &str = "owner must have exactly one of endpoint and node";

/// Checks a node id: 1..=[`MAX_NODE_ID_CHARS`] characters of `A-Z a-z 0-9 . _ -`, so it
/// is safe as one URL path segment unescaped. The message names the rule, never the value.
///
/// # Errors
///
/// `InvalidParams` naming the rule.
pub fn check_node_id(node: &str) -> Result<(), Error> {
    let ok = (1..=MAX_NODE_ID_CHARS).contains(&node.len())
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "node must be 1 to {MAX_NODE_ID_CHARS} characters of A-Z a-z 0-9 . _ -"
        )))
    }
}

/// Length limits, in characters (Unicode scalar values). Defaults: tenant 64, claim_id 128,
/// endpoint 2048.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidationLimits {
    /// Max characters of `project`, `env`, `slot`, `owner.region` and `owner.cluster`.
    pub tenant: usize,
    /// Max characters of `claim_id`.
    pub claim_id: usize,
    /// Max characters of `owner.endpoint` (ASCII in practice: a URL the kicker can send to).
    pub endpoint: usize,
}

impl Default for ValidationLimits {
    fn default() -> Self {
        Self {
            tenant: 64,
            claim_id: 128,
            endpoint: 2048,
        }
    }
}

impl ValidationLimits {
    /// Checks a key: project and env 1..=tenant characters without `#` or control
    /// characters, uid ≥ 1, slot empty (the default slot), like env, or a pool place
    /// (`#0` to `#999`, [`place_index`](crate::place_index)): places name existing pooled
    /// sessions, and only a claim refuses them (a pooled claim picks its place).
    pub fn check_key(&self, key: &Key) -> Result<(), Error> {
        self.check_user_parts(&key.project, &key.env, key.uid)?;
        if !key.slot.is_empty() && crate::place_index(&key.slot).is_none() {
            self.check_tenant_part("slot", &key.slot)?;
        }
        Ok(())
    }

    /// Checks a user key: project, env and uid as [`check_key`](Self::check_key) does.
    pub fn check_user(&self, user: &UserKey) -> Result<(), Error> {
        self.check_user_parts(&user.project, &user.env, user.uid)
    }

    fn check_user_parts(&self, project: &str, env: &str, uid: i64) -> Result<(), Error> {
        self.check_tenant_part("project", project)?;
        self.check_tenant_part("env", env)?;
        if uid < 1 {
            return Err(Error::invalid("uid must be >= 1"));
        }
        Ok(())
    }

    /// Checks a claim_id: 1..=claim_id characters, no control characters.
    pub fn check_claim_id(&self, claim_id: &str) -> Result<(), Error> {
        check_len("claim_id", claim_id, 1, self.claim_id)?;
        check_no_control("claim_id", claim_id)
    }

    /// Checks a claiming owner: region and cluster 0..=tenant characters without
    /// control characters; exactly one of endpoint and node ([`OWNER_TARGET_RULE`]);
    /// an endpoint an absolute http(s) URL with a host, 1..=endpoint characters, no
    /// control characters or whitespace; a node as [`check_node_id`] says.
    pub fn check_owner(&self, owner: &Owner) -> Result<(), Error> {
        check_len("owner.region", &owner.region, 0, self.tenant)?;
        check_no_control("owner.region", &owner.region)?;
        check_len("owner.cluster", &owner.cluster, 0, self.tenant)?;
        check_no_control("owner.cluster", &owner.cluster)?;
        match (owner.endpoint.is_empty(), owner.node.is_empty()) {
            (false, true) => {
                check_len("owner.endpoint", &owner.endpoint, 1, self.endpoint)?;
                check_endpoint(&owner.endpoint)
            }
            (true, false) => check_node_id(&owner.node),
            _ => Err(Error::invalid(OWNER_TARGET_RULE)),
        }
    }

    /// Checks an admin logout's reason: 1..=[`MAX_LOGOUT_REASON_CHARS`] characters, no control
    /// characters (it reaches a node's logs and a user's screen; omit it rather than send
    /// it empty). The message names the rule, never the text.
    pub fn check_logout_reason(&self, reason: &str) -> Result<(), Error> {
        check_len("reason", reason, 1, MAX_LOGOUT_REASON_CHARS)?;
        check_no_control("reason", reason)
    }

    fn check_tenant_part(&self, field: &str, value: &str) -> Result<(), Error> {
        check_len(field, value, 1, self.tenant)?;
        check_no_control(field, value)?;
        if value.contains('#') {
            return Err(Error::invalid(format!("{field} must not contain '#'")));
        }
        Ok(())
    }
}

fn check_len(field: &str, value: &str, min: usize, max: usize) -> Result<(), Error> {
    // `min` is 0 or 1, where bytes and characters agree.
    if value.len() < min {
        return Err(Error::invalid(format!("{field} must not be empty")));
    }
    // A text has at most as many characters as bytes: only a long one needs counting.
    if value.len() > max && value.chars().count() > max {
        return Err(Error::invalid(format!(
            "{field} must be at most {max} characters"
        )));
    }
    Ok(())
}

fn check_no_control(field: &str, value: &str) -> Result<(), Error> {
    // Fast path: printable ASCII (nearly every real value) has no control character,
    // and a byte scan is far cheaper than decoding chars.
    if value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Ok(());
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "{field} must not contain control characters"
        )));
    }
    Ok(())
}

/// An absolute URL with scheme `http` or `https` (ASCII case-insensitive) and a
/// non-empty host. Deliberately small: the kicker's HTTP client does the full parse.
fn check_endpoint(endpoint: &str) -> Result<(), Error> {
    // Visible ASCII (0x21..0x7f) has neither; only other bytes need the char walk.
    let visible_ascii = endpoint.bytes().all(|b| (0x21..0x7f).contains(&b));
    if !visible_ascii
        && endpoint
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(Error::invalid(
            "owner.endpoint must not contain control characters or whitespace",
        ));
    }
    let rest = strip_prefix_ignore_case(endpoint, "http://")
        .or_else(|| strip_prefix_ignore_case(endpoint, "https://"))
        .ok_or_else(|| Error::invalid("owner.endpoint must be an absolute http or https url"))?;
    // On bytes: every delimiter is ASCII, and a byte search is a fraction of a `char`
    // pattern's cost on every claim.
    let rest = rest.as_bytes();
    let authority = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .map_or(rest, |end| &rest[..end]);
    let host_port = authority
        .iter()
        .rposition(|&b| b == b'@')
        .map_or(authority, |at| &authority[at + 1..]);
    let no_host = if host_port.first() == Some(&b'[') {
        // IPv6 literal: the host is everything up to the closing bracket.
        host_port
            .iter()
            .position(|&b| b == b']')
            .is_none_or(|end| end == 1)
    } else {
        // The host ends at the port's colon.
        host_port.first().is_none_or(|&b| b == b':')
    };
    if no_host {
        return Err(Error::invalid("owner.endpoint must have a host"));
    }
    Ok(())
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint_ok(e: &str) -> bool {
        check_endpoint(e).is_ok()
    }

    #[test]
    fn endpoint_shapes() {
        for ok in [
            "http://h",
            "https://h:8443/kick?token=s",
            "HTTP://h/",
            "http://user@h/x",
            "http://[::1]:9/k",
        ] {
            assert!(endpoint_ok(ok), "{ok}");
        }
        for bad in [
            "",
            "h/kick",
            "/kick",
            "ftp://h/",
            "http://",
            "http:///x",
            "http://:80/",
            "http://[]/",
            "http://h /x",
            "http://h/\tx",
            "mailto:x@h",
        ] {
            assert!(!endpoint_ok(bad), "{bad}");
        }
    }

    #[test]
    fn logout_reasons() {
        let limits = ValidationLimits::default();
        for ok in [
            "abuse",
            "é",
            &"x".repeat(MAX_LOGOUT_REASON_CHARS),
            "a b\u{2028}",
            // Characters, not bytes: 256 of them pass however many bytes they take.
            &format!("{}é", "x".repeat(MAX_LOGOUT_REASON_CHARS - 1)),
            &"\u{1F600}".repeat(MAX_LOGOUT_REASON_CHARS),
        ] {
            assert!(limits.check_logout_reason(ok).is_ok(), "{ok:?}");
        }
        for (bad, rule) in [
            ("", "reason must not be empty"),
            (
                &*"x".repeat(MAX_LOGOUT_REASON_CHARS + 1),
                "reason must be at most 256 characters",
            ),
            (
                &*format!("{}é", "x".repeat(MAX_LOGOUT_REASON_CHARS)),
                "at most 256 characters",
            ),
            (
                &*"\u{1F600}".repeat(MAX_LOGOUT_REASON_CHARS + 1),
                "at most 256 characters",
            ),
            ("line\nbreak", "reason must not contain control characters"),
            ("tab\t", "control characters"),
            ("del\u{7f}", "control characters"),
            ("c1\u{85}", "control characters"),
        ] {
            let e = limits.check_logout_reason(bad).unwrap_err();
            assert!(
                e.is_invalid_params() && e.to_string().contains(rule),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn slots_are_checked_like_env_but_may_be_empty() {
        let limits = ValidationLimits::default();
        let key = |slot: &str| Key::new("p", "e", 1).with_slot(slot);
        for ok in [
            "",
            "mobile",
            "pc-2",
            "é",
            &"s".repeat(64),
            &"é".repeat(64),
            "#0",
            "#999",
        ] {
            assert!(limits.check_key(&key(ok)).is_ok(), "{ok:?}");
        }
        for (bad, rule) in [
            (&*"s".repeat(65), "slot must be at most 64 characters"),
            (&*"é".repeat(65), "slot must be at most 64 characters"),
            ("a#b", "slot must not contain '#'"),
            ("#", "slot must not contain '#'"),
            ("#01", "slot must not contain '#'"),
            ("#1000", "slot must not contain '#'"),
            ("##1", "slot must not contain '#'"),
            ("tab\t", "slot must not contain control characters"),
            ("c1\u{85}", "slot must not contain control characters"),
        ] {
            let e = limits.check_key(&key(bad)).unwrap_err();
            assert!(
                e.is_invalid_params() && e.to_string().contains(rule),
                "{bad:?}: {e}"
            );
        }
        assert!(limits.check_user(&UserKey::new("p", "e", 1)).is_ok());
        for (user, rule) in [
            (UserKey::new("", "e", 1), "project must not be empty"),
            (UserKey::new("p", "e#", 1), "env must not contain '#'"),
            (UserKey::new("p", "e", 0), "uid must be >= 1"),
        ] {
            let e = limits.check_user(&user).unwrap_err();
            assert!(e.to_string().contains(rule), "{user:?}: {e}");
        }
    }

    /// The host rule as it was written on `str` before the byte search, kept to hold the
    /// byte version to it.
    fn has_host_by_str(rest: &str) -> bool {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host_port = authority.rsplit('@').next().unwrap_or_default();
        let host = if host_port.starts_with('[') {
            host_port.find(']').map_or("", |end| &host_port[1..end])
        } else {
            host_port.split(':').next().unwrap_or_default()
        };
        !host.is_empty()
    }

    #[test]
    fn the_host_rule_on_bytes_is_the_rule_on_str() {
        // Every text of up to five characters over the delimiters and two host characters.
        let alphabet = ['a', '@', ':', '[', ']', '/', '?', '#', 'é'];
        let mut texts = vec![String::new()];
        let mut start = 0;
        for _ in 0..5 {
            let end = texts.len();
            for i in start..end {
                for c in alphabet {
                    let mut longer = texts[i].clone();
                    longer.push(c);
                    texts.push(longer);
                }
            }
            start = end;
        }
        for rest in &texts {
            let endpoint = format!("http://{rest}");
            assert_eq!(endpoint_ok(&endpoint), has_host_by_str(rest), "{endpoint}");
        }
    }

    #[test]
    fn endpoint_error_never_echoes_value() {
        let e = check_endpoint("ftp://h/?secret=hunter2").unwrap_err();
        assert!(!e.to_string().contains("hunter2"));
    }
}
