//! The session store chosen by `--store`: opened, created when asked, and checked before the
//! server announces its address, so a store that cannot be used stops startup.

use std::time::Duration;

use crate::args::{Args, DatabaseUrl, StoreKind};
use crate::error::StartupError;

/// The store chosen by `--store`, opened and checked.
pub(crate) enum OpenedStore {
    Memory(unique_store_memory::MemoryStore),
    Sqlite(unique_store_sqlite::SqliteStore),
    Fjall(unique_store_fjall::FjallStore),
    Dynamodb(unique_store_dynamodb::DynamoStore),
    Postgres(unique_store_postgres::PostgresStore),
}

/// How long startup waits for the store to answer before giving up.
pub(crate) const STARTUP_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens and checks the store of `--store`; a store that cannot be opened, created or
/// reached within [`STARTUP_CHECK_TIMEOUT`] is an error naming it (never its password).
pub(crate) async fn open_store(args: &Args) -> Result<OpenedStore, StartupError> {
    match args.store() {
        StoreKind::Memory => Ok(OpenedStore::Memory(unique_store_memory::MemoryStore::new())),
        StoreKind::Sqlite => {
            let store = unique_store_sqlite::SqliteStore::builder(&args.db)
                .synchronous(args.db_sync.synchronous())
                .record_cache(args.db_cache_records)
                .open()
                .map_err(|e| {
                    format!("cannot open the sqlite store at {}: {e}", args.db.display())
                })?;
            bounded_check("sqlite store", store.check()).await?;
            tracing::info!(
                db = %args.db.display(),
                sync = ?args.db_sync,
                cache_records = args.db_cache_records,
                "sqlite store open"
            );
            Ok(OpenedStore::Sqlite(store))
        }
        StoreKind::Fjall => {
            let dir = &args.fjall_dir;
            refuse_to_start_beside_an_earlier_default(args)?;
            let store = unique_store_fjall::FjallStore::open(dir)
                .map_err(|e| format!("cannot open the fjall store at {}: {e}", dir.display()))?;
            bounded_check("fjall store", unique_core::Store::check_ready(&store)).await?;
            tracing::info!(dir = %dir.display(), "fjall store open");
            Ok(OpenedStore::Fjall(store))
        }
        StoreKind::Dynamodb => open_dynamodb(args).await.map(OpenedStore::Dynamodb),
        StoreKind::Postgres => open_postgres(args).await.map(OpenedStore::Postgres),
    }
}

/// With no `--store`, the default fjall store must not start empty beside the SQLite store an
/// earlier build's default wrote at `--db`: its gens would begin again at 1, under the gens the
/// nodes already hold (I2). So startup stops and says how to go on.
fn refuse_to_start_beside_an_earlier_default(args: &Args) -> Result<(), StartupError> {
    if args.store_is_chosen() || args.fjall_dir.exists() || !args.db.exists() {
        return Ok(());
    }
    Err(format!(
        "no --store is given, so the default fjall store would start empty at {}, but {} holds \
         a sqlite store (the default of earlier builds): pass --store sqlite to keep using it, \
         or --store fjall to start an empty fjall store (its gens begin again at 1)",
        args.fjall_dir.display(),
        args.db.display()
    )
    .into())
}

/// The PostgreSQL store at `--database-url`, its table created first with `--create-table`.
async fn open_postgres(args: &Args) -> Result<unique_store_postgres::PostgresStore, StartupError> {
    let url = args
        .database_url
        .as_ref()
        .map(DatabaseUrl::as_str)
        .ok_or("--store postgres needs --database-url (or UNIQUE_DATABASE_URL)")?;
    let store = unique_store_postgres::PostgresStore::builder(url)
        .table(&args.database_table)
        .max_connections(args.database_max_connections)
        .connect_timeout(args.store_connect_timeout.into())
        .operation_timeout(args.store_operation_timeout.into())
        .build()
        .map_err(|e| format!("cannot configure the postgres store: {e}"))?;
    // The target names user, hosts and database, never the password.
    let what = format!("postgres table {} at {}", store.table(), store.target());
    if args.create_table {
        let created = tokio::time::timeout(STARTUP_CHECK_TIMEOUT, store.create_table_if_missing())
            .await
            .map_err(|_| format!("{what} did not answer within {STARTUP_CHECK_TIMEOUT:?}"))?
            .map_err(|e| format!("cannot create {what}: {e}"))?;
        if created {
            tracing::info!(
                table = store.table(),
                target = store.target(),
                "created postgres table"
            );
        }
    }
    bounded_check(&what, store.check()).await?;
    tracing::info!(
        table = store.table(),
        target = store.target(),
        max_connections = args.database_max_connections,
        operation_timeout = %args.store_operation_timeout,
        tls = %store.tls(),
        "postgres store ready"
    );
    Ok(store)
}

/// The DynamoDB store on `--table`, the table created first with `--create-table`.
async fn open_dynamodb(args: &Args) -> Result<unique_store_dynamodb::DynamoStore, StartupError> {
    let mut builder = unique_store_dynamodb::DynamoStore::builder()
        .table(&args.table)
        .connect_timeout(args.store_connect_timeout.into())
        .attempt_timeout(args.store_attempt_timeout.into())
        .operation_timeout(args.store_operation_timeout.into())
        .max_attempts(args.store_max_attempts);
    if let Some(url) = &args.endpoint_url {
        builder = builder.endpoint_url(url);
    }
    if let Some(region) = &args.region {
        builder = builder.region(region);
    }
    let store = builder
        .build()
        .await
        .map_err(|e| format!("cannot configure the dynamodb store: {e}"))?;
    if args.create_table {
        let created = store
            .create_table_if_missing(STARTUP_CHECK_TIMEOUT)
            .await
            .map_err(|e| format!("cannot create dynamodb table {}: {e}", args.table))?;
        if created {
            tracing::info!(table = %args.table, "created dynamodb table");
        }
    }
    store
        .check_reachable(STARTUP_CHECK_TIMEOUT)
        .await
        .map_err(|e| format!("dynamodb table {} is not usable: {e}", args.table))?;
    tracing::info!(
        table = %args.table,
        attempt_timeout = %args.store_attempt_timeout,
        operation_timeout = %args.store_operation_timeout,
        max_attempts = args.store_max_attempts,
        "dynamodb store ready"
    );
    Ok(store)
}

/// Runs a store's startup check with a deadline, so a dead store is a clear error, not a hang.
async fn bounded_check(
    what: &str,
    check: impl std::future::Future<Output = Result<(), unique_core::Error>>,
) -> Result<(), StartupError> {
    match tokio::time::timeout(STARTUP_CHECK_TIMEOUT, check).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{what} is not usable: {e}").into()),
        Err(_) => Err(format!("{what} did not answer within {STARTUP_CHECK_TIMEOUT:?}").into()),
    }
}
