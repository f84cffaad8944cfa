//! TLS against a real PostgreSQL that accepts only TLS over TCP (`ssl = on`, a `hostssl`-only
//! `pg_hba.conf`, its certificate for `127.0.0.1` and `localhost` from a CA made at test time):
//! each `sslmode` connects or is refused as libpq's would, and each refusal names its cause.
//! A plain server (the one the other tests use) shows the other side of `require` and
//! `prefer`.

mod common;

use std::path::Path;

use common::claim;
use unique_core::{Arbiter, Error, Key, Store};
use unique_store_postgres::PostgresStore;
use unique_testsupport::pki::TestPki;
use unique_testsupport::postgres::{self, DATABASE, PASSWORD, PostgresServer, USER};

const TABLE: &str = "unique_tls";

/// The TLS-only server's URL with `params` as its query.
fn url_with(server: &PostgresServer, params: &str) -> String {
    format!("{}?{params}", server.url())
}

/// The same database as a `key=value` string, connecting to 127.0.0.1 while TLS checks the
/// certificate against `host`, a name it does not hold.
fn keywords_for(server: &PostgresServer, host: &str, params: &str) -> String {
    let port = server.addr().expect("a private server").port();
    format!(
        "host={host} hostaddr=127.0.0.1 port={port} user={USER} password={PASSWORD} \
         dbname={DATABASE} {params}"
    )
}

fn ca(server: &PostgresServer) -> &Path {
    &server.tls().expect("a TLS server").ca_file
}

fn other_ca(server: &PostgresServer) -> &Path {
    &server.tls().expect("a TLS server").other_ca_file
}

/// A store on `url` with its table created and checked.
async fn usable(url: &str) -> PostgresStore {
    common::store_at(url, TABLE).await
}

/// The startup check's error for `url`; never with the password.
async fn refused(url: &str) -> Error {
    let store = common::builder(url, TABLE)
        .build()
        .expect("a url it can parse");
    let e = store.check().await.expect_err("the check must fail");
    assert!(e.is_unavailable(), "{e}");
    assert!(!e.to_string().contains(PASSWORD), "{e}");
    e
}

/// A login and a read through the store over that connection: gen 1, then the owner.
async fn claim_and_read(store: PostgresStore, uid: i64) {
    let key = Key::new("tls", "test", uid);
    let outcome = Arbiter::new(store.clone())
        .claim(&claim(
            &key,
            "http://127.0.0.1:9/kick",
            &format!("cid-{uid}"),
        ))
        .await
        .unwrap();
    assert_eq!(outcome.generation, 1);
    let read = store.read_owner(&key).await.unwrap();
    assert_eq!(read.generation, 1);
    assert_eq!(
        read.owner.map(|o| o.endpoint),
        Some("http://127.0.0.1:9/kick".to_owned())
    );
}

/// verify-full with the server's CA: the chain and the host (`127.0.0.1`, an IP name of
/// the certificate; `localhost`, a DNS name) check out, a claim and a read go through, in
/// the URL's query form with the CA's path percent-encoded and in `key=value` form. Channel
/// binding (`tls-server-end-point`) works over it: `channel_binding=require` connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_the_right_ca_claims_and_reads() {
    let server = postgres::shared_tls();
    let ca_path = ca(&server).display().to_string();
    let encoded = ca_path.replace('/', "%2F");
    let url = url_with(
        &server,
        &format!("sslmode=verify-full&sslrootcert={encoded}"),
    );
    let store = usable(&url).await;
    assert_eq!(
        store.tls(),
        format!("sslmode=verify-full, sslrootcert={ca_path}")
    );
    claim_and_read(store, 1).await;

    let port = server.addr().unwrap().port();
    let by_name = format!(
        "host=localhost port={port} user={USER} password={PASSWORD} dbname={DATABASE} \
         sslmode=verify-full sslrootcert='{ca_path}' channel_binding=require"
    );
    claim_and_read(usable(&by_name).await, 2).await;

    // No sslmode, a root file: verify-full, even on loopback.
    let store = usable(&url_with(&server, &format!("sslrootcert={ca_path}"))).await;
    assert!(
        store
            .tls()
            .starts_with("sslmode=verify-full (the default with sslrootcert)")
    );
    claim_and_read(store, 3).await;
}

/// verify-ca checks the chain and not the host: a name the certificate does not hold
/// passes it, and fails verify-full with the certificate problem named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_ca_checks_the_chain_not_the_host_name() {
    let server = postgres::shared_tls();
    let ca_path = ca(&server).display();
    let verify_ca = keywords_for(
        &server,
        "db.invalid",
        &format!("sslmode=verify-ca sslrootcert={ca_path}"),
    );
    claim_and_read(usable(&verify_ca).await, 10).await;

    let verify_full = keywords_for(
        &server,
        "db.invalid",
        &format!("sslmode=verify-full sslrootcert={ca_path}"),
    );
    let e = refused(&verify_full).await.to_string();
    assert!(
        e.contains("TLS: the server's certificate is not valid for the host name"),
        "{e}"
    );
    assert!(e.contains("db.invalid"), "rustls names the host: {e}");
}

/// A CA that did not sign the server's certificate: refused at the startup check by
/// verify-full, verify-ca and require with that root file (which libpq makes verify-ca),
/// each saying the certificate is not signed by a trusted CA and naming the file; for a CA
/// of another name (the issuer is unknown) and for one made again under the server CA's
/// name (its signature does not verify).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_refused_naming_the_certificate_problem() {
    let server = postgres::shared_tls();
    let dir = tempfile::tempdir().unwrap();
    let same_name = dir.path().join("same-name-ca.pem");
    std::fs::write(&same_name, TestPki::generate().server_ca).unwrap();
    for (root, problem) in [
        (other_ca(&server), "UnknownIssuer"),
        (same_name.as_path(), "BadSignature"),
    ] {
        let root = root.display().to_string();
        for mode in ["verify-full", "verify-ca", "require"] {
            let url = url_with(&server, &format!("sslmode={mode}&sslrootcert={root}"));
            let e = refused(&url).await.to_string();
            assert!(
                e.contains("TLS: ")
                    && e.contains("the server's certificate is not signed by a trusted CA"),
                "{mode}: {e}"
            );
            assert!(e.contains(problem), "{mode}: {e}");
            assert!(
                e.contains(&format!("sslmode={mode}, sslrootcert={root}")),
                "{mode}: {e}"
            );
        }
    }
}

/// Without TLS the server has no `pg_hba.conf` line for the connection: `sslmode=disable`,
/// and no sslmode at all on a loopback host (plain, as before TLS support), are refused
/// with the server's words and a hint that it may want TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_without_tls_is_refused_saying_so() {
    let server = postgres::shared_tls();
    for (url, setup) in [
        (url_with(&server, "sslmode=disable"), "sslmode=disable"),
        (
            server.url().to_owned(),
            "sslmode=disable (the default for a loopback host)",
        ),
    ] {
        let e = refused(&url).await.to_string();
        assert!(e.contains("no pg_hba.conf entry"), "{e}");
        assert!(e.contains("no encryption"), "{e}");
        assert!(
            e.contains(&format!("the connection did not use TLS ({setup})")),
            "{e}"
        );
        assert!(e.contains("needs sslmode=verify-full"), "{e}");
    }
}

/// require without a root file takes any certificate (as libpq), prefer takes TLS when
/// offered: both connect to the TLS-only server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_and_prefer_connect_without_a_root() {
    let server = postgres::shared_tls();
    let store = usable(&url_with(&server, "sslmode=require")).await;
    assert_eq!(store.tls(), "sslmode=require, certificate not checked");
    claim_and_read(store, 20).await;
    claim_and_read(usable(&url_with(&server, "sslmode=prefer")).await, 21).await;
}

/// A server without TLS: require is refused saying the server does not support TLS, and
/// prefer falls back to a plain connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_tls_refuses_require_and_serves_prefer() {
    let server = PostgresServer::start_private();
    let e = refused(&url_with(&server, "sslmode=require"))
        .await
        .to_string();
    assert!(e.contains("TLS: server does not support TLS"), "{e}");
    assert!(e.contains("sslmode=require"), "{e}");
    claim_and_read(usable(&url_with(&server, "sslmode=prefer")).await, 30).await;
}
