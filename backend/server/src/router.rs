//! The HTTP application: every crate's routes with the OpenAPI document,
//! the middleware stack a request meets, the console and the manual.

use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;

use crate::openapi::ApiDoc;

use gantry_core::state::{API_PREFIX, AppState, REQUEST_ID_HEADER};

/// Every route, with its OpenAPI description.
pub fn routes() -> OpenApiRouter<AppState> {
    let api = OpenApiRouter::new()
        .merge(gantry_access::auth::accounts::routes())
        .merge(gantry_access::auth::refresh::routes())
        .merge(gantry_access::auth::oidc::routes())
        .merge(gantry_access::ssh_keys::routes())
        .merge(gantry_access::tenancy::orgs::routes())
        .merge(gantry_access::tenancy::members::routes())
        .merge(gantry_access::tenancy::invitations::routes())
        .merge(gantry_webhooks::routes())
        .merge(gantry_access::tenancy::projects::routes())
        .merge(gantry_access::tenancy::api_keys::routes())
        .merge(gantry_access::tenancy::registry_credentials::routes())
        .merge(gantry_access::audit::routes())
        .merge(gantry_catalog::routes())
        .merge(gantry_inventory::nodes::routes())
        .merge(gantry_inventory::telemetry::routes())
        .merge(gantry_monitoring::history::api::routes())
        .merge(gantry_workload::quotas::routes())
        .merge(gantry_workload::queue_limits::routes())
        .merge(gantry_workload::orders::routes())
        .merge(gantry_workload::reservations::api::routes())
        .merge(gantry_workload::reservations::calendar::routes())
        .merge(gantry_workload::reservations::maintenance::routes())
        .merge(gantry_workload::jobs::arrays::routes())
        .merge(gantry_workload::jobs::attempts::routes())
        .merge(gantry_workload::jobs::logs::routes())
        .merge(gantry_agents::logs::routes())
        .merge(gantry_metering::usage::routes())
        .merge(gantry_metering::corrections::routes())
        .merge(gantry_billing::api::routes())
        .merge(gantry_billing::spend::routes())
        .merge(gantry_billing::sla::api::routes())
        .merge(gantry_agents::routes())
        .merge(gantry_networks::api::routes())
        .merge(gantry_volumes::api::routes())
        .merge(gantry_volumes::quotas::routes())
        .merge(gantry_volumes::shared::routes())
        .merge(gantry_provisioning::slurm::api::routes())
        .merge(gantry_scheduling::status::routes())
        .merge(gantry_scheduling::what_if::routes());
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .nest(API_PREFIX, api)
        .merge(crate::health::routes())
}

/// The full HTTP application over `state`.
pub fn router(state: AppState) -> anyhow::Result<Router> {
    let (router, document) = routes().split_for_parts();
    // Serialized once: the document never changes while the server runs.
    let document = axum::body::Bytes::from(
        serde_json::to_vec(&document).context("serializing the OpenAPI document")?,
    );
    let mut router = router.route(
        &format!("{API_PREFIX}/openapi.json"),
        axum::routing::get(move || {
            let document = document.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], document) }
        }),
    );
    let config = &state.config;
    match crate::http::docs::routes(&config.docs_dir) {
        Some(docs) => router = router.merge(docs),
        None => tracing::info!(
            dir = %config.docs_dir.display(),
            "no built manual there; /docs is not served"
        ),
    }
    match crate::http::console::Console::open(&config.console_dir) {
        Some(console) => {
            router = router.fallback(move |request| console.clone().serve(request));
        }
        None => tracing::info!(
            dir = %config.console_dir.display(),
            "no built console there; serving the API only"
        ),
    }

    // Layers wrap what was added before them: the last one added sees a
    // request first. Read from the bottom up for the order a request meets.
    let request_id = HeaderName::from_static(REQUEST_ID_HEADER);
    let mut router = router
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            gantry_core::http::idempotency::idempotency,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            gantry_core::http::rate_limit::limit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            gantry_core::auth::principal::authenticate,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(
            config.body_limit_bytes,
        ))
        .layer(RequestBodyLimitLayer::new(config.body_limit_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(config.request_timeout_seconds),
        ))
        // Added after the layers above, which it skips: its bearer token
        // is the scrape token, not a session or API key.
        .route(
            gantry_monitoring::PATH,
            axum::routing::get(gantry_monitoring::scrape),
        );
    if let Some(cors) = cors(&config.cors_allowed_origins) {
        router = router.layer(cors);
    }
    Ok(router
        .layer(axum::middleware::map_response(gantry_core::http::problem::ensure_problem_body))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<_>| {
            let request_id = request
                .headers()
                .get(REQUEST_ID_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            tracing::info_span!("request", method = %request.method(), path = %request.uri().path(), request_id)
        }))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .layer(axum::middleware::from_fn(gantry_core::http::request_id::sanitize))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            gantry_core::http::client_address::resolve,
        ))
        .layer(axum::middleware::from_fn(gantry_monitoring::http::record))
        .with_state(state))
}

/// CORS is off unless origins are configured.
fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let origins: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static(gantry_core::http::idempotency::HEADER),
            ])
            .expose_headers([HeaderName::from_static(REQUEST_ID_HEADER)])
            .max_age(Duration::from_secs(600)),
    )
}
