//! Images: what a workload's file system is. Operators keep the list; an
//! order may name one (or gets the default). Nodes on the `oci` runtime
//! pull its reference; nodes on the `sandbox` runtime run it from a root
//! file system of the same name that the operator prepared on the node.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::{in_use, name_taken};
use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Authenticated, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{image, order};
use gantry_types::classes::OrderStatus;

const REFERENCE_MAX: usize = 512;
const DESCRIPTION_MAX: usize = 1000;

#[derive(Debug, Serialize, ToSchema)]
pub struct Image {
    pub id: Uuid,
    /// What orders name, and the root file system's directory name on
    /// sandbox nodes.
    pub name: String,
    /// The OCI reference container nodes run, such as
    /// `nvcr.io/nvidia/pytorch:24.05-py3`.
    pub reference: String,
    pub description: String,
    /// Orders that name no image get this one.
    pub is_default: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<image::Model> for Image {
    fn from(row: image::Model) -> Self {
        Self {
            id: row.id,
            name: row.name,
            reference: row.reference,
            description: row.description,
            is_default: row.is_default,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateImage {
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    pub name: String,
    #[schema(min_length = 1, max_length = 512)]
    pub reference: String,
    #[serde(default)]
    #[schema(max_length = 1000)]
    pub description: String,
    #[serde(default)]
    pub is_default: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateImage {
    #[schema(min_length = 1, max_length = 512)]
    pub reference: Option<String>,
    #[schema(max_length = 1000)]
    pub description: Option<String>,
    pub is_default: Option<bool>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_images))
        .routes(routes!(create_image))
        .routes(routes!(update_image, delete_image))
}

fn check_reference(fields: &mut Fields, reference: &str) {
    if reference.is_empty()
        || reference.len() > REFERENCE_MAX
        || reference
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        fields.push(
            "reference",
            "must be an image reference without spaces, 1 to 512 bytes",
        );
    }
}

async fn find(db: &impl ConnectionTrait, params: &RawPathParams) -> ApiResult<image::Model> {
    let id = path_uuid(params, "image_id", Resource::Image)?;
    image::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Image, id))
}

/// Makes `id` the only default.
async fn clear_other_defaults(db: &impl ConnectionTrait, id: Uuid) -> ApiResult<()> {
    image::Entity::update_many()
        .col_expr(image::Column::IsDefault, Expr::value(false))
        .filter(image::Column::Id.ne(id))
        .exec(db)
        .await?;
    Ok(())
}

/// Every image orders may name.
#[utoipa::path(
    get,
    path = "/catalog/images",
    tag = "catalog",
    params(PageQuery),
    responses((status = 200, description = "A page of images", body = Page<Image>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_images(
    State(state): State<AppState>,
    _caller: Authenticated,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<Image>>> {
    let request = query.validate()?;
    let rows = request
        .ascending(image::Entity::find(), image::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(Page::from_rows(rows, request, |i| i.id, Image::from)))
}

/// Adds an image to the catalog.
#[utoipa::path(
    post,
    path = "/admin/catalog/images",
    tag = "admin",
    request_body = CreateImage,
    responses((status = 201, description = "The new image", body = Image), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_image(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    ApiJson(request): ApiJson<CreateImage>,
) -> ApiResult<(StatusCode, Json<Image>)> {
    let mut fields = Fields::default();
    fields.label("name", &request.name);
    check_reference(&mut fields, &request.reference);
    let description = fields.text("description", &request.description, DESCRIPTION_MAX);
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    if image::Entity::find()
        .filter(image::Column::Name.eq(&request.name))
        .one(&txn)
        .await?
        .is_some()
    {
        return Err(name_taken("image", &request.name));
    }
    let now = Utc::now();
    let row = image::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set(request.name),
        reference: Set(request.reference),
        description: Set(description),
        is_default: Set(request.is_default),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    if row.is_default {
        clear_other_defaults(&txn, row.id).await?;
    }
    let details = serde_json::json!({ "name": row.name, "reference": row.reference });
    audit::platform(&txn, &actor, "image.create", "image", row.id, details).await?;
    txn.commit().await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// Changes an image's reference, description or default flag; its name
/// stays.
#[utoipa::path(
    patch,
    path = "/admin/catalog/images/{image_id}",
    tag = "admin",
    params(("image_id" = Uuid, Path, description = "Image id")),
    request_body = UpdateImage,
    responses((status = 200, description = "The updated image", body = Image), ProblemResponses),
    security(("bearer" = []))
)]
async fn update_image(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<UpdateImage>,
) -> ApiResult<Json<Image>> {
    let mut fields = Fields::default();
    if let Some(reference) = &request.reference {
        check_reference(&mut fields, reference);
    }
    let description = request
        .description
        .as_deref()
        .map(|d| fields.text("description", d, DESCRIPTION_MAX));
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let current = find(&txn, &params).await?;
    let mut row: image::ActiveModel = current.into();
    if let Some(reference) = request.reference {
        row.reference = Set(reference);
    }
    if let Some(description) = description {
        row.description = Set(description);
    }
    if let Some(default) = request.is_default {
        row.is_default = Set(default);
    }
    row.updated_at = Set(Utc::now());
    let updated = row.update(&txn).await?;
    if updated.is_default {
        clear_other_defaults(&txn, updated.id).await?;
    }
    let details = serde_json::json!({ "name": updated.name, "reference": updated.reference });
    audit::platform(&txn, &actor, "image.update", "image", updated.id, details).await?;
    txn.commit().await?;
    Ok(Json(updated.into()))
}

/// Removes an image that no order still waiting or running uses.
#[utoipa::path(
    delete,
    path = "/admin/catalog/images/{image_id}",
    tag = "admin",
    params(("image_id" = Uuid, Path, description = "Image id")),
    responses((status = 204, description = "Removed"), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_image(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let txn = gantry_core::db::write(&state.db).await?;
    let current = find(&txn, &params).await?;
    let live = order::Entity::find()
        .filter(order::Column::ImageId.eq(current.id))
        .filter(order::Column::Status.is_in(OrderStatus::LIVE))
        .count(&txn)
        .await?;
    if live > 0 {
        return Err(in_use(
            "image",
            &current.name,
            &format!("{live} live orders"),
        ));
    }
    image::Entity::delete_by_id(current.id).exec(&txn).await?;
    let details = serde_json::json!({ "name": current.name });
    audit::platform(&txn, &actor, "image.delete", "image", current.id, details).await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
