//! The lease directory served on /v1/lease/* and /v1/nodes/*, on the store `--store` opened.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use unique_arbiter_http::LeaseService;

use crate::args::Args;
use crate::error::StartupError;
use crate::stores::{OpenedStore, STARTUP_CHECK_TIMEOUT};

/// The lease directory of `--store`'s store, served on the lease routes: the process's memory
/// for the memory store, a file of its own beside the SQLite store's (opened here: a file
/// that cannot be used stops startup), the PostgreSQL store's database (its own tables) and
/// a DynamoDB table of its own. With `--create-table` the SQL tables and the DynamoDB table
/// are created when missing. When they cannot be checked the server starts all the same, its
/// sessions unaffected, and says so: the lease routes answer 503 until the tables exist.
pub(crate) async fn open_leases(
    args: &Args,
    opened: &OpenedStore,
) -> Result<Arc<dyn LeaseService>, StartupError> {
    match opened {
        OpenedStore::Memory(_) => {
            tracing::info!("lease directory in memory");
            Ok(Arc::new(unique_lease::MemoryDirectory::new()))
        }
        OpenedStore::Sqlite(_) => sqlite_leases(args, || default_lease_db(&args.db)),
        // unique.fjall → unique-leases.db: a SQLite file beside the directory.
        OpenedStore::Fjall(_) => sqlite_leases(args, || {
            default_lease_db(&args.fjall_dir.with_extension("db"))
        }),
        OpenedStore::Postgres(store) => {
            let directory = unique_store_postgres::PostgresDirectory::builder(store)
                .table_prefix(&args.database_lease_prefix)
                .build()
                .map_err(|e| format!("cannot configure the postgres lease directory: {e}"))?;
            let what = format!("postgres lease tables {}", directory.leases_table());
            let ready = async {
                if args.create_table {
                    directory.create_tables().await?;
                }
                directory.check().await
            };
            match tokio::time::timeout(STARTUP_CHECK_TIMEOUT, ready).await {
                Ok(Ok(())) => tracing::info!(
                    leases = directory.leases_table(),
                    nodes = directory.nodes_table(),
                    "postgres lease directory ready"
                ),
                Ok(Err(e)) => lease_routes_failing(&what, &e.to_string()),
                Err(_) => lease_routes_failing(
                    &what,
                    &format!("no answer within {STARTUP_CHECK_TIMEOUT:?}"),
                ),
            }
            Ok(Arc::new(directory))
        }
        OpenedStore::Dynamodb(store) => {
            let directory = unique_store_dynamodb::DynamoDirectory::builder(&args.lease_table)
                .store(store)
                .build()
                .await
                .map_err(|e| format!("cannot configure the dynamodb lease directory: {e}"))?;
            let what = format!("dynamodb lease table {}", args.lease_table);
            let ready = async {
                if args.create_table {
                    directory
                        .create_table_if_missing(STARTUP_CHECK_TIMEOUT)
                        .await?;
                }
                directory.check_reachable(STARTUP_CHECK_TIMEOUT).await
            };
            match ready.await {
                Ok(()) => {
                    tracing::info!(table = %args.lease_table, "dynamodb lease directory ready");
                }
                Err(e) => lease_routes_failing(&what, &e.to_string()),
            }
            Ok(Arc::new(directory))
        }
    }
}

/// The SQLite lease directory at --lease-db, else at `default`.
fn sqlite_leases(
    args: &Args,
    default: impl FnOnce() -> PathBuf,
) -> Result<Arc<dyn LeaseService>, StartupError> {
    let path = args.lease_db.clone().unwrap_or_else(default);
    let directory = unique_store_sqlite::SqliteDirectory::builder(&path)
        .synchronous(args.db_sync.synchronous())
        .open()
        .map_err(|e| {
            format!(
                "cannot open the sqlite lease directory at {} (--lease-db; --no-leases \
                 serves without one): {e}",
                path.display()
            )
        })?;
    tracing::info!(lease_db = %path.display(), "sqlite lease directory open");
    Ok(Arc::new(directory))
}

/// The lease directory's file beside the session store's: `unique.db` → `unique-leases.db`.
fn default_lease_db(db: &Path) -> PathBuf {
    let stem = db
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    let name = match db.extension() {
        Some(ext) => format!("{stem}-leases.{}", ext.to_string_lossy()),
        None => format!("{stem}-leases"),
    };
    db.with_file_name(name)
}

/// Says at startup that the lease directory is not usable yet; sessions are served all the same.
fn lease_routes_failing(what: &str, why: &str) {
    tracing::warn!(
        "{what} not usable ({why}): the lease routes answer 503 until it is (create it with \
         --create-table, or serve without leases with --no-leases)"
    );
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::default_lease_db;

    #[test]
    fn the_lease_file_is_beside_the_session_file() {
        for (db, leases) in [
            ("./unique.db", "./unique-leases.db"),
            (
                "/var/lib/unique/sessions.sqlite",
                "/var/lib/unique/sessions-leases.sqlite",
            ),
            ("data", "data-leases"),
            ("a.b.db", "a.b-leases.db"),
        ] {
            assert_eq!(default_lease_db(Path::new(db)), Path::new(leases), "{db}");
        }
    }

    #[test]
    fn the_fjall_stores_lease_file_is_a_sqlite_file_beside_its_directory() {
        for (dir, leases) in [
            ("./unique.fjall", "./unique-leases.db"),
            (
                "/var/lib/unique/sessions",
                "/var/lib/unique/sessions-leases.db",
            ),
        ] {
            let beside = default_lease_db(&Path::new(dir).with_extension("db"));
            assert_eq!(beside, Path::new(leases), "{dir}");
        }
    }
}
