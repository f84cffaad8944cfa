//! The store contract suite run against `PostgresStore` in a database whose default
//! collation is not bytewise: ICU's `en-US-u-ka-shifted`, which ignores `#` and `$` at its
//! first level as glibc's `en_US.UTF-8` does (see `common::punctuation_blind_database`).
//! Every key is compared in it, so the listing's byte range (C10) must not be.

mod common;

use unique_store_contract::store_contract_tests;

store_contract_tests!(common::punctuation_blind_subject);
