//! Serving a store: the kicker, the arbiter and its HTTP service built over the opened store,
//! the listener bound and announced, and the connections served until a shutdown signal.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use unique_arbiter_http::{
    ArbiterService, AuditFile, KickHub, LeaseService, PeerSecret, PushConfig, ServeOptions,
    SharedTokens,
};
use unique_core::{Arbiter, ArbiterBuilder, Observer, Store, TracingObserver};
use unique_kick_http::SigningKeys;
use unique_kick_relay::KickRelay;
use unique_metrics::{MeteredStore, MetricsObserver};
use unique_wire::InfoKicks;

use crate::args::Args;
use crate::counts;
use crate::error::StartupError;
use crate::exposition;
use crate::kicker::{KickerConfig, ServerKicker, SigningKicker};
use crate::peers;
use crate::reload::{self, Reloader};
use crate::signals::Signals;

/// What every store is served with.
pub(crate) struct Served {
    pub(crate) tokens: Option<SharedTokens>,
    pub(crate) keys: Option<SigningKeys>,
    pub(crate) audit: Option<Arc<AuditFile>>,
    /// The lease directory on the store; `None` with `--no-leases` (the routes answer 501).
    pub(crate) leases: Option<Arc<dyn LeaseService>>,
    /// `--peer-secret-file`'s secret: kicks are forwarded across servers.
    pub(crate) peer_secret: Option<PeerSecret>,
    pub(crate) options: ServeOptions,
    /// `None` with `--no-metrics`.
    pub(crate) metrics: Option<PrometheusHandle>,
    /// Registered before the store opened.
    pub(crate) signals: Signals,
}

impl Served {
    /// With metrics, the store is timed (`MeteredStore`) and claims, kicks and releases are
    /// counted next to the log; without, the arbiter calls the store directly.
    pub(crate) async fn run<S: Store>(self, store: S, args: &Args) -> Result<(), StartupError> {
        if self.metrics.is_some() {
            let observer = (TracingObserver, MetricsObserver::new());
            run_on(MeteredStore::new(store), observer, self, args).await
        } else {
            run_on(store, TracingObserver, self, args).await
        }
    }
}

/// The builder with `--session-limit`'s default and per-project limits.
fn with_session_limits<S: Store>(
    builder: ArbiterBuilder<S>,
    args: &Args,
) -> Result<ArbiterBuilder<S>, StartupError> {
    let (default, projects) = args.session_limits()?;
    Ok(projects
        .into_iter()
        .fold(builder.session_limit(default), |builder, (project, n)| {
            builder.session_limit_for(project, n)
        }))
}

async fn run_on<S: Store>(
    store: S,
    observer: impl Observer,
    served: Served,
    args: &Args,
) -> Result<(), StartupError> {
    let Served {
        tokens,
        keys,
        audit,
        leases,
        peer_secret,
        options,
        metrics,
        signals,
    } = served;
    let config = kicker_config(args);
    config.log();
    let mut reloader = Reloader::default();
    let builder = Arbiter::builder(store);
    let hub = kick_hub(args);
    let delivery = peers::delivery(args, hub.as_ref(), leases.as_ref(), peer_secret).await?;
    let kicker_over = |http| ServerKicker {
        http,
        push: delivery.push.clone(),
    };
    // Kept for /v1/info, which reads the keys in force at each request.
    let mut signing = None;
    let builder = match (keys, &args.kick_signing_keys) {
        (Some(keys), Some(path)) => {
            tracing::info!(
                path = %path.display(),
                signing = %keys.signing_id(),
                keys = %reload::ids(&keys),
                "kicks are signed"
            );
            let kicker = SigningKicker::new(&config, keys)?;
            let arbiter = builder.kicker(kicker_over(kicker.kicker().clone()));
            signing = Some(kicker.clone());
            reloader = reloader.keys(path.clone(), kicker);
            arbiter
        }
        _ => builder.kicker(kicker_over(config.build(None)?)),
    };
    let builder = with_session_limits(builder, args)?;
    let arbiter = builder
        .observer(observer)
        .kick_timeout(args.kick_timeout)
        .max_claim_attempts(args.max_claim_attempts)
        .max_queued_claims(args.max_queued_claims)
        .max_slots_per_user(args.max_slots_per_user as usize)
        .claim_timeout(args.claim_timeout.into())
        .build();
    let _sessions_count = counts::count_sessions(&arbiter, metrics.is_some(), args);
    let mut service = ArbiterService::new(arbiter)
        .ready_timeout(args.ready_timeout.into())
        .store_kind(args.store_name());
    if let Some(kicker) = signing {
        service = service.with_kick_signing(move || info_kicks(&kicker.keys()));
    }
    if args.no_sessions {
        tracing::info!("session routes off (--no-sessions): a lease-only server, no kicks");
        service = service.without_sessions();
    }
    if let (Some(tokens), Some(path)) = (tokens, &args.auth_tokens) {
        reloader = reloader.tokens(path.clone(), tokens.clone());
        service = service.with_tokens(tokens);
    }
    if let Some(audit) = audit {
        reloader = reloader.audit(Arc::clone(&audit));
        service = service.with_audit(audit);
    }
    if let Some(leases) = leases {
        service = service.with_leases(leases);
    }
    let service = with_push(service, hub.as_ref(), delivery.relay.as_ref());
    let Signals {
        shutdown,
        #[cfg(unix)]
        hangup,
    } = signals;
    let reloads = reload::on_sighup(
        reloader,
        #[cfg(unix)]
        hangup,
    );
    let listener = unique_listener::bind(args.listen, args.backlog)
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    let scheme = if options.is_tls() { "https" } else { "http" };
    // The smoke runner and scripts read this line to find the port.
    println!("unique-server listening on {scheme}://{bound}");
    tracing::info!(%bound, store = ?args.store(), tls = options.is_tls(), "listening");
    if let Some(handle) = &metrics {
        exposition::spawn_upkeep(handle.clone());
    }
    tokio::spawn(reloads);
    // Kept to write the refusals tallied since the last interval once serving stopped.
    let audited = service.clone();
    let service = exposition::MetricsRoute::new(service, metrics);
    let shutdown = ending_streams(shutdown, hub, delivery.relay.map(|(relay, _)| relay));
    unique_listener::serve(listener, service, options, shutdown).await;
    audited.flush_audit().await;
    tracing::info!("stopped");
    Ok(())
}

/// The kicker's policy and caps, from the flags.
fn kicker_config(args: &Args) -> KickerConfig {
    KickerConfig {
        allow: args.kick_allow.clone(),
        deny: args.kick_deny.clone(),
        pool_max_idle: args.kick_pool_max_idle,
        max_kicks_in_flight: args.max_kicks_in_flight,
    }
}

/// The hub of the kick streams nodes open (push kicks) under the flags' caps; `None` on a
/// lease-only server, which sends no kicks.
fn kick_hub(args: &Args) -> Option<KickHub> {
    if args.no_sessions {
        return None;
    }
    tracing::info!(
        max_streams = args.max_kick_streams,
        max_streams_per_token = args.max_kick_streams_per_token,
        "push kicks on"
    );
    Some(KickHub::new(PushConfig {
        max_streams: args.max_kick_streams,
        max_streams_per_token: args.max_kick_streams_per_token,
        ping: args.kick_stream_ping.into(),
        write_stall: args.kick_stream_write_timeout.into(),
        ..PushConfig::default()
    }))
}

/// The push-kick routes through `hub`, and the peer routes through `relay` when it runs.
fn with_push<S: Store>(
    mut service: ArbiterService<S>,
    hub: Option<&KickHub>,
    relay: Option<&(KickRelay, PeerSecret)>,
) -> ArbiterService<S> {
    if let Some(hub) = hub {
        service = service.with_push_kicks(hub.clone());
    }
    if let Some((relay, secret)) = relay {
        let epoch = relay.epoch().to_owned();
        service = service.with_peers(secret.clone(), epoch, Arc::new(relay.clone()));
    }
    service
}

/// `shutdown`, then every kick stream ended: streams never end by themselves, so on
/// shutdown each gets its `closed` line and ends, and its connection drains like any other.
/// With peers, this server's registration goes first, so the others stop forwarding here.
async fn ending_streams(
    shutdown: impl Future<Output = ()>,
    hub: Option<KickHub>,
    relay: Option<KickRelay>,
) {
    shutdown.await;
    if let Some(relay) = relay {
        relay.leave().await;
    }
    if let Some(hub) = hub {
        hub.shutdown();
    }
}

/// The signing state `/v1/info` reports: the key ids, signing key first; never a key.
fn info_kicks(keys: &SigningKeys) -> InfoKicks {
    InfoKicks {
        signed: true,
        signing_key_id: Some(keys.signing_id().to_string()),
        key_ids: keys.ids().iter().map(ToString::to_string).collect(),
    }
}
