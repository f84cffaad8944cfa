//! The listing (C10) against a real PostgreSQL: the index its byte range needs
//! (`pk COLLATE "C"`) is created with a new table and added, once, to a table made before
//! it, by processes starting together; the startup check refuses a table without it and
//! accepts one an operator built under any name; and in a database whose collation ignores
//! punctuation the range still holds every slot, where a range in the column's own
//! collation would miss them. The generic C10 cases are in `contract.rs` and
//! `icu_contract.rs`.

mod common;

use common::claim;
use unique_core::{Arbiter, Store, UserKey};

/// A table name of this run (a database named by `UNIQUE_TEST_DATABASE_URL` outlives it).
fn fresh(base: &str) -> String {
    format!("{base}_{}", std::process::id())
}

/// The schema-2 table exactly as the release before slots created it: no listing index.
fn schema_2_before_slots(table: &str) -> String {
    format!(
        "DROP TABLE IF EXISTS {table}; \
         CREATE TABLE {table} (pk text PRIMARY KEY, gen bigint NOT NULL, owner text, \
         cid text, won text); \
         COMMENT ON TABLE {table} IS 'unique-store-postgres schema 2'"
    )
}

/// The names of `table`'s indexes, sorted.
async fn indexes(client: &tokio_postgres::Client, table: &str) -> Vec<String> {
    let rows = client
        .query(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = to_regclass($1) \
             ORDER BY 1",
            &[&table],
        )
        .await
        .unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

/// `(slot, gen)` of the user's listing, sorted by slot.
async fn listed(store: &dyn Store, user: &UserKey) -> Vec<(String, i64)> {
    let mut sessions: Vec<(String, i64)> = store
        .list_sessions(user)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.slot, s.generation))
        .collect();
    sessions.sort();
    sessions
}

/// A table created by the store has the listing index from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_table_has_the_listing_index() {
    let server = common::server();
    let admin = common::connect(&server).await;
    let table = fresh("listing_new");
    admin
        .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .unwrap();
    let _store = common::store_on(&server, &table).await;
    assert_eq!(
        indexes(&admin, &table).await,
        [format!("{table}_pk_c"), format!("{table}_pkey")]
    );
}

/// A table made before slots: the check refuses it naming the index to create; servers
/// starting together with `--create-table` each succeed, and the index is built once; then
/// the check passes and the records already there (old default-slot rows) are listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_from_before_slots_is_refused_then_indexed_once() {
    let server = common::server();
    let admin = common::connect(&server).await;
    let table = fresh("listing_old");
    admin
        .batch_execute(&schema_2_before_slots(&table))
        .await
        .unwrap();
    admin
        .batch_execute(&format!(
            "INSERT INTO {table} (pk, gen, owner, cid) VALUES \
             ('old#prod#5', 3, '{{\"endpoint\":\"http://old.invalid/kick\"}}', 'c-old')"
        ))
        .await
        .unwrap();

    let store = common::builder(server.url(), &table).build().unwrap();
    let refused = store.check().await.unwrap_err();
    assert!(refused.is_unavailable(), "{refused:?}");
    let message = refused.to_string();
    assert!(message.contains("no index for listing"), "{message}");
    assert!(message.contains("--create-table"), "{message}");
    assert!(
        message.contains(&format!(
            "CREATE INDEX IF NOT EXISTS \"{table}_pk_c\" ON \"{table}\" (pk COLLATE \"C\")"
        )),
        "{message}"
    );

    let starts: Vec<_> = (0..6)
        .map(|_| {
            let store = common::builder(server.url(), &table).build().unwrap();
            tokio::spawn(async move { store.create_table_if_missing().await })
        })
        .collect();
    for start in starts {
        assert!(
            !start.await.unwrap().expect("each start succeeds"),
            "none creates the table"
        );
    }
    assert_eq!(
        indexes(&admin, &table).await,
        [format!("{table}_pk_c"), format!("{table}_pkey")]
    );
    store.check().await.expect("the indexed table passes");

    let user = UserKey::new("old", "prod", 5);
    Arbiter::new(store.clone())
        .claim(&claim(&user.key("pc"), "http://pc.invalid/kick", "c-pc"))
        .await
        .unwrap();
    assert_eq!(
        listed(&store, &user).await,
        [(String::new(), 3), ("pc".to_owned(), 1)]
    );
}

/// An index an operator built by hand (`CONCURRENTLY`, under a name of their own) is the
/// listing index: the check passes and the store builds no second one. An index on `pk` in
/// the database's collation, or with `text_pattern_ops`, cannot serve the range and does
/// not count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_built_by_hand_under_any_name_counts() {
    let server = common::server();
    let admin = common::connect(&server).await;
    let table = fresh("listing_by_hand");
    admin
        .batch_execute(&schema_2_before_slots(&table))
        .await
        .unwrap();
    admin
        .batch_execute(&format!(
            "CREATE INDEX {table}_plain ON {table} (pk); \
             CREATE INDEX {table}_pattern ON {table} (pk COLLATE \"C\" text_pattern_ops)"
        ))
        .await
        .unwrap();
    let store = common::builder(server.url(), &table).build().unwrap();
    let refused = store.check().await.unwrap_err().to_string();
    assert!(refused.contains("no index for listing"), "{refused}");

    admin
        .batch_execute(&format!(
            "CREATE INDEX CONCURRENTLY {table}_ops_made ON {table} (pk COLLATE \"C\")"
        ))
        .await
        .unwrap();
    store.check().await.expect("the hand-built index counts");
    assert!(!store.create_table_if_missing().await.unwrap());
    assert_eq!(
        indexes(&admin, &table).await,
        [
            format!("{table}_ops_made"),
            format!("{table}_pattern"),
            format!("{table}_pkey"),
            format!("{table}_plain"),
        ],
        "no second listing index"
    );
}

/// When the listing index's name is taken by another relation of the schema, `CREATE INDEX
/// IF NOT EXISTS` would skip it silently: the store says so, naming a statement that works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_index_name_is_a_clear_error() {
    let server = common::server();
    let admin = common::connect(&server).await;
    let table = fresh("listing_taken");
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}_pk_c; CREATE TABLE {table}_pk_c (x int); {}",
            schema_2_before_slots(&table)
        ))
        .await
        .unwrap();
    let store = common::builder(server.url(), &table).build().unwrap();
    let err = store.create_table_if_missing().await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("is taken by another relation"),
        "{message}"
    );
    assert!(
        message.contains(&format!("CREATE INDEX ON \"{table}\" (pk COLLATE \"C\")")),
        "{message}"
    );
    assert_eq!(indexes(&admin, &table).await, [format!("{table}_pkey")]);
}

/// The premise of the "C" collation, in a database whose collation ignores punctuation:
/// there a user's slots are not in the range `[p#e#u#, p#e#u$)` compared in the column's
/// own collation (`#` and `$` weigh nothing), yet the store lists every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_slot_is_listed_where_the_collation_ignores_punctuation() {
    let server = common::server();
    let url = common::punctuation_blind_database(&server).await;
    let table = fresh("listing_blind");
    let admin = common::connect_to(&url).await;
    admin
        .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .unwrap();
    let store = common::store_at(&url, &table).await;
    let arbiter = Arbiter::new(store.clone());
    let user = UserKey::new("p", "e", 4);
    for slot in ["", "a", "mobile", "$"] {
        arbiter
            .claim(&claim(
                &user.key(slot),
                "http://n.invalid/kick",
                &format!("cid-{slot}"),
            ))
            .await
            .unwrap();
    }
    let (start, end) = user.slot_range();
    let in_own_collation: i64 = admin
        .query_one(
            &format!("SELECT count(*) FROM {table} WHERE pk >= $1 AND pk < $2"),
            &[&start, &end],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        in_own_collation < 3,
        "the database's collation must be one where the byte range misses slots \
         ({in_own_collation} of 3 in it)"
    );
    assert_eq!(
        listed(&store, &user).await,
        [
            (String::new(), 1),
            ("$".to_owned(), 1),
            ("a".to_owned(), 1),
            ("mobile".to_owned(), 1)
        ]
    );
}
