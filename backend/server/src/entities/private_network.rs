use sea_orm::entity::prelude::*;

/// An organization's private network in one region: its workloads'
/// addresses come from `cidr`, and nodes carry it between them as VXLAN
/// network `vni`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "private_networks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub region_id: Uuid,
    pub vni: i32,
    /// `a.b.c.d/n`, a slice of the server's `private_networks` pool.
    pub cidr: String,
    /// The host number the next address is tried at; addresses go round
    /// the network before one is used again.
    pub next_host: i32,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
