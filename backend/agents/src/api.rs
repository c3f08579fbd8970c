//! The agent API: register, heartbeat, assignments.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::health;
use super::node_auth::{JoinToken, NodeAgent};
use gantry_core::auth::api_key_secret::{self, NODE_PREFIX};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::handles::beats::Beat;
use gantry_core::http::extract::{ApiJson, ApiQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{
    allocation, gpu, gpu_model, gpu_telemetry, image, instance_type, join_token, node, order,
};
use gantry_inventory::nodes::{self, GpuSpec, NodeSpec};
use gantry_types::classes::{AllocationState, DriverKind, NodeState, OrderStatus};

const GPUS_MAX: usize = 64;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscoveredGpu {
    #[schema(minimum = 0, maximum = 63)]
    pub index: i32,
    /// A GPU model name from the catalog.
    #[schema(min_length = 1, max_length = 64)]
    pub model: String,
    #[schema(min_length = 1, max_length = 64)]
    pub uuid: String,
    #[schema(minimum = 0)]
    pub memory_mib: i64,
    /// GPUs with the same domain share NVLink.
    #[schema(minimum = 0, maximum = 63)]
    pub nvlink_domain: i32,
    #[serde(default)]
    pub mig_enabled: bool,
    /// Its MIG instances, when it is in MIG mode.
    #[serde(default)]
    #[schema(max_items = 7)]
    pub mig_devices: Vec<gantry_core::catalog::shares::MigDevice>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Register {
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub name: String,
    #[serde(default)]
    #[schema(pattern = "^([a-z0-9][a-z0-9-]{0,62})?$")]
    pub rack: String,
    #[serde(default)]
    #[schema(max_items = 32)]
    pub labels: Vec<String>,
    #[schema(minimum = 1)]
    pub cpu_milli: i64,
    #[schema(minimum = 1)]
    pub memory_mib: i64,
    #[schema(max_items = 64)]
    pub gpus: Vec<DiscoveredGpu>,
    /// How the agent isolates workloads; `process` when absent.
    #[serde(default)]
    pub runtime: NodeRuntime,
}

/// How an agent isolates the workloads on its node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeRuntime {
    /// Namespaces, a user per workload, its GPUs only, cgroup limits.
    Sandbox,
    /// Containers with CDI GPUs.
    Oci,
    /// A virtual machine per instance (QEMU), its GPUs passed through.
    Vm,
    /// Plain processes of the agent's user: not isolated.
    #[default]
    Process,
}

impl NodeRuntime {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sandbox => "sandbox",
            Self::Oci => "oci",
            Self::Vm => "vm",
            Self::Process => "process",
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Registered {
    pub node_id: Uuid,
    /// The node's credential for every later call; shown once.
    pub credential: String,
    /// Heartbeats must come more often than this.
    pub heartbeat_deadline_seconds: u64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuSample {
    #[schema(minimum = 0, maximum = 63)]
    pub index: i32,
    #[schema(minimum = 0, maximum = 100)]
    pub utilization_pct: i16,
    #[schema(minimum = 0)]
    pub memory_used_mib: i64,
    #[schema(minimum = -50, maximum = 150)]
    pub temperature_c: i16,
    #[schema(minimum = 0, maximum = 5000)]
    pub power_w: i32,
    /// `false` when the driver reports a fault (XID errors, fallen off the bus).
    #[serde(default = "healthy")]
    pub healthy: bool,
}

fn healthy() -> bool {
    true
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    #[serde(default)]
    #[schema(max_items = 64)]
    pub gpus: Vec<GpuSample>,
    /// The node's address on the data centre's network, from which its
    /// agent carries private networks to other nodes (VXLAN); absent where
    /// it carries none, and its workloads then get no private address.
    #[serde(default)]
    #[schema(value_type = Option<String>, format = Ipv4)]
    pub fabric_address: Option<std::net::Ipv4Addr>,
    /// How each volume the node keeps stands; absent from an agent that
    /// keeps none, which leaves its volumes as they were.
    #[serde(default)]
    #[schema(max_items = 4096)]
    pub volumes: Option<Vec<gantry_volumes::nodes::VolumeReport>>,
    /// Room left for more volumes on the node's disk, in bytes.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub volume_free_bytes: Option<i64>,
    /// Free bytes of the region's shared file system, as the node sees it.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub shared_free_bytes: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HeartbeatAck {
    pub node_id: Uuid,
    pub state: NodeState,
    /// An operator asked for a new credential: fetch one from
    /// `POST /agent/credential`.
    pub rotate_credential: bool,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Keep it running (start it if it is not).
    Run,
    /// Stop it: SIGTERM now, SIGKILL at `stop_at`.
    Stop,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Assignment {
    pub order_id: Uuid,
    /// The organization it runs for: the agent labels the telemetry of
    /// the GPUs it holds with it.
    pub org_id: Uuid,
    /// That organization's name, for people reading the agent's metrics.
    pub organization: String,
    pub action: Action,
    /// GPU indices on this node.
    pub gpu_ids: Vec<u32>,
    /// The share of each GPU, in thousandths: 1000 for whole GPUs, less
    /// for a fraction or a MIG instance of a GPU others use too.
    pub gpu_milli: i32,
    /// The MIG instances it holds (`MIG-…` UUIDs); its GPU's device is
    /// shared, these are its own.
    pub mig_devices: Vec<String>,
    /// For `stop`: when the grace period ends.
    pub stop_at: Option<DateTime<Utc>>,
    /// Environment for the workload, `CUDA_VISIBLE_DEVICES` included; for a
    /// job also its own variables and the rendezvous (`MASTER_ADDR`,
    /// `MASTER_PORT`, `WORLD_SIZE`, `NODE_RANK`).
    pub env: BTreeMap<String, String>,
    /// A job's command line (`sh -c`); absent for an instance, which runs
    /// the agent's own workload command.
    pub command: Option<String>,
    /// Where a job's command starts.
    pub working_dir: Option<String>,
    /// The instance type's share of the node, enforced by the runtime.
    pub limits: WorkloadLimits,
    /// OpenSSH public keys an instance admits (its SSH server's
    /// `authorized_keys`); read afresh on every fetch, so a deleted key
    /// stops working.
    pub ssh_keys: Vec<String>,
    /// Ports to expose, each on a node port of the agent's choosing.
    pub ports: Vec<u16>,
    pub image: Option<AssignedImage>,
    /// Nodes the order runs on together: a single node's workload may get
    /// a network of its own, a gang's nodes need to reach each other.
    pub node_count: i32,
    /// Its address on its organization's private network, where its node
    /// carries one.
    pub network: Option<AssignedNetwork>,
    /// The volumes it attaches (among the node's `volumes`), outer mount
    /// paths first.
    pub volumes: Vec<gantry_volumes::attach::VolumeAttachment>,
}

/// A workload's place on its organization's private network.
#[derive(Debug, Serialize, ToSchema)]
pub struct AssignedNetwork {
    /// The network's VXLAN identifier; the same on every node.
    pub vni: u32,
    /// The workload's address and the network's prefix (`10.128.0.5/20`).
    pub address: String,
    /// The fabric addresses of the other nodes with workloads on it.
    pub peers: Vec<String>,
    /// Every live workload on the network by name, this one included (its
    /// first name is its host name): the workloads' `/etc/hosts`.
    pub hosts: Vec<NetworkHost>,
}

/// A workload on a private network and the names it answers to: its
/// order's name and id, with `-<rank>` on each node of a multi-node order.
#[derive(Debug, Serialize, ToSchema)]
pub struct NetworkHost {
    pub address: String,
    pub names: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WorkloadLimits {
    pub cpu_milli: i64,
    pub memory_mib: i64,
    /// The workload's disk (its writable root); 0 where the instance type
    /// sells none, which gets the node's default.
    pub disk_gib: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AssignedImage {
    /// The catalog name, when the order named a catalog image.
    pub name: Option<String>,
    /// The OCI reference the node pulls.
    pub reference: String,
    /// The organization's login to the image's registry, when it keeps
    /// one: for this pull only.
    pub login: Option<gantry_access::tenancy::registry_credentials::RegistryLogin>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Assignments {
    pub assignments: Vec<Assignment>,
    /// The volumes the node keeps or erases, attached or not.
    pub volumes: Vec<gantry_volumes::nodes::NodeVolume>,
    /// Changes exactly when the assignments do: pass it back as `since` to
    /// wait for the next change.
    pub version: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AssignmentsQuery {
    /// The `version` the agent holds: the answer waits until the
    /// assignments differ from it, for up to `wait_ms`.
    #[param(max_length = 64)]
    pub since: Option<String>,
    /// How long to wait for a change, in milliseconds (0 to 20000; 0 answers
    /// at once).
    #[param(minimum = 0, maximum = 20000)]
    pub wait_ms: Option<u64>,
}

/// The longest an agent's fetch waits for its assignments to change.
const WAIT_MAX: Duration = Duration::from_secs(20);
/// How often a waiting fetch looks again without being told of a change
/// (another replica's scheduling loop cannot tell this one without
/// PostgreSQL, and volumes tell no one), while few fetches wait.
const RECHECK: Duration = Duration::from_secs(1);
/// How many such looks the waiting fetches of one process take per second
/// at most, together: each is a read of a node's assignments, and a fleet
/// of thousands looking every second left no room for anything else.
const RECHECKS_PER_SECOND: f64 = 200.0;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(register))
        .routes(routes!(heartbeat))
        .routes(routes!(assignments))
}

/// Registers (or re-registers) a node with a join token.
#[utoipa::path(
    post,
    path = "/agent/register",
    tag = "agent",
    request_body = Register,
    responses((status = 201, description = "The node and its credential", body = Registered), ProblemResponses),
    security(("bearer" = []))
)]
async fn register(
    State(state): State<AppState>,
    join: JoinToken,
    ApiJson(request): ApiJson<Register>,
) -> ApiResult<(StatusCode, Json<Registered>)> {
    let mut fields = Fields::default();
    fields.slug("name", &request.name);
    if !request.rack.is_empty() {
        fields.slug("rack", &request.rack);
    }
    for (i, label) in request.labels.iter().enumerate() {
        fields.label(&format!("labels[{i}]"), label);
    }
    fields.range("cpu_milli", request.cpu_milli, 1, i64::MAX);
    fields.range("memory_mib", request.memory_mib, 1, i64::MAX);
    for (i, g) in request.gpus.iter().enumerate() {
        gantry_core::catalog::shares::check_devices(
            &mut fields,
            &format!("gpus[{i}].mig_devices"),
            &g.mig_devices,
        );
    }
    if request.gpus.len() > GPUS_MAX {
        fields.push("gpus", format!("at most {GPUS_MAX} GPUs"));
    }
    let mut indices: Vec<i32> = request.gpus.iter().map(|g| g.index).collect();
    indices.sort_unstable();
    if indices
        .iter()
        .copied()
        .ne(0..i32::try_from(indices.len()).unwrap_or(0))
    {
        fields.push("gpus", "indices must be 0, 1, … without gaps or repeats");
    }
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let models: HashMap<String, gpu_model::Model> = gpu_model::Entity::find()
        .all(&txn)
        .await?
        .into_iter()
        .map(|m| (m.name.clone(), m))
        .collect();
    let missing: Vec<&str> = request
        .gpus
        .iter()
        .filter(|g| !models.contains_key(&g.model))
        .map(|g| g.model.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(ApiError::unprocessable(
            "unknown_gpu_model",
            format!("the catalog has no GPU model {missing:?}; an operator must add it first"),
        ));
    }
    if let Some(bound) = &join.token.node_name
        && *bound != request.name
    {
        return Err(ApiError::forbidden(format!(
            "this join token registers node {bound:?} only"
        )));
    }
    let existing = node::Entity::find()
        .filter(node::Column::Name.eq(&request.name))
        .one(&txn)
        .await?;
    let node_id = match existing {
        Some(current) => {
            // Taking over a registered node (its credential, its GPUs)
            // needs the operator's word for that node, not a region's.
            if join.token.node_name.as_deref() != Some(current.name.as_str()) {
                return Err(ApiError::conflict(
                    "node_registered",
                    format!(
                        "node {} is registered already; an operator issues a join token for \
                         this node (POST /admin/join-tokens with \"node\") to register it again",
                        current.name
                    ),
                ));
            }
            if current.region_id != join.token.region_id {
                return Err(ApiError::conflict(
                    "region_mismatch",
                    format!(
                        "node {} belongs to another region than the join token",
                        current.name
                    ),
                ));
            }
            reregister(&txn, current, &request, &models).await?
        }
        None => {
            let mut gpus: Vec<&DiscoveredGpu> = request.gpus.iter().collect();
            gpus.sort_by_key(|g| g.index);
            let spec = NodeSpec {
                name: request.name.clone(),
                region_id: join.token.region_id,
                rack: request.rack.clone(),
                instance_type_id: None,
                cpu_milli: request.cpu_milli,
                memory_mib: request.memory_mib,
                labels: request.labels.clone(),
                driver: DriverKind::Agent,
                gpus: gpus
                    .into_iter()
                    .map(|g| GpuSpec {
                        model_id: models[&g.model].id,
                        hardware_uuid: g.uuid.clone(),
                        memory_mib: g.memory_mib,
                        nvlink_domain: g.nvlink_domain,
                        mig_enabled: g.mig_enabled,
                        mig_devices: g.mig_devices.clone(),
                    })
                    .collect(),
            };
            nodes::insert(&txn, spec).await?.id
        }
    };
    let secret = api_key_secret::generate_with(NODE_PREFIX, node_id);
    node::Entity::update_many()
        .col_expr(
            node::Column::CredentialHash,
            Expr::value(Some(secret.secret_hash)),
        )
        .col_expr(
            node::Column::CredentialNextHash,
            Expr::value(None::<String>),
        )
        .col_expr(node::Column::CredentialRotate, Expr::value(false))
        .col_expr(
            node::Column::Runtime,
            Expr::value(Some(request.runtime.as_str())),
        )
        .col_expr(
            node::Column::LastHeartbeatAt,
            Expr::value(Some(state.clock.now())),
        )
        .filter(node::Column::Id.eq(node_id))
        .exec(&txn)
        .await?;
    // A token for one node is spent once that node has registered.
    if join.token.node_name.is_some() {
        join_token::Entity::update_many()
            .col_expr(
                join_token::Column::RevokedAt,
                Expr::value(Some(state.clock.now())),
            )
            .filter(join_token::Column::Id.eq(join.token.id))
            .exec(&txn)
            .await?;
    }
    txn.commit().await?;
    state.scheduler.wake();
    Ok((
        StatusCode::CREATED,
        Json(Registered {
            node_id,
            credential: secret.token,
            heartbeat_deadline_seconds: state.config.agent_heartbeat_deadline_seconds,
        }),
    ))
}

/// An agent registering a node that exists again (a reinstall or a lost
/// credential) gets a new credential, provided its GPUs are the same.
async fn reregister(
    db: &impl ConnectionTrait,
    current: node::Model,
    request: &Register,
    models: &HashMap<String, gpu_model::Model>,
) -> ApiResult<Uuid> {
    if current.driver != DriverKind::Agent {
        return Err(ApiError::conflict(
            "name_taken",
            format!("a simulated node named {:?} exists", current.name),
        ));
    }
    let known = gpu::Entity::find()
        .filter(gpu::Column::NodeId.eq(current.id))
        .all(db)
        .await?;
    let shape = |index: i32, model: Uuid| (index, model);
    let mut before: Vec<_> = known
        .iter()
        .map(|g| shape(g.index, g.gpu_model_id))
        .collect();
    let mut after: Vec<_> = request
        .gpus
        .iter()
        .map(|g| shape(g.index, models[&g.model].id))
        .collect();
    before.sort_unstable();
    after.sort_unstable();
    if before != after {
        return Err(ApiError::conflict(
            "node_changed",
            format!(
                "node {} is registered with other GPUs; an operator must remove it first",
                current.name
            ),
        ));
    }
    for g in &request.gpus {
        gpu::Entity::update_many()
            .col_expr(gpu::Column::HardwareUuid, Expr::value(g.uuid.clone()))
            .col_expr(gpu::Column::MemoryMib, Expr::value(g.memory_mib))
            .col_expr(gpu::Column::NvlinkDomain, Expr::value(g.nvlink_domain))
            .col_expr(gpu::Column::MigEnabled, Expr::value(g.mig_enabled))
            .col_expr(
                gpu::Column::MigDevices,
                Expr::value(gantry_inventory::nodes::stored_mig_devices(&g.mig_devices)),
            )
            .filter(gpu::Column::NodeId.eq(current.id))
            .filter(gpu::Column::Index.eq(g.index))
            .exec(db)
            .await?;
    }
    Ok(current.id)
}

/// Says the node is alive, with per-GPU telemetry.
#[utoipa::path(
    post,
    path = "/agent/heartbeat",
    tag = "agent",
    request_body = Heartbeat,
    responses((status = 200, description = "The node's state", body = HeartbeatAck), ProblemResponses),
    security(("bearer" = []))
)]
async fn heartbeat(
    State(state): State<AppState>,
    agent: NodeAgent,
    ApiJson(request): ApiJson<Heartbeat>,
) -> ApiResult<Json<HeartbeatAck>> {
    let mut fields = Fields::default();
    if request.gpus.len() > GPUS_MAX {
        fields.push("gpus", format!("at most {GPUS_MAX} GPUs"));
    }
    for (i, g) in request.gpus.iter().enumerate() {
        fields.range(&format!("gpus[{i}].index"), g.index, 0, 63);
        fields.range(
            &format!("gpus[{i}].utilization_pct"),
            g.utilization_pct,
            0,
            100,
        );
        fields.range(
            &format!("gpus[{i}].memory_used_mib"),
            g.memory_used_mib,
            0,
            i64::MAX,
        );
        fields.range(
            &format!("gpus[{i}].temperature_c"),
            g.temperature_c,
            -50,
            150,
        );
        fields.range(&format!("gpus[{i}].power_w"), g.power_w, 0, 5000);
    }
    if let Some(address) = request.fabric_address
        && (address.is_unspecified()
            || address.is_loopback()
            || address.is_multicast()
            || address.is_broadcast())
    {
        fields.push(
            "fabric_address",
            "must be a unicast address other nodes reach this one at",
        );
    }
    if let Some(reports) = &request.volumes {
        gantry_volumes::nodes::check(&mut fields, reports, request.volume_free_bytes);
    }
    if let Some(free) = request.shared_free_bytes {
        fields.range("shared_free_bytes", free, 0, i64::MAX);
    }
    fields.finish()?;
    let now = state.clock.now();
    let node = agent.node;
    let mut recovered = false;
    // What only some beats change is written here; the time, GPU health and
    // telemetry every beat writes go through the process's batch writers.
    let unhealthy = node.state == NodeState::Unhealthy;
    if unhealthy || request.volumes.is_some() || request.shared_free_bytes.is_some() {
        let txn = gantry_core::db::write(&state.db).await?;
        if let Some(reports) = &request.volumes {
            gantry_volumes::nodes::apply(&txn, &node, reports, request.volume_free_bytes, now)
                .await?;
        }
        if let Some(free) = request.shared_free_bytes {
            gantry_volumes::shared::record_free(&txn, node.region_id, free).await?;
        }
        if unhealthy {
            // Conditional, so an operator's drain since the node was read
            // is not undone; with the beat's time, so the node is never
            // ready and silent at once.
            recovered = node::Entity::update_many()
                .col_expr(node::Column::State, Expr::value(NodeState::Ready))
                .col_expr(node::Column::LastHeartbeatAt, Expr::value(Some(now)))
                .col_expr(node::Column::StateReason, Expr::value(None::<String>))
                .col_expr(node::Column::UpdatedAt, Expr::value(now))
                .filter(node::Column::Id.eq(node.id))
                .filter(node::Column::State.eq(NodeState::Unhealthy))
                .exec(&txn)
                .await?
                .rows_affected
                == 1;
        }
        if recovered {
            health::record(
                &txn,
                node.id,
                "node_recovered",
                None,
                serde_json::json!({}),
                now,
            )
            .await?;
        }
        txn.commit().await?;
    }
    let fabric_address = request.fabric_address.map(|a| a.to_string());
    state
        .beats
        .submit(Beat {
            node_id: node.id,
            at: now,
            fabric_address: (fabric_address != node.fabric_address).then_some(fabric_address),
            health: request.gpus.iter().map(|g| (g.index, g.healthy)).collect(),
            samples: request
                .gpus
                .iter()
                .map(|g| gpu_telemetry::ActiveModel {
                    node_id: Set(node.id),
                    gpu_index: Set(g.index),
                    sampled_at: Set(now),
                    utilization_pct: Set(g.utilization_pct),
                    memory_used_mib: Set(g.memory_used_mib),
                    temperature_c: Set(g.temperature_c),
                    power_w: Set(g.power_w),
                })
                .collect(),
        })
        .await?;
    if recovered {
        state.scheduler.wake();
    }
    Ok(Json(HeartbeatAck {
        node_id: node.id,
        state: if recovered {
            NodeState::Ready
        } else {
            node.state
        },
        rotate_credential: node.credential_rotate,
    }))
}

/// What should run on this node now, and what must stop. Fetching an order
/// being brought up marks it `provisioning`. With `since` and `wait_ms` the
/// answer comes the moment the assignments change (a long poll), so a start
/// or stop reaches the node without waiting for its next round.
#[utoipa::path(
    get,
    path = "/agent/assignments",
    tag = "agent",
    params(AssignmentsQuery),
    responses((status = 200, description = "This node's assignments", body = Assignments), ProblemResponses),
    security(("bearer" = []))
)]
async fn assignments(
    State(state): State<AppState>,
    agent: NodeAgent,
    ApiQuery(query): ApiQuery<AssignmentsQuery>,
) -> ApiResult<Json<Assignments>> {
    let mut fields = Fields::default();
    if query.since.as_ref().is_some_and(|s| s.len() > 64) {
        fields.push("since", "at most 64 characters");
    }
    if query
        .wait_ms
        .is_some_and(|w| u128::from(w) > WAIT_MAX.as_millis())
    {
        fields.push("wait_ms", "at most 20000");
    }
    fields.finish()?;
    let wait = Duration::from_millis(query.wait_ms.unwrap_or(0));
    let deadline = tokio::time::Instant::now() + wait;
    // Subscribed before the first look, so a change made while looking wakes
    // the wait below.
    let mut changes = state.scheduler.assignment_changes();
    let node = agent.node.id;
    loop {
        let seen = changes.borrow_and_update().mark(node);
        let assignments = current(&state, &agent.node).await?;
        let attached: Vec<Uuid> = assignments
            .iter()
            .flat_map(|a| a.volumes.iter().map(|v| v.volume_id))
            .collect();
        let volumes = gantry_volumes::nodes::of_node(&state.db, &agent.node, &attached).await?;
        let version = version(&assignments, &volumes);
        let now = tokio::time::Instant::now();
        if query.since.as_deref() != Some(version.as_str())
            || now >= deadline
            || !state.scheduler.assignment_waits_allowed()
        {
            return Ok(Json(Assignments {
                assignments,
                volumes,
                version,
            }));
        }
        let recheck = RECHECK.max(Duration::from_secs_f64(
            state.scheduler.waiting_fetches() as f64 / RECHECKS_PER_SECOND,
        ));
        let pause = deadline.saturating_duration_since(now).min(recheck);
        // Changes elsewhere do not concern this node. A closed channel (the
        // server stopping) ends the wait like a timeout.
        tokio::time::timeout(pause, changes.wait_for(|c| c.mark(node) != seen))
            .await
            .ok();
    }
}

/// What a workload is told of its GPUs: `CUDA_VISIBLE_DEVICES` names its
/// GPUs, or its MIG instance by UUID; a fraction also gets the limits of
/// NVIDIA's Multi-Process Service, which enforces them when the node runs
/// an MPS server (its share of the GPU's threads, and of its memory).
fn gpu_env(
    a: &allocation::Model,
    gpus: &[u32],
    memory: &HashMap<u32, i64>,
) -> Vec<(String, String)> {
    let visible = match &a.mig_device {
        Some(device) => device.clone(),
        None => gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
    };
    let mut env = vec![("CUDA_VISIBLE_DEVICES".to_owned(), visible)];
    if a.mig_device.is_none() && a.gpu_milli < 1000 {
        env.push((
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(),
            ((a.gpu_milli + 9) / 10).to_string(),
        ));
        if let Some(total) = gpus.first().and_then(|g| memory.get(g)) {
            // Device 0 is the first (only) visible device.
            env.push((
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(),
                format!("0={}M", total * i64::from(a.gpu_milli) / 1000),
            ));
        }
    }
    env
}

/// A digest of the assignments and volumes (their maps are ordered, so the
/// same content always serializes alike).
fn version(assignments: &[Assignment], volumes: &[gantry_volumes::nodes::NodeVolume]) -> String {
    let json = serde_json::to_vec(&(assignments, volumes)).unwrap_or_default();
    gantry_types::digest::sha256_hex(&[&json])[..32].to_owned()
}

/// Where the workloads of a node's assignments sit on their private
/// networks, and the node's peers on each.
struct NodeNetworks {
    placed: HashMap<Uuid, gantry_networks::Placement>,
    neighbours: gantry_networks::Neighbours,
}

/// Places `live` (the node's allocations) and `gangs` (every allocation
/// of their jobs) on their private networks, where `node` has a fabric. A
/// gang is placed only where all of its nodes have one: its ranks must
/// reach each other, and a rank on a node without a fabric is on that
/// node's network.
async fn private_networks(
    state: &AppState,
    node: &node::Model,
    live: &[allocation::Model],
    gangs: &[allocation::Model],
    nodes: &HashMap<Uuid, node::Model>,
) -> ApiResult<NodeNetworks> {
    let mut networks = NodeNetworks {
        placed: HashMap::new(),
        neighbours: gantry_networks::Neighbours::default(),
    };
    let Some(plan) = gantry_networks::Plan::of(&state.config) else {
        return Ok(networks);
    };
    if node.fabric_address.is_none() {
        return Ok(networks);
    }
    let mut wanted: Vec<allocation::Model> = live.to_vec();
    wanted.extend(
        gangs
            .iter()
            .filter(|g| live.iter().all(|a| a.id != g.id))
            .cloned(),
    );
    networks.placed =
        gantry_networks::place(&state.db, &state.networks, plan, &wanted, nodes).await?;
    let split: Vec<Uuid> = gangs
        .iter()
        .filter(|g| !networks.placed.contains_key(&g.id))
        .map(|g| g.order_id)
        .collect();
    networks.placed.retain(|id, _| {
        wanted
            .iter()
            .find(|a| a.id == *id)
            .is_some_and(|a| !split.contains(&a.order_id))
    });
    let orgs = live.iter().map(|a| a.org_id).collect();
    networks.neighbours = gantry_networks::neighbours(&state.db, node, &orgs).await?;
    Ok(networks)
}

/// The node's assignments as they stand, in the order of their orders.
async fn current(state: &AppState, node: &node::Model) -> ApiResult<Vec<Assignment>> {
    let live = allocation::Entity::find()
        .filter(allocation::Column::NodeId.eq(node.id))
        .filter(allocation::Column::State.ne(AllocationState::Released))
        .all(&state.db)
        .await?;
    // An idle node asks every second: nothing more to read for it.
    if live.is_empty() {
        return Ok(Vec::new());
    }
    let orders: HashMap<Uuid, order::Model> = order::Entity::find()
        .filter(order::Column::Id.is_in(live.iter().map(|a| a.order_id)))
        .all(&state.db)
        .await?
        .into_iter()
        .map(|o| (o.id, o))
        .collect();
    // Only a fetch that hands over new work writes: a waiting agent looks
    // again every second and on every change to its node, and most looks
    // find nothing new.
    let handed: Vec<Uuid> = orders
        .values()
        .filter(|o| o.status == OrderStatus::Scheduled)
        .map(|o| o.id)
        .collect();
    if !handed.is_empty() {
        let now = state.clock.now();
        order::Entity::update_many()
            .col_expr(
                order::Column::Status,
                Expr::value(OrderStatus::Provisioning),
            )
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.is_in(handed.iter().copied()))
            .filter(order::Column::Status.eq(OrderStatus::Scheduled))
            .exec(&state.db)
            .await?;
    }
    // Jobs: their commands, and every node of each for the rendezvous.
    let jobs: Vec<Uuid> = orders
        .values()
        .filter(|o| o.job.is_some())
        .map(|o| o.id)
        .collect();
    let gangs = allocation::Entity::find()
        .filter(allocation::Column::OrderId.is_in(jobs))
        .filter(allocation::Column::State.ne(AllocationState::Released))
        .all(&state.db)
        .await?;
    let mut nodes: HashMap<Uuid, node::Model> = node::Entity::find()
        .filter(node::Column::Id.is_in(gangs.iter().map(|a| a.node_id)))
        .all(&state.db)
        .await?
        .into_iter()
        .map(|n| (n.id, n))
        .collect();
    nodes.insert(node.id, node.clone());
    let networks = private_networks(state, node, &live, &gangs, &nodes).await?;
    let types: HashMap<Uuid, instance_type::Model> = instance_type::Entity::find()
        .filter(instance_type::Column::Id.is_in(orders.values().map(|o| o.instance_type_id)))
        .all(&state.db)
        .await?
        .into_iter()
        .map(|t| (t.id, t))
        .collect();
    let image_ids: Vec<Uuid> = orders.values().filter_map(|o| o.image_id).collect();
    // Most orders name no image: no query for them on every poll.
    let images: HashMap<Uuid, image::Model> = if image_ids.is_empty() {
        HashMap::new()
    } else {
        image::Entity::find()
            .filter(image::Column::Id.is_in(image_ids))
            .all(&state.db)
            .await?
            .into_iter()
            .map(|i| (i.id, i))
            .collect()
    };
    let mut assigned_images: HashMap<Uuid, (Option<String>, String)> = orders
        .values()
        .filter_map(|o| {
            let image = match (o.image_id.and_then(|i| images.get(&i)), &o.image_reference) {
                (Some(image), _) => (Some(image.name.clone()), image.reference.clone()),
                (None, Some(reference)) => (None, reference.clone()),
                (None, None) => return None,
            };
            Some((o.id, image))
        })
        .collect();
    let wanted: Vec<(Uuid, String)> = orders
        .values()
        .filter_map(|o| {
            let (_, reference) = assigned_images.get(&o.id)?;
            Some((o.org_id, gantry_types::image_refs::registry_of(reference)))
        })
        .collect();
    let mut logins = gantry_access::tenancy::registry_credentials::logins(
        &state.db,
        &state.registry_sealer,
        &wanted,
    )
    .await?;
    // Instances' keys; jobs have no SSH server.
    let key_ids: Vec<Uuid> = orders
        .values()
        .filter(|o| o.job.is_none())
        .flat_map(|o| gantry_workload::orders::json_list::<Uuid>(o.ssh_key_ids.as_deref()))
        .collect();
    let keys: HashMap<Uuid, String> = gantry_access::ssh_keys::public_keys(&state.db, &key_ids)
        .await?
        .into_iter()
        .collect();
    let org_names =
        gantry_access::tenancy::orgs::names(&state.db, live.iter().map(|a| a.org_id)).await?;
    // A fraction's memory limit is its share of its GPU's memory.
    let memory: HashMap<u32, i64> = if live.iter().any(|a| a.gpu_milli < 1000) {
        gpu::Entity::find()
            .filter(gpu::Column::NodeId.eq(node.id))
            .all(&state.db)
            .await?
            .into_iter()
            .map(|g| (u32::try_from(g.index).unwrap_or(u32::MAX), g.memory_mib))
            .collect()
    } else {
        HashMap::new()
    };
    let order_ids: Vec<Uuid> = orders.keys().copied().collect();
    let mounts = gantry_volumes::attach::of_orders(&state.db, &order_ids).await?;
    let mut assignments = live
        .into_iter()
        .filter_map(|a| {
            let order = orders.get(&a.order_id)?;
            let launch = order.job.as_ref().and_then(|_| {
                let gang: Vec<(Uuid, &str)> = gangs
                    .iter()
                    .filter(|g| g.order_id == order.id)
                    .map(|g| {
                        let at = networks.placed.get(&g.id).map_or_else(
                            || nodes.get(&g.node_id).map_or("", |n| n.name.as_str()),
                            |p| p.address.split('/').next().unwrap_or_default(),
                        );
                        (g.id, at)
                    })
                    .collect();
                gantry_workload::jobs::launch(order, a.id, &gang, &state.secret_env_sealer)
            });
            let gpu_ids = a.gpu_list();
            let mut env = BTreeMap::from([
                ("GANTRY_ORDER_ID".to_owned(), a.order_id.to_string()),
                ("GANTRY_ORG_ID".to_owned(), a.org_id.to_string()),
                ("GANTRY_ATTEMPT".to_owned(), a.attempt.to_string()),
            ]);
            env.extend(gpu_env(&a, &gpu_ids, &memory));
            if let Some(placed) = networks.placed.get(&a.id) {
                let address = placed.address.split('/').next().unwrap_or_default();
                env.insert("GANTRY_PRIVATE_ADDRESS".to_owned(), address.to_owned());
            }
            if let Some(launch) = &launch {
                env.extend(launch.env.iter().cloned());
            }
            let size = types.get(&order.instance_type_id);
            let ssh_keys = if order.job.is_some() {
                Vec::new()
            } else {
                gantry_workload::orders::json_list::<Uuid>(order.ssh_key_ids.as_deref())
                    .iter()
                    .filter_map(|id| keys.get(id).cloned())
                    .collect()
            };
            Some(Assignment {
                order_id: a.order_id,
                org_id: a.org_id,
                organization: org_names.get(&a.org_id).cloned().unwrap_or_default(),
                action: if a.state == AllocationState::Active {
                    Action::Run
                } else {
                    Action::Stop
                },
                gpu_ids,
                gpu_milli: a.gpu_milli,
                mig_devices: a.mig_device.clone().into_iter().collect(),
                stop_at: a.stop_at,
                env,
                command: launch.as_ref().map(|l| l.command.clone()),
                working_dir: launch.and_then(|l| l.working_dir),
                limits: WorkloadLimits {
                    cpu_milli: size.map_or(1000, |t| i64::from(t.vcpus) * 1000),
                    memory_mib: size.map_or(1024, |t| i64::from(t.memory_gib) * 1024),
                    disk_gib: size.map_or(0, |t| i64::from(t.disk_gib)),
                },
                ssh_keys,
                ports: gantry_workload::orders::json_list(order.ports.as_deref()),
                node_count: order.node_count,
                volumes: mounts.get(&order.id).cloned().unwrap_or_default(),
                network: networks.placed.get(&a.id).map(|p| AssignedNetwork {
                    vni: p.vni,
                    address: p.address.clone(),
                    peers: networks
                        .neighbours
                        .peers
                        .get(&p.vni)
                        .cloned()
                        .unwrap_or_default(),
                    hosts: networks
                        .neighbours
                        .hosts
                        .get(&p.vni)
                        .into_iter()
                        .flatten()
                        .map(|h| NetworkHost {
                            address: h.address.to_string(),
                            names: h.names.clone(),
                        })
                        .collect(),
                }),
                image: assigned_images.remove(&order.id).map(|(name, reference)| {
                    let registry = gantry_types::image_refs::registry_of(&reference);
                    AssignedImage {
                        name,
                        login: logins.remove(&(order.org_id, registry)),
                        reference,
                    }
                }),
            })
        })
        .collect::<Vec<_>>();
    assignments.sort_by_key(|a| a.order_id);
    Ok(assignments)
}
