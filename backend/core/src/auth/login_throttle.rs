//! Failed sign-ins, counted so that guessing is slow and no stranger can
//! lock someone else out. Within a window:
//!
//! - one source address gets `limit` failures per account and three times
//!   that over all accounts, then is refused (429) until the window ends;
//! - an account is never refused: past `limit` failures from anywhere,
//!   every further attempt on it waits a little longer, up to a cap, so a
//!   crowd of addresses guesses slowly while the owner still signs in.
//!
//! Unknown emails are counted alike so the answer does not tell which
//! accounts exist. Kept per replica, in memory.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use moka::sync::Cache;

/// How long failures are remembered, counted from the first one.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
const CAPACITY: u64 = 100_000;
/// What each failure past the limit adds to an account's wait.
const SLOWDOWN_STEP: Duration = Duration::from_millis(250);
/// The longest an attempt on an account is made to wait.
pub const SLOWDOWN_MAX: Duration = Duration::from_secs(5);
/// Failures one address may make over all accounts, per failure allowed
/// on one account.
const ADDRESS_FACTOR: u32 = 3;

/// Whether an attempt may go ahead, and after how long.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Go {
        after: Duration,
    },
    /// This address has failed too often on this account.
    AccountRefused,
    /// This address has failed too often over all accounts.
    AddressRefused,
}

pub struct LoginThrottle {
    by_account: Cache<String, Arc<AtomicU32>>,
    by_address: Cache<IpAddr, Arc<AtomicU32>>,
    by_account_address: Cache<(String, IpAddr), Arc<AtomicU32>>,
    limit: u32,
}

fn cache<K>() -> Cache<K, Arc<AtomicU32>>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
{
    Cache::builder()
        .max_capacity(CAPACITY)
        .time_to_live(WINDOW)
        .build()
}

fn count<K>(cache: &Cache<K, Arc<AtomicU32>>, key: &K) -> u32
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
{
    cache
        .get(key)
        .map_or(0, |count| count.load(Ordering::Relaxed))
}

fn bump<K>(cache: &Cache<K, Arc<AtomicU32>>, key: K)
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
{
    cache
        .get_with(key, || Arc::new(AtomicU32::new(0)))
        .fetch_add(1, Ordering::Relaxed);
}

impl LoginThrottle {
    pub fn new(limit: u32) -> Self {
        Self {
            by_account: cache(),
            by_address: cache(),
            by_account_address: cache(),
            limit,
        }
    }

    pub fn check(&self, email: &str, address: IpAddr) -> Verdict {
        if count(&self.by_address, &address) >= self.limit.saturating_mul(ADDRESS_FACTOR) {
            return Verdict::AddressRefused;
        }
        if count(&self.by_account_address, &(email.to_owned(), address)) >= self.limit {
            return Verdict::AccountRefused;
        }
        let past = count(&self.by_account, &email.to_owned()).saturating_sub(self.limit);
        Verdict::Go {
            after: SLOWDOWN_STEP.saturating_mul(past).min(SLOWDOWN_MAX),
        }
    }

    pub fn record_failure(&self, email: &str, address: IpAddr) {
        bump(&self.by_account, email.to_owned());
        bump(&self.by_address, address);
        bump(&self.by_account_address, (email.to_owned(), address));
    }

    /// The right password clears what counts against the account; the
    /// address's count over all accounts stays, or signing in to one's own
    /// account would reset a guesser's allowance.
    pub fn record_success(&self, email: &str, address: IpAddr) {
        self.by_account.invalidate(email);
        self.by_account_address
            .invalidate(&(email.to_owned(), address));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "a@example.com";
    const B: &str = "b@example.com";

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, last])
    }

    #[test]
    fn an_address_is_refused_on_an_account_it_failed_but_the_owner_is_only_slowed() {
        let throttle = LoginThrottle::new(2);
        throttle.record_failure(A, ip(1));
        assert_eq!(
            throttle.check(A, ip(1)),
            Verdict::Go {
                after: Duration::ZERO
            }
        );
        throttle.record_failure(A, ip(1));
        assert_eq!(throttle.check(A, ip(1)), Verdict::AccountRefused);
        assert_eq!(
            throttle.check(B, ip(1)),
            Verdict::Go {
                after: Duration::ZERO
            }
        );
        assert_eq!(
            throttle.check(A, ip(2)),
            Verdict::Go {
                after: Duration::ZERO
            }
        );
        throttle.record_failure(A, ip(3));
        assert_eq!(
            throttle.check(A, ip(2)),
            Verdict::Go {
                after: SLOWDOWN_STEP
            }
        );
        for _ in 0..100 {
            throttle.record_failure(A, ip(4));
        }
        assert_eq!(
            throttle.check(A, ip(2)),
            Verdict::Go {
                after: SLOWDOWN_MAX
            }
        );
        throttle.record_success(A, ip(2));
        assert_eq!(
            throttle.check(A, ip(2)),
            Verdict::Go {
                after: Duration::ZERO
            }
        );
        assert_eq!(throttle.check(A, ip(1)), Verdict::AccountRefused);
    }

    #[test]
    fn an_address_spraying_many_accounts_is_refused_everywhere() {
        let throttle = LoginThrottle::new(2);
        for i in 0..6 {
            throttle.record_failure(&format!("user{i}@example.com"), ip(9));
        }
        assert_eq!(
            throttle.check("new@example.com", ip(9)),
            Verdict::AddressRefused
        );
        throttle.record_success("user0@example.com", ip(9));
        assert_eq!(
            throttle.check("new@example.com", ip(9)),
            Verdict::AddressRefused
        );
        assert_eq!(
            throttle.check("new@example.com", ip(8)),
            Verdict::Go {
                after: Duration::ZERO
            }
        );
    }
}
