use sea_orm::entity::prelude::*;

use gantry_types::classes::{
    EstimateConfidence, OrderStatus, PricingClass, PriorityClass, WorkloadClass,
};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "orders")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    /// What people call it; none for orders made before names existed.
    pub name: Option<String>,
    pub project_id: Option<Uuid>,
    pub created_by_kind: String,
    pub created_by: Option<Uuid>,
    pub kind: String,
    pub instance_type_id: Uuid,
    pub gpu_model_id: Uuid,
    pub gpus_per_node: i32,
    pub node_count: i32,
    /// The instance type's fraction of a GPU, in thousandths, as ordered.
    pub gpu_milli: Option<i32>,
    /// The instance type's MIG profile, as ordered.
    pub mig_profile: Option<String>,
    pub region_id: Option<Uuid>,
    pub priority_class: PriorityClass,
    pub pricing_class: PricingClass,
    pub workload_class: WorkloadClass,
    pub duration_seconds: Option<i64>,
    /// Its work saves its progress when told to stop (SIGTERM, then the
    /// grace period), so the scheduler may move it to defragment.
    pub checkpointable: bool,
    pub deadline: Option<DateTimeUtc>,
    pub status: OrderStatus,
    pub pending_reason: Option<String>,
    /// The reasons it waits as a JSON array of `orders::reasons::WaitReason`.
    pub pending_details: Option<String>,
    pub estimated_start: Option<DateTimeUtc>,
    pub estimate_confidence: Option<EstimateConfidence>,
    pub failure_reason: Option<String>,
    /// JSON access details, once running.
    pub access: Option<String>,
    pub attempts: i32,
    /// The `Idempotency-Key` it was created with, unique per organization.
    pub idempotency_key: Option<String>,
    /// A job's JSON spec (command, args, env, working directory, image);
    /// none for an instance.
    pub job: Option<String>,
    /// Walltime of a job: past it the job is stopped as timed out.
    pub max_runtime_seconds: Option<i64>,
    /// Whether a job's non-zero exit is retried.
    pub retry_on_failure: bool,
    /// Retries a job may have after its first attempt.
    pub max_retries: i32,
    pub array_id: Option<Uuid>,
    pub array_index: Option<i32>,
    /// The exit code of a job's last attempt.
    pub exit_code: Option<i32>,
    /// Bytes of output kept, against the per-job limit.
    pub log_bytes: i64,
    /// A JSON array of the SSH key ids an instance admits.
    pub ssh_key_ids: Option<String>,
    /// A JSON array of the ports it exposes.
    pub ports: Option<String>,
    pub image_id: Option<Uuid>,
    /// An OCI reference the order names instead of a catalog image.
    pub image_reference: Option<String>,
    /// The reservation it runs in: only on its GPUs, only in its window.
    pub reservation_id: Option<Uuid>,
    /// The node its `local` volumes live on: it runs only there.
    pub node_id: Option<Uuid>,
    pub started_at: Option<DateTimeUtc>,
    pub ended_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
