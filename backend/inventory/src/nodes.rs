//! Nodes: list, add a simulated one, cordon, drain, return to service,
//! remove.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::catalog::shares::MigDevice;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{
    allocation, gpu, gpu_claim, gpu_model, gpu_share, instance_type, node, order, region,
};
use gantry_types::classes::{AllocationState, DriverKind, NodeState};

const LABELS_MAX: usize = 32;

#[derive(Debug, Serialize, ToSchema)]
pub struct NodeGpu {
    /// The index work on the node sees (`CUDA_VISIBLE_DEVICES`).
    pub index: i32,
    pub model: String,
    pub hardware_uuid: String,
    pub memory_mib: i64,
    pub nvlink_domain: i32,
    pub healthy: bool,
    pub mig_enabled: bool,
    /// Its MIG instances, when it is in MIG mode.
    pub mig_devices: Vec<MigDevice>,
    /// Held by work the node's cluster manager runs that Gantry did not
    /// place (a Slurm region's other jobs).
    pub held_outside: bool,
    /// The order holding this GPU whole, if any.
    pub order_id: Option<Uuid>,
    /// The organization that order belongs to.
    pub org_id: Option<Uuid>,
    /// The orders sharing it, when it is shared: fractions or MIG
    /// instances, each with its tenant.
    pub shares: Vec<GpuShare>,
}

/// One order's part of a shared GPU.
#[derive(Debug, Serialize, ToSchema)]
pub struct GpuShare {
    pub order_id: Uuid,
    pub org_id: Option<Uuid>,
    /// Thousandths of the GPU for a fraction; MIG slices for an instance.
    pub units: i32,
    /// The MIG instance held.
    pub mig_device: Option<String>,
}

/// Simulated MIG mode: every GPU of the node split into instances of one
/// profile.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SimulatedMig {
    /// A MIG profile of the node's GPU model, such as `1g.10gb`.
    #[schema(min_length = 4, max_length = 16)]
    pub profile: String,
    /// Instances per GPU: their slices add up to at most seven.
    #[schema(minimum = 1, maximum = 7)]
    pub instances: u8,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Node {
    pub id: Uuid,
    pub name: String,
    pub region: String,
    pub rack: String,
    pub instance_type: Option<String>,
    pub driver: DriverKind,
    pub state: NodeState,
    /// Why it is out of service: the operator's words when it was cordoned
    /// or drained, or what was seen when it was marked unhealthy.
    pub state_reason: Option<String>,
    pub labels: Vec<String>,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    /// How its agent isolates workloads: `sandbox`, `oci` or `process`;
    /// none for simulated nodes.
    pub runtime: Option<String>,
    /// False where tenants' workloads are not walled off from each other
    /// and from the agent (`process`): fit for one trusted tenant only.
    pub isolated: bool,
    pub gpus: Vec<NodeGpu>,
    /// Confirmed reservations holding its GPUs now or later: cordoning or
    /// draining it breaks them.
    pub reservations: Vec<super::reserved::NodeReservation>,
    /// Its room for local volumes and the volumes that live on it.
    pub storage: gantry_volumes::nodes::NodeStorage,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSimulatedNode {
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub name: String,
    /// Region name or id.
    #[schema(min_length = 1, max_length = 64)]
    pub region: String,
    /// Instance type name or id: the node gets its GPUs, vCPU and memory.
    #[schema(min_length = 1, max_length = 64)]
    pub instance_type: String,
    #[serde(default)]
    #[schema(pattern = "^([a-z0-9][a-z0-9-]{0,62})?$")]
    pub rack: String,
    #[serde(default)]
    #[schema(max_items = 32)]
    pub labels: Vec<String>,
    /// Put its GPUs in MIG mode, split into instances of one profile.
    pub mig: Option<SimulatedMig>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NodeFilter {
    /// Only nodes in this region (name).
    #[param(min_length = 1, max_length = 64)]
    pub region: Option<String>,
    /// Only nodes in this state.
    pub state: Option<NodeState>,
}

/// What a new node is made of, from whoever brings it: the simulated
/// driver, the demo or an agent's registration.
pub struct NodeSpec {
    pub name: String,
    pub region_id: Uuid,
    pub rack: String,
    pub instance_type_id: Option<Uuid>,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub labels: Vec<String>,
    pub driver: DriverKind,
    pub gpus: Vec<GpuSpec>,
}

pub struct GpuSpec {
    pub model_id: Uuid,
    pub hardware_uuid: String,
    pub memory_mib: i64,
    pub nvlink_domain: i32,
    pub mig_enabled: bool,
    pub mig_devices: Vec<MigDevice>,
}

/// MIG instances as a GPU row keeps them: none when there are none.
pub fn stored_mig_devices(devices: &[MigDevice]) -> Option<String> {
    (!devices.is_empty())
        .then(|| serde_json::to_string(devices).ok())
        .flatten()
}

/// A simulated MIG layout must be one the model has.
fn check_simulated_mig(model: &gpu_model::Model, mig: &SimulatedMig) -> ApiResult<()> {
    let mut fields = Fields::default();
    let profiles = gantry_core::catalog::shares::profiles(model.memory_gib);
    match profiles.iter().find(|p| p.name == mig.profile) {
        _ if !model.mig_capable || profiles.is_empty() => fields.push(
            "mig.profile",
            format!("GPU model {} does not support MIG", model.name),
        ),
        None => fields.push(
            "mig.profile",
            format!("{} has no MIG profile {:?}", model.name, mig.profile),
        ),
        Some(p)
            if mig.instances == 0
                || u32::from(mig.instances) * u32::from(p.slices)
                    > u32::from(gantry_core::catalog::shares::MIG_SLICES) =>
        {
            fields.push(
                "mig.instances",
                format!(
                    "{} instances of {} need {} slices; a GPU has {}",
                    mig.instances,
                    p.name,
                    u32::from(mig.instances) * u32::from(p.slices),
                    gantry_core::catalog::shares::MIG_SLICES
                ),
            );
        }
        Some(_) => {}
    }
    fields.finish()
}

/// Puts a simulated GPU in MIG mode with `count` instances of `profile`.
pub fn simulate_mig(gpu: &mut GpuSpec, profile: &str, count: usize) {
    gpu.mig_enabled = true;
    gpu.mig_devices = (0..count)
        .map(|_| MigDevice {
            uuid: format!("MIG-sim-{}", Uuid::new_v4()),
            profile: profile.to_owned(),
        })
        .collect();
}

/// Inserts a node and its GPUs (indices in the order given).
pub async fn insert(
    db: &impl ConnectionTrait,
    spec: NodeSpec,
) -> Result<node::Model, sea_orm::DbErr> {
    let now = Utc::now();
    let row = node::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set(spec.name),
        region_id: Set(spec.region_id),
        rack: Set(spec.rack),
        instance_type_id: Set(spec.instance_type_id),
        cpu_milli: Set(spec.cpu_milli),
        memory_mib: Set(spec.memory_mib),
        labels: Set(serde_json::to_string(&spec.labels).unwrap_or_else(|_| "[]".into())),
        state: Set(NodeState::Ready),
        state_reason: Set(None),
        driver: Set(spec.driver),
        credential_hash: Set(None),
        runtime: Set(None),
        credential_next_hash: Set(None),
        credential_rotate: Set(false),
        fabric_address: Set(None),
        // An agent says its room with its heartbeats; a simulated node
        // starts with all of its own (see `keep_on_simulated_nodes`).
        volume_free_bytes: Set((spec.driver == DriverKind::Simulated)
            .then_some(gantry_volumes::nodes::SIMULATED_ROOM_GIB << 30)),
        last_heartbeat_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(db)
    .await?;
    let gpus: Vec<gpu::ActiveModel> = spec
        .gpus
        .into_iter()
        .enumerate()
        .map(|(index, g)| gpu::ActiveModel {
            id: Set(Uuid::now_v7()),
            node_id: Set(row.id),
            index: Set(i32::try_from(index).unwrap_or(i32::MAX)),
            gpu_model_id: Set(g.model_id),
            hardware_uuid: Set(g.hardware_uuid),
            memory_mib: Set(g.memory_mib),
            nvlink_domain: Set(g.nvlink_domain),
            healthy: Set(true),
            mig_enabled: Set(g.mig_enabled),
            mig_devices: Set(stored_mig_devices(&g.mig_devices)),
            held_outside: Set(false),
        })
        .collect();
    if !gpus.is_empty() {
        gpu::Entity::insert_many(gpus).exec(db).await?;
    }
    Ok(row)
}

/// A simulated node of an instance type: its GPUs share one NVLink domain
/// when the model has NVLink, one each otherwise.
pub fn simulated_spec(
    name: String,
    region_id: Uuid,
    rack: String,
    labels: Vec<String>,
    instance: &instance_type::Model,
    model: &gpu_model::Model,
) -> NodeSpec {
    let gpus = (0..instance.gpus_per_node)
        .map(|index| GpuSpec {
            model_id: model.id,
            hardware_uuid: format!("GPU-sim-{}", Uuid::new_v4()),
            memory_mib: i64::from(model.memory_gib) * 1024,
            nvlink_domain: if model.interconnect == "nvlink" {
                0
            } else {
                index
            },
            mig_enabled: false,
            mig_devices: Vec::new(),
        })
        .collect();
    NodeSpec {
        name,
        region_id,
        rack,
        instance_type_id: Some(instance.id),
        cpu_milli: i64::from(instance.vcpus) * 1000,
        memory_mib: i64::from(instance.memory_gib) * 1024,
        labels,
        driver: DriverKind::Simulated,
        gpus,
    }
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_nodes, create_simulated_node))
        .routes(routes!(get_node, delete_node))
        .routes(routes!(cordon_node))
        .routes(routes!(drain_node))
        .routes(routes!(uncordon_node))
}

/// The names of the nodes `ids`.
pub async fn names(
    db: &impl ConnectionTrait,
    ids: impl IntoIterator<Item = Uuid>,
) -> Result<HashMap<Uuid, String>, sea_orm::DbErr> {
    Ok(node::Entity::find()
        .filter(node::Column::Id.is_in(ids))
        .select_only()
        .columns([node::Column::Id, node::Column::Name])
        .into_tuple::<(Uuid, String)>()
        .all(db)
        .await?
        .into_iter()
        .collect())
}

/// The node a request body names by name or id.
pub async fn by_reference(db: &impl ConnectionTrait, reference: &str) -> ApiResult<node::Model> {
    let found = match Uuid::parse_str(reference) {
        Ok(id) => node::Entity::find_by_id(id).one(db).await?,
        Err(_) => {
            node::Entity::find()
                .filter(node::Column::Name.eq(reference))
                .one(db)
                .await?
        }
    };
    found.ok_or_else(|| ApiError::unprocessable("unknown_node", format!("no node {reference:?}")))
}

pub(super) async fn find(
    db: &impl ConnectionTrait,
    params: &RawPathParams,
) -> ApiResult<node::Model> {
    let id = path_uuid(params, "node_id", Resource::Node)?;
    node::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Node, id))
}

async fn views(db: &impl ConnectionTrait, rows: Vec<node::Model>) -> ApiResult<Vec<Node>> {
    let ids: Vec<Uuid> = rows.iter().map(|n| n.id).collect();
    let regions = gantry_catalog::region_names(db).await?;
    let types = gantry_catalog::instance_type_names(db).await?;
    let models = gantry_catalog::gpu_model_names(db).await?;
    let gpus = gpu::Entity::find()
        .filter(gpu::Column::NodeId.is_in(ids.iter().copied()))
        .order_by_asc(gpu::Column::Index)
        .all(db)
        .await?;
    let claims: HashMap<Uuid, Uuid> = gpu_claim::Entity::find()
        .filter(gpu_claim::Column::GpuId.is_in(gpus.iter().map(|g| g.id)))
        .all(db)
        .await?
        .into_iter()
        .map(|c| (c.gpu_id, c.order_id))
        .collect();
    let mut shares: HashMap<Uuid, Vec<gpu_share::Model>> = HashMap::new();
    for s in gpu_share::Entity::find()
        .filter(gpu_share::Column::GpuId.is_in(gpus.iter().map(|g| g.id)))
        .all(db)
        .await?
    {
        shares.entry(s.gpu_id).or_default().push(s);
    }
    let holders = claims
        .values()
        .chain(shares.values().flatten().map(|s| &s.order_id))
        .copied();
    let owners: HashMap<Uuid, Uuid> = order::Entity::find()
        .select_only()
        .column(order::Column::Id)
        .column(order::Column::OrgId)
        .filter(order::Column::Id.is_in(holders))
        .into_tuple::<(Uuid, Uuid)>()
        .all(db)
        .await?
        .into_iter()
        .collect();
    let mut reserved = super::reserved::held_on(db, &ids).await?;
    let mut storage = gantry_volumes::nodes::storage(db, &rows).await?;
    let mut by_node: HashMap<Uuid, Vec<NodeGpu>> = HashMap::new();
    for g in gpus {
        by_node.entry(g.node_id).or_default().push(NodeGpu {
            index: g.index,
            model: models.get(&g.gpu_model_id).cloned().unwrap_or_default(),
            hardware_uuid: g.hardware_uuid,
            memory_mib: g.memory_mib,
            nvlink_domain: g.nvlink_domain,
            healthy: g.healthy,
            mig_enabled: g.mig_enabled,
            mig_devices: gantry_core::catalog::shares::mig_devices(g.mig_devices.as_deref()),
            held_outside: g.held_outside,
            order_id: claims.get(&g.id).copied(),
            org_id: claims.get(&g.id).and_then(|o| owners.get(o)).copied(),
            shares: shares
                .remove(&g.id)
                .unwrap_or_default()
                .into_iter()
                .map(|s| GpuShare {
                    org_id: owners.get(&s.order_id).copied(),
                    order_id: s.order_id,
                    units: s.units,
                    mig_device: s.mig_device,
                })
                .collect(),
        });
    }
    Ok(rows
        .into_iter()
        .map(|n| Node {
            id: n.id,
            region: regions.get(&n.region_id).cloned().unwrap_or_default(),
            instance_type: n.instance_type_id.and_then(|t| types.get(&t).cloned()),
            labels: serde_json::from_str(&n.labels).unwrap_or_default(),
            gpus: by_node.remove(&n.id).unwrap_or_default(),
            reservations: reserved.remove(&n.id).unwrap_or_default(),
            storage: storage.remove(&n.id).unwrap_or_default(),
            name: n.name,
            rack: n.rack,
            driver: n.driver,
            state: n.state,
            state_reason: n.state_reason,
            cpu_milli: n.cpu_milli,
            memory_mib: n.memory_mib,
            last_heartbeat_at: n.last_heartbeat_at,
            isolated: n.driver == DriverKind::Simulated
                || matches!(n.runtime.as_deref(), Some("sandbox" | "oci" | "vm")),
            runtime: n.runtime,
            created_at: n.created_at,
        })
        .collect())
}

async fn view(db: &impl ConnectionTrait, row: node::Model) -> ApiResult<Node> {
    views(db, vec![row])
        .await?
        .pop()
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("node view lost its row")))
}

/// Every node with its GPUs and what holds them.
#[utoipa::path(
    get,
    path = "/admin/nodes",
    tag = "admin",
    params(PageQuery, NodeFilter),
    responses((status = 200, description = "A page of nodes", body = Page<Node>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_nodes(
    State(state): State<AppState>,
    _operator: Operator,
    ApiQuery(query): ApiQuery<PageQuery>,
    ApiQuery(filter): ApiQuery<NodeFilter>,
) -> ApiResult<Json<Page<Node>>> {
    let request = query.validate()?;
    let mut select = node::Entity::find();
    if filter
        .region
        .as_deref()
        .is_some_and(|r| r.is_empty() || r.len() > 64)
    {
        return Err(ApiError::bad_request(
            "invalid_query",
            "region must be a region name of 1 to 64 characters",
        ));
    }
    if let Some(name) = &filter.region {
        let region = region::Entity::find()
            .filter(region::Column::Name.eq(name))
            .one(&state.db)
            .await?;
        select = select.filter(node::Column::RegionId.eq(region.map_or(Uuid::nil(), |r| r.id)));
    }
    if let Some(node_state) = filter.state {
        select = select.filter(node::Column::State.eq(node_state));
    }
    let rows = request
        .ascending(select, node::Column::Id)
        .all(&state.db)
        .await?;
    let page = Page::from_rows(rows, request, |n| n.id, |n| n);
    Ok(Json(Page {
        items: views(&state.db, page.items).await?,
        next_cursor: page.next_cursor,
    }))
}

/// One node.
#[utoipa::path(
    get,
    path = "/admin/nodes/{node_id}",
    tag = "admin",
    params(("node_id" = Uuid, Path, description = "Node id")),
    responses((status = 200, description = "The node", body = Node), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_node(
    State(state): State<AppState>,
    _operator: Operator,
    params: RawPathParams,
) -> ApiResult<Json<Node>> {
    let row = find(&state.db, &params).await?;
    Ok(Json(view(&state.db, row).await?))
}

/// Adds a simulated node of an instance type, for demos, tests and
/// capacity planning; real nodes join through their agent.
#[utoipa::path(
    post,
    path = "/admin/nodes",
    tag = "admin",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$")),
    request_body = CreateSimulatedNode,
    responses((status = 201, description = "The new node", body = Node), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_simulated_node(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    ApiJson(request): ApiJson<CreateSimulatedNode>,
) -> ApiResult<(StatusCode, Json<Node>)> {
    let mut fields = Fields::default();
    fields.slug("name", &request.name);
    if !request.rack.is_empty() {
        fields.slug("rack", &request.rack);
    }
    if request.labels.len() > LABELS_MAX {
        fields.push("labels", format!("at most {LABELS_MAX} labels"));
    }
    for (index, label) in request.labels.iter().enumerate() {
        fields.label(&format!("labels[{index}]"), label);
    }
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let region = gantry_catalog::region_in_body(&txn, &request.region).await?;
    let instance = gantry_catalog::instance_type_in_body(&txn, &request.instance_type).await?;
    let model = gpu_model::Entity::find_by_id(instance.gpu_model_id)
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("instance type without GPU model")))?;
    if node::Entity::find()
        .filter(node::Column::Name.eq(&request.name))
        .one(&txn)
        .await?
        .is_some()
    {
        return Err(ApiError::conflict(
            "name_taken",
            format!("a node named {:?} already exists", request.name),
        ));
    }
    if let Some(mig) = &request.mig {
        check_simulated_mig(&model, mig)?;
    }
    let mut spec = simulated_spec(
        request.name,
        region.id,
        request.rack,
        request.labels,
        &instance,
        &model,
    );
    if let Some(mig) = &request.mig {
        for gpu in &mut spec.gpus {
            simulate_mig(gpu, &mig.profile, usize::from(mig.instances));
        }
    }
    let row = insert(&txn, spec).await?;
    audit::platform(&txn, &actor, "node.create", "node", row.id, serde_json::json!({ "name": row.name, "driver": row.driver, "instance_type": instance.name })).await?;
    txn.commit().await?;
    state.scheduler.wake();
    Ok((StatusCode::CREATED, Json(view(&state.db, row).await?)))
}

/// Whether to cordon or drain a node even though it breaks reservations.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Breaking {
    /// Go ahead although confirmed reservations hold GPUs on the node; they
    /// are refused otherwise, with the reservations named.
    pub force: Option<bool>,
}

/// How a node is taken out of service.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OutOfService {
    /// Go ahead although confirmed reservations hold GPUs on the node; they
    /// are refused otherwise, with the reservations named.
    pub force: Option<bool>,
    /// Why, for other operators and the audit log (up to 500 characters).
    #[param(max_length = 500)]
    pub reason: Option<String>,
}

/// The longest reason a node keeps.
const STATE_REASON_MAX: usize = 500;

async fn set_state(
    state: &AppState,
    actor: &Actor,
    params: &RawPathParams,
    to: NodeState,
    change: OutOfService,
) -> ApiResult<Json<Node>> {
    let force = change.force.unwrap_or(false);
    let mut fields = Fields::default();
    let reason = change
        .reason
        .map(|r| fields.text("reason", r.trim(), STATE_REASON_MAX))
        .filter(|r| !r.is_empty());
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let current = find(&txn, params).await?;
    let broken = super::reserved::held_on(&txn, &[current.id])
        .await?
        .remove(&current.id)
        .unwrap_or_default();
    if to != NodeState::Ready && !broken.is_empty() && !force {
        let named: Vec<String> = broken
            .iter()
            .map(|r| {
                format!(
                    "{} ({} to {})",
                    r.name,
                    r.starts_at.format("%Y-%m-%d %H:%M"),
                    r.ends_at.format("%Y-%m-%d %H:%M UTC")
                )
            })
            .collect();
        return Err(ApiError::conflict(
            "reservation_on_node",
            format!(
                "node {} holds GPUs of reservations {}; taking it out of service breaks them \
                 (pass force=true to go ahead)",
                current.name,
                named.join(", ")
            ),
        ));
    }
    if current.state == NodeState::Unhealthy && to != NodeState::Ready {
        return Err(ApiError::conflict(
            "node_unhealthy",
            format!(
                "node {} is unhealthy; it takes no work already",
                current.name
            ),
        ));
    }
    // A cordoned node drained without a new reason keeps the one it had;
    // back in service, it has none.
    let reason = match to {
        NodeState::Ready => None,
        _ => reason.or_else(|| current.state_reason.clone()),
    };
    let mut row: node::ActiveModel = current.clone().into();
    row.state = Set(to);
    row.state_reason = Set(reason.clone());
    row.updated_at = Set(Utc::now());
    let updated = row.update(&txn).await?;
    let action = match to {
        NodeState::Cordoned => "node.cordon",
        NodeState::Draining => "node.drain",
        _ => "node.uncordon",
    };
    let broken: Vec<Uuid> = broken.iter().map(|r| r.id).collect();
    let details = serde_json::json!({
        "name": updated.name, "from": current.state, "to": to, "reason": reason,
        "reservations_broken": broken,
    });
    audit::platform(&txn, actor, action, "node", updated.id, details).await?;
    txn.commit().await?;
    state.scheduler.wake();
    Ok(Json(view(&state.db, updated).await?))
}

/// Stops placing new work on a node; its work keeps running.
#[utoipa::path(
    post,
    path = "/admin/nodes/{node_id}/cordon",
    tag = "admin",
    params(("node_id" = Uuid, Path, description = "Node id"), OutOfService),
    responses((status = 200, description = "The node", body = Node), ProblemResponses),
    security(("bearer" = []))
)]
async fn cordon_node(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiQuery(change): ApiQuery<OutOfService>,
) -> ApiResult<Json<Node>> {
    set_state(&state, &actor, &params, NodeState::Cordoned, change).await
}

/// Stops placing work on a node and moves its work elsewhere: each order
/// on it is stopped and queued again. The answer's `storage` lists the
/// local volumes that live on it: they stay, and orders attaching them
/// wait for the node.
#[utoipa::path(
    post,
    path = "/admin/nodes/{node_id}/drain",
    tag = "admin",
    params(("node_id" = Uuid, Path, description = "Node id"), OutOfService),
    responses((status = 200, description = "The node", body = Node), ProblemResponses),
    security(("bearer" = []))
)]
async fn drain_node(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiQuery(change): ApiQuery<OutOfService>,
) -> ApiResult<Json<Node>> {
    set_state(&state, &actor, &params, NodeState::Draining, change).await
}

/// Returns a cordoned, drained or repaired node to service.
#[utoipa::path(
    post,
    path = "/admin/nodes/{node_id}/uncordon",
    tag = "admin",
    params(("node_id" = Uuid, Path, description = "Node id")),
    responses((status = 200, description = "The node", body = Node), ProblemResponses),
    security(("bearer" = []))
)]
async fn uncordon_node(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<Json<Node>> {
    set_state(
        &state,
        &actor,
        &params,
        NodeState::Ready,
        OutOfService::default(),
    )
    .await
}

/// Removes a node that holds no work (drain it first).
#[utoipa::path(
    delete,
    path = "/admin/nodes/{node_id}",
    tag = "admin",
    params(("node_id" = Uuid, Path, description = "Node id")),
    responses((status = 204, description = "Removed"), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_node(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let txn = gantry_core::db::write(&state.db).await?;
    let current = find(&txn, &params).await?;
    let live = allocation::Entity::find()
        .filter(allocation::Column::NodeId.eq(current.id))
        .filter(allocation::Column::State.ne(AllocationState::Released))
        .count(&txn)
        .await?;
    if live > 0 {
        return Err(ApiError::conflict(
            "node_busy",
            format!(
                "node {} still holds {live} allocations; drain it and wait for them to stop",
                current.name
            ),
        ));
    }
    node::Entity::delete_by_id(current.id).exec(&txn).await?;
    let details = serde_json::json!({ "name": current.name });
    audit::platform(&txn, &actor, "node.delete", "node", current.id, details).await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
