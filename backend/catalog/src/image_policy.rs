//! Which images orders may name beside the catalog's: registries and
//! repositories (`nvcr.io/nvidia/`, `registry.example/team`) that
//! operators allow. None are allowed until an operator says so; the
//! catalog's images are always allowed.

use axum::Json;
use axum::extract::State;
use chrono::Utc;
use sea_orm::{ConnectionTrait, EntityTrait, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::image_refs::REFERENCE_MAX;
use gantry_core::catalog::image_policy::allowed;

use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Authenticated, Operator};
use gantry_core::error::{ApiResult, ProblemResponses};
use gantry_core::http::extract::ApiJson;
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::allowed_image_prefix;

/// The most prefixes a policy holds.
const PREFIXES_MAX: usize = 100;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImagePolicy {
    /// Registries (`nvcr.io`) or repository prefixes (`nvcr.io/nvidia/`,
    /// `registry.example/team`) an order may name an image reference
    /// from. A prefix admits references below it at a boundary:
    /// `registry.example/team` admits `registry.example/team/train:v3`,
    /// not `registry.example/teamx/train`.
    #[schema(max_items = 100, value_type = Vec<String>)]
    pub allowed_prefixes: Vec<String>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_image_policy))
        .routes(routes!(set_image_policy))
}

/// Whether `prefix` is a registry or a repository prefix below one.
fn check_prefix(prefix: &str) -> Result<(), String> {
    let trimmed = prefix.trim_end_matches('/');
    let registry = trimmed.split('/').next().unwrap_or_default();
    super::image_refs::check_registry(registry)?;
    if !(registry.contains(['.', ':']) || registry == "localhost") {
        return Err(format!("{prefix:?} must start with a registry host"));
    }
    if trimmed.len() > REFERENCE_MAX || trimmed.contains(['@', ' ']) {
        return Err(format!("{prefix:?} is not a registry or repository prefix"));
    }
    Ok(())
}

/// Registries and repositories orders may name images from.
#[utoipa::path(
    get,
    path = "/catalog/image-policy",
    tag = "catalog",
    responses((status = 200, description = "The policy", body = ImagePolicy), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_image_policy(
    State(state): State<AppState>,
    _caller: Authenticated,
) -> ApiResult<Json<ImagePolicy>> {
    Ok(Json(ImagePolicy {
        allowed_prefixes: allowed(&state.db).await?,
    }))
}

/// Replaces the registries and repositories orders may name images from.
#[utoipa::path(
    put,
    path = "/admin/catalog/image-policy",
    tag = "admin",
    request_body = ImagePolicy,
    responses((status = 200, description = "The new policy", body = ImagePolicy), ProblemResponses),
    security(("bearer" = []))
)]
async fn set_image_policy(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    ApiJson(request): ApiJson<ImagePolicy>,
) -> ApiResult<Json<ImagePolicy>> {
    let mut fields = Fields::default();
    if request.allowed_prefixes.len() > PREFIXES_MAX {
        fields.push(
            "allowed_prefixes",
            format!("must hold at most {PREFIXES_MAX} prefixes"),
        );
    }
    for (i, prefix) in request.allowed_prefixes.iter().enumerate() {
        if let Err(why) = check_prefix(prefix) {
            fields.push(&format!("allowed_prefixes[{i}]"), why);
        }
    }
    fields.finish()?;
    let mut prefixes = request.allowed_prefixes;
    prefixes.sort();
    prefixes.dedup();
    let txn = gantry_core::db::write(&state.db).await?;
    allowed_image_prefix::Entity::delete_many()
        .exec(&txn)
        .await?;
    let now = Utc::now();
    if !prefixes.is_empty() {
        allowed_image_prefix::Entity::insert_many(prefixes.iter().map(|p| {
            allowed_image_prefix::ActiveModel {
                prefix: Set(p.clone()),
                created_at: Set(now),
            }
        }))
        .exec(&txn)
        .await?;
    }
    // Admission reads the policy with the rest of the catalog.
    txn.execute_unprepared("UPDATE catalog_version SET version = version + 1")
        .await?;
    let details = serde_json::json!({ "allowed_prefixes": prefixes });
    audit::platform(
        &txn,
        &actor,
        "image_policy.set",
        "image_policy",
        Uuid::nil(),
        details,
    )
    .await?;
    txn.commit().await?;
    Ok(Json(ImagePolicy {
        allowed_prefixes: prefixes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_start_with_a_registry() {
        assert!(check_prefix("nvcr.io").is_ok());
        assert!(check_prefix("nvcr.io/nvidia/").is_ok());
        assert!(check_prefix("127.0.0.1:5000/team").is_ok());
        assert!(check_prefix("nvidia/").is_err());
        assert!(check_prefix("bad host/x").is_err());
        assert!(check_prefix("nvcr.io/x@sha256").is_err());
    }
}
