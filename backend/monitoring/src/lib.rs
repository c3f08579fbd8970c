//! What operators watch, in Prometheus's text format, through the `metrics`
//! facade and its Prometheus exporter. Fleet and queue figures come from
//! the scheduling leader (other replicas report none of them, as Kueue's
//! followers do); request, admission, preemption and cycle figures from
//! where they happen. Per-GPU telemetry is each agent's own `/metrics`, as
//! DCGM's exporter is on every node: 32,000 series of a 1,000-node fleet
//! in one server's scrape would cost it 25 times the rest. Labels stay
//! bounded: regions, models, classes and organizations, never orders.

pub mod fleet;
pub mod history;
pub mod http;

use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

use gantry_core::error::{ApiError, ApiResult};
use gantry_core::state::AppState;

/// Where the main listener answers scrapes (with the configured token).
pub const PATH: &str = "/metrics";

/// A gauge not set for this long leaves the output: a series whose labels
/// no longer apply (a GPU's previous tenant, a replica that stopped
/// leading) ends instead of repeating its last value.
const IDLE: Duration = Duration::from_secs(120);

/// How often histograms are folded and idle gauges dropped.
const UPKEEP: Duration = Duration::from_secs(5);

const SECONDS_FAST: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const SECONDS_WAIT: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's recorder, installed on first use: metrics belong to the
/// process Prometheus scrapes, whatever servers it runs.
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = builder().build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("another metrics recorder is installed; /metrics stays empty");
        }
        fleet::describe();
        http::describe();
        handle
    })
}

fn builder() -> PrometheusBuilder {
    let buckets = [
        (http::DURATION, SECONDS_FAST),
        (fleet::CYCLE, SECONDS_FAST),
        (fleet::ADMISSION_WAIT, SECONDS_WAIT),
    ];
    buckets.into_iter().fold(
        PrometheusBuilder::new().idle_timeout(MetricKindMask::GAUGE, Some(IDLE)),
        |builder, (name, bounds)| {
            // Only an empty bucket list is refused, and none of these is.
            builder
                .set_buckets_for_metric(Matcher::Full(name.to_owned()), bounds)
                .unwrap_or_else(|_| PrometheusBuilder::new())
        },
    )
}

/// Folds histograms and drops idle series, for the process's lifetime.
pub fn spawn_upkeep() {
    let handle = handle();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP);
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    });
}

fn exposition() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle().render(),
    )
}

/// `GET /metrics` on the main listener: only with the configured scrape
/// token, since the figures name tenants. Without a token configured it
/// does not exist there; the private metrics listener serves it instead.
/// Wrong tokens count against the caller's address like any other bad
/// credential.
pub async fn scrape(
    State(state): State<AppState>,
    request: Request,
) -> ApiResult<impl IntoResponse> {
    let Some(expected) = state
        .config
        .metrics_token
        .as_deref()
        .filter(|t| !t.is_empty())
    else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "route_not_found",
            "no such route",
        ));
    };
    let address = gantry_core::http::client_address::of(&request);
    if let Err(wait) = state.rate_limits.check_credentials_allowed(address) {
        return Err(ApiError::too_many_failed_credentials(wait));
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Digests compare in a time that tells nothing about the token.
    let digest = |token: &str| gantry_types::digest::sha256_hex(&[token.as_bytes()]);
    if given.is_some_and(|given| digest(given) == digest(expected)) {
        return Ok(exposition());
    }
    state.rate_limits.record_failed_credentials(address);
    Err(ApiError::unauthenticated(
        "invalid_token",
        "scraping /metrics here needs the configured metrics token as a bearer token",
    ))
}

/// Serves `/metrics` alone, without credentials, on the private address
/// operators give it, until `stop` resolves.
pub async fn serve_private(
    listener: tokio::net::TcpListener,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "serving metrics");
    }
    let app = Router::new().route(PATH, axum::routing::get(|| async { exposition() }));
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
        .context("serving metrics")
}
