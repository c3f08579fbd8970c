//! The registries and repositories orders may name images from, as
//! admission reads them; operators change them through the catalog's
//! image policy routes.

use gantry_entities::allowed_image_prefix;
use gantry_types::image_refs::ImageRef;
use sea_orm::{ConnectionTrait, EntityTrait, QueryOrder};

use crate::error::{ApiError, ApiResult};

/// The prefixes allowed now, in order.
pub async fn allowed(db: &impl ConnectionTrait) -> Result<Vec<String>, sea_orm::DbErr> {
    Ok(allowed_image_prefix::Entity::find()
        .order_by_asc(allowed_image_prefix::Column::Prefix)
        .all(db)
        .await?
        .into_iter()
        .map(|p| p.prefix)
        .collect())
}

/// The reference an order names, if the policy admits it; a 422 naming
/// `field` otherwise.
pub fn check(field: &str, text: &str, allowed: &[String]) -> ApiResult<ImageRef> {
    let reference = ImageRef::parse(text).map_err(|why| {
        ApiError::validation(vec![crate::error::FieldError {
            field: field.to_owned(),
            message: why,
        }])
    })?;
    if allowed.iter().any(|p| reference.allowed_by(p)) {
        return Ok(reference);
    }
    let said = if allowed.is_empty() {
        "this installation allows only its catalog's images (`GET /catalog/images`)".to_owned()
    } else {
        format!(
            "this installation allows images from {} only, and the catalog's",
            allowed.join(", ")
        )
    };
    Err(ApiError::validation(vec![crate::error::FieldError {
        field: field.to_owned(),
        message: format!("{} is not allowed: {said}", reference.whole()),
    }]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_outside_the_policy_are_refused_by_field() {
        let allowed = vec!["registry.example/team".to_owned()];
        assert!(check("image", "registry.example/team/train:v3", &allowed).is_ok());
        for text in ["registry.example/other/x", "debian"] {
            assert!(check("image", text, &allowed).is_err(), "{text}");
        }
    }
}
