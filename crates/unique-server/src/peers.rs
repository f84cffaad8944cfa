//! Push kicks across servers (`--peer-url`, `--peer-secret-file`,
//! `docs/design.md#push-kicks-across-servers`): the checks of the flags, and the relay that
//! registers this server's kick streams in the shared store and forwards kicks to the others.

use std::sync::Arc;

use unique_arbiter_http::{KickDelivery, KickHub, LeaseService, PeerSecret};
use unique_kick_relay::{KickRelay, RelayConfig};
use unique_lease::NodeRegistry;

use crate::args::{Args, StoreKind};
use crate::error::StartupError;
use crate::secrets;

/// The peer secret when `--peer-secret-file` is given, once the flags around it are checked:
/// forwarding needs the session routes, and a lease directory other servers read too.
pub(crate) fn secret(args: &Args) -> Result<Option<PeerSecret>, StartupError> {
    let Some(path) = &args.peer_secret_file else {
        return Ok(None);
    };
    if args.no_sessions {
        return Err(
            "--peer-url forwards kicks, which a lease-only server (--no-sessions) \
                    never sends"
                .into(),
        );
    }
    if args.no_leases {
        return Err(
            "--peer-url registers kick streams in the lease directory: drop \
                    --no-leases"
                .into(),
        );
    }
    if args.tls_cert.is_some() {
        return Err(
            "--peer-url with --tls-cert: the peer routes speak plain HTTP to the other \
                    servers' listeners, and this one speaks only TLS (not supported yet)"
                .into(),
        );
    }
    if matches!(
        args.store(),
        StoreKind::Memory | StoreKind::Fjall | StoreKind::Sqlite
    ) {
        return Err(format!(
            "--peer-url needs a store the other servers share (postgres, dynamodb); \
             --store {} is read by this process only",
            args.store_name()
        )
        .into());
    }
    Ok(Some(secrets::load_peer_secret(path)?))
}

/// How this server delivers push kicks: through the relay when it has peers, else through
/// its own hub only.
pub(crate) struct Delivery {
    pub(crate) push: Option<Arc<dyn KickDelivery>>,
    pub(crate) relay: Option<(KickRelay, PeerSecret)>,
}

/// Starts the relay over `hub` when `secret` is given (this server registered in `leases`).
pub(crate) async fn delivery(
    args: &Args,
    hub: Option<&KickHub>,
    leases: Option<&Arc<dyn LeaseService>>,
    secret: Option<PeerSecret>,
) -> Result<Delivery, StartupError> {
    let local = || hub.map(|hub| Arc::new(hub.clone()) as Arc<dyn KickDelivery>);
    let (Some(hub), Some(leases), Some(secret), Some(url)) = (hub, leases, secret, &args.peer_url)
    else {
        return Ok(Delivery {
            push: local(),
            relay: None,
        });
    };
    let registry: Arc<dyn NodeRegistry> = leases.clone();
    let config = RelayConfig::new(url.clone(), secret.clone());
    let relay = KickRelay::start(hub.clone(), registry, config)
        .await
        .map_err(|e| format!("cannot register this server for kick forwarding: {e}"))?;
    tracing::info!(url = %url, epoch = relay.epoch(), "push kicks forwarded across servers");
    Ok(Delivery {
        push: Some(Arc::new(relay.clone())),
        relay: Some((relay, secret)),
    })
}
