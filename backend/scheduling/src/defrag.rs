//! Defragmentation carried out by the scheduler when an operator turns it
//! on: each cycle that leaves work blocked by fragmentation, a plan within
//! the per-organization budget, its moves made as preemptions the engine
//! then places again. One plan runs at a time, and the past hour's moves
//! count against the budget; the ledger lives in the process that leads
//! the loop, so a new leader starts with the whole budget.

use gantry_scheduler::{
    Decisions, DisruptionBudget, DisruptionLedger, Policy, Reason, Snapshot, plan_for_decisions,
};

#[derive(Default)]
pub(super) struct Ledger {
    moves: DisruptionLedger,
    /// Until when the last plan's moves are under way.
    busy_until: Option<i64>,
}

impl Ledger {
    /// The budget for a plan now: none while the feature is off, while the
    /// last plan's moves are under way or when nothing waits on
    /// fragmentation.
    fn budget(
        &mut self,
        per_hour: f64,
        decisions: &Decisions,
        now: i64,
    ) -> Option<DisruptionBudget> {
        if per_hour <= 0.0 || self.busy_until.is_some_and(|until| now < until) {
            return None;
        }
        let fragmented = decisions.waiting.iter().any(|w| {
            w.reasons
                .iter()
                .any(|r| matches!(r, Reason::Fragmentation { .. }))
        });
        fragmented.then(|| self.moves.budget(per_hour, now))
    }

    /// Adds a plan's moves to `decisions` as preemptions and records them.
    pub(super) fn carry_out(
        &mut self,
        per_hour: f64,
        snapshot: &Snapshot<'_>,
        policy: &Policy,
        decisions: &mut Decisions,
    ) {
        let now = snapshot.now;
        let Some(budget) = self.budget(per_hour, decisions, now) else {
            return;
        };
        // The cycle's own decisions, which the default policy explains:
        // the engine does not run twice.
        let plan = plan_for_decisions(snapshot, decisions, policy, &budget);
        let moves = plan.preemptions(policy, now);
        if moves.is_empty() {
            return;
        }
        self.moves.record(&plan, now);
        self.busy_until = Some(now + policy.grace_seconds);
        decisions.preemptions.extend(moves);
    }
}
