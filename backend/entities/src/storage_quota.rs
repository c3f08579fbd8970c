use sea_orm::entity::prelude::*;

use gantry_types::classes::VolumeKind;

/// How many GiB of one kind of volume an organization may hold in a
/// region, or in every region together when `region_id` is none.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "storage_quotas")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub region_id: Option<Uuid>,
    pub kind: VolumeKind,
    pub max_gib: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
