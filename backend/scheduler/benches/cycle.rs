//! One full scheduling cycle over large clusters and queues, and the
//! incremental path of one arrival into a steady cluster.
//!
//! `cargo bench -p gantry-scheduler` prints the time of one `schedule` call
//! per size. Half the nodes hold running work on half their GPUs, and the
//! queue mixes shapes (1, 2, 4, 8 GPUs, fractions, 4×8 gangs), GPU models,
//! regions, 17 tenants with guaranteed quotas, priority classes and
//! duration estimates, so that every policy (quotas, fair share,
//! preemption, backfill planning, reasons) does its work.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gantry_scheduler::{
    AdvanceReservation, Asked, Cluster, Gpu, GpuRequest, LaunchShape, Node, OwnedSnapshot,
    Placement, Policy, PriorityClass, Queue, Quota, Running, UsageLedger, Workload,
    capacity_report, capacity_reports, launch_room, schedule, schedule_reporting,
};

const MODELS: [&str; 2] = ["H100-SXM-80GB", "H200-141GB"];
const REGIONS: [&str; 2] = ["eu-west-1", "us-east-1"];
const TENANTS: usize = 17;
const NOW: i64 = 1_796_212_800;
const CLASSES: [PriorityClass; 4] = [
    PriorityClass::Preemptible,
    PriorityClass::Batch,
    PriorityClass::Standard,
    PriorityClass::Production,
];

fn workload(i: usize, prefix: &str) -> Workload {
    let gpus = match i % 20 {
        0 => GpuRequest::Milli(500),
        n => GpuRequest::Whole([1, 1, 2, 4, 8][n % 5]),
    };
    Workload {
        id: format!("{prefix}-{i:06}"),
        queue: format!("tenant-{}", i % TENANTS),
        gpu_models: vec![MODELS[i % 2].into()],
        gpus,
        node_count: if i % 50 == 1 { 4 } else { 1 },
        cpu_milli_per_node: 8_000,
        memory_mib_per_node: 64 * 1_024,
        priority: CLASSES[(i / 3) % 4],
        submitted_at: NOW - 3_600 + i64::try_from(i % 3_600).unwrap_or_default(),
        duration_estimate: (!i.is_multiple_of(5))
            .then_some(600 + 60 * i64::try_from(i % 60).unwrap_or_default()),
        regions: if i.is_multiple_of(7) {
            vec![REGIONS[i % 2].into()]
        } else {
            Vec::new()
        },
        ..Workload::default()
    }
}

fn scenario(nodes: usize, pending: usize) -> OwnedSnapshot {
    let nodes: Vec<Node> = (0..nodes)
        .map(|i| Node {
            name: format!("node-{i:05}"),
            region: REGIONS[usize::from((i / 4) % 2 == 0)].into(),
            rack: format!("rack-{}", i / 32),
            labels: Default::default(),
            cpu_milli: 192_000,
            memory_mib: 2_048 * 1_024,
            schedulable: true,
            gpus: (0..8)
                .map(|index| Gpu {
                    index,
                    model: MODELS[i % 2].into(),
                    nvlink_domain: index / 4,
                    healthy: true,
                    mig_slices: None,
                    mig_instance_slices: None,
                })
                .collect(),
        })
        .collect();
    // Half the nodes of each GPU model and region hold work on half their
    // GPUs.
    let running = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 4 < 2)
        .map(|(i, n)| {
            let mut w = workload(i, "running");
            w.gpu_models = vec![n.gpus[0].model.clone()];
            w.gpus = GpuRequest::Whole(4);
            w.node_count = 1;
            Running {
                workload: w,
                placements: vec![Placement {
                    node: n.name.clone(),
                    gpus: vec![0, 1, 2, 3],
                }],
                started_at: NOW - 1_800,
                last_checkpoint_at: Some(NOW - 600),
                stopping_at: None,
            }
        })
        .collect();
    let per_tenant = u32::try_from(nodes.len() * 8 / 2 / TENANTS).unwrap_or(u32::MAX);
    let queues = (0..TENANTS)
        .map(|t| {
            let mut q = Queue::new(&format!("tenant-{t}"));
            q.weight = 1 + u32::try_from(t % 3).unwrap_or(0);
            for model in MODELS {
                q.quotas.insert(
                    model.into(),
                    Quota {
                        guaranteed: per_tenant / 2,
                        borrow_limit: None,
                        max: None,
                    },
                );
            }
            q
        })
        .collect();
    let mut usage = UsageLedger::new(86_400);
    for t in 0..TENANTS {
        usage.record(
            &format!("tenant-{t}"),
            MODELS[t % 2],
            3_600.0 * (t as f64),
            NOW - 600,
        );
    }
    OwnedSnapshot {
        cluster: Cluster {
            nodes,
            regions: Vec::new(),
        },
        queues,
        running,
        pending: (0..pending).map(|i| workload(i, "w")).collect(),
        reservations: Vec::new(),
        usage,
        now: NOW,
    }
}

fn cycle(c: &mut Criterion) {
    let policy = Policy::default();
    let mut group = c.benchmark_group("schedule");
    group.sample_size(10);
    let sizes: Vec<(usize, usize)> = std::env::var("GANTRY_BENCH_SIZES")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|pair| {
                    let (n, p) = pair.split_once('x')?;
                    Some((n.parse().ok()?, p.parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_else(|| {
            [100, 1_000, 10_000]
                .into_iter()
                .flat_map(|n| [1_000, 10_000, 100_000].map(|p| (n, p)))
                .collect()
        });
    for (nodes, queued) in sizes {
        let world = scenario(nodes, queued);
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{nodes}x8-gpus_{queued}-pending")),
            &world,
            |b, world| b.iter(|| schedule(black_box(&world.snapshot()), &policy)),
        );
    }
    group.finish();
}

/// One arrival into a steady cluster of 1,000 nodes: nothing else waits.
/// At 10,000 nodes, the same arrival planned alone as the server plans it
/// while only new work arrives: against the running work and the 100
/// starts the last whole plan kept for blocked work, as holds.
fn arrival(c: &mut Criterion) {
    let policy = Policy::default();
    let mut world = scenario(1_000, 0);
    world.pending = vec![workload(3, "arrival")];
    c.bench_function("schedule/one-arrival_1000x8-gpus", |b| {
        b.iter(|| schedule(black_box(&world.snapshot()), &policy))
    });
    let mut world = scenario(10_000, 0);
    world.pending = vec![workload(3, "arrival")];
    world.reservations = (0..100)
        .map(|i| AdvanceReservation {
            id: format!("planned start of w-{i:06}"),
            queue: format!("tenant-{}", i % TENANTS),
            start: NOW + 1_800,
            end: NOW + 5_400,
            placements: vec![Placement {
                node: format!("node-{:05}", i * 4),
                gpus: (0..8).collect(),
            }],
        })
        .collect();
    c.bench_function(
        "schedule/one-arrival-against-kept-holds_10000x8-gpus",
        |b| b.iter(|| schedule(black_box(&world.snapshot()), &policy)),
    );
}

/// What the leader's metrics publish reads every 5 s: the capacity report of
/// a loaded 1,000-node cluster, for the fleet alone and with every region.
fn capacity(c: &mut Criterion) {
    let world = scenario(1_000, 10_000);
    let mut group = c.benchmark_group("capacity");
    group.sample_size(20);
    group.bench_function("fleet_1000x8-gpus_10000-pending", |b| {
        b.iter(|| capacity_report(black_box(&world.snapshot())))
    });
    group.bench_function("fleet-and-regions_1000x8-gpus_10000-pending", |b| {
        b.iter(|| capacity_reports(black_box(&world.snapshot())))
    });
    group.finish();
}

/// Launch room for a catalog of 20 instance types (1, 2, 4, 8 whole GPUs
/// and a half GPU, on both models, with two CPU and memory sizes), on the
/// same cluster: worked out once per type, as each availability request
/// used to, against all of them beside a cycle from the cycle's own
/// preparation, as the leader now does.
fn rooms(c: &mut Criterion) {
    let world = scenario(1_000, 10_000);
    let policy = Policy::default();
    let shapes: Vec<LaunchShape> = MODELS
        .iter()
        .flat_map(|model| {
            [1, 2, 4, 8, 0].into_iter().flat_map(move |gpus| {
                [1, 2].into_iter().map(move |size| LaunchShape {
                    model: (*model).into(),
                    gpus: if gpus == 0 {
                        GpuRequest::Milli(500)
                    } else {
                        GpuRequest::Whole(gpus)
                    },
                    cpu_milli: 8_000 * size * u64::from(gpus.max(1)),
                    memory_mib: 65_536 * size * u64::from(gpus.max(1)),
                })
            })
        })
        .collect();
    let mut group = c.benchmark_group("rooms");
    group.sample_size(10);
    group.bench_function("each-type-alone_1000x8-gpus_10000-pending_20-types", |b| {
        b.iter(|| {
            shapes
                .iter()
                .map(|shape| launch_room(black_box(&world.snapshot()), shape).len())
                .sum::<usize>()
        })
    });
    group.bench_function("cycle_1000x8-gpus_10000-pending", |b| {
        b.iter(|| schedule(black_box(&world.snapshot()), &policy))
    });
    group.bench_function(
        "cycle-and-reports_1000x8-gpus_10000-pending_20-types",
        |b| {
            let asked = Asked {
                capacity: true,
                launch: &shapes,
            };
            b.iter(|| schedule_reporting(black_box(&world.snapshot()), &policy, &asked))
        },
    );
    group.finish();
}

criterion_group!(benches, cycle, arrival, capacity, rooms);
criterion_main!(benches);
