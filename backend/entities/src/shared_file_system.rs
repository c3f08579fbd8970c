use sea_orm::entity::prelude::*;

use gantry_types::classes::SharedFsKind;

/// The distributed file system a region's `shared` volumes live on, as
/// its operator declared it.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "shared_file_systems")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub region_id: Uuid,
    pub kind: SharedFsKind,
    /// Where every node of the region has it mounted.
    pub mount_path: String,
    /// The first node id given to organizations' files on it: each
    /// organization gets the 65,536 ids from `first_id + slot × 65,536`.
    pub first_id: i64,
    /// Its free space, as a node of the region last saw it.
    pub free_bytes: Option<i64>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
