//! TLS to PostgreSQL with libpq's URL conventions, `sslmode` and `sslrootcert`, over rustls
//! with the ring provider (see the crate docs' TLS section).
//!
//! tokio-postgres knows `sslmode` only as `disable`, `prefer` and `require` (it refuses
//! `verify-ca` and `verify-full`), does not know `sslrootcert`, and leaves every certificate
//! check to the connector it is given. So [`TlsParams::take`] takes both parameters out of
//! the URL before the driver parses the rest, and [`TlsSetup::resolve`] decides what the
//! driver is told (whether to ask for TLS, whether a refusal is final) and what the rustls
//! configuration checks (nothing, the chain, or the chain and the host name).

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::{Host, SslMode as DriverMode};
use tokio_postgres_rustls::MakeRustlsConnect;
use unique_core::Error;

/// libpq's `sslmode` values, `allow` aside (tokio-postgres cannot start plain and switch to
/// TLS on the server's demand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, plain when it refuses; the certificate is not checked.
    Prefer,
    /// TLS or no connection; the certificate is not checked (unless `sslrootcert` names a
    /// file: then as `VerifyCa`, as in libpq).
    Require,
    /// TLS, the chain checked up to a root of `sslrootcert`; not the host name.
    VerifyCa,
    /// TLS, the chain and the host name checked.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, Error> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            // The value is not repeated: nothing of the URL's query goes into a message.
            _ => {
                return Err(Error::invalid(
                    "postgres connection url: sslmode must be disable, prefer, require, \
                     verify-ca or verify-full",
                ));
            }
        })
    }

    /// libpq's name of the mode.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// `sslrootcert`: a PEM file, or `system` (libpq 16) for the system roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootCert {
    /// The system roots: Mozilla's, from `webpki-roots` (what the workspace's other TLS
    /// clients trust), not the operating system's store.
    System,
    /// A PEM bundle of CA certificates.
    File(PathBuf),
}

/// The URL's TLS parameters.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsParams {
    pub(crate) mode: Option<SslMode>,
    pub(crate) root_cert: Option<RootCert>,
}

impl TlsParams {
    /// Takes `sslmode` and `sslrootcert` out of `url` (a `postgres://` URL's query, or a
    /// `key=value` string): the rest, for the driver, and their values (the last of each,
    /// as in libpq). A string these rules cannot read is handed back whole, for the
    /// driver's own parse error.
    ///
    /// # Errors
    ///
    /// `InvalidParams` for an `sslmode` that is not one of libpq's (`allow` included, which
    /// the driver cannot do), and for libpq's client certificate and revocation parameters,
    /// which this store does not support.
    pub(crate) fn take(url: &str) -> Result<(String, Self), Error> {
        let mut params = Self::default();
        let kept = if let Some(body) = url_body(url) {
            match query_start(url, body) {
                Some(start) => params.take_from_query(url, start)?,
                None => url.to_owned(),
            }
        } else {
            params.take_from_keywords(url)?
        };
        Ok((kept, params))
    }

    /// Records `key`'s value when it is one of the TLS parameters; `false` for any other.
    fn take_one(&mut self, key: &str, value: &str) -> Result<bool, Error> {
        match key {
            "sslmode" => self.mode = Some(SslMode::parse(value)?),
            "sslrootcert" if value == "system" => self.root_cert = Some(RootCert::System),
            "sslrootcert" => self.root_cert = Some(RootCert::File(PathBuf::from(value))),
            "sslcert" | "sslkey" | "sslpassword" | "sslcertmode" | "sslcrl" | "sslcrldir" => {
                return Err(Error::invalid(format!(
                    "postgres connection url: {key} is not supported (no client certificates \
                     or revocation lists; TLS takes sslmode and sslrootcert)"
                )));
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The URL without the TLS parameters of its query, which starts at `start`. Pairs are
    /// split as tokio-postgres splits them: the key up to the next `=`, the value up to
    /// the next `&`, both percent-decoded; every other pair is kept as written.
    fn take_from_query(&mut self, url: &str, start: usize) -> Result<String, Error> {
        let (head, mut rest) = url.split_at(start);
        let mut kept = Vec::new();
        while !rest.is_empty() {
            let Some(eq) = rest.find('=') else {
                return Ok(url.to_owned());
            };
            let after = &rest[eq + 1..];
            let (value, next) = after.split_once('&').unwrap_or((after, ""));
            let pair = &rest[..eq + 1 + value.len()];
            let taken = match (percent_decode(&rest[..eq]), percent_decode(value)) {
                (Some(key), Some(value)) => self.take_one(&key, &value)?,
                // Not UTF-8: the driver refuses it.
                _ => false,
            };
            if !taken {
                kept.push(pair);
            }
            rest = next;
        }
        let head = if kept.is_empty() {
            &head[..head.len() - 1]
        } else {
            head
        };
        Ok(format!("{head}{}", kept.join("&")))
    }

    /// The `key=value` string without the TLS parameters, read as tokio-postgres reads it:
    /// a keyword, `=` (with optional blanks around it), and a value that is either quoted
    /// with `'` or runs to the next blank, `\` escaping the character after it in both.
    fn take_from_keywords(&mut self, s: &str) -> Result<String, Error> {
        let mut kept = Vec::new();
        let mut at = 0;
        loop {
            at = skip_blanks(s, at);
            if at == s.len() {
                break;
            }
            let Some((key, value, end)) = keyword_pair(s, at) else {
                return Ok(s.to_owned());
            };
            if !self.take_one(key, &value)? {
                kept.push(&s[at..end]);
            }
            at = end;
        }
        Ok(kept.join(" "))
    }
}

/// Where a `postgres://` or `postgresql://` URL's body starts; `None` for a `key=value` string.
fn url_body(url: &str) -> Option<usize> {
    ["postgres://", "postgresql://"]
        .into_iter()
        .find(|prefix| url.starts_with(prefix))
        .map(str::len)
}

/// Where the query starts (after its `?`), found as tokio-postgres finds it: the
/// credentials run to the first `@`, the query starts at the next `?`.
fn query_start(url: &str, body: usize) -> Option<usize> {
    let after_credentials = url[body..].find('@').map_or(body, |at| body + at + 1);
    url[after_credentials..]
        .find('?')
        .map(|q| after_credentials + q + 1)
}

fn skip_blanks(s: &str, mut at: usize) -> usize {
    while let Some(c) = s[at..].chars().next().filter(|c| c.is_whitespace()) {
        at += c.len_utf8();
    }
    at
}

/// The `keyword = value` at `at`: the keyword, the unescaped value, and where it ends.
fn keyword_pair(s: &str, at: usize) -> Option<(&str, String, usize)> {
    let key_end = s[at..]
        .find(|c: char| c.is_whitespace() || c == '=')
        .map_or(s.len(), |i| at + i);
    let key = &s[at..key_end];
    let eq = skip_blanks(s, key_end);
    if key.is_empty() || !s[eq..].starts_with('=') {
        return None;
    }
    let start = skip_blanks(s, eq + 1);
    let mut value = String::new();
    let mut chars = s[start..].char_indices();
    let quoted = s[start..].starts_with('\'');
    if quoted {
        chars.next();
    }
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => value.extend(chars.next().map(|(_, escaped)| escaped)),
            '\'' if quoted => return Some((key, value, start + i + 1)),
            c if c.is_whitespace() && !quoted => return Some((key, value, start + i)),
            c => value.push(c),
        }
    }
    // An unterminated quote, or an empty value: the driver's parse error says which.
    (!quoted && !value.is_empty()).then_some((key, value, s.len()))
}

/// `%XX` sequences decoded (others left as they are, as the `percent-encoding` crate the
/// driver uses leaves them); `None` when the result is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            // Two hex digits: at most 0xff.
            out.push(u8::try_from(hi * 16 + lo).unwrap_or(u8::MAX));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What a connection does about TLS, decided once from the URL.
#[derive(Debug, Clone)]
pub(crate) struct TlsSetup {
    /// The mode in force.
    pub(crate) mode: SslMode,
    /// Where the mode came from.
    origin: Origin,
    /// What the certificate check trusts: `None` when nothing is checked.
    roots: Option<RootCert>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// `sslmode` in the URL.
    Url,
    /// No `sslmode`, a `sslrootcert`: verify-full.
    RootCert,
    /// No TLS parameter, every host on loopback: no TLS, as before TLS support.
    LoopbackDefault,
    /// No TLS parameter, a host that is not loopback: verify-full on the system roots.
    RemoteDefault,
    /// Every host a Unix socket, where PostgreSQL has no TLS: libpq ignores `sslmode`.
    UnixSocket,
}

impl TlsSetup {
    /// The setup for `params` on the hosts of `config`, and the connector to give the
    /// driver. A root file is read here, so a missing or unreadable one fails at startup.
    ///
    /// # Errors
    ///
    /// `InvalidParams` for `verify-ca` without `sslrootcert`, `sslrootcert=system` with a
    /// mode weaker than `verify-full` (libpq refuses both), and a root file that cannot be
    /// read or holds no usable certificate.
    pub(crate) fn resolve(
        params: TlsParams,
        config: &tokio_postgres::Config,
    ) -> Result<(Self, DriverMode, MakeRustlsConnect), Error> {
        let mode = match (params.mode, &params.root_cert) {
            (Some(mode), _) => mode,
            (None, None) if loopback_only(config) => SslMode::Disable,
            // A root file given, or a host off this machine: verify it.
            (None, _) => SslMode::VerifyFull,
        };
        let origin = match (params.mode, &params.root_cert) {
            _ if unix_sockets_only(config) => Origin::UnixSocket,
            (Some(_), _) => Origin::Url,
            (None, Some(_)) => Origin::RootCert,
            (None, None) if mode == SslMode::Disable => Origin::LoopbackDefault,
            (None, None) => Origin::RemoteDefault,
        };
        if params.root_cert == Some(RootCert::System) && mode != SslMode::VerifyFull {
            return Err(Error::invalid(
                "postgres connection url: sslrootcert=system needs sslmode=verify-full \
                 (as in libpq: public roots vouch for any public name, so only the host name \
                 check makes them mean anything)",
            ));
        }
        let roots = match (mode, params.root_cert) {
            (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => None,
            (SslMode::VerifyCa, None | Some(RootCert::System)) => {
                return Err(Error::invalid(
                    "postgres connection url: sslmode=verify-ca needs sslrootcert=PATH, a PEM \
                     file of the CA that signed the server's certificate",
                ));
            }
            (SslMode::VerifyFull, None) => Some(RootCert::System),
            (_, Some(roots)) => Some(roots),
        };
        let setup = Self {
            mode,
            origin,
            roots,
        };
        let connector = MakeRustlsConnect::new(setup.client_config()?);
        let driver_mode = setup.driver_mode();
        Ok((setup, driver_mode, connector))
    }

    /// Whether connections go without TLS by this setup (for a refusal's hint).
    pub(crate) fn plain(&self) -> bool {
        self.mode == SslMode::Disable || self.origin == Origin::UnixSocket
    }

    /// What the driver is told: ask for TLS or not, and whether the server's refusal ends
    /// the attempt.
    fn driver_mode(&self) -> DriverMode {
        match self.mode {
            _ if self.origin == Origin::UnixSocket => DriverMode::Disable,
            SslMode::Disable => DriverMode::Disable,
            SslMode::Prefer => DriverMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => DriverMode::Require,
        }
    }

    /// The rustls configuration: `unique-tls`'s (ring, rustls' safe default versions: TLS
    /// 1.2 and 1.3, as PostgreSQL's default `ssl_min_protocol_version`), ALPN `postgresql`
    /// (which PostgreSQL 17 checks when a client offers ALPN), and the certificate check of
    /// the mode: `unique-tls`'s WebPKI check (chain and host name) for `verify-full`,
    /// [`PeerCheck`] for the others.
    fn client_config(&self) -> Result<ClientConfig, Error> {
        let refused = |e: rustls::Error| Error::invalid(format!("postgres tls configuration: {e}"));
        let roots = match &self.roots {
            None => None,
            Some(RootCert::System) => Some(unique_tls::webpki_roots()),
            Some(RootCert::File(path)) => Some(load_roots(path)?),
        };
        // Cannot be missing (see `resolve`); refused rather than trusted if it were.
        let missing = || Error::invalid(format!("postgres tls: {self} has no roots to trust"));
        let provider = unique_tls::provider();
        let peer_check = |chain| {
            unique_tls::client_config_with_verifier(Arc::new(PeerCheck { chain, provider }))
        };
        let mut config = match self.mode {
            SslMode::VerifyFull => unique_tls::client_config(roots.ok_or_else(missing)?),
            SslMode::VerifyCa => peer_check(Some(roots.ok_or_else(missing)?)),
            SslMode::Prefer | SslMode::Require => peer_check(roots),
            // `disable` never starts TLS; its connector trusts nothing all the same.
            SslMode::Disable => peer_check(Some(RootCertStore::empty())),
        }
        .map_err(refused)?;
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(config)
    }
}

/// libpq's words for the setup, for logs and errors: `sslmode=verify-full, sslrootcert=PATH`,
/// with where a default came from. A root file's path is shown (it is where to look when a
/// certificate is refused, and no secret); nothing else of the URL is.
impl fmt::Display for TlsSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sslmode={}", self.mode.name())?;
        match self.origin {
            Origin::Url => {}
            Origin::RootCert => f.write_str(" (the default with sslrootcert)")?,
            Origin::LoopbackDefault => f.write_str(" (the default for a loopback host)")?,
            Origin::RemoteDefault => f.write_str(" (the default for a host not on loopback)")?,
            Origin::UnixSocket => f.write_str(", no TLS over a Unix socket")?,
        }
        match &self.roots {
            _ if self.origin == Origin::UnixSocket => Ok(()),
            None if matches!(self.mode, SslMode::Prefer | SslMode::Require) => {
                f.write_str(", certificate not checked")
            }
            None => Ok(()),
            Some(RootCert::System) => f.write_str(", the system roots (webpki-roots)"),
            Some(RootCert::File(path)) => write!(f, ", sslrootcert={}", path.display()),
        }
    }
}

/// Whether every host of `config` is on this machine: a Unix socket, `localhost`, or an
/// address in 127.0.0.0/8 or `::1` (a host's `hostaddr`, when given, is where the
/// connection goes). A URL without hosts counts, since it cannot connect anyway.
fn loopback_only(config: &tokio_postgres::Config) -> bool {
    let hosts = config.get_hosts();
    let addrs = config.get_hostaddrs();
    (0..hosts.len().max(addrs.len())).all(|i| match (addrs.get(i), hosts.get(i)) {
        (Some(addr), _) => is_loopback(*addr),
        (None, Some(Host::Unix(_))) => true,
        (None, Some(Host::Tcp(name))) => {
            name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok_and(is_loopback)
        }
        (None, None) => false,
    })
}

fn is_loopback(addr: IpAddr) -> bool {
    addr.to_canonical().is_loopback()
}

/// Whether every host is a Unix socket (with no `hostaddr`), where no TLS is possible.
fn unix_sockets_only(config: &tokio_postgres::Config) -> bool {
    let hosts = config.get_hosts();
    !hosts.is_empty()
        && config.get_hostaddrs().is_empty()
        && hosts.iter().all(|host| matches!(host, Host::Unix(_)))
}

/// The certificates of the PEM bundle at `path`.
fn load_roots(path: &Path) -> Result<RootCertStore, Error> {
    let refused =
        |why: String| Error::invalid(format!("postgres sslrootcert {}: {why}", path.display()));
    let pem = std::fs::read(path).map_err(|e| refused(format!("cannot read it: {e}")))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| refused(format!("not a PEM certificate bundle: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| refused(format!("a certificate cannot be a root: {e}")))?;
    }
    if roots.is_empty() {
        return Err(refused(
            "holds no certificate (PEM \"BEGIN CERTIFICATE\" blocks)".to_owned(),
        ));
    }
    Ok(roots)
}

/// The certificate check of `prefer` and `require` (`chain: None`: any certificate, as in
/// libpq) and of `verify-ca` (the chain up to a root of `chain`, for server
/// authentication, at the current time; not the host name). The handshake's signature is
/// verified either way, so the peer holds the key of the certificate it presented (which
/// channel binding then ties to the SCRAM exchange).
#[derive(Debug)]
struct PeerCheck {
    chain: Option<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PeerCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.chain {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The TLS problem behind a failed connection attempt, in words naming it: a certificate
/// rustls refused (not signed by a trusted CA, not for the host name, expired), or the
/// driver's own sentence (`server does not support TLS`). `None` when TLS was not the
/// problem.
pub(crate) fn tls_problem(e: &tokio_postgres::Error) -> Option<String> {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(refused) = rustls_error(cause) {
            return Some(describe_rustls(refused));
        }
        source = cause.source();
    }
    // The driver's TLS failures of its own (the server refused TLS under `require`) carry
    // a sentence as their cause; the kind shows only in the error's own words.
    (e.to_string() == "error performing TLS handshake").then(|| {
        std::error::Error::source(e)
            .map_or_else(|| "handshake failed".to_owned(), ToString::to_string)
    })
}

/// A rustls error, directly or inside the `io::Error` tokio-rustls wraps it in (whose
/// `source` skips the error it wraps).
fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    e.downcast_ref::<rustls::Error>().or_else(|| {
        e.downcast_ref::<std::io::Error>()?
            .get_ref()?
            .downcast_ref::<rustls::Error>()
    })
}

fn describe_rustls(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    let what = match e {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => {
            "the server's certificate is not signed by a trusted CA"
        }
        // A trusted CA has the name of the certificate's issuer but did not sign it (a CA
        // made again under the same name, say).
        rustls::Error::InvalidCertificate(C::BadSignature) => {
            "a signature does not verify: the server's certificate is not signed by a trusted \
             CA (one of its issuer's name is trusted, but did not sign it)"
        }
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => "the server's certificate is not valid for the host name",
        rustls::Error::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            "the server's certificate has expired"
        }
        rustls::Error::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            "the server's certificate is not valid yet"
        }
        rustls::Error::InvalidCertificate(_) => "the server's certificate was refused",
        _ => "the handshake failed",
    };
    format!("{what} ({e})")
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
