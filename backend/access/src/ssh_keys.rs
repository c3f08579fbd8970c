//! Users' SSH public keys: added with a name, listed with fingerprints,
//! deleted. Instances admit the keys their order chose; deleting a key
//! takes it off running instances too, since agents read the keys of each
//! assignment afresh.

use std::collections::HashSet;

use ::ssh_key::public::KeyData;
use ::ssh_key::{HashAlg, PublicKey};
use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::{Actor, Principal, UserSession};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, path_uuid};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{membership, ssh_key};

const KEYS_PER_USER_MAX: usize = 50;
/// Keys one order may choose.
pub const KEYS_PER_ORDER_MAX: usize = 32;
const PUBLIC_KEY_MAX: usize = 16 * 1024;
const RSA_BITS_MIN: usize = 2048;

#[derive(Debug, Serialize, ToSchema)]
pub struct SshKey {
    pub id: Uuid,
    pub name: String,
    /// `ssh-ed25519`, `ecdsa-sha2-nistp256`, `ssh-rsa`, …
    pub algorithm: String,
    /// `SHA256:…`, as `ssh-keygen -l` prints it.
    pub fingerprint: String,
    /// The key in OpenSSH's one-line form.
    pub public_key: String,
    pub created_at: DateTime<Utc>,
}

impl From<ssh_key::Model> for SshKey {
    fn from(row: ssh_key::Model) -> Self {
        Self {
            id: row.id,
            name: row.name,
            algorithm: row.algorithm,
            fingerprint: row.fingerprint,
            public_key: row.public_key,
            created_at: row.created_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddSshKey {
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
    /// One OpenSSH public key line (`ssh-ed25519 AAAA… comment`): ed25519,
    /// ECDSA, or RSA of 2048 bits or more.
    #[schema(min_length = 1, max_length = 16384)]
    pub public_key: String,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_ssh_keys, add_ssh_key))
        .routes(routes!(delete_ssh_key))
}

/// A public key that passed the checks.
#[derive(Debug, PartialEq, Eq)]
pub struct Checked {
    pub algorithm: String,
    pub fingerprint: String,
    /// Re-encoded without its comment.
    pub openssh: String,
}

/// Parses and judges a public key line; the message says what is wrong.
pub fn check(line: &str) -> Result<Checked, String> {
    let key = PublicKey::from_openssh(line.trim())
        .map_err(|e| format!("is not an OpenSSH public key line ({e})"))?;
    match key.key_data() {
        KeyData::Ed25519(_) | KeyData::Ecdsa(_) => {}
        KeyData::SkEd25519(_) | KeyData::SkEcdsaSha2NistP256(_) => {}
        KeyData::Rsa(rsa) => {
            let bytes = rsa.n.as_positive_bytes().unwrap_or_default();
            let bits = bytes.len() * 8 - bytes.first().map_or(0, |b| b.leading_zeros() as usize);
            if bits < RSA_BITS_MIN {
                return Err(format!(
                    "is an RSA key of {bits} bits; at least {RSA_BITS_MIN} are needed"
                ));
            }
        }
        other => {
            return Err(format!(
                "uses {}, which is not accepted; use ed25519, ECDSA or RSA of 2048 bits or more",
                other.algorithm()
            ));
        }
    }
    let bare = PublicKey::new(key.key_data().clone(), "");
    Ok(Checked {
        algorithm: key.algorithm().to_string(),
        fingerprint: key.fingerprint(HashAlg::Sha256).to_string(),
        openssh: bare
            .to_openssh()
            .map_err(|e| format!("cannot be encoded again ({e})"))?,
    })
}

/// The keys an order admits: the ones it names, each checked to be the
/// caller's own (a person) or a member's of the organization (an API key,
/// which has no keys of its own); when it names none, all of a person's
/// keys and none for an API key.
pub async fn choose(
    db: &impl ConnectionTrait,
    principal: &Principal,
    org_id: Uuid,
    requested: Option<&[Uuid]>,
) -> ApiResult<Vec<Uuid>> {
    let owners: Option<Vec<Uuid>> = match principal {
        Principal::User { user_id } => Some(vec![*user_id]),
        Principal::ApiKey { .. } => match requested {
            None => return Ok(Vec::new()),
            Some(_) => Some(
                membership::Entity::find()
                    .filter(membership::Column::OrgId.eq(org_id))
                    .all(db)
                    .await?
                    .into_iter()
                    .map(|m| m.user_id)
                    .collect(),
            ),
        },
    };
    let owners = owners.unwrap_or_default();
    let allowed: Vec<ssh_key::Model> = ssh_key::Entity::find()
        .filter(ssh_key::Column::UserId.is_in(owners))
        .order_by_asc(ssh_key::Column::Id)
        .all(db)
        .await?;
    let Some(requested) = requested else {
        return Ok(allowed
            .into_iter()
            .map(|k| k.id)
            .take(KEYS_PER_ORDER_MAX)
            .collect());
    };
    let known: HashSet<Uuid> = allowed.iter().map(|k| k.id).collect();
    let mut fields = Fields::default();
    for (i, id) in requested.iter().enumerate() {
        if !known.contains(id) {
            fields.push(
                &format!("ssh_key_ids[{i}]"),
                format!("no SSH key {id} of yours (or, for an API key, of a member)"),
            );
        }
    }
    fields.finish()?;
    let mut chosen = requested.to_vec();
    chosen.dedup();
    Ok(chosen)
}

/// The OpenSSH lines of the keys with these ids that still exist.
pub async fn public_keys(
    db: &impl ConnectionTrait,
    ids: &[Uuid],
) -> ApiResult<Vec<(Uuid, String)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(ssh_key::Entity::find()
        .filter(ssh_key::Column::Id.is_in(ids.iter().copied()))
        .all(db)
        .await?
        .into_iter()
        .map(|k| (k.id, k.public_key))
        .collect())
}

/// The signed-in user's SSH keys.
#[utoipa::path(
    get,
    path = "/me/ssh-keys",
    tag = "auth",
    responses((status = 200, description = "The caller's SSH keys", body = Vec<SshKey>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_ssh_keys(
    State(state): State<AppState>,
    session: UserSession,
) -> ApiResult<Json<Vec<SshKey>>> {
    let rows = ssh_key::Entity::find()
        .filter(ssh_key::Column::UserId.eq(session.user_id))
        .order_by_asc(ssh_key::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(rows.into_iter().map(SshKey::from).collect()))
}

/// Adds an SSH public key for the signed-in user.
#[utoipa::path(
    post,
    path = "/me/ssh-keys",
    tag = "auth",
    request_body = AddSshKey,
    responses((status = 201, description = "The key", body = SshKey), ProblemResponses),
    security(("bearer" = []))
)]
async fn add_ssh_key(
    State(state): State<AppState>,
    session: UserSession,
    actor: Actor,
    ApiJson(request): ApiJson<AddSshKey>,
) -> ApiResult<(StatusCode, Json<SshKey>)> {
    let mut fields = Fields::default();
    let name = fields.name("name", &request.name, 64);
    let checked = if request.public_key.len() > PUBLIC_KEY_MAX {
        fields.push(
            "public_key",
            format!("must be at most {PUBLIC_KEY_MAX} bytes"),
        );
        None
    } else {
        check(&request.public_key)
            .map_err(|why| fields.push("public_key", why))
            .ok()
    };
    fields.finish()?;
    let Some(checked) = checked else {
        return Err(ApiError::unprocessable(
            "validation_failed",
            "public_key is invalid",
        ));
    };
    let txn = gantry_core::db::write(&state.db).await?;
    let existing = ssh_key::Entity::find()
        .filter(ssh_key::Column::UserId.eq(session.user_id))
        .all(&txn)
        .await?;
    if existing
        .iter()
        .any(|k| k.fingerprint == checked.fingerprint)
    {
        return Err(ApiError::conflict(
            "ssh_key_exists",
            format!("you already have the key {}", checked.fingerprint),
        ));
    }
    if existing.len() >= KEYS_PER_USER_MAX {
        return Err(ApiError::conflict(
            "too_many_ssh_keys",
            format!("a user may keep at most {KEYS_PER_USER_MAX} SSH keys; delete one first"),
        ));
    }
    let row = ssh_key::ActiveModel {
        id: Set(Uuid::now_v7()),
        user_id: Set(session.user_id),
        name: Set(name),
        algorithm: Set(checked.algorithm),
        fingerprint: Set(checked.fingerprint),
        public_key: Set(checked.openssh),
        created_at: Set(Utc::now()),
    }
    .insert(&txn)
    .await?;
    audit::record(
        &txn,
        Change {
            org_id: None,
            action: "ssh_key.add",
            target_type: "ssh_key",
            target_id: Some(row.id.to_string()),
            details: serde_json::json!({ "name": row.name, "fingerprint": row.fingerprint }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// Deletes one of the signed-in user's SSH keys; instances that admitted
/// it stop doing so.
#[utoipa::path(
    delete,
    path = "/me/ssh-keys/{key_id}",
    tag = "auth",
    params(("key_id" = Uuid, Path, description = "SSH key id")),
    responses((status = 204, description = "Deleted"), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_ssh_key(
    State(state): State<AppState>,
    session: UserSession,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let id = path_uuid(&params, "key_id", Resource::SshKey)?;
    let txn = gantry_core::db::write(&state.db).await?;
    let current = ssh_key::Entity::find_by_id(id)
        .filter(ssh_key::Column::UserId.eq(session.user_id))
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::SshKey, id))?;
    ssh_key::Entity::delete_by_id(current.id).exec(&txn).await?;
    audit::record(
        &txn,
        Change {
            org_id: None,
            action: "ssh_key.delete",
            target_type: "ssh_key",
            target_id: Some(current.id.to_string()),
            details: serde_json::json!({ "name": current.name, "fingerprint": current.fingerprint }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJH2WhWEoOAhfBoL8U4rbKy6NcTA9RoOQDpaTBx8feAh user@example.com";
    const ECDSA: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBGZfyULDHYNb2iztCchaQ93zyxmIqqxcEridKfJmbGxmruQmmRydUw9F6P/2dJdZ3zmHbIPkx6iylIk6BAuXx1M=";
    const RSA_1024: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQCwRd7mPccKVuPoIAO3yV3BD4nTi5w6ZqrPLlFheEkMa+I1HhiecX3EDWdOmyjc8SMRnCMUKgtJ2M5CHdxah7UVpkNv8Ayg/qagsVi8zBBvU1i8TGGfxpSVNolwAkb7t22KoCPUoQBhl4jeYSuObNEYhaCWriRDE0aZ5f7NYBxiSw==";

    #[test]
    fn an_ed25519_key_is_taken_without_its_comment() {
        let checked = check(ED25519).expect("valid");
        assert_eq!(checked.algorithm, "ssh-ed25519");
        // What `ssh-keygen -lf` prints for it.
        assert_eq!(
            checked.fingerprint,
            "SHA256:XtWlQK7JAgtqVn4W3A0IUea3IytM8gc1Hwvs7Mr5wkY"
        );
        assert_eq!(
            checked.openssh,
            ED25519.trim_end_matches(" user@example.com")
        );
        assert_eq!(
            check(ECDSA).expect("valid").algorithm,
            "ecdsa-sha2-nistp256"
        );
    }

    #[test]
    fn weak_garbage_and_truncated_keys_are_refused() {
        let weak = check(RSA_1024).expect_err("too weak");
        assert!(weak.contains("1024 bits"), "{weak}");
        assert!(check("not a key").is_err());
        assert!(check(&ED25519[..60]).is_err());
        assert!(check("").is_err());
    }
}
