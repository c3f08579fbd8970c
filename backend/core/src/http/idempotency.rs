//! `Idempotency-Key` on authenticated POSTs: the first response is stored and
//! a retry with the same key and body gets it again instead of acting twice.
//!
//! The key is claimed with an insert before the handler runs, so two
//! concurrent retries cannot both act: the second sees the claim and is told
//! to retry later. A 5xx releases the claim so the request may be retried.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::{Duration, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, Set, SqlErr};

use crate::auth::principal::Principal;
use crate::error::{ApiError, PROBLEM_CONTENT_TYPE};
use crate::state::AppState;
use gantry_entities::idempotency_key;

pub const HEADER: &str = "idempotency-key";
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// How long a stored response answers retries.
pub const RETENTION_HOURS: i64 = 24;
const MAX_KEY_LENGTH: usize = 255;
const MAX_STORED_RESPONSE: usize = 1024 * 1024;

/// Put on a response whose named top-level fields must never be stored, such
/// as a secret shown once: a replay carries `null` in their place.
#[derive(Clone, Copy)]
pub struct RedactOnReplay(pub &'static [&'static str]);

pub async fn idempotency(State(state): State<AppState>, request: Request, next: Next) -> Response {
    // Sign-up and sign-in answer with session tokens, which must never be
    // stored; they are safe to retry anyway (a repeated sign-up is refused
    // as a duplicate email, a repeated sign-in mints another token).
    let is_auth = request
        .uri()
        .path()
        .strip_prefix(crate::state::API_PREFIX)
        .is_some_and(|rest| rest.starts_with("/auth/"));
    if request.method() != Method::POST || is_auth {
        return next.run(request).await;
    }
    let (Some(key), Some(principal)) = (
        request.headers().get(HEADER).cloned(),
        request.extensions().get::<Principal>().cloned(),
    ) else {
        return next.run(request).await;
    };
    match run(&state, key, principal, request, next).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn run(
    state: &AppState,
    key: HeaderValue,
    principal: Principal,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let key = key
        .to_str()
        .ok()
        .filter(|k| {
            !k.is_empty() && k.len() <= MAX_KEY_LENGTH && k.bytes().all(|b| b.is_ascii_graphic())
        })
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_idempotency_key",
                format!("Idempotency-Key must be 1 to {MAX_KEY_LENGTH} visible ASCII characters"),
            )
        })?
        .to_owned();
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, state.config.body_limit_bytes)
        .await
        .map_err(|_| crate::http::extract::payload_too_large())?;
    let path = parts.uri.path().to_owned();
    let request_hash = fingerprint(parts.method.as_str(), &path, &body);
    let scope = principal.idempotency_scope();

    match claim(
        state,
        &scope,
        &key,
        parts.method.as_str(),
        &path,
        &request_hash,
    )
    .await?
    {
        Claim::Fresh => {}
        Claim::Replay { status, body } => return Ok(replay(status, body)),
    }

    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    remember(state, &scope, &key, response).await
}

enum Claim {
    Fresh,
    Replay { status: u16, body: String },
}

async fn claim(
    state: &AppState,
    scope: &str,
    key: &str,
    method: &str,
    path: &str,
    request_hash: &str,
) -> Result<Claim, ApiError> {
    let row = idempotency_key::ActiveModel {
        principal: Set(scope.to_owned()),
        key: Set(key.to_owned()),
        method: Set(method.to_owned()),
        path: Set(path.to_owned()),
        request_hash: Set(request_hash.to_owned()),
        response_status: Set(None),
        response_body: Set(None),
        created_at: Set(Utc::now()),
    };
    let Err(err) = idempotency_key::Entity::insert(row.clone())
        .exec(&state.db)
        .await
    else {
        return Ok(Claim::Fresh);
    };
    if !matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) {
        return Err(err.into());
    }
    let Some(existing) = idempotency_key::Entity::find_by_id((scope.to_owned(), key.to_owned()))
        .one(&state.db)
        .await?
    else {
        // Released by a failing first attempt between our insert and read.
        idempotency_key::Entity::insert(row).exec(&state.db).await?;
        return Ok(Claim::Fresh);
    };
    // A claim without a response that is older than the longest a request
    // may run was left by a server that died mid-request: the retry takes
    // it over. (Handlers whose writes must not repeat, such as order
    // creation, also record the key with what they create.)
    let abandoned = existing.response_status.is_none()
        && existing.created_at
            < Utc::now()
                - Duration::seconds(
                    i64::try_from(state.config.request_timeout_seconds).unwrap_or(30) + 5,
                );
    if abandoned || existing.created_at < Utc::now() - Duration::hours(RETENTION_HOURS) {
        idempotency_key::Entity::delete_by_id((scope.to_owned(), key.to_owned()))
            .exec(&state.db)
            .await?;
        idempotency_key::Entity::insert(row).exec(&state.db).await?;
        return Ok(Claim::Fresh);
    }
    if existing.request_hash != request_hash {
        return Err(ApiError::unprocessable(
            "idempotency_key_reused",
            "this Idempotency-Key was already used for a different request",
        ));
    }
    match (existing.response_status, existing.response_body) {
        (Some(status), Some(body)) => Ok(Claim::Replay {
            status: u16::try_from(status).unwrap_or(500),
            body,
        }),
        _ => Err(ApiError::conflict(
            "idempotency_key_in_use",
            "a request with this Idempotency-Key is still being handled; retry shortly",
        )),
    }
}

async fn remember(
    state: &AppState,
    scope: &str,
    key: &str,
    response: Response,
) -> Result<Response, ApiError> {
    let id = (scope.to_owned(), key.to_owned());
    let status = response.status();
    if status.is_server_error() {
        idempotency_key::Entity::delete_by_id(id)
            .exec(&state.db)
            .await?;
        return Ok(response);
    }
    let redact = response.extensions().get::<RedactOnReplay>().copied();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_STORED_RESPONSE)
        .await
        .map_err(ApiError::internal)?;
    let stored = stored_body(&bytes, redact);
    idempotency_key::Entity::update_many()
        .set(idempotency_key::ActiveModel {
            response_status: Set(Some(i16::try_from(status.as_u16()).unwrap_or(i16::MAX))),
            response_body: Set(Some(stored)),
            ..Default::default()
        })
        .filter(idempotency_key::Column::Principal.eq(&id.0))
        .filter(idempotency_key::Column::Key.eq(&id.1))
        .exec(&state.db)
        .await?;
    Ok(Response::from_parts(parts, Body::from(bytes)))
}

fn stored_body(bytes: &Bytes, redact: Option<RedactOnReplay>) -> String {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let Some(RedactOnReplay(fields)) = redact else {
        return text;
    };
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(mut object)) => {
            for field in fields {
                if let Some(value) = object.get_mut(*field) {
                    *value = serde_json::Value::Null;
                }
            }
            serde_json::Value::Object(object).to_string()
        }
        _ => text,
    }
}

fn replay(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let content_type = if status.is_client_error() {
        PROBLEM_CONTENT_TYPE
    } else {
        "application/json"
    };
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    if status != StatusCode::NO_CONTENT {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    response
}

/// A digest of what makes two requests "the same": method, path and body.
fn fingerprint(method: &str, path: &str, body: &[u8]) -> String {
    gantry_types::digest::sha256_hex(&[method.as_bytes(), b" ", path.as_bytes(), b"\n", body])
}

/// Deletes stored responses past their retention.
pub async fn purge_expired(db: &sea_orm::DatabaseConnection) -> Result<u64, sea_orm::DbErr> {
    let cutoff = Utc::now() - Duration::hours(RETENTION_HOURS);
    let result = idempotency_key::Entity::delete_many()
        .filter(idempotency_key::Column::CreatedAt.lt(cutoff))
        .exec(db)
        .await?;
    Ok(result.rows_affected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_fields_become_null_and_others_stay() {
        let body = Bytes::from_static(br#"{"id":"k1","secret":"gk_x","name":"ci"}"#);
        let stored = stored_body(&body, Some(RedactOnReplay(&["secret"])));
        let value: serde_json::Value = serde_json::from_str(&stored).expect("json");
        assert_eq!(value["secret"], serde_json::Value::Null);
        assert_eq!(value["name"], "ci");
        assert_eq!(stored_body(&body, None), String::from_utf8_lossy(&body));
    }

    #[test]
    fn fingerprints_differ_by_path_and_body() {
        let a = fingerprint("POST", "/a", b"{}");
        assert_eq!(a, fingerprint("POST", "/a", b"{}"));
        assert_ne!(a, fingerprint("POST", "/b", b"{}"));
        assert_ne!(a, fingerprint("POST", "/a", b"{ }"));
    }
}
