//! The follow-the-sun generator, its rating, and the comparison report.

use gantry_scheduler::WorkloadClass;
use gantry_sim::sun::{self, GPU_HOUR_MICROS, SITES};

#[test]
fn dev_work_arrives_in_local_business_hours_and_only_throughput_work_travels() {
    let local = sun::generate(7, false);
    let global = sun::generate(7, true);
    assert_eq!(local.len(), global.len());
    assert_eq!(local, sun::generate(7, false), "seeded");
    for (home, travelling) in local.iter().zip(&global) {
        let (team, region, offset) = SITES
            .iter()
            .find(|(team, ..)| *team == home.workload.queue)
            .copied()
            .expect("a known team");
        assert_eq!(home.workload.regions, [region]);
        if home.workload.class == WorkloadClass::Dev {
            let local_hour = (home.submit + i64::from(offset) * 3_600).rem_euclid(86_400) / 3_600;
            assert!(
                (9..18).contains(&local_hour),
                "{team} dev at {local_hour}:00"
            );
            assert_eq!(travelling.workload.regions, [region]);
            assert_eq!(home.workload.deadline, None);
        } else {
            assert_eq!(travelling.workload.regions.len(), 3);
            assert!(
                home.workload
                    .deadline
                    .is_some_and(|d| d > home.submit + home.run)
            );
        }
    }
}

#[test]
fn cost_is_rated_per_second_against_the_local_clock() {
    let cluster = sun::cluster(1);
    // 2026-11-30 21:00 in Frankfurt (UTC+1) is 20:00 UTC: one hour at list
    // price, then one off-peak hour at 60 %.
    let start = 1_796_256_000 - 3 * 86_400 + 20 * 3_600;
    let cost = sun::cost(&cluster, "eu-central", 2, start, 2 * 3_600);
    assert_eq!(cost, 2 * GPU_HOUR_MICROS + 2 * GPU_HOUR_MICROS * 6 / 10);
    assert_eq!(
        sun::cost(&cluster, "eu-central", 1, start, 1_800),
        GPU_HOUR_MICROS / 2
    );
    assert_eq!(sun::cost(&cluster, "nowhere", 1, start, 3_600), 0);
}

#[test]
fn both_scenarios_run_the_same_week_and_the_report_is_repeatable() {
    let report = sun::compare(42, 5);
    assert_eq!(report.scenarios.len(), 2);
    let (local, global) = (&report.scenarios[0], &report.scenarios[1]);
    assert_eq!(
        (local.scenario, global.scenario),
        ("region-local", "global")
    );
    assert_eq!(local.jobs, global.jobs);
    assert_eq!(local.deadlines, global.deadlines);
    assert!(local.completed == local.jobs && global.completed == global.jobs);
    assert!(local.utilization_by_region.len() == 3 && global.cost_micros > 0);
    assert_eq!(
        serde_json::to_string(&report).expect("json"),
        serde_json::to_string(&sun::compare(42, 5)).expect("json")
    );
}
