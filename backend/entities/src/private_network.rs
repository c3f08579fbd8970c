use sea_orm::entity::prelude::*;

/// A private network in one region, an organization's or one of its
/// projects': its workloads' addresses come from `cidr`, and nodes carry
/// it between them as VXLAN network `vni`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "private_networks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    /// Whose network it is in its region: the organization's id, or the
    /// project's for a project's own network.
    pub scope_id: Uuid,
    /// The project whose own network it is; none for the organization's.
    pub project_id: Option<Uuid>,
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
