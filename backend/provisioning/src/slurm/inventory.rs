//! A Slurm partition's nodes kept in Gantry's inventory: new nodes are
//! imported with the GPUs their GRES names, and Slurm's drains and faults
//! cordon them or mark them unhealthy, with Slurm's reason. What an
//! operator set in Gantry (a cordon, a drain) is left as it is.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};

use super::parse::{Health, SlurmNode};
use gantry_entities::{gpu_model, node, slurm_cluster};
use gantry_inventory::nodes::{GpuSpec, NodeSpec};
use gantry_types::classes::{DriverKind, NodeState};

/// How the reasons this sync writes begin: a state with another reason
/// was set by an operator.
const REASON_PREFIX: &str = "Slurm: ";

/// Brings the region's Slurm nodes in step with `seen`; true when a node
/// came or changed state.
pub async fn keep(
    db: &impl ConnectionTrait,
    cluster: &slurm_cluster::Model,
    seen: &[SlurmNode],
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let models: HashMap<String, gpu_model::Model> = gpu_model::Entity::find()
        .all(db)
        .await?
        .into_iter()
        .map(|m| (m.name.clone(), m))
        .collect();
    // GRES type → the catalog's model.
    let by_type: HashMap<String, &gpu_model::Model> = super::gres_types(cluster)
        .into_iter()
        .filter_map(|(model, gres)| Some((gres, models.get(&model)?)))
        .collect();
    let known: HashMap<String, node::Model> = node::Entity::find()
        .filter(node::Column::RegionId.eq(cluster.region_id))
        .filter(node::Column::Driver.eq(DriverKind::Slurm))
        .all(db)
        .await?
        .into_iter()
        .map(|n| (n.name.clone(), n))
        .collect();
    let mut changed = false;
    for slurm_node in seen {
        let (state, reason) = wanted(slurm_node);
        match known.get(&slurm_node.name) {
            Some(existing) => {
                changed |= set_state(db, existing, state, reason, now).await?;
            }
            None => {
                // A node of no GPU type the operator mapped is not Gantry's.
                let Some((gres, count, model)) = slurm_node
                    .gpus
                    .iter()
                    .find_map(|(gres, count)| Some((gres, *count, *by_type.get(gres)?)))
                else {
                    continue;
                };
                let spec = NodeSpec {
                    name: slurm_node.name.clone(),
                    region_id: cluster.region_id,
                    rack: cluster.partition.clone(),
                    instance_type_id: None,
                    cpu_milli: i64::from(slurm_node.cpus) * 1000,
                    memory_mib: slurm_node.memory_mib,
                    labels: vec![format!("slurm-partition={}", cluster.partition)],
                    driver: DriverKind::Slurm,
                    gpus: (0..count)
                        .map(|index| GpuSpec {
                            model_id: model.id,
                            hardware_uuid: format!("slurm:{}:{gres}:{index}", slurm_node.name),
                            memory_mib: i64::from(model.memory_gib) * 1024,
                            nvlink_domain: 0,
                            mig_enabled: false,
                            mig_devices: Vec::new(),
                        })
                        .collect(),
                };
                let inserted = gantry_inventory::nodes::insert(db, spec).await?;
                set_state(db, &inserted, state, reason, now).await?;
                changed = true;
            }
        }
    }
    for gone in known
        .values()
        .filter(|n| !seen.iter().any(|s| s.name == n.name))
    {
        let reason = format!(
            "{REASON_PREFIX}no longer in partition {}",
            cluster.partition
        );
        changed |= set_state(db, gone, NodeState::Unhealthy, Some(reason), now).await?;
    }
    Ok(changed)
}

/// The Gantry state (and reason) of a node as Slurm shows it.
fn wanted(node: &SlurmNode) -> (NodeState, Option<String>) {
    let said = |default: &str| {
        Some(format!(
            "{REASON_PREFIX}{}",
            node.reason.as_deref().unwrap_or(default)
        ))
    };
    match node.health {
        Health::Up => (NodeState::Ready, None),
        Health::Drained => (NodeState::Cordoned, said("drained")),
        Health::Down => (NodeState::Unhealthy, said("down or not responding")),
    }
}

/// Moves `current` to `state`, unless an operator set its state: true
/// when it moved.
async fn set_state(
    db: &impl ConnectionTrait,
    current: &node::Model,
    state: NodeState,
    reason: Option<String>,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let set_by_slurm = current
        .state_reason
        .as_deref()
        .is_some_and(|r| r.starts_with(REASON_PREFIX));
    let operator_set = current.state != NodeState::Ready && !set_by_slurm;
    if operator_set || (current.state == state && current.state_reason == reason) {
        return Ok(false);
    }
    node::Entity::update_many()
        .col_expr(node::Column::State, Expr::value(state))
        .col_expr(node::Column::StateReason, Expr::value(reason))
        .col_expr(node::Column::UpdatedAt, Expr::value(now))
        .filter(node::Column::Id.eq(current.id))
        .exec(db)
        .await?;
    Ok(true)
}
