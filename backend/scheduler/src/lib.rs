//! Gantry's scheduling engine.
//!
//! A pure library: no I/O, no async, no SQL and no clock reads. Time comes in
//! as an argument and the same input always yields the same decisions, so the
//! server's scheduling loop and the trace simulator drive exactly the same
//! code.
//!
//! [`schedule`] takes a [`Snapshot`] (cluster, queues, running and pending
//! work, advance reservations, decayed usage, the time) and a [`Policy`], and
//! returns [`Decisions`]: starts on exact GPUs, preemptions with a grace
//! period, reservations for blocked work, rejections, and for every waiting
//! workload its reasons with numbers and an estimated start.
//! [`capacity_report`] shows free versus schedulable capacity per shape;
//! [`launch_room`] what a launch of one shape would meet in each region;
//! [`schedule_reporting`] gives both beside a cycle's decisions from the
//! cycle's own preparation;
//! [`plan_advance_reservation`] picks the GPUs of a new reservation;
//! [`plan_defragmentation`] proposes moves that let work blocked by
//! fragmentation start; a
//! [`Placer`] places workloads one at a time with the same placement code,
//! for arrival-only studies and what-if questions.

mod calendar;
mod cluster;
mod decision;
mod defrag;
mod placement;
mod placer;
mod plan;
mod policy;
mod preempt;
mod queue;
mod report;
mod reservation;
mod schedule;
mod state;
mod usage;
mod workload;

pub use calendar::{CalendarRequest, CalendarSlot, capacity_calendar};
pub use cluster::{Cluster, Gpu, MAX_GPUS_PER_NODE, Node, OffPeak, Region};
pub use decision::{
    Decisions, EstimateConfidence, NextRelease, Preemption, PreemptionCause, QuotaLimit, Reason,
    RejectReason, Rejection, Reservation, Start, Waiting,
};
pub use defrag::{
    DefragPlan, DisruptionBudget, DisruptionLedger, Move, Step, plan_defragmentation,
    plan_for_decisions,
};
pub use placer::{Fill, Placer};
pub use policy::{Backfill, PlacementStrategy, Policy};
pub use queue::{Queue, Quota};
pub use report::{
    Asked, CapacityReport, LaunchShape, ModelCapacity, RegionRoom, Reports, SHAPES, ShapeSlots,
    capacity_report, capacity_reports, launch_room,
};
pub use reservation::{ReservationRequest, can_extend, earliest_windows, plan_advance_reservation};
pub use schedule::{OwnedSnapshot, Snapshot, schedule, schedule_reporting};
pub use usage::UsageLedger;
pub use workload::{
    AdvanceReservation, GpuRequest, Placement, PriorityClass, Running, Workload, WorkloadClass,
};
