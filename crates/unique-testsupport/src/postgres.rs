//! A real PostgreSQL server for tests.
//!
//! [`PostgresServer::start`] runs `initdb` in a scratch directory, starts `postgres` on a free
//! loopback port with durable settings (`fsync = on`, `synchronous_commit = on`), waits until it
//! accepts connections and creates the database [`DATABASE`]; the server is stopped and its
//! directory removed on drop. [`shared`] hands every test of a binary the same server.
//!
//! PostgreSQL refuses to run as root. When the tests run as root, `initdb` and `postgres` run
//! as the unprivileged `nobody` user (the scratch directory is handed to it); otherwise as the
//! current user. The server binaries are looked up on `PATH` and in Debian's
//! `/usr/lib/postgresql/<version>/bin`; when they are missing, Debian's `postgresql` package is
//! installed with `apt-get` (once, under a lock file). If that fails, or the server does not come
//! up, the test panics saying why; there is no switch to skip.
//!
//! Set [`DATABASE_URL_ENV`] (`UNIQUE_TEST_DATABASE_URL`) to a connection URL to run the tests
//! against an existing database instead: nothing is started then, and the tests create their own
//! tables in it (each test uses its own table or keys).
//!
//! [`PostgresServer::start_tls`] (and [`shared_tls`]) start a private server that accepts only
//! TLS over TCP: `ssl = on` with a certificate for `127.0.0.1` and `localhost` from a CA made
//! on the spot ([`TestPki`]), and a `pg_hba.conf` whose TCP lines are all `hostssl`, so a
//! connection without TLS is refused ("no pg_hba.conf entry … no encryption"). Its
//! [`ServerTls`] names the CA's PEM file, and one of a CA that signed nothing it presents.
//! It is set up over its Unix socket, in its private directory, the one way in without TLS.

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::apt::{self, tail};
use crate::pki::TestPki;
use crate::{ChildGuard, free_port};

/// The environment variable naming an existing database to test against instead of a private
/// server (a libpq connection URL such as `postgres://user:password@host:5432/db`).
pub const DATABASE_URL_ENV: &str = "UNIQUE_TEST_DATABASE_URL";

/// The role a private server is initialised with.
pub const USER: &str = "unique";

/// The role's password on a private server (loopback connections authenticate with
/// SCRAM-SHA-256, so a test can check that a password never reaches a log).
pub const PASSWORD: &str = "unique-test-secret-7f3a";

/// The database created on a private server.
pub const DATABASE: &str = "unique_test";

/// How long a fresh server gets to accept connections.
const START_LIMIT: Duration = Duration::from_mins(1);

/// A PostgreSQL database for tests: a private server started here, or the existing database
/// named by [`DATABASE_URL_ENV`].
#[derive(Debug)]
pub struct PostgresServer {
    url: String,
    private: Option<Private>,
}

/// A server this process started.
#[derive(Debug)]
struct Private {
    guard: ChildGuard,
    addr: SocketAddr,
    dir: PathBuf,
    tls: Option<ServerTls>,
}

/// The CA files of a server started by [`PostgresServer::start_tls`], in its scratch
/// directory (removed with it).
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// PEM: the CA that signed the server's certificate (for `127.0.0.1` and `localhost`),
    /// what a client names in `sslrootcert` to verify it.
    pub ca_file: PathBuf,
    /// PEM: a CA of another name that signed nothing the server presents; a client that
    /// trusts only it must refuse the server (the issuer is unknown to it).
    pub other_ca_file: PathBuf,
}

impl PostgresServer {
    /// The database of [`DATABASE_URL_ENV`] when it is set, else a private server (see
    /// [`start_private`](Self::start_private)).
    ///
    /// # Panics
    ///
    /// As [`start_private`](Self::start_private).
    pub fn start() -> Self {
        match std::env::var(DATABASE_URL_ENV) {
            Ok(url) if !url.trim().is_empty() => Self {
                url: url.trim().to_owned(),
                private: None,
            },
            _ => Self::start_private(),
        }
    }

    /// Starts a private server on a free loopback port, whatever [`DATABASE_URL_ENV`] says
    /// (for tests that stop the server).
    ///
    /// # Panics
    ///
    /// When PostgreSQL cannot be installed or does not come up, with a message saying why.
    pub fn start_private() -> Self {
        Self::start_own(false)
    }

    /// Starts a private server that accepts only TLS connections over TCP (see the module
    /// docs), whatever [`DATABASE_URL_ENV`] says. Its [`url`](Self::url) has no `sslmode`:
    /// each test adds the TLS parameters it tests.
    ///
    /// # Panics
    ///
    /// As [`start_private`](Self::start_private).
    pub fn start_tls() -> Self {
        Self::start_own(true)
    }

    fn start_own(tls: bool) -> Self {
        let bin = bin_dir();
        let mut last_failure = String::new();
        // A port that was free a moment ago can be taken before the server binds it.
        for _ in 0..3 {
            match try_start(&bin, tls) {
                Ok(private) => {
                    return Self {
                        url: format!("postgres://{USER}:{PASSWORD}@{}/{DATABASE}", private.addr),
                        private: Some(private),
                    };
                }
                Err(failure) => last_failure = failure,
            }
        }
        panic!("postgres did not start: {last_failure}");
    }

    /// The connection URL (with the password).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The private server's address; `None` for a database named by [`DATABASE_URL_ENV`].
    pub fn addr(&self) -> Option<SocketAddr> {
        self.private.as_ref().map(|p| p.addr)
    }

    /// The CA files of a server from [`start_tls`](Self::start_tls); `None` for any other.
    pub fn tls(&self) -> Option<&ServerTls> {
        self.private.as_ref().and_then(|p| p.tls.as_ref())
    }

    /// Stops the private server now (immediate shutdown), e.g. to test a lost database.
    ///
    /// # Panics
    ///
    /// On a database named by [`DATABASE_URL_ENV`], which this process does not own.
    pub fn stop(&mut self) {
        let private = self
            .private
            .as_mut()
            .expect("only a private server can be stopped");
        // SIGQUIT: immediate shutdown, which still removes the server's shared memory.
        private.guard.stop_with("QUIT", Duration::from_secs(10));
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(private) = &mut self.private {
            private.guard.stop_with("QUIT", Duration::from_secs(10));
            let _ = fs::remove_dir_all(&private.dir);
        }
    }
}

/// The database shared by the tests of this binary: started by the first caller, stopped when
/// the last [`Arc`] is dropped. Tests sharing it must use their own tables or keys.
///
/// # Panics
///
/// As [`PostgresServer::start`].
pub fn shared() -> Arc<PostgresServer> {
    static SHARED: Mutex<Weak<PostgresServer>> = Mutex::new(Weak::new());
    crate::shared_in(&SHARED, PostgresServer::start)
}

/// The TLS-only server ([`PostgresServer::start_tls`]) shared by the tests of this binary,
/// like [`shared`].
///
/// # Panics
///
/// As [`PostgresServer::start_tls`].
pub fn shared_tls() -> Arc<PostgresServer> {
    static SHARED: Mutex<Weak<PostgresServer>> = Mutex::new(Weak::new());
    crate::shared_in(&SHARED, PostgresServer::start_tls)
}

/// The directory holding `initdb`, `postgres`, `pg_isready` and `createdb`, installing Debian's
/// `postgresql` package when it is missing.
///
/// # Panics
///
/// When it is missing and cannot be installed.
pub fn bin_dir() -> PathBuf {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| apt::find_or_install("postgres", "postgresql", find_bin_dir))
        .clone()
        .unwrap_or_else(|missing| panic!("{missing}"))
}

/// A directory with every binary this module runs: `PATH` (Debian links some of them into
/// `/usr/local/bin`) or the newest `/usr/lib/postgresql/<version>/bin`.
fn find_bin_dir() -> Option<PathBuf> {
    let complete = |dir: &Path| {
        ["initdb", "postgres", "pg_isready", "createdb"]
            .iter()
            .all(|b| dir.join(b).is_file())
    };
    let mut versioned: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            Some((version, e.path().join("bin")))
        })
        .collect();
    versioned.sort();
    let on_path = apt::locate("initdb").and_then(|initdb| {
        // Follow Debian's symlinks to the versioned directory, which has the rest.
        let real = fs::canonicalize(initdb).ok()?;
        Some(real.parent()?.to_path_buf())
    });
    on_path
        .into_iter()
        .chain(versioned.into_iter().rev().map(|(_, dir)| dir))
        .find(|dir| complete(dir))
}

/// The user and group the server runs as: `nobody` when this process is root (PostgreSQL
/// refuses root), else nobody to switch to.
fn server_identity() -> Option<(u32, u32)> {
    let euid = fs::metadata("/proc/self").map_or(0, |m| m.uid());
    if euid != 0 {
        return None;
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    let nobody = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&"nobody") && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    });
    Some(nobody.unwrap_or((65534, 65534)))
}

/// A command that runs as the server's identity, in `dir`, without inherited `PG*` settings.
fn server_command(program: &Path, dir: &Path, identity: Option<(u32, u32)>) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(dir)
        .env("HOME", dir)
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PG") {
            cmd.env_remove(name);
        }
    }
    if let Some((uid, gid)) = identity {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

fn try_start(bin: &Path, tls: bool) -> Result<Private, String> {
    let port = free_port();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let dir = std::env::temp_dir().join(format!(
        "unique-testsupport-postgres-{}-{port}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let result = init_and_start(bin, &dir, addr, tls);
    if result.is_err() {
        let _ = fs::remove_dir_all(&dir);
    }
    result.map(|(guard, tls)| Private {
        guard,
        addr,
        dir,
        tls,
    })
}

/// How setup commands reach the server: its TCP address, or for a TLS-only server its Unix
/// socket (the only way in without TLS).
struct Setup {
    host: String,
    port: u16,
}

fn init_and_start(
    bin: &Path,
    dir: &Path,
    addr: SocketAddr,
    tls: bool,
) -> Result<(ChildGuard, Option<ServerTls>), String> {
    let identity = server_identity();
    let data = dir.join("data");
    let pwfile = dir.join("pwfile");
    fs::write(&pwfile, PASSWORD).map_err(|e| format!("cannot write the password file: {e}"))?;
    if let Some((uid, gid)) = identity {
        for path in [dir, pwfile.as_path()] {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(|e| format!("cannot hand {} to uid {uid}: {e}", path.display()))?;
        }
    }
    // initdb's own files skip fsync (--no-sync): only the running server's durability matters
    // here, and it runs with fsync and synchronous_commit on.
    let init = server_command(&bin.join("initdb"), dir, identity)
        .arg("-D")
        .arg(&data)
        .args(["-U", USER, "-E", "UTF8", "--locale=C", "--no-sync"])
        .arg(format!("--pwfile={}", pwfile.display()))
        .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
        .output()
        .map_err(|e| format!("cannot run initdb: {e}"))?;
    if !init.status.success() {
        return Err(format!(
            "initdb failed with {}: {}",
            init.status,
            tail(&String::from_utf8_lossy(&init.stderr), 800)
        ));
    }
    let (tls_args, tls, setup) = if tls {
        let (args, files) = write_tls_files(dir, identity)?;
        let setup = Setup {
            host: dir.display().to_string(),
            port: addr.port(),
        };
        (args, Some(files), setup)
    } else {
        let setup = Setup {
            host: addr.ip().to_string(),
            port: addr.port(),
        };
        (Vec::new(), None, setup)
    };
    let log_path = dir.join("postgres.log");
    let log = File::create(&log_path).map_err(|e| format!("cannot create the log: {e}"))?;
    let child = server_command(&bin.join("postgres"), dir, identity)
        .args(tls_args)
        .arg("-D")
        .arg(&data)
        .args(["-p", &addr.port().to_string()])
        .args(["-c", "listen_addresses=127.0.0.1"])
        .arg("-c")
        .arg(format!("unix_socket_directories={}", dir.display()))
        .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
        .args(["-c", "full_page_writes=on"])
        // Several test binaries and server processes share the machine: a small footprint,
        // room for their connection pools.
        .args(["-c", "max_connections=300", "-c", "shared_buffers=32MB"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot run postgres: {e}"))?;
    let mut guard = ChildGuard::new(child, "postgres");
    let ready =
        wait_until_ready(bin, &mut guard, &setup).and_then(|()| create_database(bin, &setup));
    match ready {
        Ok(()) => Ok((guard, tls)),
        Err(failure) => {
            guard.stop_with("QUIT", Duration::from_secs(5));
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            Err(format!("{failure}; log: {}", tail(&log, 1200)))
        }
    }
}

/// The server's certificate, key and `pg_hba.conf` for TLS only over TCP, written into
/// `dir` (the key owner-only, as PostgreSQL demands, and owned by the server's user), and
/// the `-c` arguments that use them.
fn write_tls_files(
    dir: &Path,
    identity: Option<(u32, u32)>,
) -> Result<(Vec<String>, ServerTls), String> {
    use std::os::unix::fs::PermissionsExt;

    let pki = TestPki::generate();
    let other = other_ca().map_err(|e| format!("rcgen cannot make a CA: {e}"))?;
    let tls = ServerTls {
        ca_file: dir.join("ca.pem"),
        other_ca_file: dir.join("other-ca.pem"),
    };
    let cert = dir.join("server.crt");
    let key = dir.join("server.key");
    let hba = dir.join("pg_hba.conf");
    let files = [
        (&tls.ca_file, pki.server_ca.as_str()),
        (&tls.other_ca_file, other.as_str()),
        (&cert, pki.server_chain.as_str()),
        (&key, pki.server_key.as_str()),
        (&hba, HBA_TLS_ONLY),
    ];
    for (path, contents) in files {
        fs::write(path, contents).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        if let Some((uid, gid)) = identity {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(|e| format!("cannot hand {} to uid {uid}: {e}", path.display()))?;
        }
    }
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot restrict {}: {e}", key.display()))?;
    let args = [
        "ssl=on".to_owned(),
        format!("ssl_cert_file={}", cert.display()),
        format!("ssl_key_file={}", key.display()),
        format!("hba_file={}", hba.display()),
    ]
    .into_iter()
    .flat_map(|setting| ["-c".to_owned(), setting])
    .collect();
    Ok((args, tls))
}

/// A self-signed CA (PEM) named unlike [`TestPki`]'s, so a chain from the server's CA finds
/// no issuer in it.
fn other_ca() -> Result<String, rcgen::Error> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "unique test other CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    Ok(params.self_signed(&rcgen::KeyPair::generate()?)?.pem())
}

/// The TLS-only server's `pg_hba.conf`: over TCP only `hostssl` lines, so a connection
/// without TLS matches none; the Unix socket, in the server's private directory, sets it up.
const HBA_TLS_ONLY: &str = "\
# unique-testsupport: TLS only over TCP; the socket (a private directory) is for setup.
local   all all              trust
hostssl all all 127.0.0.1/32 scram-sha-256
hostssl all all ::1/128      scram-sha-256
";

fn client_command(bin: &Path, program: &str, setup: &Setup) -> Command {
    let mut cmd = Command::new(bin.join(program));
    cmd.args(["-h", &setup.host, "-p", &setup.port.to_string()])
        .args(["-U", USER])
        .env("PGPASSWORD", PASSWORD)
        .env("PGCONNECT_TIMEOUT", "2")
        .stdin(Stdio::null());
    cmd
}

/// Polls `pg_isready` until the server accepts connections, failing when it exits or the
/// time is up.
fn wait_until_ready(bin: &Path, guard: &mut ChildGuard, setup: &Setup) -> Result<(), String> {
    let deadline = Instant::now() + START_LIMIT;
    let addr = format!("{}:{}", setup.host, setup.port);
    loop {
        if let Some(status) = guard.exited() {
            return Err(format!("postgres on {addr} exited early with {status}"));
        }
        let ready = client_command(bin, "pg_isready", setup)
            .args(["-d", "postgres", "-t", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run pg_isready: {e}"))?;
        if ready.success() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "postgres did not accept connections on {addr} within {START_LIMIT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn create_database(bin: &Path, setup: &Setup) -> Result<(), String> {
    let created = client_command(bin, "createdb", setup)
        .arg(DATABASE)
        .output()
        .map_err(|e| format!("cannot run createdb: {e}"))?;
    if created.status.success() {
        Ok(())
    } else {
        Err(format!(
            "createdb {DATABASE} failed with {}: {}",
            created.status,
            tail(&String::from_utf8_lossy(&created.stderr), 800)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts_queries(bin: &Path, addr: SocketAddr) -> bool {
        let setup = Setup {
            host: addr.ip().to_string(),
            port: addr.port(),
        };
        client_command(bin, "pg_isready", &setup)
            .args(["-d", DATABASE, "-t", "2"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// libpq's own view of the TLS-only server: verify-full with its CA connects over TLS,
    /// a connection without TLS finds no `pg_hba.conf` line, and the other CA is refused.
    #[test]
    fn tls_server_accepts_only_verified_tls_over_tcp() {
        let server = PostgresServer::start_tls();
        let tls = server.tls().expect("a TLS server has CA files");
        let port = server.addr().expect("a private server").port();
        let psql = |params: String| {
            Command::new(bin_dir().join("psql"))
                .arg(format!(
                    "host=127.0.0.1 port={port} user={USER} dbname={DATABASE} {params}"
                ))
                .args([
                    "-Atc",
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                ])
                .env("PGPASSWORD", PASSWORD)
                .env("PGCONNECT_TIMEOUT", "5")
                .stdin(Stdio::null())
                .output()
                .expect("run psql")
        };
        let verified = psql(format!(
            "sslmode=verify-full sslrootcert={}",
            tls.ca_file.display()
        ));
        assert_eq!(
            String::from_utf8_lossy(&verified.stdout).trim(),
            "t",
            "{}",
            String::from_utf8_lossy(&verified.stderr)
        );
        let plain = psql("sslmode=disable".to_owned());
        let refusal = String::from_utf8_lossy(&plain.stderr);
        assert!(!plain.status.success());
        assert!(refusal.contains("no pg_hba.conf entry"), "{refusal}");
        let other = psql(format!(
            "sslmode=verify-ca sslrootcert={}",
            tls.other_ca_file.display()
        ));
        let refusal = String::from_utf8_lossy(&other.stderr);
        assert!(!other.status.success());
        assert!(refusal.contains("certificate verify failed"), "{refusal}");
    }

    #[test]
    fn private_server_serves_its_database_and_stops() {
        let mut server = PostgresServer::start_private();
        let addr = server.addr().expect("a private server has an address");
        assert!(
            server
                .url()
                .starts_with(&format!("postgres://{USER}:{PASSWORD}@127.0.0.1:")),
            "{}",
            server.url()
        );
        assert!(accepts_queries(&bin_dir(), addr));
        server.stop();
        assert!(
            !accepts_queries(&bin_dir(), addr),
            "a stopped server must not answer"
        );
    }
}
