//! Placing workloads one at a time into a cluster that only fills: the
//! arrival-only protocol of placement studies, and what-if questions about
//! where the next workload would go.

use crate::cluster::Cluster;
use crate::placement::{Demand, ShapeTally, Shapes, compare, find, node_fragmentation, shapes_of};
use crate::policy::{PlacementStrategy, Policy};
use crate::state::{Alloc, FastMap, Holder, NO_MODEL, State, View, WHOLE};
use crate::workload::{GpuRequest, Placement, Workload};

/// A cluster that work is placed into one workload at a time, with the same
/// placement code the scheduling cycle uses; nothing ever leaves.
pub struct Placer<'a> {
    state: State<'a>,
    policy: Policy,
    shapes: Shapes,
    /// Per GPU model, the share of its capacity that expected work which
    /// may run on few models would need: what taking one of its GPUs costs
    /// work with nowhere else to go.
    scarcity: FastMap<u32, f64>,
    placed: u32,
}

/// How much of the GPU capacity is allocated and how much of the rest is
/// fragmented, in thousandths of a GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fill {
    /// Healthy GPU capacity.
    pub total_milli: u64,
    /// Capacity held by placed work.
    pub allocated_milli: u64,
    /// Free capacity that a request drawn from the expected work could not
    /// use, as an expectation over that work's shapes.
    pub fragmented_milli: f64,
}

impl<'a> Placer<'a> {
    /// An empty `cluster`; `expected` is the work to expect, whose shapes
    /// the fragmentation-aware strategy and [`Placer::fill`] weigh.
    pub fn new(cluster: &'a Cluster, policy: &Policy, expected: &[Workload]) -> Self {
        let state = State::new(cluster, 0);
        let mut tally = ShapeTally::default();
        for workload in expected {
            tally.add(Self::models(&state, workload), workload);
        }
        let scarcity = Self::scarcity(&state, expected);
        Self {
            state,
            policy: policy.clone(),
            shapes: shapes_of(tally),
            scarcity,
            placed: 0,
        }
    }

    /// Demand of work that may not run on every model, spread over the
    /// models it may run on by their capacity, as a share of each model's
    /// capacity, with all expected work scaled to the cluster's size.
    fn scarcity(state: &State<'_>, expected: &[Workload]) -> FastMap<u32, f64> {
        let mut capacity: FastMap<u32, f64> = FastMap::default();
        for node in &state.nodes {
            for gpu in node
                .gpus
                .iter()
                .filter(|g| g.healthy && g.model != NO_MODEL)
            {
                *capacity.entry(gpu.model).or_default() += f64::from(WHOLE);
            }
        }
        let total_capacity: f64 = capacity.values().sum();
        let (mut restricted, mut demand): (FastMap<u32, f64>, f64) = Default::default();
        for workload in expected.iter().filter(|w| w.gpus != GpuRequest::Whole(0)) {
            let need = workload.total_milli() as f64;
            demand += need;
            let models = Self::models(state, workload);
            if models.len() >= capacity.len() {
                continue;
            }
            let reach: f64 = models.iter().filter_map(|m| capacity.get(m)).sum();
            if reach > 0.0 {
                for model in models {
                    *restricted.entry(model).or_default() += need / reach;
                }
            }
        }
        if demand <= 0.0 {
            return FastMap::default();
        }
        restricted
            .into_iter()
            .map(|(model, share)| (model, (share * total_capacity / demand).min(1.0)))
            .collect()
    }

    fn models(state: &State<'_>, workload: &Workload) -> Vec<u32> {
        if workload.gpus == GpuRequest::Whole(0) {
            return vec![NO_MODEL];
        }
        workload
            .gpu_models
            .iter()
            .filter_map(|m| state.models.get(m))
            .collect()
    }

    /// Places `workload` on the best node under the policy's strategy,
    /// on any of its GPU models; `None` when it fits nowhere. Regions,
    /// labels, CPU, memory and gangs are honoured as in a cycle; quotas and
    /// ranking are not (there is nothing to rank).
    pub fn place(&mut self, workload: &Workload) -> Option<Vec<Placement>> {
        let regions: Vec<u32> = workload
            .regions
            .iter()
            .map(|r| self.state.regions.get(r).unwrap_or(NO_MODEL))
            .collect();
        let view = View {
            from: 0,
            until: None,
            reservation: None,
            tentative: false,
            binding: true,
        };
        let scored = self.policy.placement == PlacementStrategy::FragmentationAware;
        let mut fitting = Self::models(&self.state, workload)
            .into_iter()
            .filter_map(|model| {
                let demand = Demand {
                    workload,
                    model,
                    regions: regions.clone(),
                    view,
                };
                let mut offers = find(&self.state, &demand, &self.policy, &self.shapes)?;
                if scored {
                    let cost = self.scarcity.get(&model).copied().unwrap_or(0.0)
                        * workload.gpus.milli_per_node() as f64;
                    for offer in &mut offers {
                        offer.add_cost(cost);
                    }
                }
                Some(offers)
            });
        // A trace's models are alternatives, not preferences: a single-node
        // workload takes the best node of any of them, as the strategy
        // ranks nodes, the fragmentation-aware one counting what its GPUs
        // would cost work that could run nowhere else; a gang takes the
        // first model that fits it.
        let offers = if workload.node_count == 1 {
            fitting.min_by(|a, b| match (a.first(), b.first()) {
                (Some(a), Some(b)) => compare(self.policy.placement, &workload.id, a, b),
                _ => std::cmp::Ordering::Equal,
            })
        } else {
            fitting.next()
        }?;
        let holder = Holder::Started(self.placed);
        self.placed += 1;
        let units = match workload.gpus {
            GpuRequest::Whole(_) => WHOLE,
            GpuRequest::Milli(milli) => u16::try_from(milli).unwrap_or(WHOLE),
            GpuRequest::Mig(slices) => u16::from(slices),
        };
        Some(
            offers
                .into_iter()
                .map(|offer| {
                    self.state.hold(
                        offer.node,
                        Alloc {
                            holder,
                            mask: offer.mask,
                            units,
                            cpu: workload.cpu_milli_per_node,
                            mem: workload.memory_mib_per_node,
                            release_at: None,
                        },
                    );
                    let node = self.state.node(offer.node);
                    Placement {
                        node: node.node.name.clone(),
                        gpus: node.indices(offer.mask),
                    }
                })
                .collect(),
        )
    }

    /// Allocation and fragmentation of the cluster now.
    pub fn fill(&self) -> Fill {
        let mut fill = Fill {
            total_milli: 0,
            allocated_milli: 0,
            fragmented_milli: 0.0,
        };
        for node in &self.state.nodes {
            for gpu in node.gpus.iter().filter(|g| g.healthy) {
                fill.total_milli += u64::from(WHOLE);
                fill.allocated_milli +=
                    u64::from(gpu.used) * u64::from(WHOLE) / u64::from(gpu.capacity());
            }
            for model in &node.models {
                if let Some(shapes) = self.shapes.get(model) {
                    fill.fragmented_milli +=
                        node_fragmentation(node, *model, node.cpu_free, node.mem_free, shapes);
                }
            }
        }
        fill
    }
}
