//! Orders: a tenant asks for GPU capacity, admission decides at once
//! whether it can ever run, the scheduling loop places it, a driver brings
//! it up, and the tenant cancels it when done.

pub mod admission;
use gantry_core::handles::intake;
pub mod lifecycle;
pub mod names;
pub mod reconcile;
pub mod service;

use gantry_types::reasons;

use std::collections::HashMap;

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::{HeaderMap, StatusCode};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_access::tenancy::access::{OrgAccess, OrgScope, need};
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::Operator;
use gantry_core::catalog::Catalog;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_entities::{allocation, node, order, order_dependency, volume};
use gantry_types::classes::{
    AllocationState, EstimateConfidence, OrderStatus, PricingClass, PriorityClass, StopCause,
    WorkloadClass,
};

const NODE_COUNT_MAX: i32 = 64;
const DURATION_MIN: i64 = 60;
const DURATION_MAX: i64 = 366 * 24 * 3600;

/// The GPUs an order holds on one node.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodePlacement {
    pub node_id: Uuid,
    pub node_name: String,
    /// The node's region: where an order that may run anywhere runs.
    pub region: String,
    /// GPU indices on the node, as `CUDA_VISIBLE_DEVICES` names them.
    pub gpu_ids: Vec<u32>,
    /// The MIG instance it holds on that GPU (`MIG-…`), if it holds one.
    pub mig_device: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Order {
    pub id: Uuid,
    /// What people call it: given when ordered, or generated from its
    /// instance type and id, such as `h100x8-swift-otter`.
    pub name: String,
    pub org_id: Uuid,
    pub project_id: Option<Uuid>,
    /// `instance`: capacity kept until cancelled; `job`: a command run to
    /// completion.
    pub kind: String,
    pub instance_type: String,
    pub gpu_model: String,
    pub gpus_per_node: i32,
    /// The fraction of its GPU it holds, in thousandths, for a shared-GPU
    /// instance type.
    pub gpu_milli: Option<i32>,
    /// The MIG profile it holds an instance of.
    pub mig_profile: Option<String>,
    pub node_count: i32,
    pub region: Option<String>,
    pub priority_class: PriorityClass,
    pub pricing_class: PricingClass,
    pub workload_class: WorkloadClass,
    pub duration_seconds: Option<i64>,
    /// It may be moved (told to checkpoint and restarted elsewhere).
    pub checkpointable: bool,
    pub deadline: Option<DateTime<Utc>>,
    pub status: OrderStatus,
    /// Why it waits, while it waits, in English.
    pub pending_reason: Option<String>,
    /// The same reasons as data, while it is queued: figures, times and the
    /// orders they name, for a client to show in its reader's language.
    pub pending_details: Vec<reasons::WaitReason>,
    /// When the engine expects it to start, when it can tell.
    pub estimated_start: Option<DateTime<Utc>>,
    /// How far that estimate can be trusted: `reserved` when GPUs are held
    /// for the order from then (only a preemption, a lost node or work
    /// ranked above it arriving later can delay it), `planned` when it is
    /// planned behind other waiting work and may move.
    pub estimate_confidence: Option<EstimateConfidence>,
    /// Why it failed, when it did.
    pub failure_reason: Option<String>,
    /// The GPUs it holds now.
    pub placement: Vec<NodePlacement>,
    /// How to reach it, once running.
    pub access: Option<OrderAccess>,
    /// SSH keys the instance admits.
    pub ssh_key_ids: Vec<Uuid>,
    /// Ports it exposes on its nodes.
    pub ports: Vec<u16>,
    /// The image it runs: a catalog image's name or a reference.
    pub image: Option<String>,
    /// How many times it has been started.
    pub attempts: i32,
    /// What a job runs and how it is retried; none for an instance.
    pub job: Option<crate::jobs::JobView>,
    /// The reservation it runs in.
    pub reservation_id: Option<Uuid>,
    /// The volumes it attaches, and where its workloads see them.
    pub volumes: Vec<gantry_volumes::attach::VolumeAttachment>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When its latest attempt came up.
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    /// Seconds its attempts that are over ran: time waiting in the queue
    /// between them is not counted.
    pub run_seconds: i64,
    /// When the attempt running now came up; absent while it does not run.
    /// Its runtime is `run_seconds` plus the time since.
    pub running_since: Option<DateTime<Utc>>,
}

/// How a tenant reaches a running order: one entry per node.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct OrderAccess {
    /// `agent`, `slurm` or `simulated`.
    pub driver: String,
    /// How the nodes isolate it: `sandbox`, `oci`, `process` (not
    /// isolated); none on simulated and Slurm nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    pub hosts: Vec<HostAccess>,
    /// The Slurm job holding it, where a Slurm cluster runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmJobAccess>,
}

/// How a tenant reaches work a Slurm cluster runs.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SlurmJobAccess {
    pub job_id: i64,
    /// The command that opens a shell in the allocation, from the
    /// cluster's login node.
    pub command: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HostAccess {
    pub node: String,
    /// The address tenants reach the node at.
    pub host: String,
    /// The workload's address on its organization's private network,
    /// where the node is on the fabric; its other workloads reach it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<SshAccess>,
    #[serde(default)]
    pub ports: Vec<PortAccess>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SshAccess {
    /// The exact command, such as `ssh -p 42017 root@gpu-a17.example`.
    pub command: String,
    pub user: String,
    pub port: u16,
    /// The instance's host key, `SHA256:…`, to check on first connection;
    /// none on simulated nodes.
    pub host_key_fingerprint: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
pub struct PortAccess {
    /// The port the order asked to expose.
    pub port: u16,
    /// Where it is reached on the node.
    pub node_port: u16,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOrder {
    /// What to call it: lowercase letters, digits and hyphens; generated
    /// when absent, such as `h100x8-swift-otter`. Members of a job array
    /// are called `<name>-<index>`. Names need not be unique: ids are.
    #[schema(min_length = 1, max_length = 63, pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub name: Option<String>,
    /// Instance type name or id.
    #[schema(min_length = 1, max_length = 64)]
    pub instance_type: String,
    /// Nodes started together (a gang); 1 when absent.
    #[schema(minimum = 1, maximum = 64)]
    pub node_count: Option<i32>,
    /// Region name or id; any region when absent.
    #[schema(min_length = 1, max_length = 64)]
    pub region: Option<String>,
    pub project_id: Option<Uuid>,
    /// `standard` when absent; spot orders are always `preemptible`.
    pub priority_class: Option<PriorityClass>,
    /// `on_demand` when absent.
    pub pricing_class: Option<PricingClass>,
    /// `dev` when absent.
    pub workload_class: Option<WorkloadClass>,
    /// How long it is expected to run, 60 s to a year (a job: from 1 s);
    /// an instance ends then, and so does a job on simulated nodes (one
    /// without it runs 20 s there), while a job's command on a real node
    /// decides for itself.
    #[schema(minimum = 1, maximum = 31622400)]
    pub duration_seconds: Option<i64>,
    /// Its work saves its progress when told to stop (SIGTERM, then the
    /// grace period) and resumes from there: the scheduler may then move it
    /// to let work that needs whole nodes start. `false` when absent.
    pub checkpointable: Option<bool>,
    /// When it must have finished; in the future.
    pub deadline: Option<DateTime<Utc>>,
    /// Makes the order a job: a command run to completion.
    pub job: Option<crate::jobs::JobSpec>,
    /// SSH keys an instance admits (`/me/ssh-keys`); all of the ordering
    /// user's keys when absent, none for an API key unless it names them
    /// (keys of the organization's members).
    #[schema(max_items = 32)]
    pub ssh_key_ids: Option<Vec<Uuid>>,
    /// Ports to expose on each node, from the operator's list; each gets a
    /// node port, told to the workload as `GANTRY_PORT_<port>` and shown in
    /// `access`.
    #[schema(max_items = 8)]
    pub ports: Option<Vec<u16>>,
    /// A catalog image's name (`/catalog/images`), or a whole OCI
    /// reference (`registry.example/team/train:v3`, `…@sha256:…`) from a
    /// registry the image policy allows (`/catalog/image-policy`); the
    /// default image when absent. The instance runs as root in it.
    #[schema(min_length = 1, max_length = 512)]
    pub image: Option<String>,
    /// Runs the order in this reservation of the organization: only on its
    /// GPUs and inside its window, ahead of any queue, paid by the
    /// reservation. Its pricing class is then `reserved`, which needs one.
    pub reservation_id: Option<Uuid>,
    /// Volumes of the organization its workloads see, each at its own
    /// path. A `local` volume runs the order on the volume's node; any
    /// volume puts it in the volume's region.
    #[schema(max_items = 8)]
    pub volumes: Option<Vec<gantry_volumes::attach::VolumeAttachment>>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OrderFilter {
    pub status: Option<OrderStatus>,
    pub project_id: Option<Uuid>,
    /// The members of one job array.
    pub array_id: Option<Uuid>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AdminOrderFilter {
    pub status: Option<OrderStatus>,
    /// Only this organization's orders.
    pub org_id: Option<Uuid>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_all_orders))
        .routes(routes!(list_orders, create_order))
        .routes(routes!(get_order))
        .routes(routes!(cancel_order))
}

async fn page_of(
    state: &AppState,
    select: sea_orm::Select<order::Entity>,
    request: gantry_core::http::pagination::PageRequest,
) -> ApiResult<Page<Order>> {
    let rows = request
        .descending(select, order::Column::Id)
        .all(&state.db)
        .await?;
    let page = Page::from_rows(rows, request, |o| o.id, |o| o);
    let catalog = state.catalog.current(&state.db).await?;
    Ok(Page {
        items: views(&state.db, &catalog, page.items).await?,
        next_cursor: page.next_cursor,
    })
}

/// Orders as tenants see them.
async fn views(
    db: &impl ConnectionTrait,
    catalog: &Catalog,
    rows: Vec<order::Model>,
) -> ApiResult<Vec<Order>> {
    // Most orders shown are queued instances or jobs: skip the reads that
    // would find nothing. An allocation is only ever inserted with the
    // attempt it starts, so an order without one holds none.
    let started: Vec<Uuid> = rows
        .iter()
        .filter(|o| o.attempts > 0)
        .map(|o| o.id)
        .collect();
    let held = if started.is_empty() {
        Vec::new()
    } else {
        allocation::Entity::find()
            .filter(allocation::Column::OrderId.is_in(started))
            .order_by_asc(allocation::Column::Id)
            .all(db)
            .await?
    };
    let mut runs = run_times(&held);
    let live: Vec<allocation::Model> = held
        .into_iter()
        .filter(|a| a.state != AllocationState::Released)
        .collect();
    let nodes: HashMap<Uuid, (String, Uuid)> = if live.is_empty() {
        HashMap::new()
    } else {
        node::Entity::find()
            .filter(node::Column::Id.is_in(live.iter().map(|a| a.node_id)))
            .all(db)
            .await?
            .into_iter()
            .map(|n| (n.id, (n.name, n.region_id)))
            .collect()
    };
    let jobs: Vec<Uuid> = rows
        .iter()
        .filter(|o| o.job.is_some())
        .map(|o| o.id)
        .collect();
    let edges = if jobs.is_empty() {
        Vec::new()
    } else {
        order_dependency::Entity::find()
            .filter(order_dependency::Column::OrderId.is_in(jobs))
            .all(db)
            .await?
    };
    let mut dependencies: HashMap<Uuid, Vec<gantry_types::job_spec::Dependency>> = HashMap::new();
    for d in edges {
        dependencies
            .entry(d.order_id)
            .or_default()
            .push(gantry_types::job_spec::Dependency {
                order_id: d.depends_on,
                condition: gantry_types::job_spec::Condition::parse(&d.condition),
            });
    }
    let ids: Vec<Uuid> = rows.iter().map(|o| o.id).collect();
    let mut volumes = gantry_volumes::attach::of_orders(db, &ids).await?;
    let mut details: HashMap<Uuid, Vec<reasons::WaitReason>> = rows
        .iter()
        .filter(|o| o.status == OrderStatus::Queued)
        .map(|o| (o.id, reasons::parse(o.pending_details.as_deref())))
        .filter(|(_, r)| !r.is_empty())
        .collect();
    pinned_reasons(db, &rows, &volumes, &mut details).await?;
    let mentioned = reasons::mentioned(details.values().flatten());
    if !mentioned.is_empty() {
        let named: Vec<(Uuid, Uuid, Option<String>)> = order::Entity::find()
            .filter(order::Column::Id.is_in(mentioned))
            .select_only()
            .columns([order::Column::Id, order::Column::OrgId, order::Column::Name])
            .into_tuple()
            .all(db)
            .await?;
        let mut names_by_org: HashMap<Uuid, HashMap<Uuid, String>> = HashMap::new();
        for (id, org, name) in named {
            if let Some(name) = name {
                names_by_org.entry(org).or_default().insert(id, name);
            }
        }
        let no_names = HashMap::new();
        for o in &rows {
            if let Some(reasons_of) = details.get_mut(&o.id) {
                let names = names_by_org.get(&o.org_id).unwrap_or(&no_names);
                reasons::name_orders(reasons_of.iter_mut(), names);
            }
        }
    }
    let mut placements: HashMap<Uuid, Vec<NodePlacement>> = HashMap::new();
    for a in live {
        placements
            .entry(a.order_id)
            .or_default()
            .push(NodePlacement {
                node_id: a.node_id,
                node_name: nodes
                    .get(&a.node_id)
                    .map(|(name, _)| name.clone())
                    .unwrap_or_default(),
                region: nodes
                    .get(&a.node_id)
                    .and_then(|(_, region)| catalog.region_name(*region))
                    .unwrap_or_default()
                    .to_owned(),
                gpu_ids: a.gpu_list(),
                mig_device: a.mig_device.clone(),
            });
    }
    Ok(rows
        .into_iter()
        .map(|o| {
            let instance_type = catalog
                .instance_type_name(o.instance_type_id)
                .unwrap_or_default()
                .to_owned();
            Order {
                name: o
                    .name
                    .clone()
                    .unwrap_or_else(|| names::generated(&instance_type, o.id)),
                instance_type,
                gpu_model: catalog
                    .gpu_model_name(o.gpu_model_id)
                    .unwrap_or_default()
                    .to_owned(),
                region: o
                    .region_id
                    .and_then(|r| catalog.region_name(r))
                    .map(str::to_owned),
                placement: placements.remove(&o.id).unwrap_or_default(),
                job: crate::jobs::view(&o, dependencies.remove(&o.id).unwrap_or_default()),
                access: o
                    .access
                    .as_deref()
                    .and_then(|a| serde_json::from_str(a).ok()),
                ssh_key_ids: json_list(o.ssh_key_ids.as_deref()),
                ports: json_list(o.ports.as_deref()),
                image: o
                    .image_id
                    .and_then(|i| catalog.image_name(i))
                    .map(str::to_owned)
                    .or_else(|| o.image_reference.clone()),
                reservation_id: o.reservation_id,
                volumes: volumes.remove(&o.id).unwrap_or_default(),
                id: o.id,
                org_id: o.org_id,
                project_id: o.project_id,
                kind: o.kind,
                gpus_per_node: o.gpus_per_node,
                gpu_milli: o.gpu_milli,
                mig_profile: o.mig_profile,
                node_count: o.node_count,
                priority_class: o.priority_class,
                pricing_class: o.pricing_class,
                workload_class: o.workload_class,
                duration_seconds: o.duration_seconds,
                checkpointable: o.checkpointable,
                deadline: o.deadline,
                status: o.status,
                pending_details: details.remove(&o.id).unwrap_or_default(),
                pending_reason: o.pending_reason,
                estimated_start: o.estimated_start,
                estimate_confidence: o.estimate_confidence,
                failure_reason: o.failure_reason,
                attempts: o.attempts,
                created_at: o.created_at,
                updated_at: o.updated_at,
                started_at: o.started_at,
                ended_at: o.ended_at,
                run_seconds: runs.get(&o.id).map_or(0, |r| r.finished_seconds),
                running_since: runs.remove(&o.id).and_then(|r| r.running_since),
            }
        })
        .collect())
}

/// Puts first, among the reasons of each waiting order pinned to a node
/// by its local volume, that it waits for that node: the engine's reasons
/// speak of that node alone, and the tenant must read why.
async fn pinned_reasons(
    db: &impl ConnectionTrait,
    rows: &[order::Model],
    volumes: &HashMap<Uuid, Vec<gantry_volumes::attach::VolumeAttachment>>,
    details: &mut HashMap<Uuid, Vec<reasons::WaitReason>>,
) -> ApiResult<()> {
    let pinned: Vec<(&order::Model, Uuid)> = rows
        .iter()
        .filter(|o| details.contains_key(&o.id))
        .filter_map(|o| o.node_id.map(|node| (o, node)))
        .collect();
    if pinned.is_empty() {
        return Ok(());
    }
    let nodes: HashMap<Uuid, node::Model> = node::Entity::find()
        .filter(node::Column::Id.is_in(pinned.iter().map(|(_, n)| *n)))
        .all(db)
        .await?
        .into_iter()
        .map(|n| (n.id, n))
        .collect();
    let attached = pinned
        .iter()
        .flat_map(|(o, _)| volumes.get(&o.id).into_iter().flatten())
        .map(|a| a.volume_id);
    let local: Vec<volume::Model> = volume::Entity::find()
        .filter(volume::Column::Id.is_in(attached))
        .filter(volume::Column::NodeId.is_not_null())
        .all(db)
        .await?;
    for (o, node_id) in pinned {
        let (Some(node), Some(reasons_of)) = (nodes.get(&node_id), details.get_mut(&o.id)) else {
            continue;
        };
        let Some(volume) = volumes.get(&o.id).into_iter().flatten().find_map(|a| {
            local
                .iter()
                .find(|v| v.id == a.volume_id && v.node_id == Some(node_id))
        }) else {
            continue;
        };
        reasons_of.insert(
            0,
            reasons::WaitReason::PinnedByVolume {
                volume: volume.name.clone(),
                node: node.name.clone(),
                node_state: node.state,
            },
        );
    }
    Ok(())
}

/// The earlier of two times that may be unknown; unknown only when both are.
pub fn earliest(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// How long an order has run, attempt by attempt.
#[derive(Default)]
struct RunTime {
    finished_seconds: i64,
    running_since: Option<DateTime<Utc>>,
}

/// Each order's running time from its allocations: an attempt runs from
/// its first node coming up until its last node is freed.
fn run_times(allocations: &[allocation::Model]) -> HashMap<Uuid, RunTime> {
    type Span = (Option<DateTime<Utc>>, Option<DateTime<Utc>>, bool);
    let mut spans: HashMap<(Uuid, i32), Span> = HashMap::new();
    for a in allocations {
        let (start, end, open) = spans.entry((a.order_id, a.attempt)).or_default();
        *start = earliest(*start, a.running_since);
        *end = (*end).max(a.released_at);
        *open |= a.released_at.is_none();
    }
    let mut runs: HashMap<Uuid, RunTime> = HashMap::new();
    for ((order_id, _), (start, end, open)) in spans {
        let Some(start) = start else { continue };
        let run = runs.entry(order_id).or_default();
        match end {
            Some(end) if !open => run.finished_seconds += (end - start).num_seconds().max(0),
            _ => run.running_since = Some(start),
        }
    }
    runs
}

/// A stored JSON array; empty when absent.
pub fn json_list<T: serde::de::DeserializeOwned>(stored: Option<&str>) -> Vec<T> {
    stored
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

async fn view(db: &impl ConnectionTrait, catalog: &Catalog, row: order::Model) -> ApiResult<Order> {
    views(db, catalog, vec![row])
        .await?
        .pop()
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("order view lost its row")))
}

/// An order as its tenant sees it, with the catalog as of now.
async fn shown(state: &AppState, row: order::Model) -> ApiResult<Order> {
    let catalog = state.catalog.current(&state.db).await?;
    view(&state.db, &catalog, row).await
}

/// The order named by the path's `order_id`, in the caller's organization.
pub async fn find(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    params: &RawPathParams,
) -> ApiResult<order::Model> {
    let id = path_uuid(params, "order_id", Resource::Order)?;
    scope
        .select::<order::Entity>()
        .filter(order::Column::Id.eq(id))
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Order, id))
}

/// The organization's orders, newest first.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/orders",
    tag = "orders",
    params(("org_id" = Uuid, Path, description = "Organization id"), PageQuery, OrderFilter),
    responses((status = 200, description = "A page of orders", body = Page<Order>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_orders(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    ApiQuery(query): ApiQuery<PageQuery>,
    ApiQuery(filter): ApiQuery<OrderFilter>,
) -> ApiResult<Json<Page<Order>>> {
    let request = query.validate()?;
    let mut select = access.scope.select::<order::Entity>();
    if let Some(status) = filter.status {
        select = select.filter(order::Column::Status.eq(status));
    }
    if let Some(project) = filter.project_id {
        select = select.filter(order::Column::ProjectId.eq(project));
    }
    if let Some(array) = filter.array_id {
        select = select.filter(order::Column::ArrayId.eq(array));
    }
    Ok(Json(page_of(&state, select, request).await?))
}

/// Every organization's orders, newest first: the operator's view of the
/// queues.
#[utoipa::path(
    get,
    path = "/admin/orders",
    tag = "admin",
    params(PageQuery, AdminOrderFilter),
    responses((status = 200, description = "A page of orders", body = Page<Order>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_all_orders(
    State(state): State<AppState>,
    _operator: Operator,
    ApiQuery(query): ApiQuery<PageQuery>,
    ApiQuery(filter): ApiQuery<AdminOrderFilter>,
) -> ApiResult<Json<Page<Order>>> {
    let request = query.validate()?;
    let mut select = order::Entity::find();
    if let Some(status) = filter.status {
        select = select.filter(order::Column::Status.eq(status));
    }
    if let Some(org) = filter.org_id {
        select = select.filter(order::Column::OrgId.eq(org));
    }
    Ok(Json(page_of(&state, select, request).await?))
}

/// One order with its status, placement, why it waits and its access.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/orders/{order_id}",
    tag = "orders",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("order_id" = Uuid, Path, description = "Order id"),
    ),
    responses((status = 200, description = "The order", body = Order), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_order(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    params: RawPathParams,
) -> ApiResult<Json<Order>> {
    let row = find(&state.db, &access.scope, &params).await?;
    Ok(Json(shown(&state, row).await?))
}

/// Orders GPU capacity. It is refused at once when it could never run, and
/// queued otherwise.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/orders",
    tag = "orders",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$"),
    ),
    request_body = CreateOrder,
    responses((status = 201, description = "The queued order", body = Order), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_order(
    State(state): State<AppState>,
    access: OrgAccess<need::Member>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<CreateOrder>,
) -> ApiResult<(StatusCode, Json<Order>)> {
    // Keys are private to the caller, as the idempotency layer keeps them.
    let idempotency_key = headers
        .get(gantry_core::http::idempotency::HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|key| format!("{}:{key}", access.scope.principal.idempotency_scope()));
    let caller = service::Caller {
        scope: &access.scope,
        actor: &access.actor,
        idempotency_key,
    };
    let catalog = state.catalog.current(&state.db).await?;
    let created = service::create(
        service::Services {
            db: &state.db,
            catalog: &catalog,
            intake: &state.intake,
            config: &state.config,
            sealer: &state.secret_env_sealer,
        },
        &caller,
        request,
        state.clock.now(),
    )
    .await?;
    if created.new {
        state.scheduler.wake();
    }
    Ok((
        StatusCode::CREATED,
        Json(view(&state.db, &catalog, created.order).await?),
    ))
}

/// What a cancel found.
pub enum Cancelled {
    /// It was live and is cancelled now (its work is asked to stop); `from`
    /// is the status it had.
    Now {
        order: order::Model,
        from: OrderStatus,
    },
    /// It had ended already, as it stands.
    Ended(order::Model),
}

/// Cancels an order that has not ended, inside the caller's transaction:
/// its work is asked to stop, and it ends once that is done. The order is
/// read again under a lock, so what the scheduling loop did to it since the
/// caller's read (a start, above all) is what the cancel sees and stops.
pub async fn cancel(
    txn: &impl ConnectionTrait,
    order_id: Uuid,
    now: DateTime<Utc>,
) -> Result<Cancelled, sea_orm::DbErr> {
    let current = lifecycle::lock(txn, order_id)
        .await?
        .ok_or_else(|| sea_orm::DbErr::RecordNotFound(format!("order {order_id}")))?;
    if current.status.is_final() {
        return Ok(Cancelled::Ended(current));
    }
    let from = current.status;
    let holding = lifecycle::stop(txn, current.id, now, StopCause::Cancelled).await?;
    let still_stopping = holding > 0 || from == OrderStatus::Preempted;
    let mut row: order::ActiveModel = current.into();
    row.status = Set(OrderStatus::Cancelled);
    row.pending_reason = Set(None);
    row.estimated_start = Set(None);
    row.estimate_confidence = Set(None);
    row.updated_at = Set(now);
    if !still_stopping {
        row.ended_at = Set(Some(now));
    }
    Ok(Cancelled::Now {
        order: row.update(txn).await?,
        from,
    })
}

/// Cancels a waiting order or terminates a running one; its GPUs are freed
/// once its work has stopped. Cancelling a cancelled order changes nothing.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/orders/{order_id}/cancel",
    tag = "orders",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("order_id" = Uuid, Path, description = "Order id"),
    ),
    responses((status = 200, description = "The cancelled order", body = Order), ProblemResponses),
    security(("bearer" = []))
)]
async fn cancel_order(
    State(state): State<AppState>,
    access: OrgAccess<need::Member>,
    params: RawPathParams,
) -> ApiResult<Json<Order>> {
    let scope = &access.scope;
    let txn = gantry_core::db::write(&state.db).await?;
    let id = find(&txn, scope, &params).await?.id;
    let (updated, from) = match cancel(&txn, id, state.clock.now()).await? {
        Cancelled::Ended(current) if current.status == OrderStatus::Cancelled => {
            txn.commit().await?;
            return Ok(Json(shown(&state, current).await?));
        }
        Cancelled::Ended(current) => {
            return Err(ApiError::conflict(
                "order_ended",
                format!(
                    "order {} has already ended ({})",
                    current.id,
                    current.status.as_str()
                ),
            ));
        }
        Cancelled::Now { order, from } => (order, from),
    };
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "order.cancel",
            target_type: "order",
            target_id: Some(updated.id.to_string()),
            details: serde_json::json!({ "from": from }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    state.scheduler.wake();
    Ok(Json(shown(&state, updated).await?))
}
