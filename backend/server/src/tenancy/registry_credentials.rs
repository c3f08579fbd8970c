//! Registry credentials: an organization's logins to the container
//! registries its images come from. The password is taken once, stored
//! sealed (AES-256-GCM, with a key derived from the server's secret, bound
//! to its organization and registry), never shown again, and opened only to
//! hand a node the login for a pull of that organization's order.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::access::{OrgAccess, OrgScope, need};
use crate::app::AppState;
use crate::audit::{self, Change};
use crate::auth::principal::Principal;
use crate::entities::registry_credential;
use crate::error::{ApiError, ApiResult, ProblemResponses, Resource};
use crate::http::extract::{ApiJson, ApiQuery, path_uuid};
use crate::http::pagination::{Page, PageQuery};
use crate::validate::Fields;

const USERNAME_MAX: usize = 255;
/// Registry tokens (JWTs, cloud access tokens) run to a few kilobytes.
const PASSWORD_MAX: usize = 8192;

/// Seals and opens passwords with the server's key.
#[derive(Clone)]
pub struct Sealer {
    key: std::sync::Arc<LessSafeKey>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

impl Sealer {
    /// A key of its own derived from the server's secret, so replicas
    /// sharing the secret open each other's seals.
    pub fn new(server_secret: &[u8]) -> anyhow::Result<Self> {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(server_secret)
            .map_err(|e| anyhow::anyhow!("deriving the registry credentials key: {e}"))?;
        mac.update(b"gantry registry credentials v1");
        let derived = mac.finalize().into_bytes();
        let key = UnboundKey::new(&AES_256_GCM, &derived)
            .map_err(|_| anyhow::anyhow!("deriving the registry credentials key"))?;
        Ok(Self {
            key: std::sync::Arc::new(LessSafeKey::new(key)),
        })
    }

    /// `nonce ‖ ciphertext ‖ tag`, base64; `context` (its organization and
    /// registry) must be given again to open it.
    fn seal(&self, plain: &str, context: &str) -> ApiResult<String> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::Rng::fill_bytes(&mut rand::rng(), &mut nonce);
        let mut data = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context.as_bytes()),
                &mut data,
            )
            .map_err(|_| ApiError::internal(anyhow::anyhow!("sealing a registry password")))?;
        let mut all = nonce.to_vec();
        all.extend(data);
        Ok(STANDARD.encode(all))
    }

    /// The password, or None where the seal does not open (another
    /// server secret, or another organization's or registry's row).
    fn open(&self, sealed: &str, context: &str) -> Option<String> {
        let mut all = STANDARD.decode(sealed).ok()?;
        if all.len() < NONCE_LEN {
            return None;
        }
        let mut data = all.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&all).ok()?;
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(context.as_bytes()), &mut data)
            .ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }
}

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
    if let Err(why) = crate::catalog::image_refs::check_registry(&registry) {
        fields.push("registry", why);
    }
    let username = fields.name("username", &request.username, USERNAME_MAX);
    if request.password.is_empty() || request.password.len() > PASSWORD_MAX {
        fields.push("password", format!("must be 1 to {PASSWORD_MAX} bytes"));
    }
    fields.finish()?;
    let scope: &OrgScope = &access.scope;
    let txn = crate::db::write(&state.db).await?;
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
            .seal(&request.password, &context(scope.org_id, &registry))?),
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
    let txn = crate::db::write(&state.db).await?;
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
        let sealer = Sealer::new(b"0123456789abcdef0123456789abcdef").expect("key");
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
        let other = Sealer::new(b"another-secret-another-secret-xx").expect("key");
        assert_eq!(other.open(&sealed, &context(org, "registry.example")), None);
    }
}
