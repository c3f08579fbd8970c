//! Failed sign-ins per account: after `limit` failures within the window,
//! sign-in to that account is refused until the window ends, whatever the
//! password. Unknown emails are counted alike so the answer does not tell
//! which accounts exist. Kept per replica, in memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use moka::sync::Cache;

/// How long failures are remembered, counted from the first one.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
const CAPACITY: u64 = 100_000;

pub struct LoginThrottle {
    failures: Cache<String, Arc<AtomicU32>>,
    limit: u32,
}

impl LoginThrottle {
    pub fn new(limit: u32) -> Self {
        Self {
            failures: Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(WINDOW)
                .build(),
            limit,
        }
    }

    pub fn is_locked(&self, email: &str) -> bool {
        self.failures
            .get(email)
            .is_some_and(|count| count.load(Ordering::Relaxed) >= self.limit)
    }

    pub fn record_failure(&self, email: &str) {
        self.failures
            .get_with(email.to_owned(), || Arc::new(AtomicU32::new(0)))
            .fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_success(&self, email: &str) {
        self.failures.invalidate(email);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_after_the_limit_and_a_success_clears() {
        let throttle = LoginThrottle::new(2);
        throttle.record_failure("a@example.com");
        assert!(!throttle.is_locked("a@example.com"));
        throttle.record_failure("a@example.com");
        assert!(throttle.is_locked("a@example.com"));
        assert!(!throttle.is_locked("b@example.com"));
        throttle.record_success("a@example.com");
        assert!(!throttle.is_locked("a@example.com"));
    }
}
