//! Backfill around the reservation of the highest-ranked blocked workload,
//! estimated starts, advance reservations, and the reasons that name them.

mod common;

use common::{Drive, H100, NOON, World, job, node, nodes, running};
use gantry_scheduler::{
    AdvanceReservation, CalendarRequest, EstimateConfidence, Policy, PreemptionCause, Reason,
    ReservationRequest, Workload, can_extend, capacity_calendar, earliest_windows,
    plan_advance_reservation,
};

fn short(id: &str, at: i64) -> Workload {
    let mut w = job(id, "small", 1, 1);
    w.duration_estimate = Some(600);
    w.submitted_at = at;
    w
}

/// Two 10-minute 1-GPU jobs arrive now.
fn two_small_arrive(world: &mut World, cycle: usize) {
    for suffix in ["a", "b"] {
        let now = world.now;
        world
            .pending
            .push(short(&format!("s{cycle:02}{suffix}"), now));
    }
}

/// Two 8-GPU nodes, each with one GPU busy until 12:30, and a 16-GPU gang
/// that needs both whole.
fn gang_world() -> World {
    let mut world = World::new(nodes(2));
    let busy = |id: &str, node: &'static str| {
        let mut w = job(id, "other", 1, 1);
        w.duration_estimate = Some(1_800);
        running(w, &[(node, &[0])], NOON)
    };
    world.running = vec![busy("r0", "n0"), busy("r1", "n1")];
    let mut gang = job("gang", "big", 8, 2);
    gang.duration_estimate = Some(3_600);
    gang.submitted_at = NOON - 60;
    world.pending = vec![gang];
    world
}

#[test]
fn only_the_reserved_estimate_is_firm() {
    // A second gang behind the first is planned after it, without GPUs
    // held: its estimate may move.
    let mut world = gang_world();
    let mut second = job("second", "big", 8, 2);
    second.duration_estimate = Some(3_600);
    second.submitted_at = NOON - 30;
    world.pending.push(second);
    let decisions = world.decide(&Policy::default());
    let confidence = |id: &str| decisions.waiting(id).and_then(|w| w.estimate_confidence);
    assert_eq!(confidence("gang"), Some(EstimateConfidence::Reserved));
    assert_eq!(confidence("second"), Some(EstimateConfidence::Planned));
    assert_eq!(
        decisions.waiting("second").and_then(|w| w.estimated_start),
        Some(NOON + 1_800 + 3_600)
    );
}

#[test]
fn a_big_gang_starts_at_its_reserved_time_while_small_jobs_fill_the_holes() {
    let mut world = gang_world();
    let first = world.decide(&Policy::default());
    assert_eq!(first.reservations.len(), 1);
    assert_eq!(first.reservations[0].workload, "gang");
    assert_eq!(first.reservations[0].start_at, NOON + 1_800);
    let waiting = first.waiting("gang").expect("the gang waits");
    assert_eq!(waiting.estimated_start, Some(NOON + 1_800));
    assert_eq!(waiting.estimate_rests_on, ["r0", "r1"]);
    assert_eq!(
        waiting.estimate_confidence,
        Some(EstimateConfidence::Reserved)
    );

    let mut gang_started = None;
    let mut small_started = 0;
    for cycle in 0..40 {
        two_small_arrive(&mut world, cycle);
        let now = world.now;
        let decisions = world.cycle(&Policy::default(), 60);
        small_started += decisions
            .starts
            .iter()
            .filter(|s| s.workload.starts_with('s'))
            .count();
        if decisions.start("gang").is_some() {
            gang_started = Some(now);
            break;
        }
    }
    assert_eq!(
        gang_started,
        Some(NOON + 1_800),
        "the gang starts at its reservation"
    );
    assert!(
        small_started >= 30,
        "small jobs filled the holes: {small_started}"
    );

    // Without backfill reservations the stream keeps taking freed GPUs and
    // the gang is still waiting an hour later.
    let mut world = gang_world();
    let greedy = Policy {
        backfill: gantry_scheduler::Backfill::Greedy,
        ..Policy::default()
    };
    for cycle in 0..60 {
        two_small_arrive(&mut world, cycle);
        assert!(world.cycle(&greedy, 60).start("gang").is_none());
    }
}

#[test]
fn work_without_an_estimate_never_backfills_onto_reserved_gpus() {
    let mut world = gang_world();
    let mut unknown = job("unknown", "small", 1, 1);
    unknown.submitted_at = NOON;
    world.pending.push(unknown);
    let mut long = short("long", NOON);
    long.duration_estimate = Some(3_600);
    let mut quick = short("quick", NOON);
    quick.id = "quick".into();
    world.pending.push(long);
    world.pending.push(quick);
    let decisions = world.decide(&Policy::default());
    assert!(
        decisions.start("quick").is_some(),
        "ends before the reservation"
    );
    for id in ["unknown", "long"] {
        let waiting = decisions.waiting(id).expect("waits");
        assert!(
            waiting.reasons.iter().any(|r| matches!(r, Reason::HeldForReservation { holder, from, fits_with_shorter_estimate: true } if holder == "gang" && *from == NOON + 1_800)),
            "{id}: {:?}",
            waiting.reasons
        );
        assert!(
            waiting
                .reasons
                .iter()
                .any(|r| r.to_string().starts_with("held for reservation gang"))
        );
    }
}

#[test]
fn every_planned_workload_gets_an_estimated_start_and_is_told_what_is_ahead() {
    let mut world = World::new(nodes(1));
    let mut busy = job("busy", "q", 8, 1);
    busy.duration_estimate = Some(3_600);
    world.running = vec![running(
        busy,
        &[("n0", &[0, 1, 2, 3, 4, 5, 6, 7])],
        NOON - 600,
    )];
    world.pending = (0..3)
        .map(|i| {
            let mut w = job(&format!("w{i}"), "q", 8, 1);
            w.duration_estimate = Some(1_800);
            w.submitted_at = NOON + i;
            w
        })
        .collect();
    let decisions = world.decide(&Policy::default());
    let estimates: Vec<Option<i64>> = ["w0", "w1", "w2"]
        .iter()
        .map(|id| decisions.waiting(id).and_then(|w| w.estimated_start))
        .collect();
    assert_eq!(
        estimates,
        [Some(NOON + 3_000), Some(NOON + 4_800), Some(NOON + 6_600)]
    );
    let w2 = decisions.waiting("w2").expect("waits");
    assert!(
        w2.reasons
            .contains(&Reason::BehindHigherRanked { ahead: 2 })
    );
    assert!(
        w2.reasons
            .iter()
            .any(|r| r.to_string().contains("n0 frees at"))
    );
    // Only the head holds a binding reservation (EASY backfill).
    assert_eq!(decisions.reservations.len(), 1);
}

#[test]
fn an_advance_reservation_is_honoured() {
    let mut world = World::new(vec![node("n0", "r1", H100, 8)]);
    let request = ReservationRequest {
        queue: "team-r".into(),
        gpu_models: vec![H100.into()],
        gpus_per_node: 8,
        node_count: 1,
        start: NOON + 3_600,
        end: NOON + 7_200,
        ..ReservationRequest::default()
    };
    let placements = plan_advance_reservation(&world.snapshot(), &request).expect("room for it");
    assert_eq!(placements[0].gpus.len(), 8);
    world.reservations = vec![AdvanceReservation {
        id: "res-1".into(),
        queue: "team-r".into(),
        start: request.start,
        end: request.end,
        placements,
    }];
    // A second reservation over the same window finds no room.
    assert!(plan_advance_reservation(&world.snapshot(), &request).is_none());

    let mut fits = job("fits", "other", 8, 1);
    fits.duration_estimate = Some(1_800);
    let mut overlaps = job("overlaps", "other", 8, 1);
    overlaps.duration_estimate = Some(7_200);
    overlaps.submitted_at = NOON + 1;
    let mut early = job("early", "team-r", 8, 1);
    early.reservation = Some("res-1".into());
    world.pending = vec![fits, overlaps, early];
    let decisions = world.decide(&Policy::default());
    assert!(
        decisions.start("fits").is_some(),
        "it ends before the window"
    );
    assert!(
        decisions
            .waiting("early")
            .is_some_and(|w| w.reasons.contains(&Reason::NotBefore { at: NOON + 3_600 }))
    );

    // At the window, work of another queue still on the GPUs is preempted
    // and the reservation's own work starts once they are free.
    let mut overrun = job("overrun", "other", 8, 1);
    overrun.duration_estimate = Some(600);
    world.running = vec![running(overrun, &[("n0", &[0, 1, 2, 3, 4, 5, 6, 7])], NOON)];
    world
        .pending
        .retain(|w| w.id == "early" || w.id == "overlaps");
    world.now = NOON + 3_600;
    let decisions = world.decide(&Policy::default());
    assert_eq!(decisions.preemptions.len(), 1);
    assert_eq!(
        decisions.preemptions[0].cause,
        PreemptionCause::AdvanceReservation
    );
    assert_eq!(decisions.preemptions[0].by, "res-1");
    world.running.clear();
    world.now = NOON + 3_700;
    let decisions = world.decide(&Policy::default());
    assert!(decisions.start("early").is_some());
    assert!(decisions.start("overlaps").is_none());
    // Outside its queue a workload cannot name the reservation.
    let mut thief = job("thief", "other", 1, 1);
    thief.reservation = Some("res-1".into());
    world.pending = vec![thief];
    assert_eq!(world.decide(&Policy::default()).rejections.len(), 1);
}

#[test]
fn a_refused_window_gets_the_earliest_ones_that_fit_and_extensions_keep_the_same_gpus() {
    // n0 is busy until 14:00, n1 until 16:00; a third of the day later
    // another queue holds n0 from 18:00 to 20:00.
    let mut world = World::new(nodes(2));
    let busy = |id: &str, node: &'static str, seconds: i64| {
        let mut w = job(id, "other", 8, 1);
        w.duration_estimate = Some(seconds);
        running(w, &[(node, &[0, 1, 2, 3, 4, 5, 6, 7])], NOON)
    };
    world.running = vec![busy("r0", "n0", 2 * 3_600), busy("r1", "n1", 4 * 3_600)];
    world.reservations = vec![AdvanceReservation {
        id: "theirs".into(),
        queue: "other".into(),
        start: NOON + 6 * 3_600,
        end: NOON + 8 * 3_600,
        placements: vec![gantry_scheduler::Placement {
            node: "n0".into(),
            gpus: (0..8).collect(),
        }],
    }];
    let request = |nodes: u32, start: i64, hours: i64| ReservationRequest {
        queue: "mine".into(),
        gpu_models: vec![H100.into()],
        gpus_per_node: 8,
        node_count: nodes,
        start,
        end: start + hours * 3_600,
        ..ReservationRequest::default()
    };
    let now_for_an_hour = request(1, NOON + 600, 1);
    assert!(plan_advance_reservation(&world.snapshot(), &now_for_an_hour).is_none());
    let windows = earliest_windows(&world.snapshot(), &now_for_an_hour, NOON + 86_400, 3_600, 3);
    let starts: Vec<i64> = windows.iter().map(|(start, _)| *start).collect();
    // 14:00 on n0 (it ends before the other queue's 18:00), 16:00 when
    // n1 frees too, 20:00 after the other queue's window.
    assert_eq!(
        starts,
        vec![NOON + 2 * 3_600, NOON + 4 * 3_600, NOON + 8 * 3_600]
    );
    assert_eq!(windows[0].1[0].node, "n0");
    // Both nodes for five hours: only after the other queue's window.
    let both = earliest_windows(
        &world.snapshot(),
        &request(2, NOON, 5),
        NOON + 86_400,
        3_600,
        1,
    );
    assert_eq!(
        both.first().map(|(start, _)| *start),
        Some(NOON + 8 * 3_600)
    );
    // Nothing within the horizon gives an empty answer.
    assert!(
        earliest_windows(
            &world.snapshot(),
            &request(3, NOON, 1),
            NOON + 86_400,
            3_600,
            3
        )
        .is_empty()
    );

    // Ours on n0 from 14:00 to 16:00 may grow to 18:00, not past it, and
    // work running inside it does not stand in its way.
    let ours = AdvanceReservation {
        id: "ours".into(),
        queue: "mine".into(),
        start: NOON + 2 * 3_600,
        end: NOON + 4 * 3_600,
        placements: windows[0].1.clone(),
    };
    world.reservations.push(ours);
    let snapshot = world.snapshot();
    assert!(can_extend(&snapshot, "ours", NOON + 6 * 3_600));
    assert!(!can_extend(&snapshot, "ours", NOON + 6 * 3_600 + 1));
    assert!(
        !can_extend(&snapshot, "ours", NOON + 3 * 3_600),
        "not a shortening"
    );
    assert!(!can_extend(&snapshot, "nobody", NOON + 5 * 3_600));
    let mut inside = job("inside", "mine", 8, 1);
    inside.reservation = Some("ours".into());
    world.running = vec![running(
        inside,
        &[("n0", &[0, 1, 2, 3, 4, 5, 6, 7])],
        NOON + 2 * 3_600,
    )];
    world.now = NOON + 2 * 3_600;
    assert!(can_extend(&world.snapshot(), "ours", NOON + 5 * 3_600));
}

#[test]
fn the_calendar_shows_reserved_busy_and_free_gpus_hour_by_hour() {
    let mut world = World::new(nodes(2));
    let mut busy = job("busy", "other", 8, 1);
    busy.duration_estimate = Some(2 * 3_600);
    world.running = vec![running(busy, &[("n0", &[0, 1, 2, 3, 4, 5, 6, 7])], NOON)];
    world.reservations = vec![AdvanceReservation {
        id: "held".into(),
        queue: "team".into(),
        start: NOON + 4 * 3_600,
        end: NOON + 6 * 3_600,
        placements: vec![gantry_scheduler::Placement {
            node: "n1".into(),
            gpus: (0..4).collect(),
        }],
    }];
    let calendar = capacity_calendar(
        &world.snapshot(),
        &CalendarRequest {
            model: H100.into(),
            regions: vec!["eu-west-1".into()],
            gpus_per_node: 8,
            cpu_milli: 8_000,
            memory_mib: 64 * 1_024,
            from: NOON,
            step: 3_600,
            slots: 8,
        },
    );
    let row = |i: usize| {
        let s = calendar[i];
        (s.gpus, s.reserved, s.busy, s.free, s.instances)
    };
    assert_eq!(calendar.len(), 8);
    assert_eq!(row(0), (16, 0, 8, 8, 1));
    assert_eq!(row(2), (16, 0, 0, 16, 2));
    // Half of n1 is held: no whole node there, but n0 is free.
    assert_eq!(row(4), (16, 4, 0, 12, 1));
    assert_eq!(row(6), (16, 0, 0, 16, 2));
    assert!(
        capacity_calendar(
            &world.snapshot(),
            &CalendarRequest {
                model: H100.into(),
                regions: vec!["mars".into()],
                step: 3_600,
                slots: 2,
                ..CalendarRequest::default()
            }
        )
        .is_empty()
    );
}
