//! The last word on error responses: anything that left the router as an
//! error without a problem body (an unknown route, a wrong method, a body over
//! the transport limit, a timeout) is rewritten as problem+json here, so
//! clients see one error shape whatever produced it.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, PROBLEM_CONTENT_TYPE};

pub async fn ensure_problem_body(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || is_problem(&response) {
        return response;
    }
    let (code, detail) = match status {
        StatusCode::NOT_FOUND => ("route_not_found", "no such route"),
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            "this route does not accept that method",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => (
            "payload_too_large",
            "the request body is larger than this server accepts",
        ),
        StatusCode::REQUEST_TIMEOUT | StatusCode::SERVICE_UNAVAILABLE => (
            "request_timeout",
            "the request took too long and was abandoned",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            "unsupported_media_type",
            "the request body has an unsupported media type",
        ),
        s if s.is_server_error() => ("internal_error", "the server failed to handle this request"),
        _ => ("bad_request", "the request could not be handled"),
    };
    let kept = [header::ALLOW, header::RETRY_AFTER]
        .into_iter()
        .filter_map(|name| response.headers().get(&name).map(|v| (name, v.clone())))
        .collect::<Vec<_>>();
    let mut rewritten = ApiError::new(status, code, detail).into_response();
    for (name, value) in kept {
        rewritten.headers_mut().insert(name, value);
    }
    rewritten
}

fn is_problem(response: &Response) -> bool {
    response.headers().get(header::CONTENT_TYPE)
        == Some(&HeaderValue::from_static(PROBLEM_CONTENT_TYPE))
}
