//! Who is calling: resolved once per request from `Authorization: Bearer`,
//! then read by the extractors that decide what the caller may do.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::{Duration, Utc};
use sea_orm::{ActiveModelTrait, EntityTrait, Set};
use uuid::Uuid;

use super::api_key_secret;
use super::identity::KeyIdentity;
use super::session::TokenError;
use crate::error::ApiError;
use crate::http::client_address::ClientAddress;
use crate::state::AppState;
use gantry_entities::{api_key, user};
use gantry_types::roles::OrgRole;

/// `last_used_at` of an API key is refreshed at most this often, so a busy
/// key does not turn every read into a write.
const LAST_USED_RESOLUTION_SECONDS: i64 = 60;

#[derive(Debug, Clone)]
pub enum Principal {
    /// A person, through a session token.
    User { user_id: Uuid },
    /// Automation, through an API key bound to one organization and role.
    ApiKey {
        key_id: Uuid,
        org_id: Uuid,
        role: OrgRole,
    },
}

impl Principal {
    pub fn rate_limit_key(&self) -> String {
        match self {
            Self::User { user_id } => format!("user:{user_id}"),
            Self::ApiKey { key_id, .. } => format!("key:{key_id}"),
        }
    }

    /// Idempotency keys are private to the caller that sent them.
    pub fn idempotency_scope(&self) -> String {
        self.rate_limit_key()
    }

    fn kind_and_id(&self) -> (&'static str, Uuid) {
        match self {
            Self::User { user_id } => ("user", *user_id),
            Self::ApiKey { key_id, .. } => ("api_key", *key_id),
        }
    }
}

/// Resolves the caller, if the request names one. A request without
/// `Authorization` goes on anonymously (public routes serve it, protected
/// extractors refuse it); a request with a bad one stops here with 401.
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let address = crate::http::client_address::of(&request);
    if request.headers().contains_key(header::AUTHORIZATION)
        && let Err(wait) = state.rate_limits.check_credentials_allowed(address)
    {
        return ApiError::too_many_failed_credentials(wait).into_response();
    }
    match resolve(&state, request.headers()).await {
        Ok(Some(principal)) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Ok(None) => next.run(request).await,
        Err(error) => {
            if error.status() == StatusCode::UNAUTHORIZED {
                state.rate_limits.record_failed_credentials(address);
            }
            error.into_response()
        }
    }
}

async fn resolve(state: &AppState, headers: &HeaderMap) -> Result<Option<Principal>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .ok_or_else(|| {
            ApiError::unauthenticated(
                "invalid_authorization",
                "the Authorization header must be `Bearer <session token or API key>`",
            )
        })?;
    if api_key_secret::is_agent_secret(token) {
        return Ok(None);
    }
    if api_key_secret::looks_like_api_key(token) {
        return resolve_api_key(state, token).await.map(Some);
    }
    match state.sessions.verify(token) {
        Ok(user_id) => Ok(Some(Principal::User { user_id })),
        Err(TokenError::Expired) => Err(ApiError::unauthenticated(
            "token_expired",
            "the session token has expired; sign in again",
        )),
        Err(TokenError::Invalid) => Err(ApiError::unauthenticated(
            "invalid_token",
            "the session token is not valid",
        )),
    }
}

async fn resolve_api_key(state: &AppState, token: &str) -> Result<Principal, ApiError> {
    let invalid = || ApiError::unauthenticated("invalid_api_key", "the API key is not valid");
    let (key_id, presented_hash) = api_key_secret::parse(token).ok_or_else(invalid)?;
    let identity = state
        .identities
        .api_key(&state.db, key_id)
        .await?
        .filter(|identity| api_key_secret::hashes_match(&identity.key.secret_hash, &presented_hash))
        .ok_or_else(invalid)?;
    let key = &identity.key;
    let now = Utc::now();
    if key.revoked_at.is_some() {
        return Err(ApiError::unauthenticated(
            "api_key_revoked",
            "the API key has been revoked",
        ));
    }
    if key.expires_at.is_some_and(|expires| expires <= now) {
        return Err(ApiError::unauthenticated(
            "api_key_expired",
            "the API key has expired",
        ));
    }
    let stale = key
        .last_used_at
        .is_none_or(|used| now - used > Duration::seconds(LAST_USED_RESOLUTION_SECONDS));
    if stale {
        // The cache learns of the use first, so the requests that follow
        // do not each write it again.
        let mut touched = key.clone();
        touched.last_used_at = Some(now);
        state.identities.remember_key(Arc::new(KeyIdentity {
            key: touched,
            organization: identity.organization.clone(),
        }));
        let db = state.db.clone();
        tokio::spawn(async move {
            let touch = api_key::ActiveModel {
                id: Set(key_id),
                last_used_at: Set(Some(now)),
                ..Default::default()
            };
            if let Err(error) = touch.update(&db).await {
                tracing::warn!(%error, %key_id, "could not record API key use");
            }
        });
    }
    Ok(Principal::ApiKey {
        key_id,
        org_id: key.org_id,
        role: key.role,
    })
}

/// Any authenticated caller.
pub struct Authenticated(pub Principal);

impl<S: Send + Sync> FromRequestParts<S> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .map(Self)
            .ok_or_else(|| {
                ApiError::unauthenticated(
                    "unauthenticated",
                    "this route needs `Authorization: Bearer <session token or API key>`",
                )
            })
    }
}

/// A person signed in with a session token. Routes that act across
/// organizations (creating one, listing one's own) take this: an API key
/// acts inside its one organization only.
pub struct UserSession {
    pub user_id: Uuid,
}

impl<S: Send + Sync> FromRequestParts<S> for UserSession {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Authenticated::from_request_parts(parts, state).await?.0 {
            Principal::User { user_id } => Ok(Self { user_id }),
            Principal::ApiKey { .. } => Err(ApiError::forbidden(
                "this route needs a user session; an API key acts only inside its organization",
            )),
        }
    }
}

/// A platform operator, checked against the database on every request so a
/// demotion takes effect at once.
pub struct Operator {
    pub user: user::Model,
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let session = UserSession::from_request_parts(parts, state).await?;
        let user = user::Entity::find_by_id(session.user_id)
            .one(&state.db)
            .await?
            .filter(|user| user.is_operator)
            .ok_or_else(|| ApiError::forbidden("this route is for platform operators"))?;
        Ok(Self { user })
    }
}

/// Who did something, from where, in which request: what the audit log
/// records for every change.
#[derive(Debug, Clone)]
pub struct Actor {
    pub kind: &'static str,
    pub id: Option<Uuid>,
    pub request_id: String,
    pub source_address: String,
}

impl Actor {
    /// The platform itself, acting from its scheduling leader (budget
    /// alerts, prepaid draws).
    pub fn system() -> Self {
        Self {
            kind: "system",
            id: None,
            request_id: String::new(),
            source_address: "scheduler".into(),
        }
    }

    /// The same request, now attributed to a user who just identified
    /// themselves (at sign-up or sign-in).
    pub fn as_user(&self, user_id: Uuid) -> Self {
        Self {
            kind: "user",
            id: Some(user_id),
            ..self.clone()
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let (kind, id) = match parts.extensions.get::<Principal>() {
            Some(principal) => {
                let (kind, id) = principal.kind_and_id();
                (kind, Some(id))
            }
            None => ("anonymous", None),
        };
        Ok(Self {
            kind,
            id,
            request_id: parts
                .headers
                .get(crate::state::REQUEST_ID_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
            source_address: parts
                .extensions
                .get::<ClientAddress>()
                .map(|ClientAddress(ip)| ip.to_string())
                .unwrap_or_default(),
        })
    }
}
