//! Free capacity per node and the choice of exact GPUs for one workload.

use std::collections::BTreeMap;

use crate::cluster::{Cluster, Gpu, Node};
use crate::schedule::{PendingReason, Placement};
use crate::workload::{Allocation, Workload};

/// What is still free on one node.
struct FreeNode<'a> {
    node: &'a Node,
    /// Healthy, unallocated GPUs, by index.
    gpus: Vec<&'a Gpu>,
    cpu_milli: u64,
    memory_mib: u64,
}

/// One node's best offer for a workload: the GPUs it would use and how good
/// a fit that is (lower is better).
struct Offer {
    node: usize,
    gpus: Vec<u32>,
    /// 0 when the GPUs share one NVLink domain, 1 when they span several.
    spans_domains: u8,
    /// Free GPUs the node keeps afterwards: fewer is tighter packing, which
    /// keeps whole nodes free for large work.
    left_over: usize,
}

/// The free capacity of the whole cluster while one cycle places work.
pub(crate) struct Capacity<'a> {
    /// Ordered by node name so every cycle visits nodes in the same order.
    nodes: Vec<FreeNode<'a>>,
}

impl<'a> Capacity<'a> {
    pub(crate) fn new(cluster: &'a Cluster, running: &[Allocation]) -> Self {
        let mut nodes: Vec<FreeNode<'a>> = cluster
            .nodes
            .iter()
            .map(|node| FreeNode {
                node,
                gpus: node.gpus.iter().filter(|g| g.healthy).collect(),
                cpu_milli: node.cpu_milli,
                memory_mib: node.memory_mib,
            })
            .collect();
        nodes.sort_by(|a, b| a.node.name.cmp(&b.node.name));
        for allocation in running {
            let found = nodes.binary_search_by(|f| f.node.name.as_str().cmp(&allocation.node));
            if let Some(free) = found.ok().and_then(|index| nodes.get_mut(index)) {
                free.gpus.retain(|g| !allocation.gpus.contains(&g.index));
                free.cpu_milli = free.cpu_milli.saturating_sub(allocation.cpu_milli);
                free.memory_mib = free.memory_mib.saturating_sub(allocation.memory_mib);
            }
        }
        Self { nodes }
    }

    /// Every node with its free GPUs counted per model, in name order.
    pub(crate) fn free_by_model(
        &self,
    ) -> impl Iterator<Item = (&'a Node, BTreeMap<&'a str, u32>)> + '_ {
        self.nodes.iter().map(|free| {
            let mut counts = BTreeMap::new();
            for gpu in &free.gpus {
                *counts.entry(gpu.model.as_str()).or_default() += 1;
            }
            (free.node, counts)
        })
    }

    /// Places `workload` and takes the capacity, or explains why it cannot.
    pub(crate) fn place(&mut self, workload: &Workload) -> Result<Vec<Placement>, PendingReason> {
        for model in &workload.gpu_models {
            if let Some(offers) = self.gang_offers(workload, model) {
                return Ok(offers
                    .into_iter()
                    .map(|offer| self.take(workload, offer))
                    .collect());
            }
        }
        Err(self.why_not(workload))
    }

    /// Nodes that may host `workload` at all: schedulable, in one of its
    /// regions, carrying its labels.
    fn eligible(node: &Node, workload: &Workload) -> bool {
        node.schedulable
            && (workload.regions.is_empty() || workload.regions.contains(&node.region))
            && workload.required_labels.is_subset(&node.labels)
    }

    fn offer(&self, index: usize, workload: &Workload, model: &str) -> Option<Offer> {
        let free = &self.nodes[index];
        if !Self::eligible(free.node, workload)
            || free.cpu_milli < workload.cpu_milli_per_node
            || free.memory_mib < workload.memory_mib_per_node
        {
            return None;
        }
        let wanted = usize::try_from(workload.gpus_per_node).ok()?;
        let mut domains: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for gpu in free.gpus.iter().filter(|g| g.model == model) {
            domains
                .entry(gpu.nvlink_domain)
                .or_default()
                .push(gpu.index);
        }
        let available: usize = domains.values().map(Vec::len).sum();
        if available < wanted {
            return None;
        }
        // The tightest single domain that holds the request, else the
        // fullest domains first so the request spans as few as it can.
        let single = domains
            .values()
            .filter(|indices| indices.len() >= wanted)
            .min_by_key(|indices| indices.len());
        let (gpus, spans_domains) = match single {
            Some(indices) => (indices[..wanted].to_vec(), 0),
            None => {
                let mut by_size: Vec<&Vec<u32>> = domains.values().collect();
                by_size.sort_by_key(|indices| std::cmp::Reverse(indices.len()));
                let mut gpus: Vec<u32> = by_size
                    .into_iter()
                    .flatten()
                    .copied()
                    .take(wanted)
                    .collect();
                gpus.sort_unstable();
                (gpus, 1)
            }
        };
        Some(Offer {
            node: index,
            gpus,
            spans_domains,
            left_over: free.gpus.len() - wanted,
        })
    }

    /// The nodes a workload would use with GPUs of `model`: one node for a
    /// single-node request, else `node_count` nodes, from one rack when a
    /// rack can hold the whole gang.
    fn gang_offers(&self, workload: &Workload, model: &str) -> Option<Vec<Offer>> {
        let count = usize::try_from(workload.node_count).ok()?;
        let mut offers: Vec<Offer> = (0..self.nodes.len())
            .filter_map(|index| self.offer(index, workload, model))
            .collect();
        if count == 0 || offers.len() < count {
            return None;
        }
        offers.sort_by(|a, b| {
            (a.spans_domains, a.left_over, &self.nodes[a.node].node.name).cmp(&(
                b.spans_domains,
                b.left_over,
                &self.nodes[b.node].node.name,
            ))
        });
        let mut racks: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (position, offer) in offers.iter().enumerate() {
            racks
                .entry(&self.nodes[offer.node].node.rack)
                .or_default()
                .push(position);
        }
        // The rack whose best `count` offers pack tightest, else the best
        // offers anywhere.
        let chosen: Vec<usize> = racks
            .values()
            .filter(|positions| positions.len() >= count)
            .map(|positions| positions[..count].to_vec())
            .min_by_key(|positions| {
                positions
                    .iter()
                    .map(|p| offers[*p].left_over)
                    .sum::<usize>()
            })
            .unwrap_or_else(|| (0..count).collect());
        let mut taken: Vec<Option<Offer>> = offers.into_iter().map(Some).collect();
        Some(chosen.into_iter().filter_map(|p| taken[p].take()).collect())
    }

    fn take(&mut self, workload: &Workload, offer: Offer) -> Placement {
        let free = &mut self.nodes[offer.node];
        free.gpus.retain(|g| !offer.gpus.contains(&g.index));
        free.cpu_milli -= workload.cpu_milli_per_node;
        free.memory_mib -= workload.memory_mib_per_node;
        Placement {
            node: free.node.name.clone(),
            gpus: offer.gpus,
        }
    }

    /// The reason, with numbers, that `workload` cannot start now.
    fn why_not(&self, workload: &Workload) -> PendingReason {
        let models = &workload.gpu_models;
        let wanted = workload.gpus_per_node;
        let needed_nodes = workload.node_count;
        let eligible: Vec<&FreeNode<'_>> = self
            .nodes
            .iter()
            .filter(|f| Self::eligible(f.node, workload))
            .collect();
        let could_ever = eligible.iter().filter(|f| {
            let healthy = f
                .node
                .gpus
                .iter()
                .filter(|g| g.healthy && models.contains(&g.model))
                .count();
            u32::try_from(healthy).unwrap_or(u32::MAX) >= wanted
                && f.node.cpu_milli >= workload.cpu_milli_per_node
                && f.node.memory_mib >= workload.memory_mib_per_node
        });
        if u32::try_from(could_ever.count()).unwrap_or(u32::MAX) < needed_nodes {
            return PendingReason::NoSuitableNode {
                nodes_needed: needed_nodes,
            };
        }
        let free_on = |f: &FreeNode<'_>| {
            u32::try_from(f.gpus.iter().filter(|g| models.contains(&g.model)).count())
                .unwrap_or(u32::MAX)
        };
        let free_gpus: u32 = eligible.iter().map(|f| free_on(f)).sum();
        let needed = wanted.saturating_mul(needed_nodes);
        if free_gpus < needed {
            return PendingReason::InsufficientGpus { free_gpus, needed };
        }
        let with_gpus: Vec<&&FreeNode<'_>> =
            eligible.iter().filter(|f| free_on(f) >= wanted).collect();
        if u32::try_from(with_gpus.len()).unwrap_or(u32::MAX) >= needed_nodes {
            return PendingReason::CpuOrMemory {
                nodes_with_free_gpus: u32::try_from(with_gpus.len()).unwrap_or(u32::MAX),
            };
        }
        PendingReason::Fragmentation {
            free_gpus,
            gpus_per_node: wanted,
            nodes_needed: needed_nodes,
            nodes_with_room: u32::try_from(with_gpus.len()).unwrap_or(u32::MAX),
            largest_free_on_one_node: eligible.iter().map(|f| free_on(f)).max().unwrap_or(0),
        }
    }
}
