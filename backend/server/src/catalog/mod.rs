//! The catalog: regions, GPU models, instance types and their versioned
//! prices. Operators change it under `/admin/catalog`; every signed-in
//! caller reads it under `/catalog`.

pub mod gpu_models;
pub mod instance_types;
pub mod prices;
pub mod regions;

use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use utoipa_axum::router::OpenApiRouter;
use uuid::Uuid;

use crate::app::AppState;
use crate::entities::{gpu_model, instance_type, region};
use crate::error::{ApiError, ApiResult, Resource};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(regions::routes())
        .merge(gpu_models::routes())
        .merge(instance_types::routes())
        .merge(prices::routes())
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
