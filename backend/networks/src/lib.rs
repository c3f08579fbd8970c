//! Private networks: each organization gets one per region, a slice of
//! the server's `private_networks` pool, and so does each project that
//! wants one of its own (other projects of the organization may join it).
//! Each workload on a node with a fabric (an agent that carries networks
//! between nodes as VXLAN) gets an address on its project's network or
//! its organization's. Nodes learn their peers per network here: the
//! other nodes with a workload on it, and the network's name table: each
//! workload by its order's name (and rank), for the workloads' `/etc/hosts`.

pub mod api;

use gantry_core::handles::networks::Cache;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use ipnet::Ipv4Net;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect,
    Set, SqlErr,
};
use uuid::Uuid;

use gantry_entities::{allocation, node, order, private_network, project};
use gantry_types::classes::{AllocationState, ProjectNetwork};

/// Network identifiers start above the few that switches and hosts tend
/// to use for themselves.
const FIRST_VNI: i32 = 4096;
/// Tries before a pick that keeps losing to other replicas gives up for
/// this round (the next fetch tries again).
const TRIES: usize = 8;

/// How private networks are cut: the pool and each network's prefix.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub pool: Ipv4Net,
    pub prefix: u8,
}

impl Plan {
    /// The server's plan (checked when the configuration is loaded).
    pub fn of(config: &gantry_core::config::Config) -> Option<Plan> {
        let pool = config.private_network_pool().ok()?;
        Some(Plan {
            pool,
            prefix: config.private_network_prefix,
        })
    }
}

/// A workload's place on its network, as its node is told it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub vni: u32,
    /// `a.b.c.d/n`.
    pub address: String,
}

/// Whose network a workload goes on: its organization's, or a project's
/// own (its project's, or the one its project joins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scope {
    pub org_id: Uuid,
    pub project_id: Option<Uuid>,
}

impl Scope {
    fn id(self) -> Uuid {
        self.project_id.unwrap_or(self.org_id)
    }
}

/// The network `id`, from `cache` or read.
async fn network_by_id(
    db: &impl ConnectionTrait,
    cache: &Cache,
    id: Uuid,
) -> Result<Option<Arc<private_network::Model>>, DbErr> {
    if let Some(known) = cache.by_id(id) {
        return Ok(Some(known));
    }
    Ok(private_network::Entity::find_by_id(id)
        .one(db)
        .await?
        .map(|network| cache.keep(network)))
}

/// `scope`'s network in `region`, from `cache` or made on first use. Its
/// `next_host` may be stale: `take_address` reads on from there.
async fn network_of(
    db: &impl ConnectionTrait,
    cache: &Cache,
    plan: Plan,
    scope: Scope,
    region_id: Uuid,
) -> Result<Option<Arc<private_network::Model>>, DbErr> {
    if let Some(known) = cache.by_scope(scope.id(), region_id) {
        return Ok(Some(known));
    }
    made_or_read(db, plan, scope, region_id)
        .await
        .map(|found| found.map(|network| cache.keep(network)))
}

async fn made_or_read(
    db: &impl ConnectionTrait,
    plan: Plan,
    scope: Scope,
    region_id: Uuid,
) -> Result<Option<private_network::Model>, DbErr> {
    for _ in 0..TRIES {
        if let Some(found) = private_network::Entity::find()
            .filter(private_network::Column::ScopeId.eq(scope.id()))
            .filter(private_network::Column::RegionId.eq(region_id))
            .one(db)
            .await?
        {
            return Ok(Some(found));
        }
        let taken: HashSet<i32> = private_network::Entity::find()
            .all(db)
            .await?
            .into_iter()
            .map(|n| n.vni)
            .collect();
        let Ok(mut slices) = plan.pool.subnets(plan.prefix) else {
            return Ok(None);
        };
        let Some((index, slice)) = (0..)
            .zip(&mut slices)
            .find(|(i, _)| !taken.contains(&(FIRST_VNI + i)))
        else {
            tracing::error!(pool = %plan.pool, "every private network of the pool is taken");
            return Ok(None);
        };
        let row = private_network::ActiveModel {
            id: Set(Uuid::now_v7()),
            org_id: Set(scope.org_id),
            scope_id: Set(scope.id()),
            project_id: Set(scope.project_id),
            region_id: Set(region_id),
            vni: Set(FIRST_VNI + index),
            cidr: Set(slice.to_string()),
            next_host: Set(1),
            created_at: Set(chrono::Utc::now()),
        };
        match row.insert(db).await {
            Ok(made) => return Ok(Some(made)),
            // Another replica made it, or took the same identifier: look again.
            Err(e) if matches!(e.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// The next free address of `network`, taken for good: the network's
/// counter moves past it only if no one else moved it meanwhile, so two
/// replicas never hand out the same one.
async fn take_address(
    db: &impl ConnectionTrait,
    network: &private_network::Model,
    in_use: &HashSet<Ipv4Addr>,
) -> Result<Option<Ipv4Addr>, DbErr> {
    let Ok(net) = network.cidr.parse::<Ipv4Net>() else {
        return Ok(None);
    };
    let mut seen = network.next_host;
    for _ in 0..TRIES {
        let Some((address, next)) = next_free(net, seen, in_use) else {
            tracing::error!(cidr = %network.cidr, "a private network has no free address");
            return Ok(None);
        };
        let moved = private_network::Entity::update_many()
            .col_expr(private_network::Column::NextHost, Expr::value(next))
            .filter(private_network::Column::Id.eq(network.id))
            .filter(private_network::Column::NextHost.eq(seen))
            .exec(db)
            .await?;
        if moved.rows_affected == 1 {
            return Ok(Some(address));
        }
        seen = private_network::Entity::find_by_id(network.id)
            .one(db)
            .await?
            .map_or(1, |n| n.next_host);
    }
    Ok(None)
}

/// The first address of `net` from host number `from` on (going round)
/// that is not in use, and the host number to try next time. Host numbers
/// run from 1 to the last but one: neither the network's nor its
/// broadcast address.
fn next_free(net: Ipv4Net, from: i32, in_use: &HashSet<Ipv4Addr>) -> Option<(Ipv4Addr, i32)> {
    let hosts = (u32::MAX >> net.prefix_len()).max(2);
    let base = u32::from(net.network());
    let start = u32::try_from(from).unwrap_or(1).clamp(1, hosts - 1);
    let host = (0..hosts - 1)
        .map(|step| (start - 1 + step) % (hosts - 1) + 1)
        .find(|host| !in_use.contains(&Ipv4Addr::from(base + host)))?;
    let next = i32::try_from(host % (hosts - 1) + 1).unwrap_or(1);
    Some((Ipv4Addr::from(base + host), next))
}

/// Gives every allocation of `allocations` whose node has a fabric an
/// address on its organization's network in its node's region, where it
/// has none yet; answers each addressed allocation's placement.
pub async fn place(
    db: &impl ConnectionTrait,
    cache: &Cache,
    plan: Plan,
    allocations: &[allocation::Model],
    nodes: &HashMap<Uuid, node::Model>,
) -> Result<HashMap<Uuid, Placement>, DbErr> {
    let mut placed = HashMap::new();
    let unaddressed: Vec<&allocation::Model> = allocations
        .iter()
        .filter(|a| a.private_address.is_none())
        .collect();
    let scopes = scopes_of(db, &unaddressed).await?;
    let mut in_use: HashMap<Uuid, HashSet<Ipv4Addr>> = HashMap::new();
    for a in allocations {
        let Some(node) = nodes.get(&a.node_id).filter(|n| n.fabric_address.is_some()) else {
            continue;
        };
        let network = match (a.private_network_id, &a.private_address) {
            (Some(id), _) => network_by_id(db, cache, id).await?,
            (None, address) => {
                let organization = Scope {
                    org_id: a.org_id,
                    project_id: None,
                };
                // An address given before project networks is on the
                // organization's.
                let scope = match address {
                    Some(_) => organization,
                    None => scopes.get(&a.order_id).copied().unwrap_or(organization),
                };
                network_of(db, cache, plan, scope, node.region_id).await?
            }
        };
        let Some(network) = network else {
            continue;
        };
        let Ok(net) = network.cidr.parse::<Ipv4Net>() else {
            continue;
        };
        let address = match a.private_address.as_deref().map(str::parse::<Ipv4Addr>) {
            Some(Ok(address)) => Some(address),
            _ => {
                if let std::collections::hash_map::Entry::Vacant(slot) = in_use.entry(network.id) {
                    slot.insert(addresses_in_use(db, a.org_id, net).await?);
                }
                let taken = in_use.entry(network.id).or_default();
                let picked = take_address(db, &network, taken).await?;
                if let Some(address) = picked {
                    taken.insert(address);
                    allocation::Entity::update_many()
                        .col_expr(
                            allocation::Column::PrivateAddress,
                            Expr::value(Some(address.to_string())),
                        )
                        .col_expr(
                            allocation::Column::PrivateNetworkId,
                            Expr::value(Some(network.id)),
                        )
                        .filter(allocation::Column::Id.eq(a.id))
                        .filter(allocation::Column::PrivateAddress.is_null())
                        .exec(db)
                        .await?;
                }
                picked
            }
        };
        if let Some(address) = address {
            placed.insert(
                a.id,
                Placement {
                    vni: u32::try_from(network.vni).unwrap_or_default(),
                    address: format!("{address}/{}", net.prefix_len()),
                },
            );
        }
    }
    Ok(placed)
}

/// Whose network each order of `allocations` goes on, by its project's
/// choice; orders of no project (or of one since deleted) go on their
/// organization's.
async fn scopes_of(
    db: &impl ConnectionTrait,
    allocations: &[&allocation::Model],
) -> Result<HashMap<Uuid, Scope>, DbErr> {
    if allocations.is_empty() {
        return Ok(HashMap::new());
    }
    let projects_of: Vec<(Uuid, Uuid, Option<Uuid>)> = order::Entity::find()
        .select_only()
        .column(order::Column::Id)
        .column(order::Column::OrgId)
        .column(order::Column::ProjectId)
        .filter(order::Column::Id.is_in(allocations.iter().map(|a| a.order_id)))
        .into_tuple()
        .all(db)
        .await?;
    let projects: HashMap<Uuid, project::Model> = project::Entity::find()
        .filter(project::Column::Id.is_in(projects_of.iter().filter_map(|(_, _, p)| *p)))
        .all(db)
        .await?
        .into_iter()
        .map(|p| (p.id, p))
        .collect();
    Ok(projects_of
        .into_iter()
        .map(|(order_id, org_id, project_id)| {
            let project = project_id.and_then(|id| projects.get(&id));
            let own = match project.map(|p| (p.network, p.network_project_id)) {
                Some((ProjectNetwork::Own, _)) => project.map(|p| p.id),
                Some((ProjectNetwork::Joined, joins)) => joins,
                _ => None,
            };
            (
                order_id,
                Scope {
                    org_id,
                    project_id: own,
                },
            )
        })
        .collect())
}

/// The addresses live workloads of `org_id` hold on `net`.
async fn addresses_in_use(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    net: Ipv4Net,
) -> Result<HashSet<Ipv4Addr>, DbErr> {
    Ok(allocation::Entity::find()
        .filter(allocation::Column::OrgId.eq(org_id))
        .filter(allocation::Column::State.ne(AllocationState::Released))
        .filter(allocation::Column::PrivateAddress.is_not_null())
        .all(db)
        .await?
        .into_iter()
        .filter_map(|a| a.private_address?.parse().ok())
        .filter(|address| net.contains(address))
        .collect())
}

/// A workload on a network and the names it answers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub address: Ipv4Addr,
    /// Its host name first.
    pub names: Vec<String>,
}

/// What a node's workloads need to know of their networks, by VNI.
#[derive(Default)]
pub struct Neighbours {
    /// The fabric addresses of the other nodes that hold a workload on it.
    pub peers: HashMap<u32, Vec<String>>,
    /// Every live workload on it, by name.
    pub hosts: HashMap<u32, Vec<Host>>,
}

/// For each of `orgs`' networks in `node`'s region: the other nodes
/// carrying it, and its name table.
pub async fn neighbours(
    db: &impl ConnectionTrait,
    node: &node::Model,
    orgs: &BTreeSet<Uuid>,
) -> Result<Neighbours, DbErr> {
    let mut found = Neighbours::default();
    if orgs.is_empty() || node.fabric_address.is_none() {
        return Ok(found);
    }
    let networks: Vec<private_network::Model> = private_network::Entity::find()
        .filter(private_network::Column::OrgId.is_in(orgs.iter().copied()))
        .filter(private_network::Column::RegionId.eq(node.region_id))
        .all(db)
        .await?;
    let live: Vec<(u32, allocation::Model)> = allocation::Entity::find()
        .filter(allocation::Column::OrgId.is_in(orgs.iter().copied()))
        .filter(allocation::Column::State.ne(AllocationState::Released))
        .filter(allocation::Column::PrivateAddress.is_not_null())
        .all(db)
        .await?
        .into_iter()
        .filter_map(|a| {
            let network = networks.iter().find(|n| is_on(&a, n))?;
            Some((u32::try_from(network.vni).ok()?, a))
        })
        .collect();
    let fabric: HashMap<Uuid, String> = node::Entity::find()
        .filter(
            node::Column::Id.is_in(
                live.iter()
                    .map(|(_, a)| a.node_id)
                    .filter(|id| *id != node.id),
            ),
        )
        .filter(node::Column::RegionId.eq(node.region_id))
        .all(db)
        .await?
        .into_iter()
        .filter_map(|n| Some((n.id, n.fabric_address?)))
        .collect();
    let mut peers: HashMap<u32, BTreeSet<String>> = HashMap::new();
    for (vni, a) in &live {
        if let Some(address) = fabric.get(&a.node_id) {
            peers.entry(*vni).or_default().insert(address.clone());
        }
    }
    found.peers = peers
        .into_iter()
        .map(|(vni, set)| (vni, set.into_iter().collect()))
        .collect();
    let orders: HashMap<Uuid, (Option<String>, chrono::DateTime<chrono::Utc>)> =
        order::Entity::find()
            .select_only()
            .column(order::Column::Id)
            .column(order::Column::Name)
            .column(order::Column::CreatedAt)
            .filter(order::Column::Id.is_in(live.iter().map(|(_, a)| a.order_id)))
            .into_tuple::<(Uuid, Option<String>, chrono::DateTime<chrono::Utc>)>()
            .all(db)
            .await?
            .into_iter()
            .map(|(id, name, created)| (id, (name, created)))
            .collect();
    let mut workloads: HashMap<u32, HashMap<Uuid, Workload>> = HashMap::new();
    for (vni, a) in live {
        let Some(address) = a.private_address.as_deref().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Some((name, created)) = orders.get(&a.order_id) else {
            continue;
        };
        workloads
            .entry(vni)
            .or_default()
            .entry(a.order_id)
            .or_insert_with(|| Workload {
                order_id: a.order_id,
                created: *created,
                name: name.clone(),
                ranks: Vec::new(),
            })
            .ranks
            .push((a.id, address));
    }
    found.hosts = workloads
        .into_iter()
        .map(|(vni, orders)| (vni, name_table(orders.into_values().collect())))
        .collect();
    Ok(found)
}

/// Whether allocation `a`'s address is on network `n`. An address given
/// before projects had networks names none: it is on its organization's.
pub fn is_on(a: &allocation::Model, n: &private_network::Model) -> bool {
    match a.private_network_id {
        Some(id) => id == n.id,
        None => {
            n.project_id.is_none()
                && a.org_id == n.org_id
                && a.private_address
                    .as_deref()
                    .and_then(|s| s.parse::<Ipv4Addr>().ok())
                    .zip(n.cidr.parse::<Ipv4Net>().ok())
                    .is_some_and(|(address, net)| net.contains(&address))
        }
    }
}

/// An order's workloads on one network.
struct Workload {
    order_id: Uuid,
    created: chrono::DateTime<chrono::Utc>,
    name: Option<String>,
    /// Its allocations (in rank order once sorted by id) and their addresses.
    ranks: Vec<(Uuid, Ipv4Addr)>,
}

/// A network's name table: each workload answers to its order's name and
/// id, with `-<rank>` for the nodes of a multi-node order (whose rank 0
/// answers to the bare names as well). Where two orders claim one name,
/// the older keeps it.
fn name_table(mut workloads: Vec<Workload>) -> Vec<Host> {
    workloads.sort_by_key(|w| (w.created, w.order_id));
    let mut claimed: HashSet<String> = HashSet::new();
    let mut table = Vec::new();
    for mut workload in workloads {
        workload.ranks.sort_unstable();
        let gang = workload.ranks.len() > 1;
        let id = workload.order_id.to_string();
        let bases: Vec<&str> = workload
            .name
            .iter()
            .map(String::as_str)
            .chain([id.as_str()])
            .collect();
        for (rank, (_, address)) in workload.ranks.iter().enumerate() {
            let mut wanted: Vec<String> = Vec::new();
            if gang {
                wanted.extend(bases.iter().map(|base| format!("{base}-{rank}")));
            }
            if rank == 0 {
                wanted.extend(bases.iter().map(|base| (*base).to_owned()));
            }
            let names: Vec<String> = wanted
                .into_iter()
                .filter(|name| name.len() <= NAME_MAX && claimed.insert(name.clone()))
                .collect();
            if !names.is_empty() {
                table.push(Host {
                    address: *address,
                    names,
                });
            }
        }
    }
    table
}

/// A host name's longest, as the kernel takes one.
const NAME_MAX: usize = 63;

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(id: u128, minute: u32, name: Option<&str>, addresses: &[u8]) -> Workload {
        Workload {
            order_id: Uuid::from_u128(id),
            created: chrono::DateTime::from_timestamp(i64::from(minute) * 60, 0)
                .unwrap_or_default(),
            name: name.map(str::to_owned),
            ranks: addresses
                .iter()
                .map(|host| {
                    (
                        Uuid::from_u128(u128::from(*host)),
                        Ipv4Addr::new(198, 19, 0, *host),
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn workloads_answer_to_their_orders_names_and_ranks_and_the_older_keeps_a_name() {
        let table = name_table(vec![
            workload(3, 2, Some("train-1"), &[9]),
            workload(1, 0, Some("train"), &[5, 4]),
            workload(2, 1, None, &[7]),
        ]);
        let id = |n: u128| Uuid::from_u128(n).to_string();
        assert_eq!(
            table,
            vec![
                Host {
                    address: [198, 19, 0, 4].into(),
                    names: vec![
                        "train-0".into(),
                        format!("{}-0", id(1)),
                        "train".into(),
                        id(1),
                    ],
                },
                Host {
                    address: [198, 19, 0, 5].into(),
                    names: vec!["train-1".into(), format!("{}-1", id(1))],
                },
                Host {
                    address: [198, 19, 0, 7].into(),
                    names: vec![id(2)],
                },
                // `train-1` is the gang's rank 1's: the later order keeps
                // only its id.
                Host {
                    address: [198, 19, 0, 9].into(),
                    names: vec![id(3)],
                },
            ]
        );
    }

    #[test]
    fn addresses_go_round_the_network_skipping_those_in_use() {
        let net: Ipv4Net = "198.18.0.0/29".parse().expect("network");
        let none = HashSet::new();
        assert_eq!(next_free(net, 1, &none), Some(([198, 18, 0, 1].into(), 2)));
        // The last host (.6) is followed by the first again, never .7.
        assert_eq!(next_free(net, 6, &none), Some(([198, 18, 0, 6].into(), 1)));
        let taken: HashSet<Ipv4Addr> = [[198, 18, 0, 6].into(), [198, 18, 0, 1].into()].into();
        assert_eq!(next_free(net, 6, &taken), Some(([198, 18, 0, 2].into(), 3)));
        let full: HashSet<Ipv4Addr> = (1..=6).map(|h| [198, 18, 0, h].into()).collect();
        assert_eq!(next_free(net, 3, &full), None);
    }
}
