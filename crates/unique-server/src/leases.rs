//! The lease directory served on /v1/lease/* and /v1/nodes/*, on the store `--store` opened.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use unique_arbiter_http::LeaseService;
use unique_lease::LeaseRows;

use crate::args::Args;
use crate::counts::CountedTakeovers;
use crate::error::StartupError;
use crate::stores::{OpenedStore, STARTUP_CHECK_TIMEOUT};

/// The lease directory of `--store`'s store, served on the lease routes: the process's memory
/// for the memory store, the fjall store's own directory (an older build's SQLite lease file
/// beside it is imported first), a file of its own beside the SQLite store's (opened here: a
/// file that cannot be used stops startup), the PostgreSQL store's database (its own tables) and
/// a DynamoDB table of its own. With `--create-table` the SQL tables and the DynamoDB table
/// are created when missing. When they cannot be checked the server starts all the same, its
/// sessions unaffected, and says so: the lease routes answer 503 until the tables exist.
pub(crate) async fn open_leases(
    args: &Args,
    opened: &OpenedStore,
) -> Result<OpenedLeases, StartupError> {
    match opened {
        OpenedStore::Memory(_) => {
            tracing::info!("lease directory in memory");
            Ok(OpenedLeases::rows(unique_lease::MemoryDirectory::new()))
        }
        OpenedStore::Sqlite(_) => sqlite_leases(args, || default_lease_db(&args.db)),
        OpenedStore::Fjall(store) => {
            let directory = store.directory();
            import_old_lease_file(args, &directory).await?;
            tracing::info!(dir = %args.fjall_dir.display(), "lease directory in the fjall store");
            Ok(OpenedLeases::rows(directory))
        }
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
            Ok(OpenedLeases::rows(directory))
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
            // Lease items are never deleted: each carries D4's fencing (design.md, D12).
            Ok(OpenedLeases {
                service: Arc::new(directory),
                rows: None,
            })
        }
    }
}

/// The lease directory served, and its rows when the server sweeps them (D12).
pub(crate) struct OpenedLeases {
    pub(crate) service: Arc<dyn LeaseService>,
    pub(crate) rows: Option<Arc<dyn LeaseRows>>,
}

impl OpenedLeases {
    /// A row-atomic directory, its takeovers counted (`unique_lease_takeovers_total`).
    fn rows<D: LeaseRows>(directory: D) -> Self {
        let directory = Arc::new(CountedTakeovers::new(directory));
        Self {
            service: directory.clone(),
            rows: Some(directory),
        }
    }
}

/// The SQLite lease directory at --lease-db, else at `default`.
fn sqlite_leases(
    args: &Args,
    default: impl FnOnce() -> PathBuf,
) -> Result<OpenedLeases, StartupError> {
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
    Ok(OpenedLeases::rows(directory))
}

/// Before fjall held leases, the default install kept them in a SQLite file beside the fjall
/// directory (`unique.fjall` → `unique-leases.db`), or at `--lease-db`. Serving an empty
/// directory over rooms that file says are held would grant them again with epochs from 1,
/// under the fencing tokens holders already carry (D4). So a file found there is imported
/// (every row, and the epoch counter, which ends above every epoch the file issued) and then
/// renamed `<file>.imported`, so a later start does not bring back rows released since.
/// A file that cannot be read or imported stops startup, naming it.
async fn import_old_lease_file(
    args: &Args,
    directory: &unique_store_fjall::FjallDirectory,
) -> Result<(), StartupError> {
    let path = args
        .lease_db
        .clone()
        .unwrap_or_else(|| default_lease_db(&args.fjall_dir.with_extension("db")));
    if !path.exists() {
        if args.lease_db.is_some() {
            return Err(format!(
                "--lease-db {} does not exist: with the fjall store, leases live in --fjall-dir \
                 and --lease-db only names an older SQLite lease file to import",
                path.display()
            )
            .into());
        }
        return Ok(());
    }
    let refused = |why: String| -> StartupError {
        format!(
            "found the SQLite lease file {} beside the fjall store, and could not import it \
             ({why}); leases now live in --fjall-dir: fix the file and start again to import \
             it, or move it away to start with an empty lease directory (its rooms' holders \
             would then be fenced from epoch 1 again)",
            path.display()
        )
        .into()
    };
    let dump = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || {
            unique_store_sqlite::SqliteDirectory::builder(&path)
                .open()
                .and_then(|old| old.export())
        })
        .await
        .map_err(|e| refused(e.to_string()))?
        .map_err(|e| refused(e.to_string()))?
    };
    let (rooms, nodes, last_epoch) = (dump.leases.len(), dump.nodes.len(), dump.last_epoch);
    directory
        .import(dump)
        .await
        .map_err(|e| refused(e.to_string()))?;
    let imported = renamed(&path, ".imported");
    for (from, to) in [("-wal", ".imported-wal"), ("-shm", ".imported-shm")] {
        let sibling = renamed(&path, from);
        if sibling.exists() {
            std::fs::rename(&sibling, renamed(&path, to)).map_err(|e| refused(e.to_string()))?;
        }
    }
    std::fs::rename(&path, &imported).map_err(|e| refused(e.to_string()))?;
    tracing::warn!(
        from = %path.display(),
        renamed_to = %imported.display(),
        rooms,
        nodes,
        last_epoch,
        "imported the SQLite lease file into the fjall store"
    );
    Ok(())
}

/// `path` with `suffix` appended to its file name.
fn renamed(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
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
