//! What-if: more nodes or more quota show what would start.

use gantry_scheduler::OwnedSnapshot;
use gantry_scheduler::{Gpu, GpuRequest, Node, Policy, Queue, Quota, Workload};
use gantry_sim::whatif::{Change, what_if};

fn node(name: &str) -> Node {
    Node {
        name: name.into(),
        region: "eu-west-1".into(),
        rack: "r1".into(),
        labels: Default::default(),
        cpu_milli: 128_000,
        memory_mib: 1_024 * 1_024,
        schedulable: true,
        gpus: (0..8)
            .map(|index| Gpu {
                index,
                model: "H100".into(),
                nvlink_domain: index / 4,
                healthy: true,
                mig_slices: None,
                mig_instance_slices: None,
            })
            .collect(),
    }
}

fn job(id: &str, queue: &str) -> Workload {
    Workload {
        id: id.into(),
        queue: queue.into(),
        gpu_models: vec!["H100".into()],
        gpus: GpuRequest::Whole(8),
        node_count: 1,
        duration_estimate: Some(3_600),
        ..Workload::default()
    }
}

#[test]
fn extra_nodes_and_quota_show_what_would_start() {
    let mut team = Queue::new("team-a");
    team.quotas.insert(
        "H100".into(),
        Quota {
            guaranteed: 8,
            borrow_limit: Some(0),
            max: None,
        },
    );
    let state = OwnedSnapshot {
        cluster: gantry_scheduler::Cluster {
            nodes: vec![node("n1")],
            regions: Vec::new(),
        },
        queues: vec![team.clone()],
        pending: vec![job("a", "team-a"), job("b", "team-a"), job("c", "team-a")],
        ..OwnedSnapshot::default()
    };
    let policy = Policy::default();

    let more_nodes = what_if(
        &state,
        &policy,
        &Change {
            extra_nodes: vec![node("n2"), node("n3")],
            ..Change::default()
        },
    );
    assert_eq!(
        (more_nodes.before.starts, more_nodes.before.waiting),
        (1, 2)
    );
    // The quota, not the hardware, holds the rest back.
    assert_eq!(more_nodes.after.starts, 1);

    team.quotas.insert(
        "H100".into(),
        Quota {
            guaranteed: 24,
            borrow_limit: Some(0),
            max: None,
        },
    );
    let both = what_if(
        &state,
        &policy,
        &Change {
            extra_nodes: vec![node("n2"), node("n3")],
            queues: vec![team],
            ..Change::default()
        },
    );
    assert_eq!(
        (
            both.after.starts,
            both.after.started_milli,
            both.after.waiting
        ),
        (3, 24_000, 0)
    );
    assert_eq!(both.after.by_queue["team-a"], (3, 0));
    assert_eq!(both.before, more_nodes.before);
}

#[test]
fn a_defragmentation_plan_shows_what_its_moves_would_start() {
    // Two nodes, each half held by a checkpointable 4-GPU job; a whole-node
    // job waits on fragmentation.
    let mut state = OwnedSnapshot {
        cluster: gantry_scheduler::Cluster {
            nodes: vec![node("n0"), node("n1")],
            regions: Vec::new(),
        },
        now: 1_800_000_000,
        ..OwnedSnapshot::default()
    };
    for name in ["n0", "n1"] {
        let mut half = job(&format!("half-{name}"), "team");
        half.gpus = GpuRequest::Whole(4);
        half.checkpointable = true;
        state.running.push(gantry_scheduler::Running {
            workload: half,
            placements: vec![gantry_scheduler::Placement {
                node: name.into(),
                gpus: vec![0, 1, 2, 3],
            }],
            started_at: state.now - 600,
            last_checkpoint_at: None,
            stopping_at: None,
        });
    }
    state.pending = vec![job("whole", "training")];
    let policy = Policy::default();
    let change = Change {
        defragment: Some(gantry_scheduler::DisruptionBudget {
            gpu_seconds_per_queue_hour: 3_600.0,
            ..Default::default()
        }),
        ..Change::default()
    };
    let answer = what_if(&state, &policy, &change);
    assert_eq!((answer.before.starts, answer.after.starts), (0, 1));
    let plan = answer.plan.expect("a plan was asked for");
    assert_eq!(plan.steps.len(), 1);
    assert_eq!(plan.steps[0].moves.len(), 1);
    // Four GPUs through the 30 s grace period.
    assert_eq!(plan.lost_gpu_seconds, 120.0);
    // Without the change nothing is planned.
    assert!(what_if(&state, &policy, &Change::default()).plan.is_none());
}
