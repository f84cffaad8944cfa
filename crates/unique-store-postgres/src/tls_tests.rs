//! Unit tests of `tls.rs`.
use super::*;

fn take(url: &str) -> (String, TlsParams) {
    TlsParams::take(url).unwrap()
}

fn file(path: &str) -> RootCert {
    RootCert::File(PathBuf::from(path))
}

#[test]
fn url_queries_lose_only_the_tls_parameters() {
    let (rest, params) =
        take("postgres://u:p@h:5432/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem");
    assert_eq!(rest, "postgres://u:p@h:5432/db");
    assert_eq!(params.mode, Some(SslMode::VerifyFull));
    assert_eq!(params.root_cert, Some(file("/etc/ca.pem")));

    let (rest, params) =
        take("postgresql://u@h/db?application_name=a%26b&sslrootcert=/p/ca.pem&connect_timeout=5");
    assert_eq!(
        rest,
        "postgresql://u@h/db?application_name=a%26b&connect_timeout=5"
    );
    assert_eq!(params.mode, None);
    assert_eq!(params.root_cert, Some(file("/p/ca.pem")));

    // The last of each wins, as in libpq; a `?` in the password is not the query.
    let (rest, params) = take("postgres://u:a?b@h/db?sslmode=require&sslmode=disable");
    assert_eq!(rest, "postgres://u:a?b@h/db");
    assert_eq!(params.mode, Some(SslMode::Disable));

    let (rest, params) = take("postgres://u@h/db?sslrootcert=system");
    assert_eq!(rest, "postgres://u@h/db");
    assert_eq!(params.root_cert, Some(RootCert::System));

    for untouched in [
        "postgres://u@h/db",
        "postgres://u@h/db?junk",
        "postgres://h",
    ] {
        assert_eq!(
            take(untouched),
            (untouched.to_owned(), TlsParams::default())
        );
    }
}

#[test]
fn keyword_strings_lose_only_the_tls_parameters() {
    let (rest, params) =
        take("host=h sslmode = verify-ca user=u sslrootcert='/a dir/ca\\'s.pem' password=p\\ q");
    assert_eq!(rest, "host=h user=u password=p\\ q");
    assert_eq!(params.mode, Some(SslMode::VerifyCa));
    assert_eq!(params.root_cert, Some(file("/a dir/ca's.pem")));
    assert_eq!(
        rest.parse::<tokio_postgres::Config>()
            .unwrap()
            .get_password(),
        Some(&b"p q"[..])
    );

    let (rest, params) = take("  sslmode=require  ");
    assert_eq!(rest, "");
    assert_eq!(params.mode, Some(SslMode::Require));

    // What cannot be read goes to the driver whole, for its own error.
    for broken in ["host=h sslmode", "host='h sslmode=require", "host= "] {
        assert_eq!(take(broken), (broken.to_owned(), TlsParams::default()));
    }
}

#[test]
fn unknown_modes_and_client_certificates_are_refused_without_echo() {
    for url in [
        "postgres://u:s3cret@h/db?sslmode=allow",
        "postgres://u:s3cret@h/db?sslmode=verify_full",
        "host=h password=s3cret sslmode=bogus",
    ] {
        let e = TlsParams::take(url).unwrap_err();
        assert!(e.is_invalid_params());
        assert!(e.to_string().contains("verify-ca or verify-full"), "{e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }
    let e = TlsParams::take("postgres://u@h/db?sslcert=/c.pem").unwrap_err();
    assert!(e.to_string().contains("sslcert is not supported"), "{e}");
}

fn resolve(url: &str) -> Result<(TlsSetup, DriverMode), Error> {
    let (rest, params) = TlsParams::take(url)?;
    let config = rest.parse().unwrap();
    TlsSetup::resolve(params, &config).map(|(setup, mode, _)| (setup, mode))
}

#[test]
fn without_sslmode_loopback_stays_plain_and_other_hosts_verify_fully() {
    for loopback in [
        "postgres://u@127.0.0.1/db",
        "postgres://u@127.3.2.1:6543/db",
        "postgres://u@localhost/db",
        "postgres://u@LOCALHOST/db",
        "postgres://u@[::1]:5432/db",
        "host=/tmp,127.0.0.1 user=u",
        "host=db.internal hostaddr=127.0.0.1 user=u",
    ] {
        let (setup, driver) = resolve(loopback).unwrap();
        assert_eq!(setup.mode, SslMode::Disable, "{loopback}");
        assert_eq!(driver, DriverMode::Disable, "{loopback}");
        assert!(setup.plain());
        assert_eq!(
            setup.to_string(),
            "sslmode=disable (the default for a loopback host)"
        );
    }
    for remote in [
        "postgres://u@db.internal/db",
        "postgres://u@10.0.0.7/db",
        "postgres://u@localhost.example.com/db",
        "postgres://u@127.0.0.1,db.internal/db",
        "host=localhost hostaddr=10.0.0.7 user=u",
        "postgres://u@[::ffff:10.0.0.1]/db",
    ] {
        let (setup, driver) = resolve(remote).unwrap();
        assert_eq!(setup.mode, SslMode::VerifyFull, "{remote}");
        assert_eq!(driver, DriverMode::Require, "{remote}");
        assert_eq!(setup.roots, Some(RootCert::System));
        assert_eq!(
            setup.to_string(),
            "sslmode=verify-full (the default for a host not on loopback), \
             the system roots (webpki-roots)"
        );
    }
}

#[test]
fn each_mode_tells_the_driver_and_trusts_what_libpq_would() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, unique_testsupport::pki::TestPki::generate().server_ca).unwrap();
    let ca = ca.display().to_string();
    let system = Some(RootCert::System);
    let cases = [
        ("sslmode=disable".to_owned(), DriverMode::Disable, None),
        ("sslmode=prefer".to_owned(), DriverMode::Prefer, None),
        (
            format!("sslmode=prefer sslrootcert={ca}"),
            DriverMode::Prefer,
            None,
        ),
        ("sslmode=require".to_owned(), DriverMode::Require, None),
        // libpq: require with a root file verifies the chain, as verify-ca.
        (
            format!("sslmode=require sslrootcert={ca}"),
            DriverMode::Require,
            Some(file(&ca)),
        ),
        (
            format!("sslmode=verify-ca sslrootcert={ca}"),
            DriverMode::Require,
            Some(file(&ca)),
        ),
        (
            "sslmode=verify-full".to_owned(),
            DriverMode::Require,
            system.clone(),
        ),
        (
            "sslmode=verify-full sslrootcert=system".to_owned(),
            DriverMode::Require,
            system.clone(),
        ),
        ("sslrootcert=system".to_owned(), DriverMode::Require, system),
        (
            format!("sslmode=verify-full sslrootcert={ca}"),
            DriverMode::Require,
            Some(file(&ca)),
        ),
        (
            format!("sslrootcert={ca}"),
            DriverMode::Require,
            Some(file(&ca)),
        ),
    ];
    for (params, driver, roots) in cases {
        // On loopback: an explicit mode or root file applies there too.
        let (setup, told) = resolve(&format!("host=127.0.0.1 {params}")).unwrap();
        assert_eq!(told, driver, "{params}");
        assert_eq!(setup.roots, roots, "{params}");
    }
    let (setup, _) = resolve(&format!("host=h sslrootcert={ca}")).unwrap();
    assert_eq!(
        setup.to_string(),
        format!("sslmode=verify-full (the default with sslrootcert), sslrootcert={ca}")
    );
    let (setup, _) = resolve("host=h sslmode=require").unwrap();
    assert_eq!(
        setup.to_string(),
        "sslmode=require, certificate not checked"
    );
    // No TLS over a Unix socket, whatever the mode (libpq ignores it there).
    for socket in [
        "host=/run/postgresql sslmode=verify-full".to_owned(),
        format!("host=/run/postgresql sslrootcert={ca}"),
        "postgres://u@%2Fvar%2Frun%2Fpostgresql/db".to_owned(),
    ] {
        let (setup, told) = resolve(&socket).unwrap();
        assert_eq!(told, DriverMode::Disable, "{socket}");
        assert!(setup.plain(), "{socket}");
        assert!(
            setup.to_string().contains("no TLS over a Unix socket"),
            "{setup}"
        );
    }
}

#[test]
fn what_libpq_refuses_is_refused_at_build() {
    for (url, says) in [
        (
            "host=h sslmode=verify-ca",
            "verify-ca needs sslrootcert=PATH",
        ),
        (
            "host=h sslmode=require sslrootcert=system",
            "needs sslmode=verify-full",
        ),
        (
            "host=h sslmode=verify-ca sslrootcert=system",
            "needs sslmode=verify-full",
        ),
        (
            "host=h sslmode=disable sslrootcert=system",
            "needs sslmode=verify-full",
        ),
        (
            "host=h sslrootcert=/no/such/ca.pem",
            "sslrootcert /no/such/ca.pem: cannot read it",
        ),
    ] {
        let e = resolve(url).unwrap_err();
        assert!(e.is_invalid_params(), "{url}");
        assert!(e.to_string().contains(says), "{url}: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let e = resolve(&format!("host=h sslrootcert={}", empty.display())).unwrap_err();
    assert!(e.to_string().contains("holds no certificate"), "{e}");
}

#[test]
fn each_certificate_problem_has_its_words() {
    use rustls::CertificateError as C;
    let cases = [
        (C::UnknownIssuer, "not signed by a trusted CA"),
        (C::NotValidForName, "not valid for the host name"),
        (C::Expired, "has expired"),
        (C::NotValidYet, "not valid yet"),
        (C::BadSignature, "signature does not verify"),
        (C::Revoked, "certificate was refused"),
    ];
    for (problem, words) in cases {
        let described = describe_rustls(&rustls::Error::InvalidCertificate(problem));
        assert!(described.contains(words), "{described}");
    }
    let described = describe_rustls(&rustls::Error::NoCertificatesPresented);
    assert!(described.starts_with("the handshake failed"), "{described}");
    // Found inside the io::Error tokio-rustls wraps it in.
    let wrapped = std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        rustls::Error::InvalidCertificate(C::UnknownIssuer),
    );
    assert!(rustls_error(&wrapped).is_some());
}

#[test]
fn percent_decoding_matches_the_drivers() {
    assert_eq!(
        percent_decode("%2Fa%20b%zz%4").as_deref(),
        Some("/a b%zz%4")
    );
    assert_eq!(percent_decode("%ff"), None);
}
