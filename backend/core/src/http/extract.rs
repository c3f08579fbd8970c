//! Extractors that turn bad input into problem+json instead of axum's plain
//! text rejections.

use axum::body::Bytes;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON object as the request body. Syntax errors are 400; a body that is
/// not an object, or has wrong types, missing or unknown fields, is 422; a
/// missing `Content-Type: application/json` is 415; an oversize body 413.
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !has_json_content_type(req.headers()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the request body must be JSON, sent with `Content-Type: application/json`",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                payload_too_large()
            } else {
                ApiError::bad_request("unreadable_body", rejection.body_text())
            }
        })?;
        // serde would also read a struct from a JSON array of its fields;
        // the API takes objects only.
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first.is_some_and(|b| *b != b'{') {
            if serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_err() {
                return Err(ApiError::bad_request(
                    "malformed_json",
                    "the request body is not valid JSON",
                ));
            }
            return Err(ApiError::unprocessable(
                "invalid_body",
                "the request body must be a JSON object",
            ));
        }
        match axum::Json::<T>::from_bytes(&bytes) {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(JsonRejection::JsonDataError(e)) => {
                Err(ApiError::unprocessable("invalid_body", e.body_text()))
            }
            Err(other) => Err(ApiError::bad_request("malformed_json", other.body_text())),
        }
    }
}

fn has_json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

pub fn payload_too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "the request body is larger than this server accepts",
    )
}

/// Query parameters; a value of the wrong type is a 400.
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Self(value)),
            Err(QueryRejection::FailedToDeserializeQueryString(e)) => {
                Err(ApiError::bad_request("invalid_query", e.body_text()))
            }
            Err(other) => Err(ApiError::bad_request("invalid_query", other.body_text())),
        }
    }
}

/// One path parameter by name; empty where the route has none so named.
pub fn path_param<'a>(params: &'a axum::extract::RawPathParams, name: &str) -> &'a str {
    params
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
        .unwrap_or_default()
}

/// One UUID path parameter by name. A value that is not a UUID names no
/// object, so it answers like an unknown id.
pub fn path_uuid(
    params: &axum::extract::RawPathParams,
    name: &str,
    resource: crate::error::Resource,
) -> Result<uuid::Uuid, ApiError> {
    let raw = path_param(params, name);
    uuid::Uuid::try_parse(raw).map_err(|_| ApiError::not_found(resource, raw))
}
