//! Private networks as tenants and operators see them: each network with
//! the addresses its live workloads hold. A tenant reads its own
//! organization's; operators read any organization's through the same
//! route (as a viewer) and every network on the platform by page.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_access::tenancy::access::{OrgAccess, need};
use gantry_core::auth::principal::Operator;
use gantry_core::error::{ApiResult, ProblemResponses};
use gantry_core::http::extract::ApiQuery;
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_entities::{allocation, node, order, private_network, project, region};
use gantry_types::classes::AllocationState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_networks))
        .routes(routes!(admin_list_networks))
}

/// An organization's private network in one region.
#[derive(Debug, Serialize, ToSchema)]
pub struct PrivateNetwork {
    pub id: Uuid,
    pub org_id: Uuid,
    /// The project whose own network it is; none for the organization's,
    /// which its projects share unless they have their own.
    pub project_id: Option<Uuid>,
    /// That project's name (none once it is deleted).
    pub project: Option<String>,
    pub region_id: Uuid,
    pub region: String,
    /// The VXLAN network identifier nodes carry it as.
    pub vni: u32,
    /// The addresses its workloads get, `a.b.c.d/n`.
    pub cidr: String,
    /// The addresses live workloads hold, by address.
    pub addresses: Vec<NetworkAddress>,
    pub created_at: DateTime<Utc>,
}

/// A live workload's address on a private network.
#[derive(Debug, Serialize, ToSchema)]
pub struct NetworkAddress {
    pub address: String,
    pub order_id: Uuid,
    /// The order's name.
    pub order: String,
    /// The node the workload runs on.
    pub node: String,
}

/// The organization's private networks, one per region it has run work
/// in on nodes with a fabric.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/networks",
    tag = "networks",
    params(("org_id" = Uuid, Path, description = "Organization id"), PageQuery),
    responses((status = 200, description = "A page of private networks", body = Page<PrivateNetwork>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_networks(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<PrivateNetwork>>> {
    let request = query.validate()?;
    let rows = request
        .ascending(
            access.scope.select::<private_network::Entity>(),
            private_network::Column::Id,
        )
        .all(&state.db)
        .await?;
    Ok(Json(views(&state.db, rows, request).await?))
}

/// Every private network on the platform.
#[utoipa::path(
    get,
    path = "/admin/networks",
    tag = "admin",
    params(PageQuery),
    responses((status = 200, description = "A page of private networks", body = Page<PrivateNetwork>), ProblemResponses),
    security(("bearer" = []))
)]
async fn admin_list_networks(
    State(state): State<AppState>,
    _operator: Operator,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<PrivateNetwork>>> {
    let request = query.validate()?;
    let rows = request
        .ascending(private_network::Entity::find(), private_network::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(views(&state.db, rows, request).await?))
}

/// A page of `rows` with their regions' names and live addresses: four
/// queries for the page, whatever its length.
async fn views(
    db: &impl ConnectionTrait,
    rows: Vec<private_network::Model>,
    request: gantry_core::http::pagination::PageRequest,
) -> ApiResult<Page<PrivateNetwork>> {
    let regions: HashMap<Uuid, String> = region::Entity::find()
        .filter(region::Column::Id.is_in(rows.iter().map(|n| n.region_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|r| (r.id, r.name))
        .collect();
    let projects: HashMap<Uuid, String> = project::Entity::find()
        .filter(project::Column::Id.is_in(rows.iter().filter_map(|n| n.project_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|p| (p.id, p.name))
        .collect();
    let live = allocation::Entity::find()
        .filter(allocation::Column::OrgId.is_in(rows.iter().map(|n| n.org_id)))
        .filter(allocation::Column::State.ne(AllocationState::Released))
        .filter(allocation::Column::PrivateAddress.is_not_null())
        .all(db)
        .await?;
    let nodes: HashMap<Uuid, node::Model> = node::Entity::find()
        .filter(node::Column::Id.is_in(live.iter().map(|a| a.node_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|n| (n.id, n))
        .collect();
    let names: HashMap<Uuid, String> = order::Entity::find()
        .filter(order::Column::Id.is_in(live.iter().map(|a| a.order_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|o| (o.id, o.name.unwrap_or_default()))
        .collect();
    Ok(Page::from_rows(
        rows,
        request,
        |n| n.id,
        |n| {
            let mut addresses: Vec<NetworkAddress> = live
                .iter()
                .filter_map(|a| {
                    let node = nodes
                        .get(&a.node_id)
                        .filter(|m| m.region_id == n.region_id)?;
                    if !super::is_on(a, &n) {
                        return None;
                    }
                    let address = a.private_address.clone()?;
                    Some(NetworkAddress {
                        address,
                        order_id: a.order_id,
                        order: names.get(&a.order_id).cloned().unwrap_or_default(),
                        node: node.name.clone(),
                    })
                })
                .collect();
            addresses.sort_by_key(|a| a.address.parse::<std::net::Ipv4Addr>().ok());
            PrivateNetwork {
                id: n.id,
                org_id: n.org_id,
                project_id: n.project_id,
                project: n.project_id.and_then(|p| projects.get(&p).cloned()),
                region: regions.get(&n.region_id).cloned().unwrap_or_default(),
                region_id: n.region_id,
                vni: u32::try_from(n.vni).unwrap_or_default(),
                cidr: n.cidr,
                addresses,
                created_at: n.created_at,
            }
        },
    ))
}
