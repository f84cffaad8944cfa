//! The routes of the wire contract.

use crate::info::INFO_PATH;
use crate::lease::LeaseRoute;
use crate::push::{NODE_KICKS_ACK_PATH, NODE_KICKS_PATH, PushRoute, parse_node_kicks_path};

/// `POST`: claim a key for a new session.
pub const CLAIM_PATH: &str = "/v1/claim";
/// `POST`: read a key's current generation and owner (what a heartbeat asks).
pub const CURRENT_PATH: &str = "/v1/current";
/// `POST`: read several keys' current generations and owners at once (a node's batched
/// heartbeat): up to [`MAX_BATCH_KEYS`](crate::MAX_BATCH_KEYS) keys, one store round trip.
pub const CURRENT_BATCH_PATH: &str = "/v1/current/batch";
/// `POST`: release a key at a generation (logout).
pub const RELEASE_PATH: &str = "/v1/release";
/// `POST`: an admin logout of a key's current session (tombstone, then a kick with reason
/// `admin`); needs a token with the `admin` role when the server has tokens.
pub const LOGOUT_PATH: &str = "/v1/logout";
/// `POST`: an admin logout of every online session of a user (each as [`LOGOUT_PATH`] logs
/// out its slot); needs a token with the `admin` role when the server has tokens.
pub const LOGOUT_ALL_PATH: &str = "/v1/logout/all";
/// `POST`: list a user's online sessions, one per slot, in one store round trip.
pub const SESSIONS_PATH: &str = "/v1/sessions";
/// `GET` or `HEAD`: liveness; the answer is `ok` as plain text.
pub const HEALTH_PATH: &str = "/healthz";
/// `GET` or `HEAD`: readiness; `ok` as plain text when the store answers in time, else 503
/// `unavailable` with the reason.
pub const READY_PATH: &str = "/readyz";

/// One route of the wire contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// [`CLAIM_PATH`], `POST`.
    Claim,
    /// [`CURRENT_PATH`], `POST`.
    Current,
    /// [`CURRENT_BATCH_PATH`], `POST`.
    CurrentBatch,
    /// [`RELEASE_PATH`], `POST`.
    Release,
    /// [`LOGOUT_PATH`], `POST`.
    Logout,
    /// [`LOGOUT_ALL_PATH`], `POST`.
    LogoutAll,
    /// [`SESSIONS_PATH`], `POST`.
    Sessions,
    /// [`HEALTH_PATH`], `GET` or `HEAD`.
    Health,
    /// [`READY_PATH`], `GET` or `HEAD`.
    Ready,
    /// One of the lease routes (`/v1/lease/*`, `/v1/nodes/*`), `POST`.
    Lease(LeaseRoute),
    /// [`INFO_PATH`], `GET` or `HEAD`.
    Info,
    /// [`NODE_KICKS_PATH`] (`/v1/nodes/{node_id}/kicks`), `GET`: a node's kick stream.
    NodeKicks,
    /// [`NODE_KICKS_ACK_PATH`] (`/v1/nodes/{node_id}/kicks/ack`), `POST`: a pushed kick's ack.
    NodeKicksAck,
}

impl Route {
    /// Every route, in the order of the enum.
    pub const ALL: [Route; 19] = [
        Self::Claim,
        Self::Current,
        Self::CurrentBatch,
        Self::Release,
        Self::Logout,
        Self::LogoutAll,
        Self::Sessions,
        Self::Health,
        Self::Ready,
        Self::Lease(LeaseRoute::Ensure),
        Self::Lease(LeaseRoute::Verify),
        Self::Lease(LeaseRoute::Release),
        Self::Lease(LeaseRoute::Lookup),
        Self::Lease(LeaseRoute::RegisterNode),
        Self::Lease(LeaseRoute::LookupNode),
        Self::Lease(LeaseRoute::DeregisterNode),
        Self::Info,
        Self::NodeKicks,
        Self::NodeKicksAck,
    ];

    /// The route at `path` (exact match, no prefix), if any. The two push routes match with
    /// any non-empty `{node}` segment without `/` (their template included); read the node
    /// with [`parse_node_kicks_path`].
    pub fn from_path(path: &str) -> Option<Self> {
        match path {
            CLAIM_PATH => Some(Self::Claim),
            CURRENT_PATH => Some(Self::Current),
            CURRENT_BATCH_PATH => Some(Self::CurrentBatch),
            RELEASE_PATH => Some(Self::Release),
            LOGOUT_PATH => Some(Self::Logout),
            LOGOUT_ALL_PATH => Some(Self::LogoutAll),
            SESSIONS_PATH => Some(Self::Sessions),
            HEALTH_PATH => Some(Self::Health),
            READY_PATH => Some(Self::Ready),
            INFO_PATH => Some(Self::Info),
            _ => LeaseRoute::from_path(path).map(Self::Lease).or_else(|| {
                parse_node_kicks_path(path).map(|(route, _)| match route {
                    PushRoute::Stream => Self::NodeKicks,
                    PushRoute::Ack => Self::NodeKicksAck,
                })
            }),
        }
    }

    /// The route's path; the template (`{node}`) for the two push routes.
    pub const fn path(self) -> &'static str {
        match self {
            Self::Claim => CLAIM_PATH,
            Self::Current => CURRENT_PATH,
            Self::CurrentBatch => CURRENT_BATCH_PATH,
            Self::Release => RELEASE_PATH,
            Self::Logout => LOGOUT_PATH,
            Self::LogoutAll => LOGOUT_ALL_PATH,
            Self::Sessions => SESSIONS_PATH,
            Self::Health => HEALTH_PATH,
            Self::Ready => READY_PATH,
            Self::Lease(route) => route.path(),
            Self::Info => INFO_PATH,
            Self::NodeKicks => NODE_KICKS_PATH,
            Self::NodeKicksAck => NODE_KICKS_ACK_PATH,
        }
    }

    /// Whether the route answers `method`: `POST` for the operations (the lease routes and
    /// the ack included), `GET` and `HEAD` for [`Route::Health`], [`Route::Ready`] and
    /// [`Route::Info`], `GET` only for [`Route::NodeKicks`].
    pub fn allows(self, method: &http::Method) -> bool {
        match self {
            Self::Claim
            | Self::Current
            | Self::CurrentBatch
            | Self::Release
            | Self::Logout
            | Self::LogoutAll
            | Self::Sessions
            | Self::NodeKicksAck
            | Self::Lease(_) => *method == http::Method::POST,
            Self::NodeKicks => *method == http::Method::GET,
            Self::Health | Self::Ready | Self::Info => {
                *method == http::Method::GET || *method == http::Method::HEAD
            }
        }
    }
}

impl Route {
    /// The methods the route answers, as a 405's `Allow` header lists them: `POST`,
    /// `GET, HEAD` for the probes and [`Route::Info`], or `GET` for [`Route::NodeKicks`].
    pub const fn allowed_methods(self) -> &'static str {
        match self {
            Self::Health | Self::Ready | Self::Info => "GET, HEAD",
            Self::NodeKicks => "GET",
            _ => "POST",
        }
    }
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    #[test]
    fn every_route_reads_back_from_its_path() {
        for route in Route::ALL {
            assert_eq!(Route::from_path(route.path()), Some(route));
        }
        for other in [
            "/",
            "/v1/claim/",
            "/v1",
            "/V1/claim",
            "/v1/logout/",
            "/v1/logout/all/",
            "/healthz?x",
            "/readyz/",
            "/v1/info/",
            "/v1/nodes//kicks",
            "/v1/nodes/n1/kicks/",
            "",
        ] {
            assert_eq!(Route::from_path(other), None, "{other}");
        }
        assert_eq!(
            Route::from_path("/v1/nodes/n1/kicks"),
            Some(Route::NodeKicks)
        );
        assert_eq!(
            Route::from_path("/v1/nodes/n1/kicks/ack"),
            Some(Route::NodeKicksAck)
        );
        // The lease routes under /v1/nodes/ keep their meaning.
        assert_eq!(
            Route::from_path("/v1/nodes/register"),
            Some(Route::Lease(LeaseRoute::RegisterNode))
        );
    }

    #[test]
    fn allowed_methods_list_what_allows_takes() {
        for route in Route::ALL {
            for name in route.allowed_methods().split(", ") {
                let method = Method::from_bytes(name.as_bytes()).unwrap();
                assert!(route.allows(&method), "{route:?} {name}");
            }
            for method in [Method::GET, Method::HEAD, Method::POST, Method::PUT] {
                let listed = route
                    .allowed_methods()
                    .split(", ")
                    .any(|m| m == method.as_str());
                assert_eq!(listed, route.allows(&method), "{route:?} {method}");
            }
        }
    }

    #[test]
    fn methods() {
        assert!(Route::Claim.allows(&Method::POST));
        assert!(!Route::Release.allows(&Method::GET));
        assert!(Route::Logout.allows(&Method::POST));
        assert!(!Route::Logout.allows(&Method::GET));
        assert!(Route::LogoutAll.allows(&Method::POST));
        assert!(!Route::LogoutAll.allows(&Method::GET));
        assert!(Route::Health.allows(&Method::HEAD));
        assert!(!Route::Health.allows(&Method::POST));
        assert!(Route::Ready.allows(&Method::GET));
        assert!(Route::Ready.allows(&Method::HEAD));
        assert!(!Route::Ready.allows(&Method::POST));
        assert!(Route::Info.allows(&Method::GET));
        assert!(!Route::Info.allows(&Method::POST));
        assert!(Route::NodeKicks.allows(&Method::GET));
        assert!(!Route::NodeKicks.allows(&Method::HEAD));
        assert!(!Route::NodeKicks.allows(&Method::POST));
        assert!(Route::NodeKicksAck.allows(&Method::POST));
        assert!(!Route::NodeKicksAck.allows(&Method::GET));
        for route in LeaseRoute::ALL {
            assert!(Route::Lease(route).allows(&Method::POST));
            assert!(!Route::Lease(route).allows(&Method::GET));
            assert_eq!(Route::Lease(route).allowed_methods(), "POST");
        }
    }

    #[test]
    fn all_lists_every_lease_route_once() {
        let leases: Vec<LeaseRoute> = Route::ALL
            .iter()
            .filter_map(|route| match route {
                Route::Lease(lease) => Some(*lease),
                _ => None,
            })
            .collect();
        assert_eq!(leases, LeaseRoute::ALL);
    }
}
