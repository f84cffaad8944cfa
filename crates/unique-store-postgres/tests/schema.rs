//! The table's schema against a real PostgreSQL: a table of the previous schema version
//! (1, without `won`) made by hand is migrated by `create_table_if_missing` and then serves
//! the recent claims (C9); a migration never marks a table a newer build migrated meanwhile
//! as older again; a column whose type was altered by hand makes reads and claims fail with
//! `Unavailable` naming the column, never a panic; and the startup check names each column
//! of the wrong type.

mod common;

use std::sync::Arc;

use common::claim;
use unique_core::{Arbiter, Key, Owner, OwnerState, Store, encode_owner};

/// The schema-1 table exactly as the previous release created it.
fn schema_1(table: &str) -> String {
    format!(
        "DROP TABLE IF EXISTS {table}; \
         CREATE TABLE {table} (pk text PRIMARY KEY, gen bigint NOT NULL, owner text, cid text); \
         COMMENT ON TABLE {table} IS 'unique-store-postgres schema 1'"
    )
}

/// A table name of this run (a database named by `UNIQUE_TEST_DATABASE_URL` outlives it).
fn fresh(base: &str) -> String {
    format!("{base}_{}", std::process::id())
}

async fn comment(client: &tokio_postgres::Client, table: &str) -> Option<String> {
    client
        .query_one(
            "SELECT obj_description(to_regclass($1), 'pg_class')",
            &[&table],
        )
        .await
        .unwrap()
        .get(0)
}

/// A schema-1 table with a record in it: the check refuses it naming the migration, a read
/// names the missing column; `create_table_if_missing` migrates it (once, however often it runs); the record reads as
/// before, with no recent claims, and claims on it keep the list, so a superseded retry is
/// recognised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_1_table_is_migrated_and_serves_recent_claims() {
    let server = common::server();
    let admin = common::connect(&server).await;
    let table = fresh("schema_one");
    admin.batch_execute(&schema_1(&table)).await.unwrap();
    let key = Key::new("migrated", "test", 1);
    let owner = encode_owner(&Owner::new("r", "c", "http://old.invalid/kick")).unwrap();
    admin
        .execute(
            &format!("INSERT INTO {table} (pk, gen, owner, cid) VALUES ($1, 3, $2, 'cid-old')"),
            &[&key.to_string(), &owner],
        )
        .await
        .unwrap();

    let store = common::builder(server.url(), &table).build().unwrap();
    let refused = store.check().await.unwrap_err();
    assert!(refused.is_unavailable(), "{refused:?}");
    let message = refused.to_string();
    assert!(message.contains("has schema 1"), "{message}");
    assert!(
        message.contains("ADD COLUMN IF NOT EXISTS won text"),
        "{message}"
    );

    // Used without the check, the old table is an error naming the missing column.
    let unmigrated = store.read_owner(&key).await.unwrap_err().to_string();
    assert!(
        unmigrated.contains("invalid schema") && unmigrated.contains("column won is missing"),
        "{unmigrated}"
    );

    // Servers starting together with --create-table: each call succeeds, none creates.
    let migrations: Vec<_> = (0..4)
        .map(|_| {
            let store = common::builder(server.url(), &table).build().unwrap();
            tokio::spawn(async move { store.create_table_if_missing().await })
        })
        .collect();
    for migration in migrations {
        assert!(!migration.await.unwrap().expect("a migration succeeds"));
    }
    assert_eq!(
        comment(&admin, &table).await.as_deref(),
        Some("unique-store-postgres schema 2")
    );
    store
        .check()
        .await
        .expect("the migrated table passes the check");
    assert!(!store.create_table_if_missing().await.unwrap(), "once only");

    let before = store.read_owner(&key).await.unwrap();
    assert_eq!(
        (before.generation, before.claim_id.as_deref()),
        (3, Some("cid-old"))
    );
    assert!(before.owner.is_some() && before.recent_claims.is_empty());

    let arbiter = Arbiter::new(store.clone());
    let second = claim(&key, "http://new.invalid/kick", "cid-new");
    assert_eq!(arbiter.claim(&second).await.unwrap().generation, 4);
    let third = claim(&key, "http://third.invalid/kick", "cid-third");
    assert_eq!(arbiter.claim(&third).await.unwrap().generation, 5);
    let after = store.read_owner(&key).await.unwrap();
    assert_eq!(after.recent_claims.won("cid-new"), Some(4));
    assert_eq!(after.recent_claims.won("cid-third"), Some(5));
    let err = arbiter.claim(&second).await.unwrap_err();
    assert!(err.is_superseded(), "the earlier login's retry: {err:?}");
    assert!(store.release(&key, 5).await.unwrap());
    let released = store.read_owner(&key).await.unwrap();
    assert_eq!(
        released.recent_claims, after.recent_claims,
        "release keeps won"
    );
}

/// A migration that finds the table locked by a newer build migrating it (to "schema 3")
/// waits, reads the version again under the lock, and leaves the table alone: it is never
/// marked as schema 2 again, nor given this build's listing index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_leaves_a_table_a_newer_build_migrated_meanwhile() {
    let server = common::server();
    let admin = common::connect(&server).await;
    let table = fresh("schema_raced");
    admin.batch_execute(&schema_1(&table)).await.unwrap();

    let mut newer = common::connect(&server).await;
    let upgrade = newer.transaction().await.unwrap();
    upgrade
        .batch_execute(&format!(
            "LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE; \
             COMMENT ON TABLE {table} IS 'unique-store-postgres schema 3'"
        ))
        .await
        .unwrap();
    let store = common::builder(server.url(), &table).build().unwrap();
    let migration = tokio::spawn(async move { store.create_table_if_missing().await });
    // The migration read schema 1 and now waits for the newer build's lock.
    let mut waited = false;
    for _ in 0..200 {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = to_regclass($1)",
                &[&table],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            waited = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(waited, "the migration waits for the table's lock");
    upgrade.commit().await.unwrap();
    assert!(!migration.await.unwrap().unwrap());
    assert_eq!(
        comment(&admin, &table).await.as_deref(),
        Some("unique-store-postgres schema 3"),
        "the newer version stays"
    );
    let indexes: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_index WHERE indrelid = to_regclass($1)",
            &[&table],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(indexes, 1, "no listing index on a table of another version");
}

/// A column of another type (altered by hand under a running store): reads, batch reads,
/// listings, claims of each form and `current` are `Unavailable`, never a panic, both on the
/// connections whose statements were prepared before the change and on new ones; the
/// answers on new connections name the invalid schema and the column. The startup check
/// refuses the table naming the column and its type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_altered_by_hand_fails_reads_and_claims_without_a_panic() {
    let server = common::server();
    let admin = common::connect(&server).await;
    let alterations = [
        ("gen", "text USING gen::text", "text"),
        ("gen", "integer", "integer"),
        ("owner", "integer USING NULL", "integer"),
        ("cid", "integer USING NULL", "integer"),
        ("won", "integer USING NULL", "integer"),
    ];
    for (n, (altered, to, found)) in alterations.into_iter().enumerate() {
        let table = fresh(&format!("altered_{n}"));
        admin
            .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
            .await
            .unwrap();
        let store = common::store_on(&server, &table).await;
        let arbiter = Arbiter::new(store.clone());
        let held = Key::new("altered", "test", 1);
        let released = Key::new("altered", "test", 2);
        let fresh_key = Key::new("altered", "test", 3);
        for key in [&held, &released] {
            arbiter
                .claim(&claim(key, "http://a.invalid/kick", "cid-a"))
                .await
                .unwrap();
        }
        assert!(store.release(&released, 1).await.unwrap());
        // Snapshots taken before the change, one per claim form.
        let pinned = store.read_owner(&held).await.unwrap();
        let tombstone = store.read_owner(&released).await.unwrap();
        admin
            .batch_execute(&format!(
                "ALTER TABLE {table} ALTER COLUMN {altered} TYPE {to}"
            ))
            .await
            .unwrap();

        let owner = Owner::new("r", "c", "http://b.invalid/kick");
        for round in ["prepared before", "prepared after"] {
            let what = format!("{altered} altered to {found}, statements {round}");
            let errors = [
                ("read", store.read_owner(&held).await.map(drop)),
                (
                    "batch read",
                    store
                        .read_owners(&[held.clone(), fresh_key.clone()])
                        .await
                        .map(drop),
                ),
                ("current", store.current(&held).await.map(drop)),
                ("listing", store.list_sessions(&held.user()).await.map(drop)),
                (
                    "first login",
                    store
                        .claim_cas(&fresh_key, &owner, "cid-b", &OwnerState::absent())
                        .await
                        .map(drop),
                ),
                (
                    "double pin",
                    store
                        .claim_cas(&held, &owner, "cid-b", &pinned)
                        .await
                        .map(drop),
                ),
                (
                    "tombstone",
                    store
                        .claim_cas(&released, &owner, "cid-b", &tombstone)
                        .await
                        .map(drop),
                ),
            ];
            let wanted = if altered == "gen" { "bigint" } else { "text" };
            let named = format!("column {altered} is {found}, needs {wanted}");
            for (operation, result) in errors {
                let err = result.expect_err(&format!("{what}: {operation} must fail"));
                assert!(err.is_unavailable(), "{what}: {operation}: {err:?}");
                let message = err.to_string();
                assert!(
                    message.contains("invalid schema") && message.contains(&named),
                    "{what}: {operation}: {message}"
                );
            }
            // A release touches gen, owner and cid only: whatever it answers, no panic.
            let _ = store.release(&held, 1).await;
        }
        let refused = store.check().await.unwrap_err().to_string();
        let wanted = if altered == "gen" { "bigint" } else { "text" };
        assert!(
            refused.contains(&format!("column {altered} is {found}, needs {wanted}")),
            "{refused}"
        );
    }
}

/// A NULL gen written by hand into a table whose `gen` was made nullable: the columns have
/// the schema's types, so only the value is wrong; reading it is `Unavailable` naming the
/// column, not a panic, and other keys still serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_gen_written_by_hand_is_an_error_not_a_panic() {
    let server = common::server();
    let admin = common::connect(&server).await;
    let table = fresh("null_gen");
    admin
        .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .unwrap();
    let store = common::store_on(&server, &table).await;
    let broken = Key::new("nullgen", "test", 1);
    let fine = Key::new("nullgen", "test", 2);
    admin
        .batch_execute(&format!(
            "ALTER TABLE {table} ALTER COLUMN gen DROP NOT NULL"
        ))
        .await
        .unwrap();
    admin
        .execute(
            &format!("INSERT INTO {table} (pk, gen) VALUES ($1, NULL)"),
            &[&broken.to_string()],
        )
        .await
        .unwrap();
    for err in [
        store.read_owner(&broken).await.unwrap_err(),
        store.current(&broken).await.unwrap_err(),
        store
            .read_owners(&[broken.clone(), fine.clone()])
            .await
            .unwrap_err(),
    ] {
        assert!(err.is_unavailable(), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("invalid schema") && message.contains("column gen is NULL"),
            "{message}"
        );
    }
    assert!(!store.read_owner(&fine).await.unwrap().exists);
}

/// The startup check refuses a table of the current version whose columns differ, naming
/// every column that is missing or of another type, even where the driver could convert the
/// values (`character varying`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_startup_check_names_each_column_of_the_wrong_type() {
    let server = common::server();
    let admin = common::connect(&server).await;
    let table = fresh("wrong_types");
    admin
        .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .unwrap();
    let store = Arc::new(common::store_on(&server, &table).await);
    admin
        .batch_execute(&format!(
            "ALTER TABLE {table} ALTER COLUMN pk TYPE varchar(300), \
             ALTER COLUMN gen TYPE numeric, DROP COLUMN won"
        ))
        .await
        .unwrap();
    let refused = store.check().await.unwrap_err();
    assert!(refused.is_unavailable(), "{refused:?}");
    let message = refused.to_string();
    for part in [
        "invalid schema",
        "column pk is character varying(300), needs text",
        "column gen is numeric, needs bigint",
        "column won is missing",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert!(!message.contains("column owner"), "{message}");
}
