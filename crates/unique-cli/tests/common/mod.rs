//! A real server for the `unique` binary to talk to: the arbiter's HTTP service
//! (`unique-arbiter-http`, what `unique-server` serves) on a memory store, on a loopback port,
//! with caller tokens and a kicker that records every kick; and the binary, run as a process.

// Each test file uses some of these helpers, not all.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use unique_arbiter_http::{ArbiterService, Grant, Role, ServeOptions, Tokens, serve_with};
use unique_core::{
    Arbiter, CasOutcome, ClaimInput, CurrentView, Error, Key, KickDetail, KickOutcome, KickPayload,
    Kicker, Owner, OwnerState, Store, UserKey, UserSession, async_trait,
};
use unique_store_memory::MemoryStore;

/// The binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_unique");

/// A token with the admin role on project `game`.
pub(crate) const ADMIN: &str = "cli-test-admin-token-0123456789abcdef";
/// A token on `game`, env `prod` only, without a role.
pub(crate) const NODE: &str = "cli-test-node-token-0123456789abcdef";
/// Every token the tests use; none may appear in the binary's output.
pub(crate) const SECRETS: [&str; 2] = [ADMIN, NODE];

/// The endpoint whose kicks the recording kicker confirms.
pub(crate) const CONFIRMING: &str = "http://127.0.0.1:9/node-a";
/// The endpoint whose kicks time out.
pub(crate) const SILENT: &str = "http://127.0.0.1:9/node-b";

pub(crate) fn tokens() -> Tokens {
    let mut tokens = Tokens::new();
    tokens
        .add(
            ADMIN,
            Grant::new("ops", vec!["game".into()], None).with_role(Role::Admin),
        )
        .unwrap()
        .add(
            NODE,
            Grant::new("node", vec!["game".into()], Some(vec!["prod".into()])),
        )
        .unwrap();
    tokens
}

/// Records every kick; confirms those to [`CONFIRMING`], times out the others.
#[derive(Clone, Default)]
pub(crate) struct Recording(Arc<Mutex<Vec<(String, KickPayload)>>>);

#[async_trait]
impl Kicker for Recording {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, _: Duration) -> KickOutcome {
        self.0
            .lock()
            .unwrap()
            .push((endpoint.to_owned(), payload.clone()));
        if endpoint == CONFIRMING {
            KickOutcome::Confirmed
        } else {
            KickOutcome::Failed(KickDetail::Timeout)
        }
    }
}

impl Recording {
    pub(crate) fn kicks(&self) -> Vec<(String, KickPayload)> {
        self.0.lock().unwrap().clone()
    }
}

/// The server under test, serving until the test's runtime ends.
pub(crate) struct Server {
    pub(crate) url: String,
    /// The same arbiter the server serves, for logging users in without going through it.
    pub(crate) arbiter: Arbiter<Arc<MemoryStore>>,
    pub(crate) kicker: Recording,
}

impl Server {
    /// A server on a memory store with [`tokens`].
    pub(crate) async fn start() -> Self {
        Self::start_with(Some(tokens()), ServeOptions::default()).await
    }

    /// A server with `tokens` (none: no authentication) and `options` (TLS, say).
    pub(crate) async fn start_with(tokens: Option<Tokens>, options: ServeOptions) -> Self {
        let kicker = Recording::default();
        let arbiter = Arbiter::builder(Arc::new(MemoryStore::new()))
            .kicker(kicker.clone())
            .build();
        let scheme = if options.is_tls() { "https" } else { "http" };
        let mut service = ArbiterService::new(arbiter.clone());
        if let Some(tokens) = tokens {
            service = service.with_tokens(tokens);
        }
        let addr = spawn(service, options).await;
        Self {
            url: format!("{scheme}://{addr}"),
            arbiter,
            kicker,
        }
    }

    /// Logs `key` in from `endpoint` (region `eu`, cluster `c1`); its gen.
    pub(crate) async fn login(&self, key: &Key, endpoint: &str) -> i64 {
        let input = ClaimInput {
            key: key.clone(),
            owner: Owner::new("eu", "c1", endpoint),
            claim_id: format!("login-{}", next_id()),
        };
        self.arbiter.claim(&input).await.unwrap().generation
    }
}

/// A claim id part that differs between calls.
fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Serves `service` on a fresh loopback port; its address.
pub(crate) async fn spawn<S: Store>(
    service: ArbiterService<S>,
    options: ServeOptions,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_with(
        listener,
        service,
        options,
        std::future::pending(),
    ));
    addr
}

/// A loopback URL nothing listens on: a port bound a moment ago and closed again.
pub(crate) fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

/// A store whose every call fails with the error `fail` makes: a throttled or unavailable
/// store behind a real server.
pub(crate) struct Failing(pub(crate) fn() -> Error);

#[async_trait]
impl Store for Failing {
    async fn read_owner(&self, _: &Key) -> Result<OwnerState, Error> {
        Err((self.0)())
    }
    async fn claim_cas(
        &self,
        _: &Key,
        _: &Owner,
        _: &str,
        _: &OwnerState,
    ) -> Result<CasOutcome, Error> {
        Err((self.0)())
    }
    async fn current(&self, _: &Key) -> Result<CurrentView, Error> {
        Err((self.0)())
    }
    async fn release(&self, _: &Key, _: i64) -> Result<bool, Error> {
        Err((self.0)())
    }
    async fn list_sessions(&self, _: &UserKey) -> Result<Vec<UserSession>, Error> {
        Err((self.0)())
    }
}

/// What one run of the binary did.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// Asserts the exit status, showing both streams otherwise; the run, for chaining.
    #[track_caller]
    pub(crate) fn status(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "{self:#?}");
        self
    }

    /// stdout as JSON.
    #[track_caller]
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:#?}"))
    }
}

/// Runs the binary with `args` against `server` (through `UNIQUE_SERVER`) with `token`
/// (through `UNIQUE_TOKEN`, none when `None`), in `dir` if given. Asserts that no test token
/// appears on either stream, whatever the outcome.
pub(crate) async fn unique(
    server: &str,
    token: Option<&str>,
    args: &[&str],
    dir: Option<&Path>,
) -> Run {
    let mut command = tokio::process::Command::new(BIN);
    command
        .args(args)
        .env("UNIQUE_SERVER", server)
        .env_remove("UNIQUE_TOKEN")
        .env_remove("UNIQUE_CA_CERT");
    if let Some(token) = token {
        command.env("UNIQUE_TOKEN", token);
    }
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let output = command.output().await.expect("the unique binary runs");
    let run = Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    };
    for secret in SECRETS {
        assert!(
            !run.stdout.contains(secret) && !run.stderr.contains(secret),
            "a token leaked: {run:#?}"
        );
    }
    run
}
