#![doc = include_str!("../README.md")]
//!
//! ## Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `node` (default) | the `node` module: the `Node` runtime, the HTTP transport, the kick receiver, kick signatures; `wire` |
//! | `server` | the `server` module: the `Arbiter` over HTTP, the accept loop, the HTTP kicker; `wire` |
//! | `memory`, `sqlite`, `fjall`, `postgres`, `dynamodb` | one store each in [`store`] (the SQL and DynamoDB crates with their lease directories) |
//! | `metrics` | `metrics`: the metrics observer and store wrapper |
//! | `lease` | `lease`: the room lease directory and node registry |
//! | `store-contract` | `store_contract`: the suite a store backend runs on itself |
//!
//! Each part is also its own crate (`unique-client`, `unique-store-sqlite`, …), re-exported
//! whole under the names below, for those who want just one.

/// The domain, the traits and the `Arbiter` (`unique-core`), always included.
pub use unique_core as core;
pub use unique_core::{
    Arbiter, ArbiterBuilder, ClaimInput, ClaimOutcome, CurrentView, Error, EvictReason, Key,
    KickDetail, KickPayload, KickReason, LogoutInput, LogoutOutcome, Owner, PoolPolicy,
    PoolRequest, PooledOutcome, PooledSession, Store, UserKey, UserSession,
};

/// The HTTP wire contract both sides speak (`unique-wire`): routes, bodies, the kick body.
#[cfg(any(feature = "node", feature = "server"))]
pub use unique_wire as wire;

/// A backend that holds sessions: everything a node wires, in one place.
#[cfg(feature = "node")]
pub mod node {
    pub use unique_client::{
        Claimer, ClaimerOptions, Drain, EndNotice, Ending, HeartbeatOptions, KickAck, KickHandler,
        KickOptions, Login, LoginError, Node, NodeBuilder, NodeEvent, NodeEvents, NodeLoginError,
        PendingLogin, PooledLogin, Session, Shutdown, Transport,
    };
    pub use unique_client_http::{HttpTransport, HttpTransportBuilder};
    pub use unique_kick_signature::SigningKeys;
    pub use unique_kickrecv::{KickReceiver, KickReceiverBuilder, KickService, ServeOptions};

    /// The client crate whole (`unique-client`).
    pub use unique_client as client;
    /// The HTTP transport crate whole (`unique-client-http`).
    pub use unique_client_http as client_http;
    /// The kick signature crate whole (`unique-kick-signature`).
    pub use unique_kick_signature as kick_signature;
    /// The kick receiver crate whole (`unique-kickrecv`).
    pub use unique_kickrecv as kickrecv;
}

/// The arbitration over HTTP in your own program (pick a store from [`store`]).
#[cfg(feature = "server")]
pub mod server {
    pub use unique_arbiter_http::{ArbiterService, Grant, Tokens, serve, serve_with};
    pub use unique_kick_http::{EndpointPolicy, HttpKicker, HttpKickerBuilder};
    pub use unique_kick_signature::SigningKeys;
    pub use unique_listener::ServeOptions;

    /// The HTTP adapter whole (`unique-arbiter-http`).
    pub use unique_arbiter_http as arbiter_http;
    /// The HTTP kicker whole (`unique-kick-http`).
    pub use unique_kick_http as kick_http;
    /// The accept loop whole (`unique-listener`).
    pub use unique_listener as listener;
}

/// The stores, one feature each.
pub mod store {
    #[cfg(feature = "dynamodb")]
    pub use unique_store_dynamodb::{DynamoStore, DynamoStoreBuilder};
    #[cfg(feature = "fjall")]
    pub use unique_store_fjall::{FjallStore, FjallStoreBuilder};
    #[cfg(feature = "memory")]
    pub use unique_store_memory::MemoryStore;
    #[cfg(feature = "postgres")]
    pub use unique_store_postgres::{PostgresStore, PostgresStoreBuilder};
    #[cfg(feature = "sqlite")]
    pub use unique_store_sqlite::{SqliteStore, SqliteStoreBuilder};

    /// The DynamoDB store whole (`unique-store-dynamodb`).
    #[cfg(feature = "dynamodb")]
    pub use unique_store_dynamodb as dynamodb;
    /// The fjall store whole (`unique-store-fjall`).
    #[cfg(feature = "fjall")]
    pub use unique_store_fjall as fjall;
    /// The in-memory store whole (`unique-store-memory`).
    #[cfg(feature = "memory")]
    pub use unique_store_memory as memory;
    /// The PostgreSQL store whole (`unique-store-postgres`).
    #[cfg(feature = "postgres")]
    pub use unique_store_postgres as postgres;
    /// The SQLite store whole (`unique-store-sqlite`).
    #[cfg(feature = "sqlite")]
    pub use unique_store_sqlite as sqlite;
}

/// Metrics through the `metrics` facade (`unique-metrics`).
#[cfg(feature = "metrics")]
pub use unique_metrics as metrics;

/// The room lease directory and node registry (`unique-lease`).
#[cfg(feature = "lease")]
pub use unique_lease as lease;

/// The store contract suite (`unique-store-contract`).
#[cfg(feature = "store-contract")]
pub use unique_store_contract as store_contract;
