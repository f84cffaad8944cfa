//! SIGINT and SIGTERM: the end of serving, or of a startup still opening the store. (SIGHUP
//! rereads the files: see `reload`.)

use std::future::Future;
use std::pin::Pin;

use crate::error::StartupError;

/// Resolves on the first SIGINT or SIGTERM.
pub(crate) type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The signals the server handles, registered together at the start of startup, before the
/// store opens: a SIGTERM while a store connects (a PostgreSQL that does not answer) ends
/// startup cleanly instead of killing the process, and a SIGHUP then does not end it either
/// (SIGHUP's default) but waits to reload once the server serves.
pub(crate) struct Signals {
    /// Resolves on SIGINT or SIGTERM.
    pub(crate) shutdown: Shutdown,
    /// SIGHUP, registered; `reload::on_sighup` listens to it.
    #[cfg(unix)]
    pub(crate) hangup: tokio::signal::unix::Signal,
}

/// Registers SIGINT, SIGTERM and SIGHUP handlers now.
pub(crate) fn install() -> Result<Signals, StartupError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let register =
            |kind| signal(kind).map_err(|e| format!("cannot install a signal handler: {e}"));
        let mut interrupt = register(SignalKind::interrupt())?;
        let mut terminate = register(SignalKind::terminate())?;
        let hangup = signal(SignalKind::hangup())
            .map_err(|e| format!("cannot install the SIGHUP handler: {e}"))?;
        Ok(Signals {
            shutdown: Box::pin(async move {
                tokio::select! {
                    _ = interrupt.recv() => {},
                    _ = terminate.recv() => {},
                }
                tracing::info!("shutdown requested");
            }),
            hangup,
        })
    }
    #[cfg(not(unix))]
    {
        Ok(Signals {
            shutdown: Box::pin(async {
                let _ = tokio::signal::ctrl_c().await;
                tracing::info!("shutdown requested");
            }),
        })
    }
}

/// Runs `step` (opening the store, or its lease directory) unless `shutdown` comes first:
/// `None` then, `step` dropped (its connection attempts with it) and the reason logged.
pub(crate) async fn unless_stopped<T>(
    shutdown: &mut Shutdown,
    what: &str,
    step: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        done = step => Some(done),
        () = shutdown.as_mut() => {
            tracing::warn!("shutdown requested while {what}: stopping before serving");
            None
        }
    }
}
