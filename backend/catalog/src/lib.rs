//! The catalog: regions, GPU models, instance types and their versioned
//! prices. Operators change it under `/admin/catalog`; every signed-in
//! caller reads it under `/catalog`.

pub mod availability;
pub mod gpu_models;
pub mod image_policy;
pub mod images;
pub mod instance_types;
pub mod prices;
pub mod regions;
pub mod storage_prices;

use gantry_core::catalog::shares;
use gantry_types::image_refs;

use std::collections::HashMap;

use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect};
use utoipa_axum::router::OpenApiRouter;
use uuid::Uuid;

use gantry_core::error::{ApiError, ApiResult, Resource};
use gantry_core::state::AppState;
use gantry_entities::{gpu_model, instance_type, region};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(regions::routes())
        .merge(gpu_models::routes())
        .merge(instance_types::routes())
        .merge(prices::routes())
        .merge(storage_prices::routes())
        .merge(availability::routes())
        .merge(images::routes())
        .merge(image_policy::routes())
}

/// Finds a row by id, or by its unique name when `reference` is not a UUID.
macro_rules! by_reference {
    ($fn_name:ident, $entity:ident, $resource:expr) => {
        pub async fn $fn_name(
            db: &impl ConnectionTrait,
            reference: &str,
        ) -> ApiResult<$entity::Model> {
            let select = match Uuid::try_parse(reference) {
                Ok(id) => $entity::Entity::find_by_id(id),
                Err(_) => $entity::Entity::find().filter($entity::Column::Name.eq(reference)),
            };
            select
                .one(db)
                .await?
                .ok_or_else(|| ApiError::not_found($resource, reference))
        }
    };
}

by_reference!(region_by_ref, region, Resource::Region);
by_reference!(gpu_model_by_ref, gpu_model, Resource::GpuModel);
by_reference!(instance_type_by_ref, instance_type, Resource::InstanceType);

/// Like the `…_by_ref` lookups, for a reference in a request body: an
/// unknown one is an invalid request (422), not a missing resource.
macro_rules! in_body {
    ($fn_name:ident, $lookup:ident, $entity:ident, $code:literal, $what:literal) => {
        pub async fn $fn_name(
            db: &impl ConnectionTrait,
            reference: &str,
        ) -> ApiResult<$entity::Model> {
            $lookup(db, reference).await.map_err(|_| {
                ApiError::unprocessable($code, format!(concat!("no ", $what, " {:?}"), reference))
            })
        }
    };
}

in_body!(
    region_in_body,
    region_by_ref,
    region,
    "unknown_region",
    "region"
);
in_body!(
    gpu_model_in_body,
    gpu_model_by_ref,
    gpu_model,
    "unknown_gpu_model",
    "GPU model"
);
in_body!(
    instance_type_in_body,
    instance_type_by_ref,
    instance_type,
    "unknown_instance_type",
    "instance type"
);

/// Names by id of every row of a catalog table, for showing references.
macro_rules! names {
    ($fn_name:ident, $entity:ident) => {
        pub async fn $fn_name(db: &impl ConnectionTrait) -> ApiResult<HashMap<Uuid, String>> {
            Ok($entity::Entity::find()
                .select_only()
                .column($entity::Column::Id)
                .column($entity::Column::Name)
                .into_tuple::<(Uuid, String)>()
                .all(db)
                .await?
                .into_iter()
                .collect())
        }
    };
}

names!(region_names, region);
names!(gpu_model_names, gpu_model);
names!(instance_type_names, instance_type);

/// Refuses a name another row of the same table already has.
fn name_taken(what: &str, name: &str) -> ApiError {
    ApiError::conflict(
        "name_taken",
        format!("a {what} named {name:?} already exists"),
    )
}

/// Refuses to delete a row that others still refer to.
fn in_use(what: &str, name: &str, by: &str) -> ApiError {
    ApiError::conflict(
        "in_use",
        format!("the {what} {name:?} is still used by {by}; remove those first"),
    )
}
