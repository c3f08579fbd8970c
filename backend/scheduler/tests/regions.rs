//! Time and place: deferrable work follows the sun to off-peak regions and
//! may wait for an off-peak window while its deadline holds; interactive
//! work stays in its home region.

mod common;

use common::{Drive, H100, NOON, World, job, node};
use gantry_scheduler::{OffPeak, Policy, Reason, Region, WorkloadClass};

/// eu-west-1 (UTC, noon now: peak) and ap-east-1 (UTC+12, midnight now:
/// off-peak), same list price.
fn two_regions() -> World {
    let mut asia = node("ap-0", "r9", H100, 8);
    asia.region = "ap-east-1".into();
    let mut world = World::new(vec![node("eu-0", "r1", H100, 8), asia]);
    let region = |name: &str, offset_hours: i32| Region {
        name: name.into(),
        utc_offset_minutes: offset_hours * 60,
        off_peak: Some(OffPeak {
            start_minute: 22 * 60,
            end_minute: 6 * 60,
            price_permille: 600,
        }),
        gpu_hour_micros: [(H100.to_owned(), 2_500_000)].into(),
    };
    world.cluster.regions = vec![region("eu-west-1", 0), region("ap-east-1", 12)];
    world
}

fn node_of(decisions: &gantry_scheduler::Decisions, id: &str) -> Option<String> {
    decisions.start(id).map(|s| s.placements[0].node.clone())
}

#[test]
fn deferrable_work_goes_off_peak_while_interactive_work_stays_home() {
    let mut world = two_regions();
    let regions = vec!["eu-west-1".to_owned(), "ap-east-1".to_owned()];
    let mut batch = job("batch", "q", 4, 1);
    batch.class = WorkloadClass::Batch;
    batch.regions = regions.clone();
    let mut inference = job("inference", "q", 4, 1);
    inference.class = WorkloadClass::Inference;
    inference.regions = regions;
    world.pending = vec![batch, inference];
    let decisions = world.decide(&Policy::default());
    assert_eq!(node_of(&decisions, "batch").as_deref(), Some("ap-0"));
    assert_eq!(node_of(&decisions, "inference").as_deref(), Some("eu-0"));

    // Without follow-the-sun, the batch job stays home too.
    let decisions = world.decide(&Policy {
        follow_the_sun: false,
        ..Policy::default()
    });
    assert_eq!(node_of(&decisions, "batch").as_deref(), Some("eu-0"));
}

#[test]
fn deferrable_work_waits_for_an_off_peak_window_only_while_its_deadline_holds() {
    let mut world = two_regions();
    let mut patient = job("patient", "q", 8, 1);
    patient.class = WorkloadClass::Hpo;
    patient.regions = vec!["eu-west-1".into()];
    patient.duration_estimate = Some(2 * 3_600);
    patient.deadline = Some(NOON + 24 * 3_600);
    let mut hurried = patient.clone();
    hurried.id = "hurried".into();
    hurried.gpus = gantry_scheduler::GpuRequest::Whole(4);
    hurried.deadline = Some(NOON + 4 * 3_600);
    world.pending = vec![patient, hurried];
    let decisions = world.decide(&Policy::default());
    let waiting = decisions.waiting("patient").expect("defers to the evening");
    let evening = NOON + 10 * 3_600;
    assert_eq!(
        waiting.reasons,
        [Reason::OffPeak {
            region: "eu-west-1".into(),
            at: evening
        }]
    );
    assert_eq!(waiting.estimated_start, Some(evening));
    assert_eq!(node_of(&decisions, "hurried").as_deref(), Some("eu-0"));

    // In the window it runs.
    world.pending.retain(|w| w.id == "patient");
    world.now = evening;
    assert!(world.decide(&Policy::default()).start("patient").is_some());
}
