//! What-if for operators: the live cluster and queue, loaded as the
//! scheduling loop loads them, decided as they are and again with extra
//! nodes, other organization quotas, another placement policy or a
//! defragmentation plan carried out.

use std::collections::{BTreeMap, BTreeSet};

use axum::Json;
use axum::extract::State;
use gantry_scheduler as engine;
use gantry_sim::whatif::{self, Change};
use sea_orm::EntityTrait;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_core::auth::principal::Operator;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::http::extract::ApiJson;
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::gpu_model;

const NODES_MAX: i32 = 10_000;
const GPUS_MAX: u32 = 1_000_000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtraNodes {
    /// Instance type name or id: the nodes get its GPUs, vCPU and memory.
    #[schema(min_length = 1, max_length = 64)]
    pub instance_type: String,
    /// Region name or id.
    #[schema(min_length = 1, max_length = 64)]
    pub region: String,
    #[schema(minimum = 1, maximum = 10000)]
    pub count: i32,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaChange {
    pub org_id: Uuid,
    /// GPU model name or id.
    #[schema(min_length = 1, max_length = 64)]
    pub gpu_model: String,
    #[schema(minimum = 0, maximum = 1000000)]
    pub guaranteed_gpus: u32,
    #[schema(minimum = 0, maximum = 1000000)]
    pub max_gpus: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    FragmentationAware,
    BestFit,
    FirstFit,
    Spread,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WhatIfRequest {
    #[serde(default)]
    #[schema(max_items = 20)]
    pub extra_nodes: Vec<ExtraNodes>,
    #[serde(default)]
    #[schema(max_items = 200)]
    pub quotas: Vec<QuotaChange>,
    /// Another placement strategy.
    pub placement: Option<Placement>,
    /// Carry out a defragmentation plan first: moves of preemptible work
    /// that let work blocked by fragmentation start.
    pub defragment: Option<Defragment>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Defragment {
    /// GPU-seconds of work each organization may lose to moves per hour.
    #[schema(minimum = 0, maximum = 1000000000)]
    pub budget_gpu_seconds_per_org_hour: f64,
}

/// One running order to move.
#[derive(Debug, Serialize, ToSchema)]
pub struct PlannedMove {
    pub order_id: String,
    pub from_node: String,
    pub from_gpus: Vec<u32>,
    pub to_node: String,
    pub to_gpus: Vec<u32>,
    /// It is told to checkpoint and restarts from there; otherwise it
    /// restarts from its last checkpoint or its start.
    pub checkpoint: bool,
    /// GPU-seconds of work the move loses.
    pub lost_gpu_seconds: f64,
}

/// The moves that let one waiting order start.
#[derive(Debug, Serialize, ToSchema)]
pub struct PlannedStep {
    pub order_id: String,
    /// The nodes it would start on.
    pub nodes: Vec<String>,
    pub moves: Vec<PlannedMove>,
    pub lost_gpu_seconds: f64,
}

/// A defragmentation plan and what it costs.
#[derive(Debug, Serialize, ToSchema)]
pub struct DefragmentationPlan {
    pub steps: Vec<PlannedStep>,
    /// GPU-seconds of work lost in all.
    pub lost_gpu_seconds: f64,
    /// Waiting orders blocked by fragmentation that no move within the
    /// budget helps.
    pub unhelped: Vec<String>,
}

impl From<engine::DefragPlan> for DefragmentationPlan {
    fn from(plan: engine::DefragPlan) -> Self {
        Self {
            steps: plan
                .steps
                .into_iter()
                .map(|step| PlannedStep {
                    order_id: step.workload,
                    nodes: step.nodes,
                    moves: step
                        .moves
                        .into_iter()
                        .map(|m| PlannedMove {
                            order_id: m.workload,
                            from_node: m.from.node,
                            from_gpus: m.from.gpus,
                            to_node: m.to.node,
                            to_gpus: m.to.gpus,
                            checkpoint: m.checkpoint,
                            lost_gpu_seconds: m.lost_gpu_seconds,
                        })
                        .collect(),
                    lost_gpu_seconds: step.lost_gpu_seconds,
                })
                .collect(),
            lost_gpu_seconds: plan.lost_gpu_seconds,
            unhelped: plan.unhelped,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct QueueOutcome {
    pub starts: usize,
    pub waiting: usize,
}

/// What one cycle would decide.
#[derive(Debug, Serialize, ToSchema)]
pub struct Outcome {
    pub starts: usize,
    /// GPUs the starts would take.
    pub started_gpus: f64,
    pub waiting: usize,
    pub rejected: usize,
    pub preempted: usize,
    /// Mean seconds until the estimated start, over waiting work with one.
    pub mean_estimated_wait_seconds: Option<f64>,
    /// Per organization id.
    pub by_organization: BTreeMap<String, QueueOutcome>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WhatIfResult {
    pub before: Outcome,
    pub after: Outcome,
    /// The defragmentation plan carried out, when one was asked for.
    pub defragmentation: Option<DefragmentationPlan>,
}

impl From<whatif::Side> for Outcome {
    fn from(side: whatif::Side) -> Self {
        Self {
            starts: side.starts,
            started_gpus: side.started_milli as f64 / 1000.0,
            waiting: side.waiting,
            rejected: side.rejected,
            preempted: side.preempted,
            mean_estimated_wait_seconds: side.mean_estimated_wait,
            by_organization: side
                .by_queue
                .into_iter()
                .map(|(org, (starts, waiting))| (org, QueueOutcome { starts, waiting }))
                .collect(),
        }
    }
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(what_if))
}

/// Decides the live queue as it is and with a change, changing nothing.
#[utoipa::path(
    post,
    path = "/admin/what-if",
    tag = "admin",
    request_body = WhatIfRequest,
    responses((status = 200, description = "Both sides", body = WhatIfResult), ProblemResponses),
    security(("bearer" = []))
)]
async fn what_if(
    State(state): State<AppState>,
    _operator: Operator,
    ApiJson(request): ApiJson<WhatIfRequest>,
) -> ApiResult<Json<WhatIfResult>> {
    let mut fields = Fields::default();
    for (i, extra) in request.extra_nodes.iter().enumerate() {
        fields.range(
            &format!("extra_nodes[{i}].count"),
            extra.count,
            1,
            NODES_MAX,
        );
    }
    for (i, quota) in request.quotas.iter().enumerate() {
        fields.range(
            &format!("quotas[{i}].guaranteed_gpus"),
            quota.guaranteed_gpus,
            0,
            GPUS_MAX,
        );
        if let Some(max) = quota.max_gpus {
            fields.range(&format!("quotas[{i}].max_gpus"), max, 0, GPUS_MAX);
        }
    }
    if let Some(defragment) = &request.defragment {
        let budget = defragment.budget_gpu_seconds_per_org_hour;
        if !(0.0..=1e9).contains(&budget) {
            fields.push(
                "defragment.budget_gpu_seconds_per_org_hour",
                "must be 0 to 1000000000",
            );
        }
    }
    if request.extra_nodes.len() > 20 || request.quotas.len() > 200 {
        fields.push("extra_nodes", "at most 20 node groups and 200 quotas");
    }
    fields.finish()?;
    let mut change = Change::default();
    for (i, extra) in request.extra_nodes.iter().enumerate() {
        let unknown = |what: &str| {
            ApiError::unprocessable(
                "unknown_reference",
                format!("extra_nodes[{i}]: no {what} {:?}", extra.instance_type),
            )
        };
        let instance = gantry_catalog::instance_type_by_ref(&state.db, &extra.instance_type)
            .await
            .map_err(|_| unknown("instance type"))?;
        let region = gantry_catalog::region_by_ref(&state.db, &extra.region)
            .await
            .map_err(|_| {
                ApiError::unprocessable(
                    "unknown_reference",
                    format!("extra_nodes[{i}]: no region {:?}", extra.region),
                )
            })?;
        let model = gpu_model::Entity::find_by_id(instance.gpu_model_id)
            .one(&state.db)
            .await?
            .ok_or_else(|| unknown("GPU model for instance type"))?;
        for n in 0..extra.count {
            change.extra_nodes.push(engine::Node {
                name: format!("what-if-{i}-{n}"),
                region: region.name.clone(),
                rack: format!("what-if-{i}"),
                labels: BTreeSet::new(),
                cpu_milli: u64::try_from(instance.vcpus).unwrap_or(0) * 1000,
                memory_mib: u64::try_from(instance.memory_gib).unwrap_or(0) * 1024,
                schedulable: true,
                gpus: (0..u32::try_from(instance.gpus_per_node).unwrap_or(0))
                    .map(|index| engine::Gpu {
                        index,
                        model: model.name.clone(),
                        nvlink_domain: 0,
                        healthy: true,
                        mig_slices: None,
                        mig_instance_slices: None,
                    })
                    .collect(),
            });
        }
    }
    let loaded = super::load::load(&state.db, state.clock.now()).await?;
    let snapshot = loaded.snapshot;
    for (i, q) in request.quotas.iter().enumerate() {
        let model = gantry_catalog::gpu_model_by_ref(&state.db, &q.gpu_model)
            .await
            .map_err(|_| {
                ApiError::unprocessable(
                    "unknown_reference",
                    format!("quotas[{i}]: no GPU model {:?}", q.gpu_model),
                )
            })?;
        let name = q.org_id.to_string();
        let mut queue = change
            .queues
            .iter()
            .chain(&snapshot.queues)
            .find(|existing| existing.name == name)
            .cloned()
            .unwrap_or_else(|| engine::Queue::new(&name));
        queue.quotas.insert(
            model.name,
            engine::Quota {
                guaranteed: q.guaranteed_gpus,
                borrow_limit: None,
                max: q.max_gpus,
            },
        );
        change.queues.retain(|existing| existing.name != name);
        change.queues.push(queue);
    }
    let policy = engine::Policy::default();
    change.policy = request.placement.map(|placement| engine::Policy {
        placement: match placement {
            Placement::FragmentationAware => engine::PlacementStrategy::FragmentationAware,
            Placement::BestFit => engine::PlacementStrategy::BestFit,
            Placement::FirstFit => engine::PlacementStrategy::FirstFit,
            Placement::Spread => engine::PlacementStrategy::Spread,
        },
        ..engine::Policy::default()
    });
    change.defragment = request
        .defragment
        .map(|defragment| engine::DisruptionBudget {
            gpu_seconds_per_queue_hour: defragment.budget_gpu_seconds_per_org_hour,
            spent: BTreeMap::new(),
        });
    let result = tokio::task::spawn_blocking(move || whatif::what_if(&snapshot, &policy, &change))
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(WhatIfResult {
        before: result.before.into(),
        after: result.after.into(),
        defragmentation: result.plan.map(Into::into),
    }))
}
