//! Captured output of jobs: node agents ship their lines, kept up to a size
//! limit per job and dropped a retention period after the job ended;
//! tenants read them as pages or follow them live as server-sent events.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_access::tenancy::access::{OrgAccess, need};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::http::extract::ApiQuery;
use gantry_core::state::AppState;
use gantry_entities::{job_log, order};

const PAGE_DEFAULT: u64 = 1000;
const PAGE_MAX: u64 = 5000;
/// How often a follower looks for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LogLine {
    /// Increases with every line; pass the last one as `after`.
    pub id: i64,
    pub attempt: i32,
    pub node_id: Option<Uuid>,
    pub stream: String,
    pub line: String,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Logs {
    pub lines: Vec<LogLine>,
    /// The `after` for the next page; absent when there were no lines.
    pub next_after: Option<i64>,
    /// Output past the job's size limit was dropped.
    pub truncated: bool,
    /// The job has ended: no more lines will come.
    pub ended: bool,
}

/// One server-sent event of `follow=true`: `data` is a [`LogLine`] as
/// JSON and `id` its id; the last event is `end` with `{}`.
#[derive(Debug, ToSchema)]
pub struct LogEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl From<LogEvent> for Event {
    fn from(sent: LogEvent) -> Self {
        let mut event = Event::default().data(sent.data);
        if let Some(id) = sent.id {
            event = event.id(id);
        }
        if let Some(name) = sent.event {
            event = event.event(name);
        }
        event
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// Only lines after this id.
    pub after: Option<i64>,
    /// Lines per page, 1 to 5000; 1000 when absent.
    #[param(minimum = 1, maximum = 5000)]
    pub limit: Option<u64>,
    /// Only this attempt's lines.
    #[param(minimum = 1)]
    pub attempt: Option<i32>,
    /// Stream new lines as server-sent events (`text/event-stream`) until
    /// the job ends: each event's data is one line as JSON, its id the
    /// line's id; a last `end` event says the job ended.
    pub follow: Option<bool>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(read))
}

/// One line of a job's output, as stored.
pub fn row(
    job: &order::Model,
    node_id: Uuid,
    stream: Stream,
    line: String,
    at: DateTime<Utc>,
) -> job_log::ActiveModel {
    job_log::ActiveModel {
        order_id: Set(job.id),
        attempt: Set(job.attempts),
        node_id: Set(Some(node_id)),
        stream: Set(stream.as_str().to_owned()),
        line: Set(line),
        at: Set(at),
        ..Default::default()
    }
}

/// Stores `lines` of `job`'s output from node `node_id` up to the job's
/// limit of `limit` bytes; past it, one marker line says the rest is not
/// kept. Answers the lines kept and whether the limit is reached.
pub async fn keep(
    db: &impl ConnectionTrait,
    job: &order::Model,
    node_id: Uuid,
    lines: impl IntoIterator<Item = (Stream, String)>,
    limit: i64,
    at: DateTime<Utc>,
) -> Result<(usize, bool), DbErr> {
    let mut used = job.log_bytes;
    let mut rows = Vec::new();
    let mut truncated = used >= limit;
    for (stream, line) in lines {
        let size = i64::try_from(line.len()).unwrap_or(i64::MAX);
        if truncated || used.saturating_add(size) > limit {
            if !truncated {
                rows.push(row(
                    job,
                    node_id,
                    Stream::Stderr,
                    format!("[gantry] output past {limit} bytes is not kept"),
                    at,
                ));
                truncated = true;
            }
            continue;
        }
        used += size;
        rows.push(row(job, node_id, stream, line, at));
    }
    let kept = rows.len();
    for chunk in rows.chunks(500) {
        job_log::Entity::insert_many(chunk.to_vec())
            .exec_without_returning(db)
            .await?;
    }
    // The marker line counts against the limit too, so it is written once.
    let stored = if truncated { limit } else { used };
    order::Entity::update_many()
        .col_expr(
            order::Column::LogBytes,
            sea_orm::sea_query::Expr::value(stored),
        )
        .filter(order::Column::Id.eq(job.id))
        .exec(db)
        .await?;
    Ok((kept, truncated))
}

/// A job's captured output, oldest first; `follow=true` streams it live.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/orders/{order_id}/logs",
    tag = "orders",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("order_id" = Uuid, Path, description = "Order id"),
        LogQuery,
    ),
    responses(
        (status = 200, description = "A page of lines, or with `follow=true` a stream of them", content(
            (Logs = "application/json"),
            (LogEvent = "text/event-stream"),
        )),
        ProblemResponses,
    ),
    security(("bearer" = []))
)]
async fn read(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    params: RawPathParams,
    ApiQuery(query): ApiQuery<LogQuery>,
) -> ApiResult<Response> {
    let job = crate::orders::find(&state.db, &access.scope, &params).await?;
    let limit = query.limit.unwrap_or(PAGE_DEFAULT);
    if !(1..=PAGE_MAX).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_limit",
            format!("limit must be between 1 and {PAGE_MAX}"),
        ));
    }
    if query.attempt.is_some_and(|a| a < 1) {
        return Err(ApiError::bad_request(
            "invalid_attempt",
            "attempt must be 1 or more",
        ));
    }
    if query.follow == Some(true) {
        return Ok(follow(
            state.db.clone(),
            job.id,
            query.after.unwrap_or(0),
            query.attempt,
        )
        .into_response());
    }
    let lines = page(
        &state.db,
        job.id,
        query.after.unwrap_or(0),
        query.attempt,
        limit,
    )
    .await?;
    let limit_bytes = i64::try_from(state.config.job_log_limit_bytes).unwrap_or(i64::MAX);
    Ok(Json(Logs {
        next_after: lines.last().map(|l| l.id),
        lines,
        truncated: job.log_bytes >= limit_bytes,
        ended: job.status.is_final(),
    })
    .into_response())
}

async fn page(
    db: &impl ConnectionTrait,
    order_id: Uuid,
    after: i64,
    attempt: Option<i32>,
    limit: u64,
) -> Result<Vec<LogLine>, DbErr> {
    let mut select = job_log::Entity::find()
        .filter(job_log::Column::OrderId.eq(order_id))
        .filter(job_log::Column::Id.gt(after));
    if let Some(attempt) = attempt {
        select = select.filter(job_log::Column::Attempt.eq(attempt));
    }
    Ok(select
        .order_by_asc(job_log::Column::Id)
        .limit(limit)
        .all(db)
        .await?
        .into_iter()
        .map(|l| LogLine {
            id: l.id,
            attempt: l.attempt,
            node_id: l.node_id,
            stream: l.stream,
            line: l.line,
            at: l.at,
        })
        .collect())
}

/// New lines as they come, until the job has ended and every line is out.
fn follow(
    db: DatabaseConnection,
    order_id: Uuid,
    after: i64,
    attempt: Option<i32>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    struct Cursor {
        db: DatabaseConnection,
        after: i64,
        queued: std::collections::VecDeque<Event>,
        done: bool,
    }
    let start = Cursor {
        db,
        after,
        queued: std::collections::VecDeque::new(),
        done: false,
    };
    let stream = futures_util::stream::unfold(start, move |mut cursor| async move {
        loop {
            if let Some(event) = cursor.queued.pop_front() {
                return Some((Ok(event), cursor));
            }
            if cursor.done {
                return None;
            }
            // Whether it ended is read before the lines, so no line written
            // before the end is missed.
            let ended = order::Entity::find_by_id(order_id)
                .one(&cursor.db)
                .await
                .ok()
                .flatten()
                .is_none_or(|o| o.status.is_final());
            match page(&cursor.db, order_id, cursor.after, attempt, PAGE_MAX).await {
                Ok(lines) if !lines.is_empty() => {
                    for line in lines {
                        cursor.after = line.id;
                        let data = serde_json::to_string(&line).unwrap_or_default();
                        cursor
                            .queued
                            .push_back(Event::default().id(line.id.to_string()).data(data));
                    }
                    continue;
                }
                Ok(_) if ended => {
                    cursor.done = true;
                    cursor
                        .queued
                        .push_back(Event::default().event("end").data("{}"));
                    continue;
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, %order_id, "reading job output failed"),
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Drops the output of jobs that ended more than `retention` ago.
pub async fn prune(
    db: &DatabaseConnection,
    now: DateTime<Utc>,
    retention: chrono::Duration,
) -> Result<u64, DbErr> {
    let ended = sea_orm::sea_query::Query::select()
        .column(order::Column::Id)
        .from(order::Entity)
        .and_where(order::Column::EndedAt.lt(now - retention))
        .to_owned();
    Ok(job_log::Entity::delete_many()
        .filter(job_log::Column::OrderId.in_subquery(ended))
        .exec(db)
        .await?
        .rows_affected)
}
