use sea_orm::entity::prelude::*;

use gantry_types::classes::{DriverKind, NodeState};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "nodes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub name: String,
    pub region_id: Uuid,
    pub rack: String,
    pub instance_type_id: Option<Uuid>,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    /// A JSON array of labels.
    pub labels: String,
    pub state: NodeState,
    /// Why it is out of service: the operator's words, or what was seen.
    pub state_reason: Option<String>,
    pub driver: DriverKind,
    pub credential_hash: Option<String>,
    pub last_heartbeat_at: Option<DateTimeUtc>,
    /// How its agent isolates workloads (`sandbox`, `oci`, `process`);
    /// none for simulated nodes.
    pub runtime: Option<String>,
    /// A rotated credential not yet used: either it or the current one is
    /// accepted until the agent first presents the new one.
    pub credential_next_hash: Option<String>,
    /// An operator asked for a new credential; the next heartbeat says so.
    pub credential_rotate: bool,
    /// The address its agent carries private networks from (VXLAN), on
    /// the data centre's network; none where it carries none.
    pub fabric_address: Option<String>,
    /// Free space for `local` volumes on its disk, as its agent last said;
    /// none where it keeps none.
    pub volume_free_bytes: Option<i64>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
