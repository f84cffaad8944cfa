//! `--ca-cert`: an https server whose certificate a private CA (generated here) signed is
//! reached with that CA, and refused without it (status 1, the certificate named); a CA file
//! that is not usable is status 2.

mod common;

use std::sync::Arc;

use common::{NODE, Server, unique};
use unique_arbiter_http::ServeOptions;
use unique_testsupport::pki::TestPki;

#[tokio::test]
async fn a_private_ca_is_trusted_only_when_given() {
    let pki = TestPki::generate();
    let config = unique_tls::server_config_from_pem(
        pki.server_chain.as_bytes(),
        pki.server_key.as_bytes(),
        None,
    )
    .unwrap();
    let server = Server::start_with(
        Some(common::tokens()),
        ServeOptions::default().tls(Arc::new(config)),
    )
    .await;
    assert!(
        server.url.starts_with("https://127.0.0.1:"),
        "{}",
        server.url
    );
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.server_ca).unwrap();
    let current = [
        "current",
        "--project",
        "game",
        "--env",
        "prod",
        "--uid",
        "42",
    ];

    let run = unique(
        &server.url,
        Some(NODE),
        &[&current[..], &["--ca-cert", ca.to_str().unwrap()]].concat(),
        None,
    )
    .await;
    assert_eq!(
        run.status(0).stdout,
        "no record: never logged in (the next login gets gen 1)\n"
    );

    // The public web roots do not know the private CA.
    let run = unique(&server.url, Some(NODE), &current, None).await;
    run.status(1);
    assert!(run.stderr.contains("certificate"), "{run:#?}");

    // Another CA: refused too.
    let other = dir.path().join("other.pem");
    std::fs::write(&other, TestPki::generate().server_ca).unwrap();
    let run = unique(
        &server.url,
        Some(NODE),
        &[&current[..], &["--ca-cert", other.to_str().unwrap()]].concat(),
        None,
    )
    .await;
    run.status(1);

    // A file without a certificate, and no file at all.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    for path in [empty, dir.path().join("missing.pem")] {
        let run = unique(
            &server.url,
            Some(NODE),
            &[&current[..], &["--ca-cert", path.to_str().unwrap()]].concat(),
            None,
        )
        .await;
        run.status(2);
        assert!(run.stderr.starts_with("unique: --ca-cert: "), "{run:#?}");
    }
}
