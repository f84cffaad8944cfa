//! The server's kicker: `unique-kick-http`'s [`HttpKicker`] under the `--kick-allow` /
//! `--kick-deny` policy, and, with `--kick-signing-keys`, behind a handle that swaps in a
//! kicker with new keys when the file is reloaded.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use unique_core::{KickOutcome, KickPayload, Kicker, async_trait};
use unique_kick_http::{EndpointPolicy, EndpointRule, HttpKicker, SigningKeys};

/// How every kicker of this server is built: the endpoint policy and the caps of the flags.
#[derive(Debug, Clone)]
pub(crate) struct KickerConfig {
    pub(crate) allow: Vec<EndpointRule>,
    pub(crate) deny: Vec<EndpointRule>,
    /// `--kick-pool-max-idle`.
    pub(crate) pool_max_idle: usize,
    /// `--max-kicks-in-flight`. Each kicker counts its own: after a key reload, kicks still
    /// running on the old kicker count against its cap, not the new one's.
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
    pub(crate) fn build(&self, keys: Option<SigningKeys>) -> Result<HttpKicker, String> {
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
            .map_err(|e| format!("cannot build the kicker: {e}"))
    }
}

/// A signing kicker whose keys can be replaced while the server runs. Clones share it.
///
/// A replacement builds a whole new [`HttpKicker`] (the keys are fixed inside one) and puts
/// it in place at once: a kick already under way finishes on the kicker it started with,
/// every later kick is signed with the new keys. The new kicker starts with an empty
/// connection pool; the old one's idle connections to nodes close when its last kick ends.
#[derive(Clone)]
pub(crate) struct SigningKicker {
    config: KickerConfig,
    current: Arc<RwLock<Signing>>,
}

/// The kicker in force and the keys it signs with.
struct Signing {
    keys: SigningKeys,
    kicker: HttpKicker,
}

impl SigningKicker {
    pub(crate) fn new(config: KickerConfig, keys: SigningKeys) -> Result<Self, String> {
        let kicker = config.build(Some(keys.clone()))?;
        Ok(Self {
            config,
            current: Arc::new(RwLock::new(Signing { keys, kicker })),
        })
    }

    /// The keys kicks are signed with now.
    pub(crate) fn keys(&self) -> SigningKeys {
        self.read(|signing| signing.keys.clone())
    }

    /// Signs every kick from now on with `keys`; returns the keys it replaced.
    pub(crate) fn replace_keys(&self, keys: SigningKeys) -> Result<SigningKeys, String> {
        let kicker = self.config.build(Some(keys.clone()))?;
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        let old = std::mem::replace(&mut *current, Signing { keys, kicker });
        Ok(old.keys)
    }

    /// The kicker in force now (a cheap clone: `HttpKicker` is an `Arc`).
    fn kicker(&self) -> HttpKicker {
        self.read(|signing| signing.kicker.clone())
    }

    fn read<T>(&self, f: impl FnOnce(&Signing) -> T) -> T {
        // The write is one swap of a whole `Signing`: a poisoned lock still holds a whole one.
        f(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }
}

#[async_trait]
impl Kicker for SigningKicker {
    async fn kick(&self, endpoint: &str, payload: &KickPayload, timeout: Duration) -> KickOutcome {
        // The lock is released before the kick: a reload never waits for a kick.
        let kicker = self.kicker();
        kicker.kick(endpoint, payload, timeout).await
    }

    fn check_endpoint(&self, endpoint: &str) -> Result<(), String> {
        self.read(|signing| signing.kicker.check_endpoint(endpoint))
    }
}

#[cfg(test)]
mod tests {
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
        let kicker = SigningKicker::new(config(), k1.clone()).unwrap();
        let shared = kicker.clone();
        assert_eq!(shared.keys().ids(), k1.ids());
        let k2 = SigningKeys::new([K2, K1]).unwrap();
        let old = kicker.replace_keys(k2.clone()).unwrap();
        assert_eq!(old.ids(), k1.ids());
        assert_eq!(shared.keys().signing_id(), k2.signing_id());
        assert!(shared.check_endpoint("http://10.0.99.7/kick").is_err());
        assert!(shared.check_endpoint("http://10.0.98.7/kick").is_ok());
    }
}
