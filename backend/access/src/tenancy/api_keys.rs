//! API keys: credentials for automation, bound to one organization and one
//! role, shown once, stored hashed, revocable.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::access::{OrgAccess, need};
use super::roles::OrgRole;
use gantry_core::audit::{self, Change};
use gantry_core::auth::api_key_secret;
use gantry_core::auth::principal::Principal;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::idempotency::RedactOnReplay;
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::api_key;

#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKey {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub role: OrgRole,
    /// The user who created the key, while that user exists.
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// When the key was last used, to the minute.
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<api_key::Model> for ApiKey {
    fn from(row: api_key::Model) -> Self {
        Self {
            id: row.id,
            org_id: row.org_id,
            name: row.name,
            role: row.role,
            created_by: row.created_by,
            created_at: row.created_at,
            expires_at: row.expires_at,
            last_used_at: row.last_used_at,
            revoked_at: row.revoked_at,
        }
    }
}

/// A new key with its secret, which is shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedApiKey {
    #[serde(flatten)]
    pub key: ApiKey,
    /// Use as `Authorization: Bearer <secret>`. Not retrievable later; a
    /// replay of the creating request (same `Idempotency-Key`) answers `null`.
    pub secret: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateApiKey {
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub name: String,
    /// Any role but `owner`.
    pub role: OrgRole,
    /// When the key stops working; never when absent.
    pub expires_at: Option<DateTime<Utc>>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_api_keys, create_api_key))
        .routes(routes!(revoke_api_key))
}

/// The organization's API keys, revoked ones included; never their secrets.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/api-keys",
    tag = "api-keys",
    params(("org_id" = Uuid, Path, description = "Organization id"), PageQuery),
    responses((status = 200, description = "A page of API keys", body = Page<ApiKey>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_api_keys(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<ApiKey>>> {
    let request = query.validate()?;
    let rows = request
        .ascending(
            access.scope.select::<api_key::Entity>(),
            api_key::Column::Id,
        )
        .all(&state.db)
        .await?;
    Ok(Json(Page::from_rows(rows, request, |k| k.id, ApiKey::from)))
}

/// Creates an API key; the response carries its secret, once.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/api-keys",
    tag = "api-keys",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$"),
    ),
    request_body = CreateApiKey,
    responses((status = 201, description = "The new key and its secret", body = CreatedApiKey), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_api_key(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    ApiJson(request): ApiJson<CreateApiKey>,
) -> ApiResult<Response> {
    let mut fields = Fields::default();
    let name = fields.name("name", &request.name, 100);
    if request.role == OrgRole::Owner {
        fields.push("role", "an API key cannot be an owner");
    }
    let now = Utc::now();
    if request.expires_at.is_some_and(|at| at <= now) {
        fields.push("expires_at", "must be in the future");
    }
    fields.finish()?;
    let scope = &access.scope;
    let created_by = match scope.principal {
        Principal::User { user_id } => Some(user_id),
        Principal::ApiKey { .. } => None,
    };
    let generated = api_key_secret::generate();
    let txn = gantry_core::db::write(&state.db).await?;
    let row = api_key::ActiveModel {
        id: Set(generated.id),
        org_id: Set(scope.org_id),
        name: Set(name),
        role: Set(request.role),
        secret_hash: Set(generated.secret_hash),
        created_by: Set(created_by),
        created_at: Set(now),
        expires_at: Set(request.expires_at),
        last_used_at: Set(None),
        revoked_at: Set(None),
    }
    .insert(&txn)
    .await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "api_key.create",
            target_type: "api_key",
            target_id: Some(row.id.to_string()),
            details: serde_json::json!({ "name": row.name, "role": row.role, "expires_at": row.expires_at }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    let body = CreatedApiKey {
        key: row.into(),
        secret: Some(generated.token),
    };
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    response
        .extensions_mut()
        .insert(RedactOnReplay(&["secret"]));
    Ok(response)
}

/// Revokes an API key at once. Revoking a revoked key changes nothing.
#[utoipa::path(
    delete,
    path = "/orgs/{org_id}/api-keys/{key_id}",
    tag = "api-keys",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("key_id" = Uuid, Path, description = "API key id"),
    ),
    responses((status = 204, description = "Revoked"), ProblemResponses),
    security(("bearer" = []))
)]
async fn revoke_api_key(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let key_id = path_uuid(&params, "key_id", Resource::ApiKey)?;
    let scope = &access.scope;
    let txn = gantry_core::db::write(&state.db).await?;
    let key = scope
        .select::<api_key::Entity>()
        .filter(api_key::Column::Id.eq(key_id))
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::ApiKey, key_id))?;
    if key.revoked_at.is_none() {
        let mut row: api_key::ActiveModel = key.into();
        row.revoked_at = Set(Some(Utc::now()));
        row.update(&txn).await?;
        audit::record(
            &txn,
            Change {
                org_id: Some(scope.org_id),
                action: "api_key.revoke",
                target_type: "api_key",
                target_id: Some(key_id.to_string()),
                details: serde_json::json!({}),
                actor: &access.actor,
            },
        )
        .await?;
    }
    txn.commit().await?;
    state.identities.forget_key(key_id);
    Ok(StatusCode::NO_CONTENT)
}
