//! The server's kicker: `unique-kick-http`'s [`HttpKicker`] under the `--kick-allow` /
//! `--kick-deny` policy and its caps, and, with `--kick-signing-keys`, the handle its keys
//! are replaced through when the file is reloaded.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use unique_arbiter_http::{KickDelivery, PushedKick};
use unique_core::{KickOutcome, KickPayload, Kicker, async_trait};
use unique_kick_http::{EndpointPolicy, EndpointRule, HttpKicker, SigningKeys};

use crate::error::StartupError;

/// How every kicker of this server is built: the endpoint policy and the caps of the flags.
#[derive(Debug, Clone)]
pub(crate) struct KickerConfig {
    pub(crate) allow: Vec<EndpointRule>,
    pub(crate) deny: Vec<EndpointRule>,
    /// `--kick-pool-max-idle`.
    pub(crate) pool_max_idle: usize,
    /// `--max-kicks-in-flight`.
    pub(crate) max_kicks_in_flight: usize,
}

impl Default for KickerConfig {
    /// No allow or deny rules, the kicker's own caps.
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            pool_max_idle: unique_kick_http::DEFAULT_MAX_IDLE,
            max_kicks_in_flight: unique_kick_http::DEFAULT_MAX_KICKS_IN_FLIGHT,
        }
    }
}

impl KickerConfig {
    /// Logs the endpoint policy once, at startup.
    pub(crate) fn log(&self) {
        let list = |rules: &[EndpointRule]| {
            rules
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        tracing::info!(
            allow = %list(&self.allow),
            deny = %list(&self.deny),
            "kick-endpoint policy"
        );
    }

    /// A kicker under the policy, signing with `keys` when given.
    pub(crate) fn build(&self, keys: Option<SigningKeys>) -> Result<HttpKicker, StartupError> {
        let policy = EndpointPolicy::new()
            .allow(self.allow.iter().cloned())
            .deny(self.deny.iter().cloned());
        let mut builder = HttpKicker::builder()
            .endpoint_policy(policy)
            .pool_max_idle(self.pool_max_idle)
            .max_kicks_in_flight(self.max_kicks_in_flight);
        if let Some(keys) = keys {
            builder = builder.signing_keys(keys);
        }
        builder
            .build()
            .map_err(|e| format!("cannot build the kicker: {e}").into())
    }
}

/// The server's signing kicker, whose keys can be replaced while it runs. Clones share it.
///
/// A replacement changes only the keys ([`HttpKicker::replace_signing_keys`]): a kick
/// already signed goes out as it was, every later one is signed with the new keys, and the
/// connection pool and the count of kicks in flight (`--max-kicks-in-flight`) stay one.
#[derive(Clone)]
pub(crate) struct SigningKicker {
    kicker: HttpKicker,
}

impl SigningKicker {
    pub(crate) fn new(config: &KickerConfig, keys: SigningKeys) -> Result<Self, StartupError> {
        Ok(Self {
            kicker: config.build(Some(keys))?,
        })
    }

    /// The kicker itself, for the arbiter.
    pub(crate) fn kicker(&self) -> &HttpKicker {
        &self.kicker
    }

    /// The keys kicks are signed with now.
    pub(crate) fn keys(&self) -> SigningKeys {
        self.kicker
            .signing_keys()
            .expect("a signing kicker is built with keys and only ever given others")
    }

    /// Signs every kick from now on with `keys`; returns the keys it replaced.
    pub(crate) fn replace_keys(&self, keys: SigningKeys) -> SigningKeys {
        self.kicker
            .replace_signing_keys(keys)
            .expect("a signing kicker is built with keys and only ever given others")
    }
}

/// The arbiter's kicker: HTTP kicks to endpoints through `http`, push kicks to nodes through
/// `push` (the kick-stream hub), each body signed by `http`'s keys in force, exactly as an HTTP
/// kick's `Unique-Signature` header is.
#[derive(Clone)]
pub(crate) struct ServerKicker {
    pub(crate) http: HttpKicker,
    /// `None`: no push channel (a node's kick is connect-error, the trait's default).
    pub(crate) push: Option<Arc<dyn KickDelivery>>,
}

#[async_trait]
impl Kicker for ServerKicker {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        self.http.kick(endpoint, payload, timeout).await
    }

    async fn kick_node(&self, node: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        let Some(push) = &self.push else {
            return self.http.kick_node(node, payload, timeout).await;
        };
        let body = unique_wire::encode_kick(payload);
        let signature = self
            .http
            .signing_keys()
            .map(|keys| keys.sign(&body, SystemTime::now()));
        // encode_kick writes JSON, which is UTF-8.
        let body = String::from_utf8(body).expect("a kick body is UTF-8");
        let kick = PushedKick { body, signature };
        push.deliver(node, payload, kick, timeout).await
    }

    fn check_endpoint(&self, endpoint: &str) -> Result<(), String> {
        self.http.check_endpoint(endpoint)
    }
}

#[cfg(test)]
mod tests {
    use unique_core::Kicker;

    use super::*;

    const K1: &str = "kicker-k1-0123456789abcdef0123456789abcdef";
    const K2: &str = "kicker-k2-0123456789abcdef0123456789abcdef";

    fn config() -> KickerConfig {
        KickerConfig {
            deny: vec!["10.0.99.0/24".parse().unwrap()],
            ..KickerConfig::default()
        }
    }

    #[test]
    fn replacing_the_keys_keeps_the_policy_and_returns_the_old_keys() {
        let k1 = SigningKeys::new([K1]).unwrap();
        let kicker = SigningKicker::new(&config(), k1.clone()).unwrap();
        let shared = kicker.clone();
        assert_eq!(shared.keys().ids(), k1.ids());
        let k2 = SigningKeys::new([K2, K1]).unwrap();
        let old = kicker.replace_keys(k2.clone());
        assert_eq!(old.ids(), k1.ids());
        assert_eq!(shared.keys().signing_id(), k2.signing_id());
        assert!(
            shared
                .kicker()
                .check_endpoint("http://10.0.99.7/kick")
                .is_err()
        );
        assert!(
            shared
                .kicker()
                .check_endpoint("http://10.0.98.7/kick")
                .is_ok()
        );
    }
}
