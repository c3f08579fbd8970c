use sea_orm::entity::prelude::*;

/// A volume's size from `starts_at` until `ends_at` (open while it holds):
/// what storage is billed by.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "volume_sizes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub volume_id: Uuid,
    pub org_id: Uuid,
    pub size_gib: i64,
    pub starts_at: DateTimeUtc,
    pub ends_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
