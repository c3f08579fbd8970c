//! Extractors that turn bad input into problem+json instead of axum's plain
//! text rejections.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body. Syntax errors are 400, type and shape errors 422,
/// a missing `Content-Type: application/json` 415, an oversize body 413.
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::JsonDataError(e) => ApiError::unprocessable("invalid_body", e.body_text()),
        JsonRejection::JsonSyntaxError(e) => ApiError::bad_request("malformed_json", e.body_text()),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the request body must be JSON, sent with `Content-Type: application/json`",
        ),
        JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            payload_too_large()
        }
        other => ApiError::bad_request("unreadable_body", other.body_text()),
    }
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

/// One UUID path parameter by name. A value that is not a UUID names no
/// object, so it answers like an unknown id.
pub fn path_uuid(
    params: &axum::extract::RawPathParams,
    name: &str,
    resource: crate::error::Resource,
) -> Result<uuid::Uuid, ApiError> {
    let raw = params
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
        .unwrap_or_default();
    uuid::Uuid::try_parse(raw).map_err(|_| ApiError::not_found(resource, raw))
}
