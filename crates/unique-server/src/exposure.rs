//! Which security settings a listening address demands, decided before the socket is bound.
//!
//! Loopback is served with any settings. A non-loopback address is exposed to other hosts,
//! so the binary wants callers authenticated (`--auth-tokens`) and, once they are, kicks
//! signed (`--kick-signing-keys`): the nodes' kick receivers sit on the same network as the
//! server's callers, and a receiver can only tell the server's kicks apart from anyone's
//! POSTs by their signature. Each guard can be waived with its `--insecure-*` flag.
//!
//! | non-loopback, with | outcome |
//! |---|---|
//! | tokens and signing keys | served |
//! | tokens, no keys | refused, unless `--insecure-unsigned-kicks` (then served, with a warning) |
//! | no tokens | refused, unless `--insecure-no-auth` |
//! | `--insecure-no-auth`, no keys | served, warning that callers and kicks are both unauthenticated |
//! | `--no-sessions` (no kicks at all) | served with tokens; with `--insecure-no-auth`, warning about callers only |
//!
//! `--insecure-no-auth` alone is enough: its operator has already said every host that can
//! reach the server is trusted, and asking for a second waiver would protect nothing (any
//! such host can claim a key, which kicks its session just as a forged kick would).

use std::net::SocketAddr;

/// How callers are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auth {
    /// `--auth-tokens`.
    Tokens,
    /// `--insecure-no-auth`: the operator says every host that can reach the server is trusted.
    Waived,
    /// Neither.
    Off,
}

impl Auth {
    /// From the flags (clap keeps the two from being given together).
    pub(crate) fn of(tokens: bool, insecure_no_auth: bool) -> Self {
        match (tokens, insecure_no_auth) {
            (true, _) => Self::Tokens,
            (false, true) => Self::Waived,
            (false, false) => Self::Off,
        }
    }
}

/// Whether kicks are signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kicks {
    /// `--kick-signing-keys`.
    Signed,
    /// `--insecure-unsigned-kicks`: the operator says only trusted hosts reach the receivers.
    Waived,
    /// Neither.
    Unsigned,
    /// `--no-sessions`: a lease-only server sends no kick, so there is nothing to sign.
    None,
}

impl Kicks {
    /// From the flags (clap keeps the signing flags from being given together, or with
    /// `--no-sessions`).
    pub(crate) fn of(signing_keys: bool, insecure_unsigned_kicks: bool, no_sessions: bool) -> Self {
        match (signing_keys, insecure_unsigned_kicks, no_sessions) {
            (_, _, true) => Self::None,
            (true, _, false) => Self::Signed,
            (false, true, false) => Self::Waived,
            (false, false, false) => Self::Unsigned,
        }
    }
}

/// What to warn about when serving without authentication (`--insecure-no-auth`).
pub(crate) const NO_AUTH: &str = "serving without caller authentication (--insecure-no-auth)";
/// What to warn about when kicks from an exposed server go unsigned.
pub(crate) const UNSIGNED: &str = "sending unsigned kicks: any host that reaches a node's \
    kick receiver can log its users out (pass --kick-signing-keys FILE)";

/// Whether the server may start on `listen` with these settings: `Ok` with the warnings to
/// log, or `Err` with the refusal, which names the flags that fix it.
pub(crate) fn check(
    listen: SocketAddr,
    auth: Auth,
    kicks: Kicks,
) -> Result<Vec<&'static str>, String> {
    if listen.ip().is_loopback() {
        return Ok(Vec::new());
    }
    match (auth, kicks) {
        (Auth::Off, _) => Err(format!(
            "refusing to serve an unauthenticated API on {listen}: pass --auth-tokens FILE, \
             or --insecure-no-auth if every host that can reach it is trusted"
        )),
        (Auth::Tokens, Kicks::Unsigned) => Err(format!(
            "refusing to send unsigned kicks from a server exposed on {listen}: pass \
             --kick-signing-keys FILE (and give the nodes' kick receivers the same keys), or \
             --insecure-unsigned-kicks if only trusted hosts can reach the kick receivers"
        )),
        (Auth::Tokens, Kicks::Signed | Kicks::None) => Ok(Vec::new()),
        (Auth::Tokens, Kicks::Waived) => Ok(vec![UNSIGNED]),
        (Auth::Waived, Kicks::Signed | Kicks::None) => Ok(vec![NO_AUTH]),
        (Auth::Waived, Kicks::Waived | Kicks::Unsigned) => Ok(vec![NO_AUTH, UNSIGNED]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AUTHS: [Auth; 3] = [Auth::Tokens, Auth::Waived, Auth::Off];
    const KICKS: [Kicks; 4] = [Kicks::Signed, Kicks::Waived, Kicks::Unsigned, Kicks::None];

    /// What a row of the table expects: the warnings, or a needle of the refusal.
    type Expected = Result<&'static [&'static str], &'static str>;

    fn at(listen: &str) -> SocketAddr {
        listen.parse().unwrap()
    }

    #[test]
    fn flags_map_to_settings() {
        assert_eq!(Auth::of(true, false), Auth::Tokens);
        assert_eq!(Auth::of(false, true), Auth::Waived);
        assert_eq!(Auth::of(false, false), Auth::Off);
        assert_eq!(Kicks::of(true, false, false), Kicks::Signed);
        assert_eq!(Kicks::of(false, true, false), Kicks::Waived);
        assert_eq!(Kicks::of(false, false, false), Kicks::Unsigned);
        assert_eq!(Kicks::of(false, false, true), Kicks::None);
    }

    #[test]
    fn loopback_is_served_whatever_the_settings_without_a_warning() {
        for loopback in ["127.0.0.1:7420", "127.0.0.2:1", "[::1]:7420"] {
            for auth in AUTHS {
                for kicks in KICKS {
                    assert_eq!(
                        check(at(loopback), auth, kicks),
                        Ok(Vec::new()),
                        "{loopback} {auth:?} {kicks:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_exposed_address_follows_the_decision_table() {
        let auth_refused = Err("--auth-tokens");
        let kick_refused = Err("--kick-signing-keys");
        let table: [(Auth, Kicks, Expected); 12] = [
            (Auth::Tokens, Kicks::Signed, Ok(&[])),
            (Auth::Tokens, Kicks::Waived, Ok(&[UNSIGNED])),
            (Auth::Tokens, Kicks::Unsigned, kick_refused),
            (Auth::Waived, Kicks::Signed, Ok(&[NO_AUTH])),
            (Auth::Waived, Kicks::Waived, Ok(&[NO_AUTH, UNSIGNED])),
            (Auth::Waived, Kicks::Unsigned, Ok(&[NO_AUTH, UNSIGNED])),
            (Auth::Off, Kicks::Signed, auth_refused),
            (Auth::Off, Kicks::Waived, auth_refused),
            (Auth::Off, Kicks::Unsigned, auth_refused),
            (Auth::Tokens, Kicks::None, Ok(&[])),
            (Auth::Waived, Kicks::None, Ok(&[NO_AUTH])),
            (Auth::Off, Kicks::None, auth_refused),
        ];
        for exposed in ["0.0.0.0:7420", "10.0.0.5:7420", "[::]:7420", "192.0.2.1:80"] {
            for (auth, kicks, expected) in table {
                let decided = check(at(exposed), auth, kicks);
                match expected {
                    Ok(warnings) => {
                        assert_eq!(decided.as_deref(), Ok(warnings), "{auth:?} {kicks:?}");
                    }
                    Err(needle) => {
                        let refused = decided.expect_err("refused");
                        assert!(refused.contains(needle), "{auth:?} {kicks:?}: {refused}");
                        assert!(refused.contains(exposed), "{refused}");
                    }
                }
            }
        }
    }

    #[test]
    fn each_refusal_names_both_fixes() {
        let refused = check(at("0.0.0.0:7420"), Auth::Tokens, Kicks::Unsigned).unwrap_err();
        assert!(
            refused.contains("--kick-signing-keys FILE")
                && refused.contains("--insecure-unsigned-kicks"),
            "{refused}"
        );
        let refused = check(at("0.0.0.0:7420"), Auth::Off, Kicks::Signed).unwrap_err();
        assert!(
            refused.contains("--auth-tokens FILE") && refused.contains("--insecure-no-auth"),
            "{refused}"
        );
    }
}
