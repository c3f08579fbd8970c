//! The switches and knobs of the engine's policies.

/// How the engine picks among nodes that could host a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementStrategy {
    /// Minimise the fragmentation the placement adds, weighted by the shapes
    /// of work that is waiting (the idea of the FGD paper), after topology.
    FragmentationAware,
    /// The FGD paper's score as its authors publish it (Weng et al., USENIX
    /// ATC '23): the node whose expected fragmentation grows least, where
    /// a request that fits counts only the partly used GPUs too small for
    /// it, CPU alone stands for the host, and equal scores are drawn at
    /// random as the Kubernetes scheduler does. A peer for the simulator.
    Fgd,
    /// The node left with the fewest free GPUs (packing).
    BestFit,
    /// The first node, by name, that fits.
    FirstFit,
    /// The node left with the most free GPUs.
    Spread,
    /// A node drawn by a hash of the seed, the workload and the node, so it
    /// is random yet repeatable.
    Random {
        /// The seed.
        seed: u64,
    },
}

/// What happens behind the highest-ranked workload that cannot start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backfill {
    /// Nothing ranked below it starts (strict first-come order).
    None,
    /// Anything that fits starts; big work may starve.
    Greedy,
    /// It gets a reservation, and later work starts only if it does not
    /// delay it (EASY backfill).
    Easy,
}

/// Every policy, each switchable. [`Policy::default`] turns all on.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// How nodes are chosen.
    pub placement: PlacementStrategy,
    /// Fitting nodes scored per bucket of equal free GPUs by the sampling
    /// strategies: a few find a tight, low-fragmentation node without
    /// scoring the whole cluster; `usize::MAX` scores every node.
    pub scored_per_bucket: usize,
    /// Higher classes preempt lower ones.
    pub preemption: bool,
    /// Work within its guaranteed quota preempts borrowers.
    pub reclaim: bool,
    /// Victim searches per cycle: each looks at every node that could host
    /// the workload, so a cycle with many blocked workloads that may preempt
    /// leaves the rest to the next cycle.
    pub preemption_searches: usize,
    /// Seconds between telling a victim it is preempted and stopping it.
    pub grace_seconds: i64,
    /// Quotas and admission limits apply.
    pub quotas: bool,
    /// Queues that used less recently go first within a class.
    pub fair_share: bool,
    /// Waiting shorter than this earns no aging: in a steady backlog every
    /// job waits a while, and aging those waits would undo fair share (the
    /// queue served less would gain rank for being served less).
    pub aging_after: i64,
    /// Rank points a workload gains per hour it waits beyond `aging_after`;
    /// 1,000 points are one priority class.
    pub aging_per_hour: f64,
    /// The most points aging may add.
    pub aging_cap: f64,
    /// Within a queue and class, work that frees its GPUs sooner goes
    /// first: a workload ranks as if it had arrived later by this many times
    /// its estimated duration, at most `shorter_first_horizon`. Zero ranks
    /// by arrival.
    pub shorter_first_factor: f64,
    /// The longest such delay, in seconds, which work that states no
    /// duration gets whole: nothing that arrives more than this after a
    /// workload passes it within its queue and class.
    pub shorter_first_horizon: i64,
    /// Deadline work escalates once its slack falls under this many seconds.
    pub deadline_window: i64,
    /// Points added at zero slack, in proportion before.
    pub deadline_boost: f64,
    /// What happens behind blocked work.
    pub backfill: Backfill,
    /// How many blocked workloads hold reservations (1 is EASY backfill).
    pub reservation_depth: usize,
    /// How many blocked workloads get a planned start; the rest are told how
    /// many wait ahead of them.
    pub planning_depth: usize,
    /// Every waiting workload is told why it waits. A replay, which shows
    /// reasons to no one, turns this off: waiting work then appears in the
    /// decisions only when it has an estimated start, and without reasons.
    pub reasons: bool,
    /// Deferrable work prefers the cheapest region now and may wait for an
    /// off-peak window while its deadline holds.
    pub follow_the_sun: bool,
    /// The longest deferral for an off-peak window, in seconds.
    pub max_deferral: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            placement: PlacementStrategy::FragmentationAware,
            scored_per_bucket: 8,
            preemption: true,
            reclaim: true,
            preemption_searches: 64,
            grace_seconds: 30,
            quotas: true,
            fair_share: true,
            aging_after: 2 * 3_600,
            aging_per_hour: 50.0,
            aging_cap: 1_000.0,
            shorter_first_factor: 40.0,
            // A week: where Slurm's multifactor age factor stops growing by
            // default, and past what a tenant would wait for a start.
            shorter_first_horizon: 7 * 86_400,
            deadline_window: 6 * 3_600,
            deadline_boost: 1_500.0,
            backfill: Backfill::Easy,
            reservation_depth: 1,
            planning_depth: 100,
            reasons: true,
            follow_the_sun: true,
            max_deferral: 12 * 3_600,
        }
    }
}
