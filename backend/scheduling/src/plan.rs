//! How much of the queue a cycle plans. Planning the whole queue costs
//! about 2 µs per waiting workload (ranking, placement tries, reasons):
//! 255 ms at 100,000. While only new work arrives, what the last whole
//! plan decided for the rest still holds: no room opened (nothing ended,
//! moved or stopped, no node changed), no waiting work changed, so every
//! workload that waited still cannot start, and the starts it planned for
//! the blocked are kept as holds the new work must not take. A cycle then
//! plans the arrivals alone against the running work and those holds.
//!
//! The whole queue is planned again when anything else changed (see
//! [`Delta::unsettled`]), when a planned start it holds has come, with each
//! metrics publish (due every 5 s; a cycle with arrivals plans them alone
//! first, so an arrival does not wait for a whole plan that only the clock
//! asked for, but a publish 10 s old goes first, which bounds how stale the
//! waiting work's reasons and estimates get), and always while the queue is
//! shorter than `scheduler_whole_plan_below` (1,000 by default: a whole
//! plan then costs a few milliseconds).

use chrono::{DateTime, Utc};
use gantry_scheduler::{
    AdvanceReservation, Asked, Decisions, OwnedSnapshot, Policy, Reports, Snapshot, Workload,
    schedule,
};
use gantry_world::input::Delta;
use gantry_world::load::Loaded;

use crate::defrag;

/// The holder name of a kept plan's holds: no queue or reservation has it.
const HOLD_PREFIX: &str = "planned start of ";

/// What the last whole plan kept for blocked work.
#[derive(Default)]
pub(crate) struct KeptPlan {
    /// Planned starts of blocked work, as holds on their GPUs.
    holds: Vec<AdvanceReservation>,
    planned: bool,
}

/// Whether the gauges are due to be published, which takes a whole plan.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publishing {
    No,
    /// Due, but a cycle with arrivals plans them alone first.
    Due,
    /// Due for long enough that it goes before arrivals.
    Overdue,
}

/// What a cycle plans.
pub(crate) enum Scope {
    /// Every waiting workload.
    Whole,
    /// Only these, new since the last cycle.
    Arrivals(Vec<Workload>),
    /// Nothing: no work arrived and the plan holds.
    Nothing,
}

impl Scope {
    /// How the cycle log names it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Whole => "whole",
            Self::Arrivals(_) => "arrivals",
            Self::Nothing => "nothing",
        }
    }
}

impl KeptPlan {
    /// What this cycle plans, given what changed and whether a publish is
    /// due.
    pub(crate) fn scope(
        &self,
        delta: &Delta,
        snapshot: &OwnedSnapshot,
        publishing: Publishing,
        whole_below: usize,
        now: DateTime<Utc>,
    ) -> Scope {
        let due = self.holds.iter().any(|h| h.start <= now.timestamp());
        if !self.planned
            || delta.unsettled
            || publishing == Publishing::Overdue
            || due
            || snapshot.pending.len() < whole_below
        {
            return Scope::Whole;
        }
        // A publish waits for a cycle that no new work waits on.
        if delta.arrived.is_empty() {
            return match publishing {
                Publishing::No => Scope::Nothing,
                Publishing::Due | Publishing::Overdue => Scope::Whole,
            };
        }
        Scope::Arrivals(
            delta
                .arrived
                .iter()
                .filter_map(|id| {
                    snapshot
                        .pending
                        .binary_search_by(|w| w.id.cmp(id))
                        .ok()
                        .map(|at| snapshot.pending[at].clone())
                })
                .collect(),
        )
    }

    /// Keeps what a cycle of `scope` planned for blocked work: a whole
    /// plan replaces the holds, arrivals add theirs.
    pub(crate) fn keep(&mut self, scope: &Scope, decisions: &Decisions, snapshot: &OwnedSnapshot) {
        let holds = decisions.reservations.iter().filter_map(|planned| {
            let at = snapshot
                .pending
                .binary_search_by(|w| w.id.cmp(&planned.workload))
                .ok()?;
            let workload = &snapshot.pending[at];
            Some(AdvanceReservation {
                id: format!("{HOLD_PREFIX}{}", planned.workload),
                queue: workload.queue.clone(),
                start: planned.start_at,
                end: workload
                    .duration_estimate
                    .map_or(i64::MAX, |d| planned.start_at.saturating_add(d)),
                placements: planned.placements.clone(),
            })
        });
        match scope {
            Scope::Whole => {
                self.holds = holds.collect();
                self.planned = true;
            }
            Scope::Arrivals(_) => self.holds.extend(holds),
            Scope::Nothing => {}
        }
    }

    /// The kept holds, for a cycle that plans arrivals.
    pub(crate) fn holds(&self) -> &[AdvanceReservation] {
        &self.holds
    }

    /// Forgets the plan: the next cycle plans the whole queue.
    pub(crate) fn forget(&mut self) {
        *self = Self::default();
    }
}

/// What one cycle's engine call answers.
pub(crate) struct Planned {
    pub(crate) loaded: Loaded,
    pub(crate) decisions: Decisions,
    pub(crate) reports: Reports,
    pub(crate) ledger: defrag::Ledger,
}

/// Runs the engine over `scope`. Reports and defragmentation come with
/// whole plans only: they read the whole queue.
pub(crate) fn decide(
    loaded: Loaded,
    scope: &Scope,
    holds: &[AdvanceReservation],
    asked: &Asked<'_>,
    mut ledger: defrag::Ledger,
    per_hour: f64,
) -> Planned {
    let policy = Policy::default();
    let snapshot = &loaded.snapshot;
    let (decisions, reports) = match scope {
        Scope::Whole => {
            let (mut decisions, reports) = snapshot.decide_reporting(&policy, asked);
            ledger.carry_out(per_hour, &snapshot.snapshot(), &policy, &mut decisions);
            (decisions, reports)
        }
        Scope::Arrivals(arrivals) => {
            let mut reservations = snapshot.reservations.clone();
            reservations.extend_from_slice(holds);
            let decisions = schedule(
                &Snapshot {
                    pending: arrivals,
                    reservations: &reservations,
                    ..snapshot.snapshot()
                },
                &policy,
            );
            (decisions, Reports::default())
        }
        Scope::Nothing => (Decisions::default(), Reports::default()),
    };
    Planned {
        loaded,
        decisions,
        reports,
        ledger,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(publishing: Publishing, arrived: &[&str]) -> &'static str {
        let snapshot = OwnedSnapshot::default();
        let mut kept = KeptPlan::default();
        kept.keep(&Scope::Whole, &Decisions::default(), &snapshot);
        let delta = Delta {
            arrived: arrived.iter().map(|id| (*id).to_owned()).collect(),
            unsettled: false,
        };
        kept.scope(&delta, &snapshot, publishing, 0, Utc::now())
            .name()
    }

    #[test]
    fn a_due_publish_waits_for_arrivals_until_it_is_overdue() {
        assert_eq!(scope(Publishing::No, &["a"]), "arrivals");
        assert_eq!(scope(Publishing::Due, &["a"]), "arrivals");
        assert_eq!(scope(Publishing::Overdue, &["a"]), "whole");
        assert_eq!(scope(Publishing::Due, &[]), "whole");
        assert_eq!(scope(Publishing::No, &[]), "nothing");
    }

    #[test]
    fn nothing_planned_yet_plans_the_whole_queue() {
        let snapshot = OwnedSnapshot::default();
        let delta = Delta {
            arrived: vec!["a".to_owned()],
            unsettled: false,
        };
        let scope = KeptPlan::default().scope(&delta, &snapshot, Publishing::No, 0, Utc::now());
        assert_eq!(scope.name(), "whole");
    }
}
