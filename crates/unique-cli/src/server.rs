//! The calls to a server: `current`, `sessions`, `logout` (of one slot or all), `release`, over
//! `unique-client-http`'s transport, and how their answers are shown.

use std::fmt::Write as _;
use std::path::Path;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use unique_client::Transport;
use unique_client_http::HttpTransport;
use unique_core::{
    CurrentView, Error, Key, LogoutInput, LogoutOutcome, Owner, UserLogoutInput, UserSession,
    place_index,
};
use unique_wire::{
    CurrentAnswer, LogoutAllAnswer, LogoutAnswer, ReleaseAnswer, SessionEntry, SessionsAnswer,
    SlotLogoutEntry,
};

use crate::cli::{Cli, DEFAULT_TIMEOUT, KeyArgs, UserArgs};
use crate::exit::{Failure, INVALID};

/// One call to the server, as the command line named it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call<'a> {
    Current(&'a KeyArgs),
    Sessions(&'a UserArgs),
    Logout(&'a KeyArgs, &'a str),
    LogoutAll(&'a UserArgs, &'a str),
    Release(&'a KeyArgs, i64),
}

/// Makes `call` to the server the global options of `cli` name; the text to print.
pub(crate) async fn run(cli: &Cli, call: Call<'_>) -> Result<String, Failure> {
    let transport = transport(cli)?;
    let failed = |e: Error| Failure::from_call(&e);
    let json = cli.json;
    match call {
        Call::Current(key) => {
            let view = transport.current(&key.key()).await.map_err(failed)?;
            Ok(if json {
                to_json(&CurrentAnswer::from(view))
            } else {
                current(&view)
            })
        }
        Call::Sessions(user) => {
            let sessions = transport.sessions(&user.user()).await.map_err(failed)?;
            Ok(if json {
                let sessions = sessions.into_iter().map(SessionEntry::from).collect();
                to_json(&SessionsAnswer {
                    sessions,
                    next: None,
                })
            } else {
                sessions_table(&sessions)
            })
        }
        Call::Logout(key, reason) => {
            let input = LogoutInput {
                key: key.key(),
                reason: Some(reason.to_owned()),
            };
            let outcome = transport.logout(&input).await.map_err(failed)?;
            Ok(if json {
                to_json(&LogoutAnswer::from(outcome))
            } else {
                logout(&outcome)
            })
        }
        Call::LogoutAll(user, reason) => {
            let input = UserLogoutInput {
                user: user.user(),
                reason: Some(reason.to_owned()),
            };
            let logouts = transport.logout_all(&input).await.map_err(failed)?;
            Ok(if json {
                let sessions = logouts
                    .into_iter()
                    .map(|(slot, outcome)| SlotLogoutEntry::new(slot, outcome))
                    .collect();
                to_json(&LogoutAllAnswer { sessions })
            } else {
                logout_all(&logouts)
            })
        }
        Call::Release(key, generation) => {
            let released = transport
                .release(&key.key(), generation)
                .await
                .map_err(failed)?;
            Ok(if json {
                to_json(&ReleaseAnswer { released })
            } else {
                release(&key.key(), generation, released)
            })
        }
    }
}

/// The transport the global options describe.
pub(crate) fn transport(cli: &Cli) -> Result<HttpTransport, Failure> {
    let timeout = cli.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let mut builder = HttpTransport::builder(cli.server.as_str())
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(concat!("unique-cli/", env!("CARGO_PKG_VERSION")));
    if let Some(token) = cli.token.as_deref().filter(|t| !t.is_empty()) {
        builder = builder.bearer_token(token);
    }
    if let Some(path) = &cli.ca_cert {
        builder = builder.tls_config(private_ca(path)?);
    }
    // The builder's messages name the option's problem, never the URL or the token.
    builder.build().map_err(|e| match e {
        Error::InvalidParams(message) => Failure::new(
            INVALID,
            format!("cannot use --server or --token: {message}"),
        ),
        other => Failure::new(INVALID, other.to_string()),
    })
}

/// A client configuration trusting only the CA certificates of the PEM file at `path`.
fn private_ca(path: &Path) -> Result<rustls::ClientConfig, Failure> {
    let shown = path.display();
    let pem = std::fs::read(path)
        .map_err(|e| Failure::file(format!("--ca-cert: cannot read {shown}: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert =
            cert.map_err(|e| Failure::file(format!("--ca-cert: {shown} is not PEM: {e}")))?;
        roots.add(cert).map_err(|e| {
            Failure::file(format!(
                "--ca-cert: {shown} holds an unusable certificate: {e}"
            ))
        })?;
    }
    if roots.is_empty() {
        return Err(Failure::file(format!(
            "--ca-cert: {shown} holds no PEM certificate"
        )));
    }
    unique_tls::client_config(roots)
        .map_err(|e| Failure::file(format!("--ca-cert: no TLS configuration: {e}")))
}

/// One line of JSON: the server's answer shape.
pub(crate) fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("answer types serialise")
}

/// Where a session lives: `region/cluster` (`-` for a missing part, `-` for neither).
fn place(owner: &Owner) -> String {
    if owner.region.is_empty() && owner.cluster.is_empty() {
        return "-".to_owned();
    }
    let part = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            s.to_owned()
        }
    };
    format!("{}/{}", part(&owner.region), part(&owner.cluster))
}

/// Where the session's kicks go: its endpoint, `node:<id>` for a push node (its kicks come
/// down the stream that node holds open), `-` for neither.
fn endpoint(owner: &Owner) -> String {
    if !owner.endpoint.is_empty() {
        owner.endpoint.clone()
    } else if !owner.node.is_empty() {
        format!("node:{}", owner.node)
    } else {
        "-".to_owned()
    }
}

fn current(view: &CurrentView) -> String {
    match (&view.owner, view.exists) {
        (Some(owner), _) => format!(
            "online at gen {}: {} {}",
            view.generation,
            place(owner),
            endpoint(owner)
        ),
        (None, true) => format!(
            "offline at gen {} (logged out or released; the next login gets gen {})",
            view.generation,
            view.generation.saturating_add(1)
        ),
        (None, false) => "no record: never logged in (the next login gets gen 1)".to_owned(),
    }
}

/// A slot as the tables show it: `(default)`, a pool place marked `#0 (pool)`, or its name.
fn slot_label(slot: &str) -> String {
    if slot.is_empty() {
        "(default)".to_owned()
    } else if place_index(slot).is_some() {
        format!("{slot} (pool)")
    } else {
        slot.to_owned()
    }
}

/// A login time (ms since the Unix epoch) in RFC 3339 UTC with milliseconds.
fn login_time(since: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(since);
    humantime::format_rfc3339_millis(at).to_string()
}

/// The sessions as a table; a SINCE column (the login time) when any session has one (a pooled
/// session's owner carries it).
fn sessions_table(sessions: &[UserSession]) -> String {
    if sessions.is_empty() {
        return "no online session".to_owned();
    }
    let with_since = sessions.iter().any(|s| s.owner.since.is_some());
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            let mut row = vec![slot_label(&s.slot), s.generation.to_string()];
            if with_since {
                row.push(s.owner.since.map_or_else(|| "-".to_owned(), login_time));
            }
            row.extend([place(&s.owner), endpoint(&s.owner)]);
            row
        })
        .collect();
    let mut header = vec!["SLOT", "GEN"];
    if with_since {
        header.push("SINCE");
    }
    header.extend(["REGION/CLUSTER", "ENDPOINT"]);
    let header: Vec<String> = header.into_iter().map(str::to_owned).collect();
    let mut widths = vec![0usize; header.len()];
    for row in std::iter::once(&header).chain(&rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    std::iter::once(&header)
        .chain(&rows)
        .map(|row| {
            // Every column padded but the last (the endpoint).
            let (last, padded) = row.split_last().expect("a row has cells");
            let mut line = String::new();
            for (cell, width) in padded.iter().zip(&widths) {
                // Writing to a String cannot fail.
                let _ = write!(line, "{cell:<width$}  ");
            }
            line.push_str(last);
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn logout(outcome: &LogoutOutcome) -> String {
    let generation = outcome.generation;
    match (outcome.released, outcome.kick_detail) {
        (true, None) => format!("logged out gen {generation}; its node confirmed the kick"),
        (true, Some(detail)) => format!(
            "logged out gen {generation}; the kick did not confirm ({detail}): the node is \
             presumed offline, and the session's heartbeat evicts it"
        ),
        (false, _) if generation == 0 => "nothing to log out: no record".to_owned(),
        (false, _) => format!("nothing to log out: no online session (gen {generation})"),
    }
}

/// One line per session `unique logout --all` found: its slot, then what its logout did.
fn logout_all(logouts: &[(String, LogoutOutcome)]) -> String {
    if logouts.is_empty() {
        return "nothing to log out: no online session".to_owned();
    }
    logouts
        .iter()
        .map(|(slot, outcome)| format!("{}: {}", slot_label(slot), logout(outcome)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn release(key: &Key, generation: i64, released: bool) -> String {
    if released {
        format!("released gen {generation} of {key}")
    } else {
        format!(
            "not released: {key} is not online at gen {generation} (already released or \
             logged out, or a newer login holds it)"
        )
    }
}

#[cfg(test)]
mod tests {
    use unique_core::KickDetail;

    use super::*;

    fn owner() -> Owner {
        Owner::new("eu", "c1", "http://127.0.0.1:9001/kick")
    }

    #[test]
    fn current_says_online_offline_or_never() {
        let online = CurrentView {
            generation: 3,
            owner: Some(owner()),
            exists: true,
        };
        assert_eq!(
            current(&online),
            "online at gen 3: eu/c1 http://127.0.0.1:9001/kick"
        );
        let offline = CurrentView {
            generation: 3,
            owner: None,
            exists: true,
        };
        assert!(current(&offline).starts_with("offline at gen 3 ("));
        assert!(current(&CurrentView::default()).starts_with("no record"));
    }

    #[test]
    fn sessions_are_a_table_with_aligned_columns() {
        let sessions = [
            UserSession {
                slot: String::new(),
                generation: 12,
                owner: owner(),
            },
            UserSession {
                slot: "mobile".into(),
                generation: 1,
                owner: Owner::new("", "", "http://10.0.0.7:9001/kick"),
            },
            UserSession {
                slot: "tv".into(),
                generation: 4,
                owner: Owner::with_node("eu", "c2", "n7"),
            },
        ];
        assert_eq!(
            sessions_table(&sessions),
            "SLOT       GEN  REGION/CLUSTER  ENDPOINT\n\
             (default)  12   eu/c1           http://127.0.0.1:9001/kick\n\
             mobile     1    -               http://10.0.0.7:9001/kick\n\
             tv         4    eu/c2           node:n7"
        );
        assert_eq!(sessions_table(&[]), "no online session");
        let pooled = [
            UserSession {
                slot: "#0".into(),
                generation: 3,
                owner: Owner {
                    since: Some(1_700_000_000_123),
                    ..owner()
                },
            },
            UserSession {
                slot: "mobile".into(),
                generation: 1,
                owner: owner(),
            },
        ];
        assert_eq!(
            sessions_table(&pooled),
            "SLOT       GEN  SINCE                     REGION/CLUSTER  ENDPOINT\n\
             #0 (pool)  3    2023-11-14T22:13:20.123Z  eu/c1           http://127.0.0.1:9001/kick\n\
             mobile     1    -                         eu/c1           http://127.0.0.1:9001/kick"
        );
        assert_eq!(place(&Owner::new("eu", "", "")), "eu/-");
    }

    #[test]
    fn logout_says_what_happened_to_the_session_and_the_node() {
        let mut outcome = LogoutOutcome {
            released: true,
            generation: 4,
            kicked: true,
            kick_detail: None,
        };
        assert_eq!(
            logout(&outcome),
            "logged out gen 4; its node confirmed the kick"
        );
        outcome.kicked = false;
        outcome.kick_detail = Some(KickDetail::Timeout);
        assert!(logout(&outcome).contains("did not confirm (timeout)"));
        outcome.released = false;
        outcome.kick_detail = None;
        assert_eq!(
            logout(&outcome),
            "nothing to log out: no online session (gen 4)"
        );
        outcome.generation = 0;
        assert_eq!(logout(&outcome), "nothing to log out: no record");
    }

    #[test]
    fn logout_all_is_one_line_per_session() {
        let released = LogoutOutcome {
            released: true,
            generation: 2,
            kicked: true,
            kick_detail: None,
        };
        let raced = LogoutOutcome {
            released: false,
            generation: 1,
            kicked: false,
            kick_detail: None,
        };
        assert_eq!(
            logout_all(&[
                (String::new(), released.clone()),
                ("#1".into(), released),
                ("mobile".into(), raced),
            ]),
            "(default): logged out gen 2; its node confirmed the kick\n\
             #1 (pool): logged out gen 2; its node confirmed the kick\n\
             mobile: nothing to log out: no online session (gen 1)"
        );
        assert_eq!(logout_all(&[]), "nothing to log out: no online session");
    }
}
