//! Per-caller rate limiting: one token bucket per API key, per user, or for
//! anonymous calls per source address.

use std::net::SocketAddr;
use std::num::NonZeroU32;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use crate::app::AppState;
use crate::auth::principal::Principal;
use crate::error::ApiError;

pub struct RateLimits {
    limiter: DefaultKeyedRateLimiter<String>,
    clock: DefaultClock,
}

impl RateLimits {
    pub fn new(per_second: u32, burst: u32) -> Self {
        let per_second = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        Self {
            limiter: DefaultKeyedRateLimiter::keyed(
                Quota::per_second(per_second).allow_burst(burst),
            ),
            clock: DefaultClock::default(),
        }
    }

    /// `Err(seconds to wait)` when `key` is over its rate.
    fn check(&self, key: &String) -> Result<(), u64> {
        self.limiter
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()).as_secs().max(1))
    }

    /// Forgets callers whose buckets are full again, so the map stays as
    /// small as the set of recently active callers.
    pub fn prune(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

pub async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let key = match request.extensions().get::<Principal>() {
        Some(principal) => principal.rate_limit_key(),
        None => {
            let peer = request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| addr.ip().to_string());
            format!("ip:{}", peer.unwrap_or_default())
        }
    };
    match state.rate_limits.check(&key) {
        Ok(()) => next.run(request).await,
        Err(retry_after) => ApiError::too_many_requests(retry_after).into_response(),
    }
}
