//! The fill protocol on a slice of the Alibaba trace: placements that an
//! independent check accepts, curves that follow the arrivals, and the same
//! report for the same seed.

use std::collections::BTreeMap;

use gantry_scheduler::Cluster;
use gantry_sim::experiment::{PLACEMENT_POLICIES, fill_experiment, placement_policy};
use gantry_sim::{alibaba, fill};

fn cluster() -> Cluster {
    Cluster {
        nodes: alibaba::nodes(include_str!("fixtures/nodes.csv")).expect("nodes"),
        regions: Vec::new(),
    }
}

fn pods() -> Vec<alibaba::Pod> {
    alibaba::pods(include_str!("fixtures/pods_default.csv")).expect("pods")
}

#[test]
fn every_placement_fits_its_node_by_an_independent_check() {
    let cluster = cluster();
    let pods = pods();
    for policy in PLACEMENT_POLICIES {
        let config = placement_policy(policy, 42).expect("policy");
        let mut rows = Vec::new();
        let run = fill::run(&cluster, &pods, &config, 42, 1.3, |row| {
            rows.push(row.clone())
        });
        // Replay the CSV rows against the node list.
        let mut left: BTreeMap<&str, (i64, i64, Vec<i64>)> = cluster
            .nodes
            .iter()
            .map(|n| {
                (
                    n.name.as_str(),
                    (
                        n.cpu_milli as i64,
                        n.memory_mib as i64,
                        vec![1000; n.gpus.len()],
                    ),
                )
            })
            .collect();
        for (seq, row) in rows.iter().enumerate() {
            assert_eq!(row.seq, seq);
            let Some(node) = &row.node else { continue };
            let (cpu, mem, gpus) = left.get_mut(node.as_str()).expect("known node");
            *cpu -= row.pod.cpu_milli as i64;
            *mem -= row.pod.memory_mib as i64;
            assert!(
                *cpu >= 0 && *mem >= 0,
                "{policy}: {node} over CPU or memory"
            );
            assert_eq!(
                row.gpus.len(),
                row.pod.num_gpu as usize,
                "{policy}: GPU count"
            );
            for gpu in &row.gpus {
                let free = &mut gpus[*gpu as usize];
                if row.pod.gpu_milli == 1000 {
                    assert_eq!(*free, 1000, "{policy}: a whole GPU must be unused");
                }
                *free -= i64::from(row.pod.gpu_milli);
                assert!(*free >= 0, "{policy}: {node} GPU {gpu} over capacity");
            }
            let model = &cluster
                .nodes
                .iter()
                .find(|n| &n.name == node)
                .expect("node")
                .gpus;
            if !row.pod.gpu_spec.is_empty() && row.pod.num_gpu > 0 {
                assert!(
                    row.pod.gpu_spec.contains(&model[0].model),
                    "{policy}: model"
                );
            }
            assert!(row.csv().starts_with(&format!("{seq},{}", row.pod.name)));
        }
        assert_eq!(rows.len(), run.arrived);
        assert_eq!(rows.iter().filter(|r| r.node.is_none()).count(), run.failed);
        // One point per whole percent of arrived work, allocation never
        // above arrived work and never falling.
        for (i, point) in run.curve.iter().enumerate() {
            assert_eq!(point.arrived_percent as usize, i + 1);
            assert!(point.arrived >= f64::from(point.arrived_percent) / 100.0);
            assert!(point.allocation <= point.arrived + 1e-9);
            assert!((0.0..=1.0).contains(&point.fragmentation));
            if i > 0 {
                assert!(point.allocation >= run.curve[i - 1].allocation);
            }
        }
    }
}

#[test]
fn arrivals_stop_before_the_inflated_request() {
    let pods = pods();
    let total = 40_000;
    let order = fill::arrivals(&pods, total, 7, 1.3);
    let requested: u64 = order.iter().map(|i| pods[*i].gpu_request_milli()).sum();
    assert!(requested <= 52_000);
    let mut first: Vec<usize> = order.iter().copied().take(pods.len()).collect();
    first.sort_unstable();
    first.dedup();
    assert!(
        first.len() >= pods.len() - 1 || requested > 40_000,
        "each pod arrives once first"
    );
    assert_eq!(order, fill::arrivals(&pods, total, 7, 1.3));
    assert_ne!(order, fill::arrivals(&pods, total, 8, 1.3));
}

#[test]
fn the_same_seeds_give_byte_identical_reports() {
    let cluster = cluster();
    let lists = vec![("default".to_owned(), pods())];
    let policies = vec!["gantry".to_owned(), "random".to_owned()];
    let report = |threads| {
        serde_json::to_string(&fill_experiment(
            &cluster,
            &lists,
            &policies,
            &[42, 43],
            1.3,
            threads,
            &|_| {},
        ))
        .expect("json")
    };
    let one = report(1);
    assert_eq!(one, report(2));
    assert!(one.contains("\"medians\""));
}
