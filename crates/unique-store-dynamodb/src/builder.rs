//! How a [`DynamoStore`] gets its SDK client: a caller's `Client`, or one built
//! here from an endpoint URL, a region and credentials.

use std::fmt;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::SharedHttpClient;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_smithy_http_client::tls;
use unique_core::Error;

use crate::client::DynamoStore;
use crate::metrics::RequestCounter;

/// The table name used when none is configured.
pub const DEFAULT_TABLE: &str = "unique-sessions";

/// Connect timeout of a client this builder creates (unless overridden): a TCP and TLS
/// handshake with DynamoDB in the same region takes milliseconds.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Per-attempt timeout of a client this builder creates (unless overridden): one HTTP
/// attempt, connect included. A pooled connection that stopped answering costs at most
/// this before the SDK drops it and retries on a new one.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);

/// Whole-operation timeout (every SDK attempt and the backoff between them) of a client
/// this builder creates (unless overridden): the most any one store call takes, so the
/// most a claim waits on each of its reads and writes.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(3);

/// HTTP attempts per operation of a client this builder creates (unless overridden): the
/// SDK's standard retry policy, with backoff starting at [`DEFAULT_RETRY_BACKOFF`].
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// First retry backoff of a client this builder creates (jittered, doubling). The SDK's
/// standard 1 s would leave no room for a third attempt inside
/// [`DEFAULT_OPERATION_TIMEOUT`].
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// The HTTP client of every SDK client this crate builds, and of a client handed to
/// [`DynamoStoreBuilder::client`] that has none: the SDK's own hyper client on rustls
/// with **ring**, the crypto provider the rest of unique uses (`unique-tls`), trusting
/// the platform's root certificates as the SDK's default client does.
///
/// This crate depends on the SDK without its `default-https-client` feature, which
/// would compile a second provider (aws-lc-rs) into every binary. Pass this to
/// `aws_sdk_dynamodb::Config::builder().http_client(..)` when building a client of
/// your own, or enable that feature in your own manifest to get the SDK's default.
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// Configures a [`DynamoStore`].
///
/// Either hand it a ready SDK [`Client`] with [`client`](Self::client), or let
/// it build one from [`endpoint_url`](Self::endpoint_url),
/// [`region`](Self::region) and [`static_credentials`](Self::static_credentials).
/// Without static credentials, the standard AWS chain (environment, profile,
/// web identity, container and instance metadata) is used when the default
/// `aws-config` feature is on.
///
/// Timeouts and the attempt limit apply on top of either client. A client built
/// here defaults to [`DEFAULT_CONNECT_TIMEOUT`], [`DEFAULT_ATTEMPT_TIMEOUT`],
/// [`DEFAULT_OPERATION_TIMEOUT`] and [`DEFAULT_MAX_ATTEMPTS`]; a given client
/// keeps its own unless they are set here. With the defaults no store call takes
/// longer than 3 s, whether DynamoDB answers slowly, not at all, or a pooled
/// connection went silent.
#[derive(Default)]
pub struct DynamoStoreBuilder {
    table: Option<String>,
    client: Option<Client>,
    endpoint_url: Option<String>,
    region: Option<String>,
    credentials: Option<Credentials>,
    connect_timeout: Option<Duration>,
    operation_timeout: Option<Duration>,
    attempt_timeout: Option<Duration>,
    max_attempts: Option<u32>,
}

impl fmt::Debug for DynamoStoreBuilder {
    /// Never prints credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoStoreBuilder")
            .field("table", &self.table)
            .field("has_client", &self.client.is_some())
            .field("endpoint_url", &self.endpoint_url)
            .field("region", &self.region)
            .field("static_credentials", &self.credentials.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

impl DynamoStoreBuilder {
    /// The table holding the records (default [`DEFAULT_TABLE`]).
    #[must_use]
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.table = Some(name.into());
        self
    }

    /// Uses this SDK client (its region, credentials and endpoint). The store
    /// works on its own copy with a request counter added; `client` is unchanged.
    /// Takes precedence over endpoint, region and credentials.
    #[must_use]
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// A non-AWS endpoint, e.g. `http://127.0.0.1:4567` for a local DynamoDB-compatible server.
    #[must_use]
    pub fn endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// The AWS region, e.g. `us-east-1`.
    #[must_use]
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Fixed credentials (local servers, tests). Never logged.
    #[must_use]
    pub fn static_credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        self.credentials = Some(Credentials::new(
            access_key_id,
            secret_access_key,
            None,
            None,
            "unique-store-dynamodb-static",
        ));
        self
    }

    /// Time allowed to open a connection (default [`DEFAULT_CONNECT_TIMEOUT`]).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Time allowed for a whole operation, SDK retries and their backoff included
    /// (default [`DEFAULT_OPERATION_TIMEOUT`]).
    #[must_use]
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = Some(timeout);
        self
    }

    /// Time allowed for one HTTP attempt of an operation, connect included (default
    /// [`DEFAULT_ATTEMPT_TIMEOUT`]). An attempt that times out is retried on a new
    /// connection while attempts and the operation timeout allow.
    #[must_use]
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// HTTP attempts per operation (default [`DEFAULT_MAX_ATTEMPTS`]; 1 = no SDK retry;
    /// values below 1 clamp to 1).
    ///
    /// A retried conditional write that had already been applied fails its
    /// condition; the Arbiter's next read then finds its own claim_id and
    /// answers with the written gen (the replay short-circuit), so retries stay safe.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts.max(1));
        self
    }

    /// Builds the store. Sends no request (see
    /// [`DynamoStore::check_reachable`] for a startup check).
    ///
    /// # Errors
    ///
    /// `InvalidParams` for an empty table name, or when neither a client nor
    /// static credentials are given and the `aws-config` feature is off (or no
    /// region is given then).
    pub async fn build(self) -> Result<DynamoStore, Error> {
        let table = self.table.clone().unwrap_or_else(|| DEFAULT_TABLE.into());
        if table.is_empty() {
            return Err(Error::invalid("dynamodb table name must not be empty"));
        }
        let own_client = self.client.is_none();
        let mut base = match &self.client {
            Some(client) => client.config().clone(),
            None => self.base_config().await?,
        };
        if base.http_client().is_none() {
            // Without the SDK's default client feature a caller's client may have
            // none; every request would fail with "no HTTP client".
            base = base.to_builder().http_client(https_client()).build();
        }
        let mut timeouts = base
            .timeout_config()
            .cloned()
            .unwrap_or_else(TimeoutConfig::disabled)
            .to_builder();
        let mut retry = base.retry_config().cloned();
        if own_client {
            timeouts.set_connect_timeout(Some(DEFAULT_CONNECT_TIMEOUT));
            timeouts.set_operation_attempt_timeout(Some(DEFAULT_ATTEMPT_TIMEOUT));
            timeouts.set_operation_timeout(Some(DEFAULT_OPERATION_TIMEOUT));
            retry = Some(
                RetryConfig::standard()
                    .with_max_attempts(DEFAULT_MAX_ATTEMPTS)
                    .with_initial_backoff(DEFAULT_RETRY_BACKOFF),
            );
        }
        if let Some(t) = self.connect_timeout {
            timeouts.set_connect_timeout(Some(t));
        }
        if let Some(t) = self.operation_timeout {
            timeouts.set_operation_timeout(Some(t));
        }
        if let Some(t) = self.attempt_timeout {
            timeouts.set_operation_attempt_timeout(Some(t));
        }
        if let Some(attempts) = self.max_attempts {
            retry = Some(
                retry
                    .unwrap_or_else(RetryConfig::standard)
                    .with_max_attempts(attempts),
            );
        }
        // The budget of one call, also the most requests one batch read sends.
        let attempts = retry
            .as_ref()
            .map_or(DEFAULT_MAX_ATTEMPTS, RetryConfig::max_attempts);
        let mut conf = base.to_builder().timeout_config(timeouts.build());
        if let Some(retry) = retry {
            conf = conf.retry_config(retry);
        }
        let counter = RequestCounter::default();
        let client = Client::from_conf(conf.interceptor(counter.clone()).build());
        Ok(DynamoStore::new(client, table, counter, attempts))
    }

    /// The SDK configuration of a client built here.
    async fn base_config(&self) -> Result<aws_sdk_dynamodb::Config, Error> {
        if let Some(credentials) = &self.credentials {
            // Static credentials need no provider chain: no file, environment
            // or instance-metadata lookups, so tests and local servers stay offline.
            let region = self
                .region
                .clone()
                .ok_or_else(|| Error::invalid("dynamodb region is required"))?;
            let mut conf = aws_sdk_dynamodb::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .http_client(https_client())
                .region(Region::new(region))
                .credentials_provider(credentials.clone());
            if let Some(url) = &self.endpoint_url {
                conf = conf.endpoint_url(url);
            }
            return Ok(conf.build());
        }
        self.default_chain_config().await
    }

    #[cfg(feature = "aws-config")]
    async fn default_chain_config(&self) -> Result<aws_sdk_dynamodb::Config, Error> {
        // The credential chain's own calls (STS, SSO, instance metadata) use it too.
        let mut loader =
            aws_config::defaults(BehaviorVersion::latest()).http_client(https_client());
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        let sdk = loader.load().await;
        if sdk.region().is_none() {
            return Err(Error::invalid(
                "dynamodb region is required (set it, or AWS_REGION)",
            ));
        }
        Ok(aws_sdk_dynamodb::Config::new(&sdk))
    }

    #[cfg(not(feature = "aws-config"))]
    #[allow(clippy::unused_async)]
    async fn default_chain_config(&self) -> Result<aws_sdk_dynamodb::Config, Error> {
        Err(Error::invalid(
            "dynamodb credentials are required: pass a client or static credentials, \
             or enable the aws-config feature",
        ))
    }
}
