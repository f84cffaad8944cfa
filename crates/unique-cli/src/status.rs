//! `unique status`: the server's info (`GET /v1/info`) and readiness (`GET /readyz`).

use serde::Serialize;
use unique_wire::InfoAnswer;

use crate::cli::Cli;
use crate::exit::{self, Failure};
use crate::server::transport;

/// What `--json` prints: the server's info as it sent it, and its readiness.
#[derive(Serialize)]
struct Status<'a> {
    info: &'a InfoAnswer,
    ready: bool,
    /// Why not, when not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    not_ready: Option<String>,
}

/// Asks the server; the text to print and the exit status (1 when the store is not ready).
pub(crate) async fn status(cli: &Cli) -> Result<(String, u8), Failure> {
    let transport = transport(cli)?;
    let info = transport.info().await.map_err(|e| Failure::from_call(&e))?;
    let not_ready = transport.ready().await.err().map(|e| match e {
        unique_core::Error::Unavailable { reason, .. } => reason,
        other => other.to_string(),
    });
    let code = if not_ready.is_some() {
        exit::UNAVAILABLE
    } else {
        exit::OK
    };
    let text = if cli.json {
        crate::server::to_json(&Status {
            info: &info,
            ready: not_ready.is_none(),
            not_ready,
        })
    } else {
        text(&info, not_ready.as_deref())
    };
    Ok((text, code))
}

fn on(yes: bool) -> &'static str {
    if yes { "on" } else { "off" }
}

fn text(info: &InfoAnswer, not_ready: Option<&str>) -> String {
    let store = info.features.store.as_deref().unwrap_or("unnamed");
    let ready = not_ready.map_or_else(|| "ready".to_owned(), |why| format!("NOT READY: {why}"));
    let auth = if info.auth.required {
        "bearer token required (--token)"
    } else {
        "none: every caller is trusted"
    };
    let kicks = match (&info.kicks.signing_key_id, info.features.sessions) {
        (_, false) => "none sent (lease-only server)".to_owned(),
        (Some(id), true) if info.kicks.signed => format!(
            "signed with key {id} (key file: {}); receivers verify with the same file",
            info.kicks.key_ids.join(", ")
        ),
        _ => "unsigned; receivers must not verify signatures".to_owned(),
    };
    let limits = &info.limits;
    let slots = limits
        .max_slots_per_user
        .map_or_else(|| "no limit".to_owned(), |n| n.to_string());
    let pools = match limits.session_limit {
        None => "not reported (a server older than pooled sessions)".to_owned(),
        Some(n) if limits.project_session_limits.is_empty() => {
            format!("up to {n} sessions per user")
        }
        Some(n) => {
            let projects: Vec<String> = limits
                .project_session_limits
                .iter()
                .map(|(project, limit)| format!("{project} {limit}"))
                .collect();
            format!(
                "up to {n} sessions per user; projects of their own: {}",
                projects.join(", ")
            )
        }
    };
    [
        format!("server    unique-server {}", info.version),
        format!("store     {store}: {ready}"),
        format!(
            "serves    sessions {}, leases {}",
            on(info.features.sessions),
            on(info.features.leases)
        ),
        format!("callers   {auth}"),
        format!("kicks     {kicks}"),
        format!(
            "limits    {slots} slots per user, {} keys per batch, {} sessions per page, \
             {} bytes per request, lease ttl up to {} ms",
            limits.max_batch_keys,
            limits.max_sessions_page,
            limits.max_request_body_bytes,
            limits.max_lease_ttl_ms
        ),
        format!("pools     {pools}"),
    ]
    .join("\n")
}
