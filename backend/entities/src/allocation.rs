use sea_orm::entity::prelude::*;

use gantry_types::classes::{AllocationState, StopCause};

/// The GPUs of one order on one node, for one attempt.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "allocations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub order_id: Uuid,
    pub org_id: Uuid,
    pub node_id: Uuid,
    /// A JSON array of the GPU indices on the node.
    pub gpu_indices: String,
    pub state: AllocationState,
    pub stop_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub released_at: Option<DateTimeUtc>,
    /// When its order began running on it; metering starts here.
    pub running_since: Option<DateTimeUtc>,
    /// When a provider fault (its node going silent) took it down: from
    /// here to its release, time is measured but not billed.
    pub down_from: Option<DateTimeUtc>,
    /// How far usage records cover it (whole seconds).
    pub metered_until: Option<DateTimeUtc>,
    /// Which attempt of its order it served (1, 2, …).
    pub attempt: i32,
    /// The exit code its workload reported, if it exited.
    pub exit_code: Option<i32>,
    /// How its attempt ended (completed, failed, timed_out, cancelled,
    /// preempted, node_lost); none while it lasts.
    pub outcome: Option<String>,
    /// The share of each GPU it holds, in thousandths: 1000 for whole GPUs.
    pub gpu_milli: i32,
    /// The UUID of the MIG instance it holds (`MIG-…`).
    pub mig_device: Option<String>,
    /// Its workload's address on its private network (its project's or
    /// its organization's), once its node has a fabric to carry one.
    pub private_address: Option<String>,
    /// The network that address is on.
    pub private_network_id: Option<Uuid>,
    /// Why it was told to stop; none while it runs, or when its work
    /// ended by itself.
    pub stop_cause: Option<StopCause>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

impl Model {
    /// The GPU indices it holds on its node.
    pub fn gpu_list(&self) -> Vec<u32> {
        serde_json::from_str(&self.gpu_indices).unwrap_or_default()
    }

    /// How many GPUs it holds.
    pub fn gpu_count(&self) -> i64 {
        i64::try_from(self.gpu_list().len()).unwrap_or(i64::MAX)
    }
}
