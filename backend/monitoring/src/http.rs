//! Requests by matched route, method and status, and how long they took:
//! the route template (`/api/v1/orgs/{org_id}/orders`), never the path
//! itself, so ids never become labels.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics::{Unit, counter, describe_counter, describe_histogram, histogram};

pub const REQUESTS: &str = "gantry_http_requests_total";
pub const DURATION: &str = "gantry_http_request_duration_seconds";

pub fn describe() {
    describe_counter!(
        REQUESTS,
        "HTTP requests answered, by method, matched route and status"
    );
    describe_histogram!(
        DURATION,
        Unit::Seconds,
        "Time to answer an HTTP request, by method and matched route"
    );
}

/// Counts and times every request; the console's pages and unknown paths
/// share one label each.
pub async fn record(request: Request, next: Next) -> Response {
    let began = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    counter!(REQUESTS, "method" => method.clone(), "route" => route.clone(), "status" => status)
        .increment(1);
    histogram!(DURATION, "method" => method, "route" => route)
        .record(began.elapsed().as_secs_f64());
    response
}
