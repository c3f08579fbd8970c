//! The time the platform's domain runs on: orders, scheduling, drivers,
//! node health, prices, metering and billing.
//!
//! It is the system clock, shifted by an offset that only tests move, so a
//! simulated month of orders, price changes, failures and invoices passes in
//! seconds while timers still run in real time. Sessions, leases and
//! idempotency records keep to the system clock itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, TimeDelta, Utc};

#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
}

impl Clock {
    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + TimeDelta::milliseconds(self.offset_ms.load(Ordering::Relaxed))
    }

    /// Moves the clock forward (tests only: production never shifts it).
    pub fn advance(&self, by: TimeDelta) {
        self.offset_ms
            .fetch_add(by.num_milliseconds(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_offset() {
        let clock = Clock::default();
        let seen_by_a_task = clock.clone();
        let before = seen_by_a_task.now();
        clock.advance(TimeDelta::days(30));
        let moved = seen_by_a_task.now() - before;
        assert!(
            moved >= TimeDelta::days(30) && moved < TimeDelta::days(30) + TimeDelta::seconds(5)
        );
    }
}
