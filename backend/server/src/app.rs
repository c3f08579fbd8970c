//! The application: shared state, the router with its middleware, and the
//! server loop with graceful shutdown.

use std::net::SocketAddr;
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

use crate::auth::identity::IdentityCache;
use crate::auth::login_throttle::LoginThrottle;
use crate::auth::password::PasswordHasher;
use crate::auth::session::{self, SessionKeys};
use crate::config::Config;
use crate::http::rate_limit::RateLimits;
use crate::openapi::ApiDoc;
use crate::scheduling::SchedulerHandle;

pub use gantry_core::state::{API_PREFIX, AppState, REQUEST_ID_HEADER, Shared};

/// Connects to the database, applies pending migrations, loads (or creates)
/// the session signing secret and, with `demo` on, seeds an empty database
/// with the demo installation.
pub async fn start(config: Config) -> anyhow::Result<AppState> {
    let scheduler = SchedulerHandle::default();
    let db = crate::db::connect(
        &config.database_url(),
        config.database_max_connections,
        &crate::scheduling::notify::application_name(scheduler.holder()),
    )
    .await?;
    crate::db::migrate(&db).await?;
    let secret = session::load_or_create_secret(config.jwt_secret.as_deref(), &config.data_dir)?;
    let passwords = PasswordHasher::new()?;
    let trusted_proxies =
        crate::http::client_address::TrustedProxies::parse(&config.trusted_proxies)?;
    let webhook_targets = crate::webhooks::target::Targets::new(
        crate::http::client_address::networks(&config.webhook_allowed_networks, "webhook network")?,
        config.webhook_allow_http,
    );
    if config.demo && crate::demo::seed(&db, &passwords).await? {
        tracing::info!("seeded the demo catalog, simulated cluster and logins");
    }
    let intake = crate::orders::intake::Intake::start(db.clone(), config.max_waiting_orders);
    Ok(AppState::from(Shared {
        db,
        sessions: SessionKeys::new(&secret, config.jwt_ttl_seconds)?,
        passwords,
        identities: IdentityCache::new(config.auth_cache_seconds),
        login_throttle: LoginThrottle::new(config.login_max_failures),
        rate_limits: RateLimits::new(
            config.rate_limit_per_second,
            config.rate_limit_burst,
            config.failed_auth_per_minute,
        ),
        scheduler,
        intake,
        catalog: crate::catalog::cache::CatalogCache::default(),
        networks: crate::networks::Cache::default(),
        clock: crate::clock::Clock::default(),
        trusted_proxies,
        webhook_targets,
        registry_sealer: crate::sealing::Sealer::new(
            &secret,
            crate::tenancy::registry_credentials::PURPOSE,
        )?,
        secret_env_sealer: crate::sealing::Sealer::new(&secret, crate::jobs::SECRETS_PURPOSE)?,
        config,
    }))
}

/// Every route, with its OpenAPI description.
pub fn routes() -> OpenApiRouter<AppState> {
    let api = OpenApiRouter::new()
        .merge(crate::auth::accounts::routes())
        .merge(crate::auth::refresh::routes())
        .merge(crate::auth::oidc::routes())
        .merge(crate::ssh_keys::routes())
        .merge(crate::tenancy::orgs::routes())
        .merge(crate::tenancy::members::routes())
        .merge(crate::tenancy::invitations::routes())
        .merge(crate::webhooks::routes())
        .merge(crate::tenancy::projects::routes())
        .merge(crate::tenancy::api_keys::routes())
        .merge(crate::tenancy::registry_credentials::routes())
        .merge(crate::audit::routes())
        .merge(crate::catalog::routes())
        .merge(crate::inventory::nodes::routes())
        .merge(crate::inventory::telemetry::routes())
        .merge(crate::monitoring::history::api::routes())
        .merge(crate::quotas::routes())
        .merge(crate::queue_limits::routes())
        .merge(crate::orders::routes())
        .merge(crate::reservations::api::routes())
        .merge(crate::reservations::calendar::routes())
        .merge(crate::reservations::maintenance::routes())
        .merge(crate::jobs::arrays::routes())
        .merge(crate::jobs::attempts::routes())
        .merge(crate::jobs::logs::routes())
        .merge(crate::jobs::logs::agent_routes())
        .merge(crate::metering::usage::routes())
        .merge(crate::metering::corrections::routes())
        .merge(crate::billing::api::routes())
        .merge(crate::billing::spend::routes())
        .merge(crate::sla::api::routes())
        .merge(crate::agents::routes())
        .merge(crate::networks::api::routes())
        .merge(crate::scheduling::status::routes())
        .merge(crate::scheduling::what_if::routes());
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
            crate::http::idempotency::idempotency,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::http::rate_limit::limit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::principal::authenticate,
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
            crate::monitoring::PATH,
            axum::routing::get(crate::monitoring::scrape),
        );
    if let Some(cors) = cors(&config.cors_allowed_origins) {
        router = router.layer(cors);
    }
    Ok(router
        .layer(axum::middleware::map_response(crate::http::problem::ensure_problem_body))
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
        .layer(axum::middleware::from_fn(crate::http::request_id::sanitize))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::http::client_address::resolve,
        ))
        .layer(axum::middleware::from_fn(crate::monitoring::http::record))
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
                HeaderName::from_static(crate::http::idempotency::HEADER),
            ])
            .expose_headers([HeaderName::from_static(REQUEST_ID_HEADER)])
            .max_age(Duration::from_secs(600)),
    )
}

/// Housekeeping that runs for the life of the server: expired idempotency
/// records, idle rate-limit buckets, job output, GPU readings and webhook
/// events past their retention, and single sign-ins never finished are
/// dropped.
fn spawn_housekeeping(state: AppState) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(600));
        loop {
            tick.tick().await;
            state.rate_limits.prune();
            match crate::http::idempotency::purge_expired(&state.db).await {
                Ok(0) => {}
                Ok(purged) => tracing::info!(purged, "dropped expired idempotency records"),
                Err(error) => tracing::warn!(%error, "could not drop expired idempotency records"),
            }
            let retention = chrono::Duration::days(
                i64::try_from(state.config.job_log_retention_days).unwrap_or(14),
            );
            match crate::jobs::logs::prune(&state.db, state.clock.now(), retention).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "dropped output of jobs past retention"),
                Err(error) => tracing::warn!(%error, "could not drop old job output"),
            }
            match crate::inventory::telemetry::prune(&state.db, state.clock.now()).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "dropped GPU readings past retention"),
                Err(error) => tracing::warn!(%error, "could not drop old GPU readings"),
            }
            match crate::webhooks::delivery::prune(
                &state.db,
                state.clock.now(),
                crate::webhooks::delivery::RETENTION,
            )
            .await
            {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "dropped webhook events past retention"),
                Err(error) => tracing::warn!(%error, "could not drop old webhook events"),
            }
            match crate::auth::oidc::prune(&state.db, state.clock.now()).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "dropped single sign-ins never finished"),
                Err(error) => tracing::warn!(%error, "could not drop lapsed single sign-ins"),
            }
        }
    });
}

/// Serves on an already-bound listener until `shutdown` resolves, then
/// finishes the requests in flight.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    spawn_housekeeping(state.clone());
    crate::monitoring::spawn_upkeep();
    let (stop_scheduler, scheduler_stopped) = tokio::sync::watch::channel(false);
    let metrics = match state.config.metrics_listen {
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("binding the metrics listener {address}"))?;
            let mut stopped = scheduler_stopped.clone();
            Some(tokio::spawn(crate::monitoring::serve_private(
                listener,
                async move {
                    stopped.changed().await.ok();
                },
            )))
        }
        None => None,
    };
    let notifications = tokio::spawn(crate::scheduling::notify::listen(
        state.clone(),
        scheduler_stopped.clone(),
    ));
    let webhooks = tokio::spawn(crate::webhooks::delivery::run(
        state.clone(),
        scheduler_stopped.clone(),
    ));
    let scheduler = tokio::spawn(crate::scheduling::run(state.clone(), scheduler_stopped));
    let handle = state.scheduler.clone();
    let app = router(state)?;
    let shutdown = async move {
        shutdown.await;
        // Agents' waiting fetches answer now instead of holding the
        // shutdown up for their whole wait.
        handle.stop_assignment_waits();
    };
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
    .context("serving HTTP");
    // The loop gives its lease up on the way out, so a replica takes over
    // without waiting for it to expire.
    stop_scheduler.send(true).ok();
    scheduler.await.ok();
    notifications.await.ok();
    webhooks.await.ok();
    if let Some(metrics) = metrics {
        metrics.await.context("the metrics listener")??;
    }
    served
}
