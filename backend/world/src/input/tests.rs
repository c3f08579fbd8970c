//! Random changes to the leader's copy, recorded as following the change
//! log records them, go through the kept input; after every step it must
//! equal an input built whole from the same copy.

use std::collections::HashMap;

use chrono::{DateTime, TimeDelta, Utc};
use proptest::prelude::*;
use uuid::Uuid;

use super::{Input, differences};
use crate::gate::Gate;
use crate::scoped::Held;
use crate::world::{Changed, World};
use gantry_entities::{
    allocation, gpu, gpu_model, instance_type, node, order, quota, region, reservation,
};
use gantry_types::classes::{
    AllocationState, DriverKind, NodeState, OrderStatus, PricingClass, PriorityClass,
    ReservationStatus, WorkloadClass,
};
use gantry_types::reasons::WaitReason;

const GPUS_PER_NODE: i32 = 4;

/// A copy of the rows, the changes made to it since the last cycle, and
/// the dependency gate, as the loop would have them.
struct Run {
    world: World,
    changed: Changed,
    gate: Gate,
    now: DateTime<Utc>,
    next: u128,
    models: Vec<Uuid>,
    types: Vec<Uuid>,
    regions: Vec<Uuid>,
    orgs: Vec<Uuid>,
    reservation: Uuid,
    /// Orders made since the last cycle, and whether nothing else changed.
    arrived: Vec<Uuid>,
    only_arrivals: bool,
}

impl Run {
    fn new() -> Self {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let mut run = Self {
            world: World::default(),
            changed: Changed::default(),
            gate: Gate::default(),
            now,
            next: 0,
            models: Vec::new(),
            types: Vec::new(),
            regions: Vec::new(),
            orgs: Vec::new(),
            reservation: Uuid::nil(),
            arrived: Vec::new(),
            only_arrivals: false,
        };
        for name in ["eu-west-1", "us-east-1"] {
            let id = run.id();
            run.regions.push(id);
            run.world.regions.insert(
                id,
                region::Model {
                    id,
                    name: name.into(),
                    display_name: name.into(),
                    time_zone: "UTC".into(),
                    compliance_tags: "[]".into(),
                    off_peak_start_hour: None,
                    off_peak_end_hour: None,
                    off_peak_multiplier_permille: None,
                    created_at: now,
                    updated_at: now,
                },
            );
        }
        for name in ["H100", "A100"] {
            let id = run.id();
            run.models.push(id);
            run.world.gpu_models.insert(
                id,
                gpu_model::Model {
                    id,
                    name: name.into(),
                    vendor: "nvidia".into(),
                    memory_gib: 80,
                    interconnect: "nvlink".into(),
                    mig_capable: true,
                    created_at: now,
                    updated_at: now,
                },
            );
        }
        for (gpus, mig) in [(1, None), (4, None), (1, Some("1g.10gb"))] {
            let id = run.id();
            run.types.push(id);
            run.world.instance_types.insert(
                id,
                instance_type::Model {
                    id,
                    name: format!("type-{gpus}-{}", mig.is_some()),
                    gpu_model_id: run.models[0],
                    gpus_per_node: gpus,
                    vcpus: 8,
                    memory_gib: 32,
                    disk_gib: 100,
                    gpu_milli: None,
                    mig_profile: mig.map(Into::into),
                    created_at: now,
                    updated_at: now,
                },
            );
        }
        run.orgs = vec![run.id(), run.id(), run.id()];
        run.reservation = run.id();
        run.world.reservations.insert(
            run.reservation,
            reservation::Model {
                id: run.reservation,
                org_id: run.orgs[0],
                project_id: None,
                name: "window".into(),
                instance_type_id: run.types[1],
                gpu_model_id: run.models[0],
                region_id: run.regions[0],
                node_count: 1,
                gpus_per_node: GPUS_PER_NODE,
                starts_at: now - TimeDelta::hours(1),
                ends_at: now + TimeDelta::hours(5),
                hourly_micros: 1,
                status: ReservationStatus::Confirmed,
                billed_until: now + TimeDelta::hours(5),
                cancelled_at: None,
                cancellation_fee_micros: 0,
                created_by_kind: "user".into(),
                created_by: None,
                created_at: now,
                updated_at: now,
            },
        );
        for at in 0..4 {
            run.add_node(at);
        }
        run
    }

    fn id(&mut self) -> Uuid {
        self.next += 1;
        Uuid::from_u128(self.next)
    }

    fn add_node(&mut self, pick: u32) {
        let id = self.id();
        let model = self.models[pick as usize % self.models.len()];
        self.world.nodes.insert(
            id,
            node::Model {
                id,
                name: format!("node-{:03}", self.next),
                region_id: self.regions[pick as usize % self.regions.len()],
                rack: "rack-1".into(),
                instance_type_id: None,
                cpu_milli: 64_000,
                memory_mib: 512 * 1024,
                labels: r#"["fast"]"#.into(),
                state: NodeState::Ready,
                state_reason: None,
                driver: DriverKind::Simulated,
                credential_hash: None,
                last_heartbeat_at: None,
                runtime: None,
                credential_next_hash: None,
                credential_rotate: false,
                fabric_address: None,
                volume_free_bytes: None,
                created_at: self.now,
                updated_at: self.now,
            },
        );
        for index in 0..GPUS_PER_NODE {
            let gpu = self.id();
            // The first GPU of every other node is cut into MIG instances.
            let mig = index == 0 && pick.is_multiple_of(2);
            self.world.gpus.insert(
                gpu,
                gpu::Model {
                    id: gpu,
                    node_id: id,
                    index,
                    gpu_model_id: model,
                    hardware_uuid: format!("GPU-{gpu}"),
                    memory_mib: 81_920,
                    nvlink_domain: 0,
                    healthy: true,
                    mig_enabled: mig,
                    mig_devices: mig.then(|| {
                        serde_json::json!([
                            {"uuid": format!("MIG-{gpu}-a"), "profile": "1g.10gb"},
                            {"uuid": format!("MIG-{gpu}-b"), "profile": "1g.10gb"},
                        ])
                        .to_string()
                    }),
                    held_outside: false,
                },
            );
        }
        self.changed.nodes.insert(id);
    }

    fn sorted<T>(map: &HashMap<Uuid, T>, keep: impl Fn(&T) -> bool) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = map
            .iter()
            .filter(|(_, row)| keep(row))
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        ids
    }

    fn queued(&self) -> Vec<Uuid> {
        Self::sorted(&self.world.orders, |o| o.status == OrderStatus::Queued)
    }

    fn running(&self) -> Vec<Uuid> {
        Self::sorted(&self.world.orders, |o| o.status == OrderStatus::Running)
    }

    fn nodes(&self) -> Vec<Uuid> {
        Self::sorted(&self.world.nodes, |_| true)
    }

    fn add_order(&mut self, a: u32, b: u32) {
        let id = self.id();
        let kind = self.types[a as usize % self.types.len()];
        let t = &self.world.instance_types[&kind];
        let nodes = self.nodes();
        self.world.orders.insert(
            id,
            order::Model {
                id,
                org_id: self.orgs[b as usize % self.orgs.len()],
                name: None,
                project_id: b.is_multiple_of(3).then_some(self.orgs[0]),
                created_by_kind: "user".into(),
                created_by: None,
                kind: "instance".into(),
                instance_type_id: kind,
                gpu_model_id: t.gpu_model_id,
                gpus_per_node: t.gpus_per_node,
                node_count: 1,
                gpu_milli: None,
                mig_profile: t.mig_profile.clone(),
                region_id: (b % 4 == 1).then_some(self.regions[0]),
                priority_class: PriorityClass::Standard,
                pricing_class: PricingClass::OnDemand,
                workload_class: WorkloadClass::Training,
                duration_seconds: b.is_multiple_of(2).then_some(600),
                checkpointable: false,
                deadline: None,
                status: OrderStatus::Queued,
                pending_reason: None,
                pending_details: None,
                estimated_start: None,
                estimate_confidence: None,
                failure_reason: None,
                access: None,
                attempts: 0,
                idempotency_key: None,
                job: None,
                max_runtime_seconds: None,
                retry_on_failure: false,
                max_retries: 0,
                array_id: None,
                array_index: None,
                exit_code: None,
                log_bytes: 0,
                ssh_key_ids: None,
                ports: None,
                image_id: None,
                image_reference: None,
                reservation_id: (b % 7 == 3).then_some(self.reservation),
                node_id: (b % 5 == 2 && !nodes.is_empty()).then(|| nodes[a as usize % nodes.len()]),
                started_at: None,
                ended_at: None,
                created_at: self.now - TimeDelta::seconds(i64::from(b % 100)),
                updated_at: self.now,
            },
        );
        self.changed.orders.insert(id);
        self.arrived.push(id);
    }

    /// Starts a queued order on a node, as the loop's writes and the log
    /// that follows them would.
    fn start(&mut self, a: u32, b: u32) {
        let (queued, nodes) = (self.queued(), self.nodes());
        if queued.is_empty() || nodes.is_empty() {
            return;
        }
        let id = queued[a as usize % queued.len()];
        let node = nodes[b as usize % nodes.len()];
        let Some(o) = self.world.orders.get_mut(&id) else {
            return;
        };
        o.status = OrderStatus::Running;
        o.started_at = a.is_multiple_of(2).then_some(self.now);
        let (org, mig) = (o.org_id, o.mig_profile.is_some());
        let count = o.gpus_per_node;
        let mig_device = mig
            .then(|| {
                self.world
                    .gpus
                    .values()
                    .find(|g| g.node_id == node && g.mig_enabled)
                    .map(|g| format!("MIG-{}-a", g.id))
            })
            .flatten();
        let allocation = self.id();
        self.world.allocations.insert(
            allocation,
            allocation::Model {
                id: allocation,
                order_id: id,
                org_id: org,
                node_id: node,
                gpu_indices: serde_json::to_string(&(0..count).collect::<Vec<_>>())
                    .unwrap_or_default(),
                state: AllocationState::Active,
                stop_at: None,
                created_at: self.now,
                released_at: None,
                running_since: None,
                down_from: None,
                metered_until: None,
                attempt: 1,
                exit_code: None,
                outcome: None,
                gpu_milli: 1000,
                mig_device: mig_device.clone(),
                private_address: None,
                private_network_id: None,
                stop_cause: None,
            },
        );
        self.changed.orders.insert(id);
        if mig_device.is_some() {
            self.changed.nodes.insert(node);
        }
    }

    /// Ends a running order: its allocations are released and it leaves
    /// the copy.
    fn end(&mut self, a: u32) {
        let running = self.running();
        if running.is_empty() {
            return;
        }
        let id = running[a as usize % running.len()];
        let gone: Vec<allocation::Model> = self
            .world
            .allocations
            .values()
            .filter(|al| al.order_id == id)
            .cloned()
            .collect();
        for al in gone {
            self.world.allocations.remove(&al.id);
            if al.mig_device.is_some() {
                self.changed.nodes.insert(al.node_id);
            }
        }
        self.world.orders.remove(&id);
        self.changed.orders.insert(id);
    }

    fn stopping(&mut self, a: u32) {
        let mut ids = Self::sorted(&self.world.allocations, |al| {
            al.state == AllocationState::Active
        });
        ids.truncate(16);
        let Some(al) = ids
            .get(a as usize % ids.len().max(1))
            .and_then(|id| self.world.allocations.get_mut(id))
        else {
            return;
        };
        al.state = AllocationState::Stopping;
        al.stop_at = Some(self.now + TimeDelta::seconds(30));
        self.changed.orders.insert(al.order_id);
    }

    fn reprioritize(&mut self, a: u32) {
        let queued = self.queued();
        if let Some(o) = queued
            .get(a as usize % queued.len().max(1))
            .and_then(|id| self.world.orders.get_mut(id))
        {
            o.priority_class = PriorityClass::Production;
            o.duration_seconds = Some(60);
            self.changed.orders.insert(o.id);
        }
    }

    fn cancel(&mut self, a: u32) {
        let queued = self.queued();
        if let Some(id) = queued.get(a as usize % queued.len().max(1)) {
            self.world.orders.remove(id);
            self.changed.orders.insert(*id);
        }
    }

    fn gpu_health(&mut self, a: u32) {
        let gpus = Self::sorted(&self.world.gpus, |_| true);
        if let Some(g) = gpus
            .get(a as usize % gpus.len().max(1))
            .and_then(|id| self.world.gpus.get_mut(id))
        {
            g.healthy = !g.healthy;
            self.changed.nodes.insert(g.node_id);
        }
    }

    fn node_state(&mut self, a: u32, b: u32) {
        let nodes = self.nodes();
        if let Some(n) = nodes
            .get(a as usize % nodes.len().max(1))
            .and_then(|id| self.world.nodes.get_mut(id))
        {
            n.state = [
                NodeState::Ready,
                NodeState::Cordoned,
                NodeState::Draining,
                NodeState::Unhealthy,
            ][b as usize % 4];
            n.labels = if b.is_multiple_of(2) {
                r#"["fast"]"#.into()
            } else {
                "[]".into()
            };
            self.changed.nodes.insert(n.id);
        }
    }

    fn rename_node(&mut self, a: u32) {
        let nodes = self.nodes();
        if let Some(n) = nodes
            .get(a as usize % nodes.len().max(1))
            .and_then(|id| self.world.nodes.get_mut(id))
        {
            n.name = format!("renamed-{a}");
            self.changed.nodes.insert(n.id);
        }
    }

    fn remove_node(&mut self, a: u32) {
        let nodes = self.nodes();
        if nodes.len() <= 2 {
            return;
        }
        let id = nodes[a as usize % nodes.len()];
        self.world.nodes.remove(&id);
        self.world.gpus.retain(|_, g| g.node_id != id);
        self.changed.nodes.insert(id);
    }

    fn rename_model(&mut self, a: u32) {
        if let Some(m) = self.world.gpu_models.get_mut(&self.models[0]) {
            m.name = format!("H100-{a}");
            self.changed.catalog = true;
        }
    }

    fn narrow_quota(&mut self, a: u32) {
        let id = self.id();
        self.world.quotas.insert(
            id,
            quota::Model {
                id,
                org_id: self.orgs[a as usize % self.orgs.len()],
                project_id: a.is_multiple_of(2).then_some(self.orgs[0]),
                gpu_model_id: self.models[0],
                region_id: (a % 2 == 1).then_some(self.regions[1]),
                guaranteed_gpus: 0,
                max_gpus: Some(i32::try_from(a % 6).unwrap_or(0)),
                created_at: self.now,
                updated_at: self.now,
            },
        );
    }

    fn hold_on_dependency(&mut self, a: u32) {
        let queued = self.queued();
        let Some(&id) = queued.get(a as usize % queued.len().max(1)) else {
            return;
        };
        if a.is_multiple_of(3) {
            self.gate.broken.insert(id, "a dependency failed".into());
        } else {
            self.gate.blocked.insert(
                id,
                Held {
                    order_id: id,
                    reason: "waiting for a job".into(),
                    details: WaitReason::ScopedQuota { needed_gpus: 1 },
                },
            );
        }
    }

    /// One cycle: the kept input, patched with what changed, against one
    /// built whole; and what it says changed against what did.
    fn cycle(&mut self, input: &mut Input) -> Result<(), TestCaseError> {
        let changed = std::mem::take(&mut self.changed);
        let (kept, delta) = input.prepare(&self.world, Some(&changed), self.gate.clone(), self.now);
        let (whole, _) = Input::default().prepare(&self.world, None, self.gate.clone(), self.now);
        prop_assert_eq!(&kept.snapshot.pending, &whole.snapshot.pending);
        prop_assert_eq!(differences(&kept, &whole), Vec::<&str>::new());
        prop_assert_eq!(&kept.snapshot.pending, &whole.snapshot.pending);
        prop_assert_eq!(&kept.snapshot, &whole.snapshot);
        if self.only_arrivals {
            prop_assert!(!delta.unsettled, "only new orders came, yet {delta:?}");
        }
        let waiting = |id: &String| kept.snapshot.pending.iter().any(|w| w.id == *id);
        prop_assert!(delta.arrived.iter().all(waiting), "{delta:?}");
        // Arrivals matter only to a cycle that keeps its plan: an unsettled
        // one plans everything.
        for id in std::mem::take(&mut self.arrived)
            .iter()
            .map(ToString::to_string)
        {
            if !delta.unsettled {
                prop_assert_eq!(
                    waiting(&id),
                    delta.arrived.contains(&id),
                    "{} {:?}",
                    id,
                    delta
                );
            }
        }
        input.keep(kept);
        // Dependencies end and start between cycles.
        self.gate = Gate::default();
        self.only_arrivals = true;
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_kept_input_equals_one_built_whole(steps in prop::collection::vec((0u8..19, any::<u32>(), any::<u32>()), 1..120)) {
        let mut run = Run::new();
        let mut input = Input::default();
        run.cycle(&mut input)?;
        for (step, a, b) in steps {
            run.only_arrivals &= step <= 4 || step == 18;
            match step {
                0..=2 => run.add_order(a, b),
                3 | 4 => run.start(a, b),
                5 => run.end(a),
                6 => run.stopping(a),
                7 => run.reprioritize(a),
                8 => run.cancel(a),
                9 => run.gpu_health(a),
                10 => run.node_state(a, b),
                11 => run.add_node(a),
                12 => run.rename_node(a),
                13 => run.remove_node(a),
                14 => run.rename_model(a),
                15 => run.narrow_quota(a),
                16 => run.hold_on_dependency(a),
                17 => {
                    run.now += TimeDelta::seconds(i64::from(a % 600));
                    run.cycle(&mut input)?;
                }
                _ => run.cycle(&mut input)?,
            }
        }
        run.cycle(&mut input)?;
    }
}
