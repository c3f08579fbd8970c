//! Operators declare which Slurm cluster runs a region: how to reach its
//! commands, the partition whose nodes are the region's, the account to
//! charge, and the GRES type of each catalog GPU model.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{node, organization, slurm_cluster, slurm_job};
use gantry_types::classes::{DriverKind, SlurmAccess, SlurmUsers};

/// The most GPU models one cluster maps.
const GRES_TYPES_MAX: usize = 32;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_slurm_clusters, set_slurm_cluster))
        .routes(routes!(delete_slurm_cluster))
        .routes(routes!(list_slurm_users))
}

/// The Unix user an organization's jobs run as on a Slurm cluster: the
/// user (and group) the cluster's operator makes on every node.
#[derive(Debug, Serialize, ToSchema)]
pub struct SlurmUser {
    pub org_id: Uuid,
    pub organization: String,
    pub user: String,
}

/// A region's Slurm cluster, as operators see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SlurmCluster {
    pub region: String,
    pub partition: String,
    pub account: Option<String>,
    pub conf_path: Option<String>,
    pub login_host: Option<String>,
    pub output_dir: String,
    /// Each catalog GPU model's GRES type.
    pub gres_types: BTreeMap<String, String>,
    pub access: SlurmAccess,
    pub users: SlurmUsers,
    pub user_prefix: String,
    /// Nodes imported from its partition.
    pub nodes: i64,
    /// GPUs of each node that Slurm jobs Gantry did not submit hold.
    pub outside_gpus: BTreeMap<String, i64>,
    /// Attempts Slurm runs or has not ended yet.
    pub jobs: i64,
    /// What went wrong on the last sync; none when it went well.
    pub problem: Option<String>,
    pub synced_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSlurmCluster {
    /// A region name or id.
    #[schema(min_length = 1, max_length = 64)]
    pub region: String,
    /// The partition whose nodes are the region's.
    #[schema(pattern = "^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}$")]
    pub partition: String,
    /// The Slurm account Gantry's jobs are charged to.
    #[schema(pattern = "^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}$")]
    pub account: Option<String>,
    /// `SLURM_CONF` for the commands, where not the default.
    #[schema(min_length = 1, max_length = 255)]
    pub conf_path: Option<String>,
    /// `[user@]host` of a login node to run the commands on over SSH;
    /// none to run them on the control plane's hosts.
    #[schema(pattern = "^[A-Za-z0-9_.][A-Za-z0-9_.@-]{0,254}$")]
    pub login_host: Option<String>,
    /// Where jobs' output files go: a directory the nodes and the host the
    /// commands run on both see.
    #[schema(min_length = 1, max_length = 255)]
    pub output_dir: String,
    /// Each catalog GPU model's GRES type, such as `{"H100-80GB": "h100"}`.
    pub gres_types: BTreeMap<String, String>,
    #[serde(default = "srun")]
    pub access: SlurmAccess,
    /// Whom jobs run as: each organization as its own Unix user (which
    /// must exist on the cluster: `user_prefix` and the last twelve hex
    /// digits of the organization's id), or all as the commands' user.
    #[serde(default = "per_organization")]
    pub users: SlurmUsers,
    /// How each organization's user's name begins.
    #[schema(pattern = "^[a-z_][a-z0-9_-]{0,15}$")]
    #[serde(default = "user_prefix")]
    pub user_prefix: String,
}

fn srun() -> SlurmAccess {
    SlurmAccess::Srun
}

fn per_organization() -> SlurmUsers {
    SlurmUsers::PerOrganization
}

fn user_prefix() -> String {
    "gantry-".into()
}

/// A Slurm name: no leading '-', so it never reads as an option.
fn is_slurm_name(value: &str, max: usize) -> bool {
    !value.is_empty()
        && value.len() <= max
        && !value.starts_with('-')
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

fn check(request: &SetSlurmCluster, catalog: &gantry_core::catalog::Catalog) -> ApiResult<()> {
    let mut fields = Fields::default();
    if !is_slurm_name(&request.partition, 64) {
        fields.push(
            "partition",
            "must be a Slurm partition name: letters, digits, '_', '.', '-', not starting with '-'",
        );
    }
    if let Some(account) = &request.account
        && !is_slurm_name(account, 64)
    {
        fields.push(
            "account",
            "must be a Slurm account name: letters, digits, '_', '.', '-', not starting with '-'",
        );
    }
    if let Some(host) = &request.login_host
        && (host.starts_with('-')
            || host.len() > 255
            || host.is_empty()
            || !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-@".contains(c)))
    {
        fields.push("login_host", "must be [user@]host");
    }
    for (field, path) in [
        ("conf_path", request.conf_path.as_deref()),
        ("output_dir", Some(request.output_dir.as_str())),
    ] {
        if let Some(why) = path.and_then(gantry_volumes::paths::shape_refusal) {
            fields.push(field, why);
        }
    }
    let prefix_ok = request.user_prefix.len() <= 16
        && request
            .user_prefix
            .starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && request
            .user_prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-".contains(c));
    if !prefix_ok {
        fields.push(
            "user_prefix",
            "must begin a Unix user name: up to 16 of a-z, 0-9, '_', '-', starting with a letter or '_'",
        );
    }
    if request.gres_types.is_empty() || request.gres_types.len() > GRES_TYPES_MAX {
        fields.push(
            "gres_types",
            format!("from 1 to {GRES_TYPES_MAX} GPU models, each with its GRES type"),
        );
    }
    for (model, gres) in &request.gres_types {
        if catalog.gpu_model_named(model).is_err() {
            fields.push(
                &format!("gres_types.{model}"),
                "is not a GPU model of the catalog",
            );
        }
        if !is_slurm_name(gres, 32) {
            fields.push(
                &format!("gres_types.{model}"),
                "must be a GRES type: letters, digits, '_', '.', '-'",
            );
        }
    }
    fields.finish()
}

/// Every region's Slurm cluster.
#[utoipa::path(
    get,
    path = "/admin/slurm-clusters",
    tag = "admin",
    responses((status = 200, description = "Each Slurm region's cluster", body = Vec<SlurmCluster>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_slurm_clusters(
    State(state): State<AppState>,
    _operator: Operator,
) -> ApiResult<Json<Vec<SlurmCluster>>> {
    let catalog = state.catalog.current(&state.db).await?;
    let mut views = Vec::new();
    for cluster in slurm_cluster::Entity::find().all(&state.db).await? {
        let name = catalog
            .region_name(cluster.region_id)
            .unwrap_or_default()
            .to_owned();
        views.push(view(&state.db, cluster, name).await?);
    }
    views.sort_by(|a, b| a.region.cmp(&b.region));
    Ok(Json(views))
}

async fn view(
    db: &impl ConnectionTrait,
    cluster: slurm_cluster::Model,
    region: String,
) -> ApiResult<SlurmCluster> {
    let nodes = node::Entity::find()
        .filter(node::Column::RegionId.eq(cluster.region_id))
        .filter(node::Column::Driver.eq(DriverKind::Slurm))
        .count(db)
        .await?;
    let jobs = slurm_job::Entity::find()
        .filter(slurm_job::Column::RegionId.eq(cluster.region_id))
        .filter(slurm_job::Column::Finished.eq(false))
        .count(db)
        .await?;
    Ok(SlurmCluster {
        region,
        gres_types: super::gres_types(&cluster).into_iter().collect(),
        outside_gpus: cluster
            .outside
            .as_deref()
            .and_then(|o| serde_json::from_str(o).ok())
            .unwrap_or_default(),
        partition: cluster.partition,
        account: cluster.account,
        conf_path: cluster.conf_path,
        login_host: cluster.login_host,
        output_dir: cluster.output_dir,
        access: cluster.access,
        users: cluster.users,
        user_prefix: cluster.user_prefix,
        nodes: i64::try_from(nodes).unwrap_or(i64::MAX),
        jobs: i64::try_from(jobs).unwrap_or(i64::MAX),
        problem: cluster.problem,
        synced_at: cluster.synced_at,
    })
}

/// Declares (or changes) the Slurm cluster that runs a region. Its nodes
/// are imported on the next sync, a few seconds later.
#[utoipa::path(
    put,
    path = "/admin/slurm-clusters",
    tag = "admin",
    request_body = SetSlurmCluster,
    responses((status = 200, description = "The region's Slurm cluster", body = SlurmCluster), ProblemResponses),
    security(("bearer" = []))
)]
async fn set_slurm_cluster(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    ApiJson(request): ApiJson<SetSlurmCluster>,
) -> ApiResult<Json<SlurmCluster>> {
    let catalog = state.catalog.current(&state.db).await?;
    check(&request, &catalog)?;
    let region = catalog.region(&request.region)?;
    let gres_types: BTreeMap<String, String> = request
        .gres_types
        .iter()
        .filter_map(|(model, gres)| {
            let model = catalog.gpu_model_named(model).ok()?;
            Some((model.name.clone(), gres.clone()))
        })
        .collect();
    let gres_types = serde_json::to_string(&gres_types).unwrap_or_else(|_| "{}".into());
    let now = state.clock.now();
    let txn = gantry_core::db::write(&state.db).await?;
    let existing = slurm_cluster::Entity::find_by_id(region.id)
        .one(&txn)
        .await?;
    let row = match existing {
        Some(cluster) => {
            let mut row: slurm_cluster::ActiveModel = cluster.into();
            row.partition = Set(request.partition.clone());
            row.account = Set(request.account.clone());
            row.conf_path = Set(request.conf_path.clone());
            row.login_host = Set(request.login_host.clone());
            row.output_dir = Set(request.output_dir.clone());
            row.gres_types = Set(gres_types);
            row.access = Set(request.access);
            row.users = Set(request.users);
            row.user_prefix = Set(request.user_prefix.clone());
            row.updated_at = Set(now);
            row.update(&txn).await?
        }
        None => {
            slurm_cluster::ActiveModel {
                region_id: Set(region.id),
                partition: Set(request.partition.clone()),
                account: Set(request.account.clone()),
                conf_path: Set(request.conf_path.clone()),
                login_host: Set(request.login_host.clone()),
                output_dir: Set(request.output_dir.clone()),
                gres_types: Set(gres_types),
                access: Set(request.access),
                users: Set(request.users),
                user_prefix: Set(request.user_prefix.clone()),
                problem: Set(None),
                outside: Set(None),
                synced_at: Set(None),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(&txn)
            .await?
        }
    };
    audit::record(
        &txn,
        audit::Change {
            org_id: None,
            action: "slurm_cluster.set",
            target_type: "region",
            target_id: Some(region.id.to_string()),
            details: serde_json::json!({
                "partition": row.partition,
                "account": row.account,
                "login_host": row.login_host,
                "users": row.users,
            }),
            actor: &actor,
        },
    )
    .await?;
    let view = view(&txn, row, region.name.clone()).await?;
    txn.commit().await?;
    state.scheduler.wake();
    Ok(Json(view))
}

/// Takes a region's Slurm cluster out of Gantry's hands, once Slurm runs
/// none of Gantry's work there. Its nodes stay, cordoned by nobody: an
/// operator removes them.
#[utoipa::path(
    delete,
    path = "/admin/slurm-clusters/{region}",
    tag = "admin",
    params(("region" = String, Path, description = "Region name or id")),
    responses((status = 204, description = "The region has no Slurm cluster now"), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_slurm_cluster(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let reference = gantry_core::http::extract::path_param(&params, "region");
    let catalog = state.catalog.current(&state.db).await?;
    let region = catalog.region(reference)?;
    let txn = gantry_core::db::write(&state.db).await?;
    let cluster = slurm_cluster::Entity::find_by_id(region.id)
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::SlurmCluster, region.id))?;
    let running = slurm_job::Entity::find()
        .filter(slurm_job::Column::RegionId.eq(region.id))
        .filter(slurm_job::Column::Finished.eq(false))
        .count(&txn)
        .await?;
    if running > 0 {
        return Err(ApiError::conflict(
            "slurm_jobs_running",
            format!(
                "Slurm runs {running} of Gantry's jobs in region {}: they must end first",
                region.name
            ),
        ));
    }
    slurm_cluster::Entity::delete_by_id(cluster.region_id)
        .exec(&txn)
        .await?;
    audit::record(
        &txn,
        audit::Change {
            org_id: None,
            action: "slurm_cluster.delete",
            target_type: "region",
            target_id: Some(region.id.to_string()),
            details: serde_json::json!({ "partition": cluster.partition }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The Unix user each organization's jobs run as on a region's Slurm
/// cluster, for the operator to make on every node (`useradd`, or the
/// cluster's directory service). Empty where every job runs as the
/// commands' own user (`users: shared`).
#[utoipa::path(
    get,
    path = "/admin/slurm-clusters/{region}/users",
    tag = "admin",
    params(("region" = String, Path, description = "Region name or id"), PageQuery),
    responses((status = 200, description = "A page of organizations with their Unix users", body = Page<SlurmUser>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_slurm_users(
    State(state): State<AppState>,
    _operator: Operator,
    params: RawPathParams,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<SlurmUser>>> {
    let request = query.validate()?;
    let reference = gantry_core::http::extract::path_param(&params, "region");
    let catalog = state.catalog.current(&state.db).await?;
    let region = catalog.region(reference)?;
    let cluster = slurm_cluster::Entity::find_by_id(region.id)
        .one(&state.db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::SlurmCluster, region.id))?;
    if cluster.users == SlurmUsers::Shared {
        return Ok(Json(Page {
            items: Vec::new(),
            next_cursor: None,
        }));
    }
    let rows = request
        .ascending(organization::Entity::find(), organization::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(Page::from_rows(
        rows,
        request,
        |o| o.id,
        |o| SlurmUser {
            user: super::user_of(&cluster, o.id).unwrap_or_default(),
            org_id: o.id,
            organization: o.name,
        },
    )))
}
