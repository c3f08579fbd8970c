//! A caller's `X-Request-Id` is kept only when it is short and printable:
//! it lands in logs and in the audit log's bounded column. Any other is
//! dropped before the request id layer, which then gives the request a
//! fresh one, and the response says so.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use crate::state::REQUEST_ID_HEADER;

/// The longest request id kept, as the audit log stores it.
pub const MAX_LENGTH: usize = 64;

/// Set on a response whose caller's request id was replaced.
pub const REPLACED_HEADER: &str = "x-request-id-replaced";

fn acceptable(value: &HeaderValue) -> bool {
    let bytes = value.as_bytes();
    (1..=MAX_LENGTH).contains(&bytes.len()) && bytes.iter().all(|b| (0x21..=0x7e).contains(b))
}

pub async fn sanitize(mut request: Request, next: Next) -> Response {
    let replaced = request
        .headers()
        .get_all(REQUEST_ID_HEADER)
        .iter()
        .enumerate()
        .any(|(i, value)| i > 0 || !acceptable(value));
    if replaced {
        request.headers_mut().remove(REQUEST_ID_HEADER);
    }
    let mut response = next.run(request).await;
    if replaced {
        response.headers_mut().insert(
            HeaderName::from_static(REPLACED_HEADER),
            HeaderValue::from_static(
                "the X-Request-Id sent was not one value of 1 to 64 printable ASCII characters",
            ),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_short_printable_ids_only() {
        assert!(acceptable(&HeaderValue::from_static("req-1_a.b:c")));
        assert!(acceptable(&HeaderValue::from_static(
            "0123456789012345678901234567890123456789012345678901234567890123"
        )));
        assert!(!acceptable(&HeaderValue::from_static(
            "01234567890123456789012345678901234567890123456789012345678901234"
        )));
        assert!(!acceptable(&HeaderValue::from_static("")));
        assert!(!acceptable(&HeaderValue::from_static("has space")));
        assert!(!acceptable(
            &HeaderValue::from_bytes(b"caf\xc3\xa9").expect("header")
        ));
    }
}
