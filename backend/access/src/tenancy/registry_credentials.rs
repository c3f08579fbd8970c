//! Registry credentials: an organization's logins to the container
//! registries its images come from. The password is taken once, stored
//! sealed (bound to its organization and registry), never shown again, and
//! opened only to hand a node the login for a pull of that organization's
//! order.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::access::{OrgAccess, OrgScope, need};
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::Principal;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::sealing::Sealer;
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::registry_credential;

const USERNAME_MAX: usize = 255;
/// Registry tokens (JWTs, cloud access tokens) run to a few kilobytes.
const PASSWORD_MAX: usize = 8192;

/// What registry passwords are sealed for: the key derived for them.
pub const PURPOSE: &str = "gantry registry credentials v1";

/// What a seal is bound to.
fn context(org_id: Uuid, registry: &str) -> String {
    format!("{org_id}/{registry}")
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RegistryCredential {
    pub id: Uuid,
    pub org_id: Uuid,
    /// `host` or `host:port`, as image references name it.
    pub registry: String,
    pub username: String,
    /// The user who stored it, while that user exists.
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl From<registry_credential::Model> for RegistryCredential {
    fn from(row: registry_credential::Model) -> Self {
        Self {
            id: row.id,
            org_id: row.org_id,
            registry: row.registry,
            username: row.username,
            created_by: row.created_by,
            created_at: row.created_at,
        }
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRegistryCredential {
    /// `host` or `host:port` (`nvcr.io`, `registry.example:5000`).
    #[schema(min_length = 1, max_length = 255)]
    pub registry: String,
    #[schema(min_length = 1, max_length = 255)]
    pub username: String,
    /// The password or access token; never shown again.
    #[schema(min_length = 1, max_length = 8192)]
    pub password: String,
}

/// A login as a node gets it for one pull.
#[derive(Serialize, ToSchema)]
pub struct RegistryLogin {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for RegistryLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryLogin")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(
            list_registry_credentials,
            create_registry_credential
        ))
        .routes(routes!(delete_registry_credential))
}

/// The organization's logins for `registries`, opened, by registry: what
/// nodes get for pulls of its orders.
pub async fn logins(
    db: &impl ConnectionTrait,
    sealer: &Sealer,
    wanted: &[(Uuid, String)],
) -> ApiResult<std::collections::HashMap<(Uuid, String), RegistryLogin>> {
    if wanted.is_empty() {
        return Ok(std::collections::HashMap::new());
    }
    let orgs: Vec<Uuid> = wanted.iter().map(|(org, _)| *org).collect();
    let rows = registry_credential::Entity::find()
        .filter(registry_credential::Column::OrgId.is_in(orgs))
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .filter(|row| wanted.contains(&(row.org_id, row.registry.clone())))
        .filter_map(|row| {
            let password = sealer.open(&row.secret, &context(row.org_id, &row.registry));
            if password.is_none() {
                tracing::warn!(
                    org_id = %row.org_id,
                    registry = %row.registry,
                    "a registry password does not open with this server's secret; \
                     the organization must store it again"
                );
            }
            Some((
                (row.org_id, row.registry),
                RegistryLogin {
                    username: row.username,
                    password: password?,
                },
            ))
        })
        .collect())
}

/// The organization's registry credentials; never their passwords.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/registry-credentials",
    tag = "registry-credentials",
    params(("org_id" = Uuid, Path, description = "Organization id"), PageQuery),
    responses((status = 200, description = "A page of registry credentials", body = Page<RegistryCredential>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_registry_credentials(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<RegistryCredential>>> {
    let request = query.validate()?;
    let rows = request
        .ascending(
            access.scope.select::<registry_credential::Entity>(),
            registry_credential::Column::Id,
        )
        .all(&state.db)
        .await?;
    Ok(Json(Page::from_rows(
        rows,
        request,
        |c| c.id,
        RegistryCredential::from,
    )))
}

/// Stores the organization's login to a registry; its nodes use it to
/// pull the organization's images from there.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/registry-credentials",
    tag = "registry-credentials",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    request_body = CreateRegistryCredential,
    responses((status = 201, description = "Stored; the password is never shown again", body = RegistryCredential), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_registry_credential(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    ApiJson(request): ApiJson<CreateRegistryCredential>,
) -> ApiResult<(StatusCode, Json<RegistryCredential>)> {
    let mut fields = Fields::default();
    let registry = request.registry.trim().to_lowercase();
    if let Err(why) = gantry_types::image_refs::check_registry(&registry) {
        fields.push("registry", why);
    }
    let username = fields.name("username", &request.username, USERNAME_MAX);
    if request.password.is_empty() || request.password.len() > PASSWORD_MAX {
        fields.push("password", format!("must be 1 to {PASSWORD_MAX} bytes"));
    }
    fields.finish()?;
    let scope: &OrgScope = &access.scope;
    let txn = gantry_core::db::write(&state.db).await?;
    let taken = scope
        .select::<registry_credential::Entity>()
        .filter(registry_credential::Column::Registry.eq(&registry))
        .one(&txn)
        .await?;
    if taken.is_some() {
        return Err(ApiError::conflict(
            "registry_credential_exists",
            format!(
                "the organization has credentials for {registry} already; delete them to store \
                 new ones"
            ),
        ));
    }
    let row = registry_credential::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(scope.org_id),
        secret: Set(state
            .registry_sealer
            .seal(&request.password, &context(scope.org_id, &registry))
            .map_err(ApiError::internal)?),
        registry: Set(registry),
        username: Set(username),
        created_by: Set(match scope.principal {
            Principal::User { user_id } => Some(user_id),
            Principal::ApiKey { .. } => None,
        }),
        created_at: Set(Utc::now()),
    }
    .insert(&txn)
    .await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "registry_credential.create",
            target_type: "registry_credential",
            target_id: Some(row.id.to_string()),
            details: serde_json::json!({ "registry": row.registry, "username": row.username }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// Deletes a registry credential: later pulls go without it.
#[utoipa::path(
    delete,
    path = "/orgs/{org_id}/registry-credentials/{credential_id}",
    tag = "registry-credentials",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("credential_id" = Uuid, Path, description = "Registry credential id"),
    ),
    responses((status = 204, description = "Deleted"), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_registry_credential(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let id = path_uuid(&params, "credential_id", Resource::RegistryCredential)?;
    let scope = &access.scope;
    let txn = gantry_core::db::write(&state.db).await?;
    let row = scope
        .select::<registry_credential::Entity>()
        .filter(registry_credential::Column::Id.eq(id))
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::RegistryCredential, id))?;
    registry_credential::Entity::delete_by_id(row.id)
        .exec(&txn)
        .await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "registry_credential.delete",
            target_type: "registry_credential",
            target_id: Some(id.to_string()),
            details: serde_json::json!({ "registry": row.registry }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_opens_only_with_its_key_and_context() {
        let sealer = Sealer::new(b"0123456789abcdef0123456789abcdef", PURPOSE).expect("key");
        let org = Uuid::now_v7();
        let sealed = sealer
            .seal("hunter2", &context(org, "registry.example"))
            .expect("sealed");
        assert!(!sealed.contains("hunter2"));
        assert_eq!(
            sealer
                .open(&sealed, &context(org, "registry.example"))
                .as_deref(),
            Some("hunter2")
        );
        // Copied to another organization's row, or read by another key: shut.
        assert_eq!(
            sealer.open(&sealed, &context(Uuid::now_v7(), "registry.example")),
            None
        );
        let other = Sealer::new(b"another-secret-another-secret-xx", PURPOSE).expect("key");
        assert_eq!(other.open(&sealed, &context(org, "registry.example")), None);
    }
}
