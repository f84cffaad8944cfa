//! `GET /metrics`: the Prometheus exporter's recorder, installed for the whole process, and the
//! route that renders it in front of the arbiter's service.
//!
//! The libraries record through the `metrics` facade; only this binary picks an exporter.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use unique_arbiter_http::ResponseBody;
use unique_listener::RequestBody;

use crate::error::StartupError;

/// The path the exposition is served on.
pub(crate) const PATH: &str = "/metrics";

/// The Prometheus text exposition format.
const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often histogram samples are folded into their buckets when nobody scrapes, so they do
/// not pile up.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder as the process's global recorder, with buckets for every
/// histogram the server records, and returns the handle that renders it. Must run before
/// anything registers a metric (the arbiter's observer and store, the services, the accept
/// loop), which happens when they are built.
pub(crate) fn install() -> Result<PrometheusHandle, StartupError> {
    let buckets = [
        (
            unique_metrics::CLAIM_DURATION_SECONDS,
            unique_metrics::buckets::CLAIM_DURATION_SECONDS,
        ),
        (
            unique_metrics::STORE_OPERATION_DURATION_SECONDS,
            unique_metrics::buckets::STORE_OPERATION_DURATION_SECONDS,
        ),
        (
            unique_metrics::CLAIM_ATTEMPTS,
            unique_metrics::buckets::CLAIM_ATTEMPTS,
        ),
    ];
    let mut builder = PrometheusBuilder::new();
    for (name, bounds) in buckets {
        builder = builder
            .set_buckets_for_metric(Matcher::Full(name.to_owned()), bounds)
            .map_err(|e| format!("cannot configure the metrics buckets: {e}"))?;
    }
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    Ok(handle)
}

/// Folds histogram samples into their buckets every few seconds, for as long as the runtime runs.
pub(crate) fn spawn_upkeep(handle: PrometheusHandle) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            every.tick().await;
            handle.run_upkeep();
        }
    });
}

/// Answers `GET /metrics` from `handle` (when there is one) and passes every other request to
/// `inner` unchanged.
#[derive(Clone)]
pub(crate) struct MetricsRoute<S> {
    inner: S,
    handle: Option<PrometheusHandle>,
}

impl<S> MetricsRoute<S> {
    /// `handle: None` (`--no-metrics`): `/metrics` goes to `inner` like any path (404).
    pub(crate) fn new(inner: S, handle: Option<PrometheusHandle>) -> Self {
        Self { inner, handle }
    }
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<ResponseBody>, Infallible>> + Send>>;

impl<S> tower_service::Service<Request<RequestBody>> for MetricsRoute<S>
where
    S: tower_service::Service<
            Request<RequestBody>,
            Response = Response<ResponseBody>,
            Error = Infallible,
            Future = Answer,
        >,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<RequestBody>) -> Answer {
        match &self.handle {
            Some(handle) if request.uri().path() == PATH => {
                let answer = exposition(handle, request.method());
                Box::pin(std::future::ready(Ok(answer)))
            }
            _ => self.inner.call(request),
        }
    }
}

/// The rendered metrics for `GET` (and `HEAD`), 405 for any other method.
fn exposition(handle: &PrometheusHandle, method: &Method) -> Response<ResponseBody> {
    let (status, body, content_type) = if method == Method::GET || method == Method::HEAD {
        (
            StatusCode::OK,
            Bytes::from(handle.render()),
            CONTENT_TYPE_TEXT,
        )
    } else {
        let refused = Bytes::from_static(b"method not allowed");
        (StatusCode::METHOD_NOT_ALLOWED, refused, "text/plain")
    };
    let mut answer = Response::new(ResponseBody::new(body));
    *answer.status_mut() = status;
    let headers = answer.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    answer
}
