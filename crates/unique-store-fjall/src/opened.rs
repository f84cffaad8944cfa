//! The open database, what readers see of it, and how the writer tells whether it can write.

use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, Snapshot};
use unique_core::Error;

/// The keyspaces (fjall's name for trees): the session records, and the lease directory's
/// rooms, nodes and epoch counter.
const RECORDS: &str = "records";
const LEASES: &str = "leases";
const NODES: &str = "nodes";
const LEASE_META: &str = "lease_meta";

/// The keyspaces of one opened database.
#[derive(Clone)]
pub(crate) struct Keyspaces {
    /// The session records, by key.
    pub records: Keyspace,
    /// The room leases, by room id.
    pub leases: Keyspace,
    /// The node registrations, by node id.
    pub nodes: Keyspace,
    /// The lease epoch counter.
    pub meta: Keyspace,
}

/// The database as the writer holds it.
pub(crate) struct Opened {
    pub db: Database,
    pub keyspaces: Keyspaces,
}

impl Opened {
    /// Opens the database in `path` (creating it when missing), recovering what its journal
    /// durably holds: what a crash recovery does, and what the writer does again after a
    /// failed write.
    pub(crate) fn open(path: &Path) -> Result<Self, fjall::Error> {
        let db = Database::builder(path)
            // The writer fsyncs the journal once per group, not after every batch.
            .manual_journal_persist(true)
            .open()?;
        let keyspace = |name| db.keyspace(name, KeyspaceCreateOptions::default);
        let keyspaces = Keyspaces {
            records: keyspace(RECORDS)?,
            leases: keyspace(LEASES)?,
            nodes: keyspace(NODES)?,
            meta: keyspace(LEASE_META)?,
        };
        Ok(Self { db, keyspaces })
    }

    /// What readers read from now on: the database's current (durable) state.
    pub(crate) fn view(&self) -> Arc<View> {
        Arc::new(View {
            keyspaces: self.keyspaces.clone(),
            snapshot: self.db.snapshot(),
        })
    }
}

/// A durable snapshot and the keyspaces to read it through.
pub(crate) struct View {
    pub keyspaces: Keyspaces,
    pub snapshot: Snapshot,
}

/// What readers read: the last durable snapshot, or `None` while the writer reopens the
/// database (readers then answer `Unavailable`).
pub(crate) type Published = Arc<RwLock<Option<Arc<View>>>>;

/// The published view.
pub(crate) fn latest(published: &Published) -> Result<Arc<View>, Error> {
    published
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .ok_or_else(|| {
            Error::unavailable("fjall store: reopening the database after a failed write")
        })
}

pub(crate) fn publish(published: &Published, view: Option<Arc<View>>) {
    *published.write().unwrap_or_else(PoisonError::into_inner) = view;
}
