//! SIGINT and SIGTERM: the end of serving. (SIGHUP rereads the files: see `reload`.)

use crate::error::StartupError;

/// Registers SIGINT and SIGTERM handlers now (before the address is announced, so
/// an early signal is never missed) and returns a future that resolves on either.
pub(crate) fn shutdown() -> Result<impl std::future::Future<Output = ()>, StartupError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let register =
            |kind| signal(kind).map_err(|e| format!("cannot install a signal handler: {e}"));
        let mut interrupt = register(SignalKind::interrupt())?;
        let mut terminate = register(SignalKind::terminate())?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => {},
                _ = terminate.recv() => {},
            }
            tracing::info!("shutdown requested");
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutdown requested");
        })
    }
}
