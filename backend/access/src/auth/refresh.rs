//! Browser sessions that outlive their access tokens: a refresh token in an
//! httpOnly cookie (scripts cannot read it; only the auth routes receive
//! it) is exchanged once for a new access token and the next refresh
//! token. A used token presented again means someone else holds a copy:
//! the whole sign-in is revoked. Signing out revokes the sign-in, changing
//! the password revokes all of the user's.

use axum::Json;
use axum::extract::State;
use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use chrono::{DateTime, TimeDelta, Utc};
use cookie::{Cookie, SameSite};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::accounts::TokenResponse;
use gantry_core::audit::{self, Change};
use gantry_core::auth::api_key_secret;
use gantry_core::auth::principal::Actor;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::state::AppState;
use gantry_entities::refresh_token;

/// The cookie's name, and the only path it is sent to.
pub const COOKIE_NAME: &str = "gantry_refresh";
const COOKIE_PATH: &str = "/api/v1/auth";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(refresh))
        .routes(routes!(logout))
}

/// The answer header that sets the refresh cookie.
pub type WithCookie = [(HeaderName, HeaderValue); 1];

/// A new refresh token of `family` for `user_id`, stored by its hash, in
/// the `Set-Cookie` header that carries it.
pub async fn issue(
    db: &impl ConnectionTrait,
    user_id: Uuid,
    family_id: Uuid,
    ttl_seconds: u64,
    secure: bool,
    now: DateTime<Utc>,
) -> ApiResult<WithCookie> {
    let secret = api_key_secret::generate_with(api_key_secret::REFRESH_PREFIX, Uuid::now_v7());
    let ttl = i64::try_from(ttl_seconds).unwrap_or(i64::MAX);
    refresh_token::ActiveModel {
        id: Set(secret.id),
        user_id: Set(user_id),
        family_id: Set(family_id),
        token_hash: Set(secret.secret_hash),
        expires_at: Set(now + TimeDelta::seconds(ttl)),
        created_at: Set(now),
        used_at: Set(None),
        revoked_at: Set(None),
    }
    .insert(db)
    .await?;
    Ok([(SET_COOKIE, cookie_header(&secret.token, ttl, secure)?)])
}

fn cookie_header(value: &str, max_age_seconds: i64, secure: bool) -> ApiResult<HeaderValue> {
    let cookie = Cookie::build((COOKIE_NAME, value))
        .path(COOKIE_PATH)
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .max_age(cookie::time::Duration::seconds(max_age_seconds))
        .build();
    HeaderValue::from_str(&cookie.to_string())
        .map_err(|e| ApiError::internal(anyhow::Error::new(e)))
}

/// Whether the browser reached us over HTTPS (through the proxy in front):
/// the cookie is then marked `Secure`. Plain HTTP is for local use.
pub fn over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|proto| proto.eq_ignore_ascii_case("https"))
}

/// The refresh token the request's cookies carry: its row id and the hash
/// of its secret.
fn presented(headers: &HeaderMap) -> Option<(Uuid, String)> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE_NAME)
        .and_then(|c| api_key_secret::parse_with(api_key_secret::REFRESH_PREFIX, c.value()))
}

/// The stored token the request presents, if its secret matches.
async fn find_presented(
    db: &impl ConnectionTrait,
    headers: &HeaderMap,
) -> Result<Option<refresh_token::Model>, sea_orm::DbErr> {
    let Some((id, hash)) = presented(headers) else {
        return Ok(None);
    };
    Ok(refresh_token::Entity::find_by_id(id)
        .one(db)
        .await?
        .filter(|row| api_key_secret::hashes_match(&row.token_hash, &hash)))
}

fn session_ended(detail: &str) -> ApiError {
    ApiError::unauthenticated("session_ended", detail.to_owned())
}

/// Revokes every live token of a family, or of a user.
async fn revoke(
    db: &impl ConnectionTrait,
    which: sea_orm::sea_query::SimpleExpr,
    now: DateTime<Utc>,
) -> Result<u64, sea_orm::DbErr> {
    Ok(refresh_token::Entity::update_many()
        .col_expr(refresh_token::Column::RevokedAt, Expr::value(Some(now)))
        .filter(which)
        .filter(refresh_token::Column::RevokedAt.is_null())
        .exec(db)
        .await?
        .rows_affected)
}

/// Ends the sign-in `token` belongs to, saying why in the audit log.
async fn end_sign_in(
    db: &impl ConnectionTrait,
    token: &refresh_token::Model,
    actor: &Actor,
    action: &'static str,
    now: DateTime<Utc>,
) -> ApiResult<()> {
    revoke(db, refresh_token::Column::FamilyId.eq(token.family_id), now).await?;
    audit::record(
        db,
        Change {
            org_id: None,
            action,
            target_type: "user",
            target_id: Some(token.user_id.to_string()),
            details: serde_json::json!({ "family_id": token.family_id }),
            actor: &actor.as_user(token.user_id),
        },
    )
    .await?;
    Ok(())
}

/// Ends every browser session of a user (a changed password).
pub async fn revoke_user(
    db: &impl ConnectionTrait,
    user_id: Uuid,
    now: DateTime<Utc>,
) -> Result<u64, sea_orm::DbErr> {
    revoke(db, refresh_token::Column::UserId.eq(user_id), now).await
}

/// Exchanges the refresh cookie for a new access token and a new cookie.
#[utoipa::path(
    post,
    path = "/auth/refresh",
    tag = "auth",
    responses(
        (status = 200, description = "A new session token; `Set-Cookie` carries the next refresh token", body = TokenResponse),
        ProblemResponses,
    )
)]
async fn refresh(
    State(state): State<AppState>,
    actor: Actor,
    headers: HeaderMap,
) -> ApiResult<(WithCookie, Json<TokenResponse>)> {
    if presented(&headers).is_none() {
        return Err(session_ended("no session to refresh; sign in again"));
    }
    let now = state.clock.now();
    let txn = gantry_core::db::write(&state.db).await?;
    let Some(current) = find_presented(&txn, &headers).await? else {
        return Err(session_ended("the session is not known; sign in again"));
    };
    if current.revoked_at.is_some() || current.expires_at <= now {
        return Err(session_ended("the session has ended; sign in again"));
    }
    // Marked used only if nobody else used it first: of two exchanges of
    // one token, one wins and the other is reuse.
    let claimed = refresh_token::Entity::update_many()
        .col_expr(refresh_token::Column::UsedAt, Expr::value(Some(now)))
        .filter(refresh_token::Column::Id.eq(current.id))
        .filter(refresh_token::Column::UsedAt.is_null())
        .exec(&txn)
        .await?
        .rows_affected;
    if claimed == 0 {
        end_sign_in(&txn, &current, &actor, "session.refresh_reused", now).await?;
        txn.commit().await?;
        return Err(session_ended(
            "this session was refreshed elsewhere, so it was ended to be safe; sign in again",
        ));
    }
    let cookie = issue(
        &txn,
        current.user_id,
        current.family_id,
        state.config.refresh_ttl_seconds,
        over_https(&headers),
        now,
    )
    .await?;
    txn.commit().await?;
    let access_token = state
        .sessions
        .issue(current.user_id)
        .map_err(ApiError::internal)?;
    Ok((
        cookie,
        Json(TokenResponse {
            access_token,
            token_type: "Bearer".into(),
            expires_in: state.sessions.ttl_seconds(),
        }),
    ))
}

/// Ends the browser session: its refresh tokens are revoked and the cookie
/// cleared. Access tokens already issued run out within their lifetime.
#[utoipa::path(
    post,
    path = "/auth/logout",
    tag = "auth",
    responses((status = 204, description = "Signed out; the cookie is cleared"), ProblemResponses)
)]
async fn logout(
    State(state): State<AppState>,
    actor: Actor,
    headers: HeaderMap,
) -> ApiResult<(StatusCode, WithCookie)> {
    let now = state.clock.now();
    if let Some(current) = find_presented(&state.db, &headers).await? {
        let txn = gantry_core::db::write(&state.db).await?;
        end_sign_in(&txn, &current, &actor, "user.logout", now).await?;
        txn.commit().await?;
    }
    Ok((
        StatusCode::NO_CONTENT,
        [(SET_COOKIE, cookie_header("", 0, over_https(&headers))?)],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_http_only_strict_and_scoped_to_the_auth_routes() {
        let header = cookie_header("secret", 60, true).expect("header");
        let text = header.to_str().expect("text");
        for part in [
            "gantry_refresh=secret",
            "HttpOnly",
            "SameSite=Strict",
            "Secure",
            "Path=/api/v1/auth",
            "Max-Age=60",
        ] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
        let token = api_key_secret::generate_with(api_key_secret::REFRESH_PREFIX, Uuid::now_v7());
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            HeaderValue::from_str(&format!("theme=dark; gantry_refresh={}; x=1", token.token))
                .expect("header"),
        );
        assert_eq!(presented(&headers), Some((token.id, token.secret_hash)));
        headers.insert(COOKIE, HeaderValue::from_static("gantry_refresh="));
        assert_eq!(presented(&headers), None);
    }
}
