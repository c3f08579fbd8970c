//! One full scheduling cycle over a large cluster and queue.
//!
//! `cargo bench -p gantry-scheduler` prints the time of one `schedule` call
//! for each size. The cluster is half busy (every other node holds work on
//! half its GPUs) and the queue mixes shapes, models, priorities and gangs.

use std::collections::BTreeSet;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gantry_scheduler::{Allocation, Cluster, Gpu, Node, Workload, schedule};

const MODELS: [&str; 2] = ["H100-SXM-80GB", "H200-141GB"];

fn cluster(nodes: usize) -> (Cluster, Vec<Allocation>) {
    let nodes: Vec<Node> = (0..nodes)
        .map(|i| Node {
            name: format!("node-{i:05}"),
            region: if i % 4 == 0 { "us-east-1" } else { "eu-west-1" }.into(),
            rack: format!("rack-{}", i / 32),
            labels: BTreeSet::new(),
            cpu_milli: 192_000,
            memory_mib: 2_048 * 1_024,
            schedulable: true,
            gpus: (0..8)
                .map(|index| Gpu {
                    index,
                    model: MODELS[i % 2].into(),
                    nvlink_domain: index / 4,
                    healthy: true,
                })
                .collect(),
        })
        .collect();
    let running = nodes
        .iter()
        .step_by(2)
        .map(|n| Allocation {
            workload: format!("running-{}", n.name),
            node: n.name.clone(),
            gpus: vec![0, 1, 2, 3],
            cpu_milli: 32_000,
            memory_mib: 256 * 1_024,
        })
        .collect();
    (Cluster { nodes }, running)
}

fn pending(count: usize) -> Vec<Workload> {
    (0..count)
        .map(|i| Workload {
            id: format!("w-{i:06}"),
            tenant: format!("tenant-{}", i % 17),
            gpu_models: vec![MODELS[i % 2].into()],
            gpus_per_node: [1, 1, 2, 4, 8][i % 5],
            node_count: if i % 50 == 0 { 4 } else { 1 },
            cpu_milli_per_node: 8_000,
            memory_mib_per_node: 64 * 1_024,
            priority: i32::try_from(i % 3).unwrap_or_default(),
            submitted_at: i64::try_from(i).unwrap_or_default(),
            regions: Vec::new(),
            required_labels: BTreeSet::new(),
        })
        .collect()
}

fn cycle(c: &mut Criterion) {
    let mut group = c.benchmark_group("schedule");
    group.sample_size(10);
    for (nodes, queued) in [(100, 1_000), (1_000, 1_000), (1_000, 10_000)] {
        let (cluster, running) = cluster(nodes);
        let work = pending(queued);
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{nodes}x8-gpus_{queued}-pending")),
            &(cluster, running, work),
            |b, (cluster, running, work)| {
                b.iter(|| schedule(black_box(cluster), black_box(running), black_box(work)))
            },
        );
    }
    group.finish();
}

criterion_group!(benches, cycle);
criterion_main!(benches);
