//! Per-caller rate limiting: one token bucket per API key, per user, or for
//! anonymous calls per source address, announced in the IETF `RateLimit`
//! and `RateLimit-Policy` fields. Credentials that fail draw on a second,
//! smaller bucket per source address, checked before any credential is
//! looked up, so guessing keys costs the guesser and not the database.
//! Health probes are never limited: a load balancer must see a busy
//! replica as alive.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock as _, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::{Quota, RateLimiter};
use moka::sync::Cache;

use crate::auth::principal::Principal;
use crate::error::ApiError;
use crate::state::AppState;

/// Paths a load balancer or Prometheus probes.
const UNLIMITED_PATHS: &[&str] = &["/healthz", "/readyz", "/metrics"];

/// The policy's name in the `RateLimit` fields.
const POLICY: &str = "\"caller\"";

type InformedLimiter<K> = RateLimiter<
    K,
    governor::state::keyed::DefaultKeyedStateStore<K>,
    DefaultClock,
    StateInformationMiddleware,
>;

pub struct RateLimits {
    limiter: InformedLimiter<String>,
    failed_auth: InformedLimiter<IpAddr>,
    /// Addresses out of failed-auth tokens, until when.
    blocked: Cache<IpAddr, Instant>,
    clock: DefaultClock,
    policy: HeaderValue,
    per_second: u32,
    burst: u32,
}

impl RateLimits {
    /// `per_second` and `burst` per caller; `failed_auth_per_minute`
    /// failed credentials per source address, a third of them at once.
    pub fn new(per_second: u32, burst: u32, failed_auth_per_minute: u32) -> Self {
        let per_second = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        let failures = NonZeroU32::new(failed_auth_per_minute).unwrap_or(NonZeroU32::MIN);
        let failure_burst = NonZeroU32::new(failures.get() / 3).unwrap_or(NonZeroU32::MIN);
        // A full bucket refills in burst / rate seconds: the policy's window.
        let window = burst.get().div_ceil(per_second.get());
        let policy = HeaderValue::from_str(&format!("{POLICY};q={burst};w={window}"))
            .unwrap_or_else(|_| HeaderValue::from_static(POLICY));
        Self {
            limiter: RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst))
                .with_middleware::<StateInformationMiddleware>(),
            failed_auth: RateLimiter::keyed(Quota::per_minute(failures).allow_burst(failure_burst))
                .with_middleware::<StateInformationMiddleware>(),
            blocked: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(3600))
                .build(),
            clock: DefaultClock::default(),
            policy,
            per_second: per_second.get(),
            burst: burst.get(),
        }
    }

    /// Forgets callers whose buckets are full again, so the maps stay as
    /// small as the set of recently active callers.
    pub fn prune(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
        self.failed_auth.retain_recent();
        self.failed_auth.shrink_to_fit();
        self.blocked.run_pending_tasks();
    }

    /// `Err(seconds to wait)` while `address` may not present credentials.
    pub fn check_credentials_allowed(&self, address: Option<IpAddr>) -> Result<(), u64> {
        let Some(address) = address else {
            return Ok(());
        };
        match self.blocked.get(&address) {
            Some(until) if until > Instant::now() => {
                Err(until.duration_since(Instant::now()).as_secs().max(1))
            }
            _ => Ok(()),
        }
    }

    /// Counts credentials from `address` that failed; once its bucket is
    /// empty, the address is refused until a token is back.
    pub fn record_failed_credentials(&self, address: Option<IpAddr>) {
        let Some(address) = address else {
            return;
        };
        let wait = match self.failed_auth.check_key(&address) {
            Ok(snapshot) if snapshot.remaining_burst_capacity() == 0 => {
                snapshot.quota().replenish_interval()
            }
            Ok(_) => return,
            Err(not_until) => not_until.wait_time_from(self.clock.now()),
        };
        self.blocked.insert(address, Instant::now() + wait);
    }

    fn headers(&self, remaining: u32, response: &mut Response) {
        // Seconds until the bucket is full again.
        let reset = (self.burst - remaining.min(self.burst)).div_ceil(self.per_second);
        let headers = response.headers_mut();
        headers.insert(
            HeaderName::from_static("ratelimit-policy"),
            self.policy.clone(),
        );
        if let Ok(value) = HeaderValue::from_str(&format!("{POLICY};r={remaining};t={reset}")) {
            headers.insert(HeaderName::from_static("ratelimit"), value);
        }
    }
}

pub async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if UNLIMITED_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let key = match request.extensions().get::<Principal>() {
        Some(principal) => principal.rate_limit_key(),
        None => format!(
            "ip:{}",
            crate::http::client_address::of(&request)
                .map(|ip| ip.to_string())
                .unwrap_or_default()
        ),
    };
    let limits = &state.rate_limits;
    match limits.limiter.check_key(&key) {
        Ok(snapshot) => {
            let mut response = next.run(request).await;
            limits.headers(snapshot.remaining_burst_capacity(), &mut response);
            response
        }
        Err(not_until) => {
            let wait = not_until
                .wait_time_from(limits.clock.now())
                .as_secs()
                .max(1);
            let mut response = ApiError::too_many_requests(wait).into_response();
            limits.headers(0, &mut response);
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_credentials_block_an_address_once_its_bucket_is_empty() {
        let limits = RateLimits::new(10, 10, 6);
        let attacker = Some(IpAddr::from([10, 0, 0, 1]));
        let bystander = Some(IpAddr::from([10, 0, 0, 2]));
        // A third of the minute's six at once: the first failure leaves one,
        // the second empties the bucket.
        limits.record_failed_credentials(attacker);
        assert!(limits.check_credentials_allowed(attacker).is_ok());
        limits.record_failed_credentials(attacker);
        let wait = limits
            .check_credentials_allowed(attacker)
            .expect_err("blocked");
        assert!((1..=10).contains(&wait), "{wait}");
        assert!(limits.check_credentials_allowed(bystander).is_ok());
        assert!(limits.check_credentials_allowed(None).is_ok());
    }
}
