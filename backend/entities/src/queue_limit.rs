use sea_orm::entity::prelude::*;

/// How many orders an organization, or one of its projects, may have
/// waiting at once; without a row the installation's default applies to
/// the organization and none to its projects.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "queue_limits")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    /// `None`: the whole organization.
    pub project_id: Option<Uuid>,
    pub max_waiting_orders: i32,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
