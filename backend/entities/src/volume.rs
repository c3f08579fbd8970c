use sea_orm::entity::prelude::*;

use gantry_types::classes::{VolumeKind, VolumeState};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "volumes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub project_id: Option<Uuid>,
    pub name: String,
    pub region_id: Uuid,
    pub kind: VolumeKind,
    /// The size sold: the file system holds exactly this much.
    pub size_gib: i64,
    pub state: VolumeState,
    /// Why it failed, in its node's words.
    pub state_reason: Option<String>,
    /// The node a `local` volume lives on.
    pub node_id: Option<Uuid>,
    /// Bytes its files take, as its node last measured.
    pub used_bytes: Option<i64>,
    /// The size its node has made it; below `size_gib` while a grow is
    /// under way.
    pub provisioned_gib: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub deleted_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
