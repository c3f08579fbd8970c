//! Delivery. Whichever replica holds the `webhooks` lease fans new outbox
//! events out to the endpoints of their organization (one delivery per
//! endpoint, its bytes fixed then, in one transaction with marking the
//! events dispatched), then sends what is due. An attempt succeeds on a 2xx
//! answer within 15 s; a failure is retried on Svix's schedule (5 s, 5 min,
//! 30 min, 2 h, 5 h, 10 h, 10 h after the attempts before it), and an
//! endpoint whose deliveries have all failed for 5 days is turned off and
//! its organization told. Delivery is at least once: a replica that stops
//! between sending and recording sends again, with the same `webhook-id`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use tokio::sync::watch;
use uuid::Uuid;

use super::events;
use super::signing;
use super::target::{CheckedResolver, Targets};
use bytes::Bytes;
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::Actor;
use gantry_core::state::AppState;
use gantry_entities::{webhook_attempt, webhook_delivery, webhook_endpoint, webhook_event};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

const LEASE: &str = "webhooks";
const TICK: Duration = Duration::from_millis(500);
const FAN_OUT_BATCH: u64 = 500;
const SEND_BATCH: u64 = 32;
/// An answer must come within this.
pub const TIMEOUT: Duration = Duration::from_secs(15);
const USER_AGENT: &str = concat!("Gantry-Webhooks/", env!("CARGO_PKG_VERSION"));
/// Bytes of a receiver's answer kept with the attempt.
const EXCERPT_BYTES: usize = 512;
/// Seconds before the next attempt after each failed one; after the last,
/// the delivery has failed.
pub const RETRY_AFTER: [i64; 7] = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000];
/// An endpoint that has failed every delivery this long is turned off.
pub const DISABLE_AFTER: TimeDelta = TimeDelta::days(5);

/// How long sent events and finished deliveries are kept.
pub const RETENTION: TimeDelta = TimeDelta::days(30);

/// Delivery states.
pub const PENDING: &str = "pending";
pub const SUCCEEDED: &str = "succeeded";
pub const FAILED: &str = "failed";

/// The HTTP client deliveries use.
pub type Client = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<HttpConnector<CheckedResolver>>,
    Full<Bytes>,
>;

/// The HTTP client deliveries use: TLS against the web's roots, names
/// resolved through the address check, HTTP/1.1, no proxy; redirects are
/// answers like any other.
pub fn client(targets: &Targets) -> anyhow::Result<Client> {
    let mut http = HttpConnector::new_with_resolver(CheckedResolver(targets.clone()));
    http.enforce_http(false);
    http.set_connect_timeout(Some(TIMEOUT));
    let https = gantry_core::http::outbound::https(http)?;
    Ok(hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https))
}

/// Runs delivery until `stop` turns true.
pub async fn run(state: AppState, mut stop: watch::Receiver<bool>) {
    let holder = format!("{}-webhooks", state.scheduler.holder());
    let client = match client(&state.webhook_targets) {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "cannot build the webhook client; no webhooks are delivered");
            return;
        }
    };
    let ttl = TimeDelta::seconds(10);
    loop {
        match gantry_world::lease::hold(&state.db, LEASE, &holder, ttl).await {
            Ok(true) => {
                if let Err(error) = fan_out(&state).await {
                    tracing::warn!(%error, "webhook fan-out failed; trying again");
                }
                if let Err(error) = send_due(&state, &client).await {
                    tracing::warn!(%error, "webhook sending failed; trying again");
                }
            }
            Ok(false) => {}
            Err(error) => tracing::warn!(%error, "cannot hold the webhook lease"),
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = stop.changed() => break,
        }
    }
    gantry_world::lease::release(&state.db, LEASE, &holder)
        .await
        .ok();
}

fn subscribed(endpoint: &webhook_endpoint::Model, event_type: &str) -> bool {
    let types: Vec<String> = serde_json::from_str(&endpoint.event_types).unwrap_or_default();
    types.is_empty() || types.iter().any(|t| t == event_type)
}

/// The bytes sent for an event: the Standard Webhooks envelope.
pub fn envelope(event_type: &str, timestamp: &str, data: &serde_json::Value) -> String {
    serde_json::json!({ "type": event_type, "timestamp": timestamp, "data": data }).to_string()
}

/// A pending delivery of `payload` to `endpoint`, due now.
pub fn delivery(
    endpoint: &webhook_endpoint::Model,
    event_seq: Option<i64>,
    message_id: String,
    event_type: &str,
    payload: String,
    now: DateTime<Utc>,
) -> webhook_delivery::ActiveModel {
    webhook_delivery::ActiveModel {
        id: Set(Uuid::now_v7()),
        endpoint_id: Set(endpoint.id),
        org_id: Set(endpoint.org_id),
        message_id: Set(message_id),
        event_seq: Set(event_seq),
        event_type: Set(event_type.to_owned()),
        payload: Set(payload),
        status: Set(PENDING.to_owned()),
        attempts: Set(0),
        next_attempt_at: Set(Some(now)),
        created_at: Set(now),
        updated_at: Set(now),
    }
}

/// Turns undispatched outbox events into deliveries.
async fn fan_out(state: &AppState) -> Result<usize, DbErr> {
    let txn = gantry_core::db::write(&state.db).await?;
    let rows = webhook_event::Entity::find()
        .filter(webhook_event::Column::Dispatched.eq(false))
        .order_by_asc(webhook_event::Column::Seq)
        .limit(FAN_OUT_BATCH)
        .all(&txn)
        .await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let mut orgs: Vec<Uuid> = rows.iter().map(|r| r.org_id).collect();
    orgs.sort_unstable();
    orgs.dedup();
    let mut endpoints: HashMap<Uuid, Vec<webhook_endpoint::Model>> = HashMap::new();
    for endpoint in webhook_endpoint::Entity::find()
        .filter(webhook_endpoint::Column::OrgId.is_in(orgs))
        .filter(webhook_endpoint::Column::Enabled.eq(true))
        .all(&txn)
        .await?
    {
        endpoints.entry(endpoint.org_id).or_default().push(endpoint);
    }
    let now = state.clock.now();
    let mut deliveries = Vec::new();
    for row in &rows {
        let Some(targets) = endpoints.get(&row.org_id) else {
            continue;
        };
        let Some((event_type, data)) = events::describe(&txn, row).await? else {
            continue;
        };
        let payload = envelope(&event_type, &row.occurred_at, &data);
        for endpoint in targets.iter().filter(|e| subscribed(e, &event_type)) {
            deliveries.push(delivery(
                endpoint,
                Some(row.seq),
                format!("msg_{}", row.seq),
                &event_type,
                payload.clone(),
                now,
            ));
        }
    }
    let count = deliveries.len();
    if !deliveries.is_empty() {
        webhook_delivery::Entity::insert_many(deliveries)
            .exec_without_returning(&txn)
            .await?;
    }
    webhook_event::Entity::update_many()
        .col_expr(webhook_event::Column::Dispatched, Expr::value(true))
        .filter(webhook_event::Column::Seq.is_in(rows.iter().map(|r| r.seq)))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(count)
}

/// What one attempt got.
struct Answer {
    status: Option<u16>,
    excerpt: Option<String>,
    error: Option<String>,
    latency: Duration,
}

impl Answer {
    fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// Sends every delivery that is due and records each attempt: endpoints
/// side by side, each endpoint's deliveries one after another in the order
/// their events happened, so a receiver that answers sees them in order.
async fn send_due(state: &AppState, client: &Client) -> Result<usize, DbErr> {
    let now = state.clock.now();
    let due = webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::Status.eq(PENDING))
        .filter(webhook_delivery::Column::NextAttemptAt.lte(now))
        .order_by_asc(webhook_delivery::Column::NextAttemptAt)
        .order_by_asc(webhook_delivery::Column::EventSeq)
        .order_by_asc(webhook_delivery::Column::Id)
        .limit(SEND_BATCH)
        .all(&state.db)
        .await?;
    if due.is_empty() {
        return Ok(0);
    }
    let endpoints = gantry_core::db::by_id(
        webhook_endpoint::Entity::find()
            .filter(webhook_endpoint::Column::Id.is_in(due.iter().map(|d| d.endpoint_id)))
            .all(&state.db)
            .await?,
        |e| e.id,
    );
    let mut queues: Vec<(&webhook_endpoint::Model, Vec<&webhook_delivery::Model>)> = Vec::new();
    for delivery in &due {
        match endpoints.get(&delivery.endpoint_id) {
            Some(endpoint) if endpoint.enabled => {
                match queues.iter_mut().find(|(e, _)| e.id == endpoint.id) {
                    Some((_, queue)) => queue.push(delivery),
                    None => queues.push((endpoint, vec![delivery])),
                }
            }
            // A turned-off endpoint's deliveries end here; they can be
            // sent again once it is on.
            _ => {
                webhook_delivery::Entity::update_many()
                    .col_expr(webhook_delivery::Column::Status, Expr::value(FAILED))
                    .col_expr(
                        webhook_delivery::Column::NextAttemptAt,
                        Expr::value(Option::<DateTime<Utc>>::None),
                    )
                    .col_expr(webhook_delivery::Column::UpdatedAt, Expr::value(now))
                    .filter(webhook_delivery::Column::Id.eq(delivery.id))
                    .exec(&state.db)
                    .await?;
            }
        }
    }
    let sent =
        futures_util::future::join_all(queues.into_iter().map(|(endpoint, queue)| async move {
            let mut count = 0;
            for delivery in queue {
                let answer = attempt(client, &state.webhook_targets, endpoint, delivery, now).await;
                record(state, delivery, endpoint, &answer, now).await?;
                count += 1;
            }
            Ok::<_, DbErr>(count)
        }))
        .await;
    sent.into_iter().sum()
}

async fn attempt(
    client: &Client,
    targets: &Targets,
    endpoint: &webhook_endpoint::Model,
    delivery: &webhook_delivery::Model,
    now: DateTime<Utc>,
) -> Answer {
    let began = Instant::now();
    let refused = |error: String| Answer {
        status: None,
        excerpt: None,
        error: Some(error),
        latency: began.elapsed(),
    };
    let url = match targets.check(&endpoint.url) {
        Ok(url) => url,
        Err(refusal) => return refused(refusal.to_string()),
    };
    let mut secrets = vec![endpoint.secret.as_str()];
    if let (Some(previous), Some(until)) =
        (&endpoint.previous_secret, endpoint.previous_secret_until)
        && until > now
    {
        secrets.push(previous);
    }
    // The receiver checks this against its own clock, so it is the real
    // time of the attempt.
    let timestamp = Utc::now().timestamp();
    let signature = signing::header(secrets, &delivery.message_id, timestamp, &delivery.payload);
    let request = http::Request::post(url.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, USER_AGENT)
        .header("webhook-id", &delivery.message_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(Full::new(Bytes::from(delivery.payload.clone())));
    let request = match request {
        Ok(request) => request,
        Err(error) => return refused(error.to_string()),
    };
    let answered = tokio::time::timeout(TIMEOUT, async {
        let response = client.request(request).await?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut excerpt = Vec::new();
        while excerpt.len() < EXCERPT_BYTES {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        excerpt.extend_from_slice(data);
                    }
                }
                _ => break,
            }
        }
        excerpt.truncate(EXCERPT_BYTES);
        Ok::<_, hyper_util::client::legacy::Error>((status, excerpt))
    })
    .await;
    match answered {
        Ok(Ok((status, excerpt))) => Answer {
            status: Some(status),
            excerpt: Some(String::from_utf8_lossy(&excerpt).into_owned()),
            error: None,
            latency: began.elapsed(),
        },
        Ok(Err(error)) => refused(describe_error(&error)),
        Err(_) => refused(format!("no answer within {} s", TIMEOUT.as_secs())),
    }
}

/// The error and its causes, which name the refused address.
fn describe_error(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

async fn record(
    state: &AppState,
    delivery: &webhook_delivery::Model,
    endpoint: &webhook_endpoint::Model,
    answer: &Answer,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let txn = gantry_core::db::write(&state.db).await?;
    webhook_attempt::ActiveModel {
        id: Set(Uuid::now_v7()),
        delivery_id: Set(delivery.id),
        attempted_at: Set(now),
        status_code: Set(answer.status.map(i32::from)),
        latency_ms: Set(i32::try_from(answer.latency.as_millis()).unwrap_or(i32::MAX)),
        response_excerpt: Set(answer.excerpt.clone()),
        error: Set(answer.error.clone()),
    }
    .insert(&txn)
    .await?;
    let attempts = delivery.attempts + 1;
    let (status, next) = if answer.succeeded() {
        (SUCCEEDED, None)
    } else {
        match usize::try_from(attempts - 1)
            .ok()
            .and_then(|n| RETRY_AFTER.get(n))
        {
            Some(after) => (PENDING, Some(now + TimeDelta::seconds(*after))),
            None => (FAILED, None),
        }
    };
    webhook_delivery::Entity::update_many()
        .col_expr(webhook_delivery::Column::Status, Expr::value(status))
        .col_expr(webhook_delivery::Column::Attempts, Expr::value(attempts))
        .col_expr(webhook_delivery::Column::NextAttemptAt, Expr::value(next))
        .col_expr(webhook_delivery::Column::UpdatedAt, Expr::value(now))
        .filter(webhook_delivery::Column::Id.eq(delivery.id))
        .exec(&txn)
        .await?;
    health(&txn, endpoint, answer.succeeded(), now).await?;
    txn.commit().await
}

/// Keeps when an endpoint started failing, and turns it off once it has
/// failed for [`DISABLE_AFTER`].
async fn health(
    db: &impl ConnectionTrait,
    endpoint: &webhook_endpoint::Model,
    succeeded: bool,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let Some(current) = webhook_endpoint::Entity::find_by_id(endpoint.id)
        .one(db)
        .await?
    else {
        return Ok(());
    };
    if succeeded {
        if current.failing_since.is_some() {
            let mut row: webhook_endpoint::ActiveModel = current.into();
            row.failing_since = Set(None);
            row.update(db).await?;
        }
        return Ok(());
    }
    let since = current.failing_since.unwrap_or(now);
    let disable = current.enabled && now - since >= DISABLE_AFTER;
    let (id, org_id, url) = (current.id, current.org_id, current.url.clone());
    let reason = format!(
        "every delivery failed for {} days",
        DISABLE_AFTER.num_days()
    );
    let mut row: webhook_endpoint::ActiveModel = current.into();
    row.failing_since = Set(Some(since));
    if disable {
        row.enabled = Set(false);
        row.disabled_reason = Set(Some(reason.clone()));
        row.updated_at = Set(now);
    }
    row.update(db).await?;
    if disable {
        audit::record(
            db,
            Change {
                org_id: Some(org_id),
                action: "webhook.endpoint_disabled",
                target_type: "webhook_endpoint",
                target_id: Some(id.to_string()),
                details: serde_json::json!({
                    "url": url,
                    "failing_since": since,
                    "reason": reason,
                }),
                actor: &Actor::system(),
            },
        )
        .await?;
        tracing::warn!(endpoint = %id, org = %org_id, "webhook endpoint turned off after failing for days");
    }
    Ok(())
}

/// Drops dispatched events and deliveries past `retention`.
pub async fn prune(
    db: &impl ConnectionTrait,
    now: DateTime<Utc>,
    retention: TimeDelta,
) -> Result<u64, DbErr> {
    let cutoff = now - retention;
    let events = webhook_event::Entity::delete_many()
        .filter(webhook_event::Column::Dispatched.eq(true))
        .filter(webhook_event::Column::OccurredAt.lt(events::timestamp(cutoff)))
        .exec(db)
        .await?
        .rows_affected;
    let deliveries = webhook_delivery::Entity::delete_many()
        .filter(webhook_delivery::Column::CreatedAt.lt(cutoff))
        .filter(webhook_delivery::Column::Status.ne(PENDING))
        .exec(db)
        .await?
        .rows_affected;
    Ok(events + deliveries)
}
