//! The store contract suite (`unique-store-contract`, C1–C10 and the traps) run against
//! `PostgresStore` on a real PostgreSQL server (started by the test tooling, or the database
//! named by `UNIQUE_TEST_DATABASE_URL`), one test per case.

mod common;

use unique_store_contract::store_contract_tests;

store_contract_tests!(common::subject);
