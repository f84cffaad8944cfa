//! The kick connector's resolver: the system resolver, then the
//! [`EndpointPolicy`] on every address it returns.
//!
//! hyper-util's `HttpConnector` connects only to the addresses its resolver
//! returns, without a lookup of its own, so the address checked here is the
//! address connected to: a name that resolves differently on a second lookup (DNS
//! rebinding) gets no second lookup.

use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use tower_service::Service;
use unique_core::BoxError;

use crate::policy::{EndpointPolicy, Refusal};

/// Resolves with `R`, then keeps the addresses the policy allows; fails, without
/// any lookup, for a name the policy refuses by name, and fails when it keeps no
/// address.
#[derive(Debug, Clone)]
pub(crate) struct PolicyResolver<R = GaiResolver> {
    policy: Arc<EndpointPolicy>,
    inner: R,
}

impl PolicyResolver {
    pub(crate) fn new(policy: Arc<EndpointPolicy>) -> Self {
        Self::with(policy, GaiResolver::new())
    }
}

impl<R> PolicyResolver<R> {
    pub(crate) fn with(policy: Arc<EndpointPolicy>, inner: R) -> Self {
        Self { policy, inner }
    }
}

impl<R> Service<Name> for PolicyResolver<R>
where
    R: Service<Name> + Clone + Send + 'static,
    R::Response: Iterator<Item = SocketAddr>,
    R::Error: Into<BoxError>,
    R::Future: Send,
{
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Each call drives its own clone of the inner resolver to readiness.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = Arc::clone(&self.policy);
        let mut inner = self.inner.clone();
        Box::pin(async move {
            policy.check_host(name.as_str())?;
            poll_fn(|cx| inner.poll_ready(cx))
                .await
                .map_err(Into::into)?;
            let resolved = inner.call(name.clone()).await.map_err(Into::into)?;
            Ok(allowed(&policy, name.as_str(), resolved)?.into_iter())
        })
    }
}

/// The addresses of `host` the policy allows. An empty lookup stays empty (the
/// connector reports it); a lookup whose every address is refused is the first
/// refusal.
fn allowed(
    policy: &EndpointPolicy,
    host: &str,
    resolved: impl Iterator<Item = SocketAddr>,
) -> Result<Vec<SocketAddr>, Refusal> {
    let mut refused = None;
    let kept: Vec<SocketAddr> = resolved
        .filter(|addr| match policy.check_address(Some(host), addr.ip()) {
            Ok(()) => true,
            Err(refusal) => {
                tracing::debug!(%refusal, "kick endpoint address refused by the policy");
                refused.get_or_insert(refusal);
                false
            }
        })
        .collect();
    match refused {
        Some(refusal) if kept.is_empty() => Err(refusal),
        _ => Ok(kept),
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::str::FromStr;
    use std::sync::Mutex;

    use super::*;
    use crate::policy::{EndpointRule, ReservedRange};

    /// A resolver answering every name with fixed addresses, recording each name
    /// it was asked; nothing here touches the network.
    #[derive(Clone)]
    struct Fixed {
        addrs: Vec<SocketAddr>,
        asked: Arc<Mutex<Vec<String>>>,
    }

    impl Fixed {
        fn new(addrs: &[&str]) -> Self {
            Self {
                addrs: addrs
                    .iter()
                    .map(|a| SocketAddr::new(a.parse().expect("an ip address"), 0))
                    .collect(),
                asked: Arc::default(),
            }
        }

        fn asked(&self) -> Vec<String> {
            self.asked.lock().expect("not poisoned").clone()
        }
    }

    impl Service<Name> for Fixed {
        type Response = std::vec::IntoIter<SocketAddr>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, name: Name) -> Self::Future {
            self.asked
                .lock()
                .expect("not poisoned")
                .push(name.as_str().to_owned());
            std::future::ready(Ok(self.addrs.clone().into_iter()))
        }
    }

    fn policy(deny: &[&str]) -> Arc<EndpointPolicy> {
        let rules = deny
            .iter()
            .map(|r| EndpointRule::from_str(r).expect("rule"));
        Arc::new(EndpointPolicy::new().deny(rules))
    }

    async fn resolve(
        policy: Arc<EndpointPolicy>,
        fixed: &Fixed,
        name: &str,
    ) -> Result<Vec<SocketAddr>, String> {
        let mut resolver = PolicyResolver::with(policy, fixed.clone());
        resolver
            .call(Name::from_str(name).expect("a name"))
            .await
            .map(Iterator::collect)
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn refused_addresses_are_dropped_and_the_rest_kept() {
        let fixed = Fixed::new(&[
            "169.254.169.254",
            "10.0.0.1",
            "::ffff:10.0.0.2",
            "fe80::1",
            // A name resolving to a cloud metadata address (a lookup that is faked
            // here: nothing is sent anywhere).
            "fd00:ec2::254",
            "100.100.100.200",
        ]);
        let kept = resolve(policy(&["10.0.0.2"]), &fixed, "node.internal").await;
        assert_eq!(kept, Ok(vec!["10.0.0.1:0".parse().expect("addr")]));
    }

    #[tokio::test]
    async fn a_name_whose_every_address_is_refused_fails_with_the_first_refusal() {
        // An allowed name resolving to a refused address is refused: the
        // rebinding case, decided on the address that would be connected to.
        let fixed = Fixed::new(&["169.254.169.254", "10.0.0.1"]);
        let refused = resolve(policy(&["10.0.0.1"]), &fixed, "node.internal").await;
        assert_eq!(
            refused,
            Err(Refusal::Reserved(ReservedRange::LinkLocal).to_string())
        );
        assert_eq!(fixed.asked(), ["node.internal"]);
    }

    #[tokio::test]
    async fn a_name_denied_by_name_is_never_looked_up() {
        let fixed = Fixed::new(&["10.0.0.1"]);
        let refused = resolve(policy(&["*.internal"]), &fixed, "Node.Internal").await;
        assert_eq!(refused, Err(Refusal::Denied.to_string()));
        assert!(fixed.asked().is_empty(), "looked up {:?}", fixed.asked());
    }

    #[tokio::test]
    async fn an_empty_lookup_stays_empty() {
        let fixed = Fixed::new(&[]);
        assert_eq!(resolve(policy(&[]), &fixed, "node").await, Ok(vec![]));
    }
}
