//! The server loop: the background tasks of a replica (housekeeping,
//! metrics, change notifications, webhook delivery, the scheduling loop)
//! and HTTP with graceful shutdown.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;

use gantry_core::state::AppState;

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
            match gantry_core::http::idempotency::purge_expired(&state.db).await {
                Ok(0) => {}
                Ok(purged) => tracing::info!(purged, "dropped expired idempotency records"),
                Err(error) => tracing::warn!(%error, "could not drop expired idempotency records"),
            }
            let retention = chrono::Duration::days(
                i64::try_from(state.config.job_log_retention_days).unwrap_or(14),
            );
            match gantry_workload::jobs::logs::prune(&state.db, state.clock.now(), retention).await
            {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "dropped output of jobs past retention"),
                Err(error) => tracing::warn!(%error, "could not drop old job output"),
            }
            match gantry_inventory::telemetry::prune(&state.db, state.clock.now()).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "dropped GPU readings past retention"),
                Err(error) => tracing::warn!(%error, "could not drop old GPU readings"),
            }
            match gantry_webhooks::delivery::prune(
                &state.db,
                state.clock.now(),
                gantry_webhooks::delivery::RETENTION,
            )
            .await
            {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "dropped webhook events past retention"),
                Err(error) => tracing::warn!(%error, "could not drop old webhook events"),
            }
            match gantry_access::auth::oidc::prune(&state.db, state.clock.now()).await {
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
    gantry_monitoring::spawn_upkeep();
    let (stop_scheduler, scheduler_stopped) = tokio::sync::watch::channel(false);
    let metrics = match state.config.metrics_listen {
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("binding the metrics listener {address}"))?;
            let mut stopped = scheduler_stopped.clone();
            Some(tokio::spawn(gantry_monitoring::serve_private(
                listener,
                async move {
                    stopped.changed().await.ok();
                },
            )))
        }
        None => None,
    };
    let notifications = tokio::spawn(gantry_world::notify::listen(
        state.clone(),
        scheduler_stopped.clone(),
    ));
    let webhooks = tokio::spawn(gantry_webhooks::delivery::run(
        state.clone(),
        scheduler_stopped.clone(),
    ));
    let scheduler = tokio::spawn(gantry_scheduling::run(state.clone(), scheduler_stopped));
    let handle = state.scheduler.clone();
    let app = crate::router::router(state)?;
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
