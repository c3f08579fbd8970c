use sea_orm::entity::prelude::*;

/// A registry or repository orders may name images from (beside the
/// catalog's), set by operators.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "allowed_image_prefixes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub prefix: String,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
