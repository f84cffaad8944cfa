//! Configuring a [`PostgresStore`]: the connection, the table, the pool and the bounds.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::TargetSessionAttrs;
use unique_core::Error;

use crate::sql::Statements;
use crate::store::{Inner, PostgresStore};
use crate::tls::{TlsParams, TlsSetup};

/// The default table name.
pub const DEFAULT_TABLE: &str = "unique_records";

/// The default number of pooled connections per store (per server process).
pub const DEFAULT_MAX_CONNECTIONS: u16 = 16;

/// The default time allowed to open a connection (TCP, TLS handshake, startup,
/// authentication).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The default bound on one store call: waiting for a connection, connecting, the
/// statement and its answer.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(3);

/// Builds a [`PostgresStore`]; see [`PostgresStore::builder`].
#[derive(Debug, Clone)]
pub struct PostgresStoreBuilder {
    url: String,
    table: String,
    max_connections: u16,
    connect_timeout: Duration,
    operation_timeout: Duration,
}

impl PostgresStoreBuilder {
    pub(crate) fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            table: DEFAULT_TABLE.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        }
    }

    /// The table (`name` or `schema.name`; letters, digits, `_`, `-`). Default
    /// [`DEFAULT_TABLE`].
    #[must_use]
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The most connections this store keeps open (at least 1). Default
    /// [`DEFAULT_MAX_CONNECTIONS`].
    #[must_use]
    pub fn max_connections(mut self, max: u16) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// The time allowed to open one connection, unless the URL sets `connect_timeout`.
    /// Default [`DEFAULT_CONNECT_TIMEOUT`].
    #[must_use]
    pub fn connect_timeout(mut self, limit: Duration) -> Self {
        self.connect_timeout = limit;
        self
    }

    /// The bound on every store call, from asking the pool for a connection to the
    /// statement's answer. Default [`DEFAULT_OPERATION_TIMEOUT`]. A call that runs out of
    /// it is `Unavailable` and its connection is closed, not reused.
    #[must_use]
    pub fn operation_timeout(mut self, limit: Duration) -> Self {
        self.operation_timeout = limit;
        self
    }

    /// The store. Opens no connection: the pool connects on first use; call
    /// [`PostgresStore::check`] (and [`PostgresStore::create_table_if_missing`]) to find out
    /// at startup whether the database is usable.
    ///
    /// # Errors
    ///
    /// `InvalidParams` when the URL cannot be parsed (the message never repeats it), its TLS
    /// parameters are not usable (an unknown `sslmode`, `verify-ca` without `sslrootcert`,
    /// a root file that cannot be read or holds no certificate: see the crate docs' TLS
    /// section), or the table name is not allowed.
    pub fn build(self) -> Result<PostgresStore, Error> {
        let sql = Statements::for_table(&self.table)?;
        // The driver knows neither verify-ca, verify-full nor sslrootcert: the TLS
        // parameters are taken out first and applied here.
        let (url, tls_params) = TlsParams::take(&self.url)?;
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            Error::invalid(format!("postgres connection url cannot be parsed: {e}"))
        })?;
        let (tls, ssl_mode, connector) = TlsSetup::resolve(tls_params, &config)?;
        config.ssl_mode(ssl_mode);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(self.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("unique");
        }
        // Reads must be strong (C2): never a hot standby, whatever hosts the URL lists.
        config.target_session_attrs(TargetSessionAttrs::ReadWrite);
        config.options(pinned_options(config.get_options().unwrap_or_default()));
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        let target = describe_target(&config);
        let manager = Manager::from_config(
            config,
            connector,
            ManagerConfig {
                // No query on checkout: a pooled connection costs no extra round trip. A
                // connection that broke since is closed on first failure, never reused.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(self.max_connections.into())
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(self.operation_timeout))
            .create_timeout(Some(self.operation_timeout))
            .recycle_timeout(Some(self.operation_timeout))
            .build()
            .map_err(|e| Error::invalid(format!("postgres connection pool: {e}")))?;
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                pool,
                sql,
                target,
                tls_summary: tls.to_string(),
                tls,
                operation_timeout: self.operation_timeout,
            }),
        })
    }
}

/// The connection's startup options: the URL's own `options` with this store's settings
/// around them, pinned per connection so that a server, database or role default cannot
/// change them (a startup option outranks all three):
///
/// - `synchronous_commit=on`, before the URL's options: an acknowledged claim must be
///   durable, whatever default a database or role was given since the startup check ran.
///   A URL that sets it on purpose (`remote_apply`, say) still wins; the startup check
///   refuses `off`.
/// - `default_transaction_isolation=read committed`, after them: the claim forms rely on
///   READ COMMITTED's re-check of a concurrently updated row.
fn pinned_options(url_options: &str) -> String {
    format!(
        "-c synchronous_commit=on {url_options} -c default_transaction_isolation=read\\ committed"
    )
}

/// `user@host:port/db` (hosts joined by commas), never the password: what logs may show.
fn describe_target(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    format!(
        "{}@{}/{}",
        config.get_user().unwrap_or_default(),
        hosts.join(","),
        config.get_dbname().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn target_never_shows_the_password() {
        let store = crate::PostgresStore::builder("postgres://alice:s3cret@db.internal:6543/app")
            .build()
            .unwrap();
        assert_eq!(store.target(), "alice@db.internal:6543/app");
        let debug = format!("{store:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
    }

    #[test]
    fn a_bad_url_is_refused_without_repeating_it() {
        let e = crate::PostgresStore::builder("postgres://u:s3cret@h:notaport/db")
            .build()
            .unwrap_err();
        assert!(e.is_invalid_params());
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn the_store_settings_surround_the_url_options() {
        assert_eq!(
            super::pinned_options("-c work_mem=8MB"),
            "-c synchronous_commit=on -c work_mem=8MB \
             -c default_transaction_isolation=read\\ committed"
        );
    }

    /// `SHOW synchronous_commit` on connections the pool hands out (several at once, then
    /// again once returned) after a database, a role and a role-in-database default were
    /// set `off` on a private server: each still reports `on`, where a plain connection
    /// reports `off`, and the startup check passes. A URL that sets it on purpose wins, and
    /// the check refuses a URL's `off`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pooled_connections_commit_synchronously_whatever_the_defaults() {
        use std::time::Duration;

        use tokio_postgres::NoTls;
        use unique_testsupport::postgres::{DATABASE, PostgresServer, USER};

        async fn show(client: &tokio_postgres::Client) -> String {
            client
                .query_one("SHOW synchronous_commit", &[])
                .await
                .unwrap()
                .get(0)
        }
        async fn plain(url: &str) -> tokio_postgres::Client {
            let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
            tokio::spawn(connection);
            client
        }
        let store_on = |url: &str| {
            crate::PostgresStore::builder(url)
                .table("sync_pinned")
                .max_connections(3)
                .operation_timeout(Duration::from_secs(20))
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap()
        };

        let server = PostgresServer::start_private();
        let admin = plain(server.url()).await;
        for default in [
            format!("ALTER DATABASE \"{DATABASE}\" SET synchronous_commit = off"),
            format!("ALTER ROLE \"{USER}\" SET synchronous_commit = off"),
            format!(
                "ALTER ROLE \"{USER}\" IN DATABASE \"{DATABASE}\" SET synchronous_commit = off"
            ),
        ] {
            admin.batch_execute(&default).await.unwrap();
            assert_eq!(
                show(&plain(server.url()).await).await,
                "off",
                "{default}: a new plain connection starts with it off"
            );
            let store = store_on(server.url());
            for round in ["handed out", "handed out again"] {
                let pool = &store.inner.pool;
                let (a, b, c) = tokio::join!(pool.get(), pool.get(), pool.get());
                let connections = [a.unwrap(), b.unwrap(), c.unwrap()];
                for connection in &connections {
                    assert_eq!(show(connection).await, "on", "{default}: {round}");
                }
            }
            store.create_table_if_missing().await.unwrap();
            store
                .check()
                .await
                .unwrap_or_else(|e| panic!("{default}: {e}"));
        }

        let chosen = format!(
            "{}?options=-c%20synchronous_commit%3Dremote_apply",
            server.url()
        );
        let store = store_on(&chosen);
        let connection = store.inner.pool.get().await.unwrap();
        assert_eq!(
            show(&connection).await,
            "remote_apply",
            "the URL's choice wins"
        );
        drop(connection);
        store.check().await.unwrap();
        let off = format!("{}?options=-c%20synchronous_commit%3Doff", server.url());
        let e = store_on(&off).check().await.unwrap_err();
        assert!(e.to_string().contains("synchronous_commit is off"), "{e}");
    }

    #[test]
    fn a_bad_table_is_refused() {
        let e = crate::PostgresStore::builder("postgres://u@h/db")
            .table("a;b")
            .build()
            .unwrap_err();
        assert!(e.is_invalid_params());
    }
}
