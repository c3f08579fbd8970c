//! Admission: malformed, never-fitting, over-quota and over-limit work is
//! rejected with a reason; quotas keep the rest waiting with numbers.

mod common;

use common::{Drive, H100, NOON, World, job, nodes, queue, running};
use gantry_scheduler::{GpuRequest, Policy, Quota, QuotaLimit, Reason, RejectReason};

fn rejection(decisions: &gantry_scheduler::Decisions, id: &str) -> Option<RejectReason> {
    decisions
        .rejections
        .iter()
        .find(|r| r.workload == id)
        .map(|r| r.reason.clone())
}

#[test]
fn requests_that_can_never_run_are_rejected_with_a_reason() {
    let mut world = World::new(nodes(2));
    let mut team = queue("team-a", 8, 1);
    team.quotas.insert(
        H100.into(),
        Quota {
            guaranteed: 8,
            borrow_limit: None,
            max: Some(12),
        },
    );
    team.max_pending = Some(2);
    world.queues = vec![team];
    let mut fraction = job("bad-fraction", "team-a", 0, 1);
    fraction.gpus = GpuRequest::Milli(1_500);
    let mut gang_fraction = job("gang-fraction", "team-a", 0, 2);
    gang_fraction.gpus = GpuRequest::Milli(500);
    let later = |id: &str, offset: i64| {
        let mut w = job(id, "team-a", 1, 1);
        w.submitted_at += offset;
        w
    };
    world.pending = vec![
        fraction,
        gang_fraction,
        job("no-nodes", "team-a", 8, 0),
        job("stranger", "team-b", 1, 1),
        job("too-many", "team-a", 8, 2),
        later("first", 1),
        later("second", 2),
        later("third", 3),
        later("first", 4),
    ];
    let decisions = world.decide(&Policy::default());
    assert!(matches!(
        rejection(&decisions, "bad-fraction"),
        Some(RejectReason::Invalid(_))
    ));
    assert!(matches!(
        rejection(&decisions, "gang-fraction"),
        Some(RejectReason::Invalid(_))
    ));
    assert!(matches!(
        rejection(&decisions, "no-nodes"),
        Some(RejectReason::Invalid(_))
    ));
    assert_eq!(
        rejection(&decisions, "stranger"),
        Some(RejectReason::UnknownQueue("team-b".into()))
    );
    let over = rejection(&decisions, "too-many").expect("over its maximum");
    assert_eq!(
        over,
        RejectReason::OverQuota {
            model: H100.into(),
            needed_milli: 16_000,
            max_milli: 12_000
        }
    );
    assert_eq!(
        over.to_string(),
        "over quota: it needs 16 H100-SXM-80GB and its queue may hold at most 12"
    );
    // The admission limit keeps the two earliest; the duplicate id is
    // refused.
    assert_eq!(
        rejection(&decisions, "third"),
        Some(RejectReason::QueueFull { limit: 2 })
    );
    assert!(decisions.start("first").is_some() && decisions.start("second").is_some());
    assert_eq!(
        decisions
            .rejections
            .iter()
            .filter(|r| r.workload == "first")
            .count(),
        1
    );
}

#[test]
fn quota_reasons_say_how_much_more_quota_would_start_the_work() {
    let mut world = World::new(nodes(4));
    let mut team = queue("team-a", 16, 1);
    team.quotas.insert(
        H100.into(),
        Quota {
            guaranteed: 16,
            borrow_limit: Some(0),
            max: None,
        },
    );
    world.queues = vec![team];
    let all: &[u32] = &[0, 1, 2, 3, 4, 5, 6, 7];
    world.running = vec![running(
        job("a-1", "team-a", 8, 2),
        &[("n0", all), ("n1", all)],
        NOON,
    )];
    world.pending = vec![job("a-2", "team-a", 8, 1)];
    let decisions = world.decide(&Policy::default());
    let waiting = decisions.waiting("a-2").expect("waits on quota");
    assert_eq!(
        waiting.reasons,
        [Reason::Quota {
            queue: "team-a".into(),
            model: H100.into(),
            used_milli: 16_000,
            limit_milli: 16_000,
            needed_milli: 8_000,
            limit: QuotaLimit::Borrowing,
        }]
    );
    assert_eq!(
        waiting.reasons[0].to_string(),
        "quota: team-a uses 16/16 H100-SXM-80GB (guarantee plus borrowing limit); it needs 8 \
         (would fit with 8 more H100-SXM-80GB quota)"
    );
    // With borrowing allowed it starts on the idle nodes.
    world.queues[0].quotas.insert(
        H100.into(),
        Quota {
            guaranteed: 16,
            borrow_limit: Some(8),
            max: None,
        },
    );
    assert!(world.decide(&Policy::default()).start("a-2").is_some());
    // With quotas off nothing is checked.
    world.queues[0].quotas.insert(
        H100.into(),
        Quota {
            guaranteed: 0,
            borrow_limit: Some(0),
            max: Some(1),
        },
    );
    assert!(
        world
            .decide(&Policy {
                quotas: false,
                ..Policy::default()
            })
            .start("a-2")
            .is_some()
    );
}
