//! The one error type of the API layer and its single mapping to RFC 9457
//! `application/problem+json`.
//!
//! Every failure a handler, extractor or middleware can produce becomes an
//! [`ApiError`]; its `code` is stable and machine-readable, its `detail` is
//! written for people. Internal causes are logged once with the request id
//! and never sent to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sea_orm::{DbErr, SqlErr};
use serde::Serialize;
use utoipa::ToSchema;

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// An RFC 9457 problem document.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem: `urn:gantry:problem:<code>`.
    #[serde(rename = "type")]
    pub problem_type: String,
    /// A short, stable summary of the kind of problem.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong with this request, for people.
    pub detail: String,
    /// The stable machine-readable code, also the last segment of `type`.
    pub code: String,
    /// Field-level validation errors, when the request body was invalid.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// For a window of capacity that is taken: the earliest ones that
    /// would fit instead, earliest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<Window>,
}

/// A window of time, start inclusive, end exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct Window {
    pub starts_at: chrono::DateTime<chrono::Utc>,
    pub ends_at: chrono::DateTime<chrono::Utc>,
}

/// One invalid field of a request.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FieldError {
    /// The field, as a JSON path into the request (`email`, `members[0].role`).
    pub field: String,
    pub message: String,
}

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    detail: String,
    errors: Vec<FieldError>,
    alternatives: Vec<Window>,
    retry_after_seconds: Option<u64>,
    source: Option<anyhow::Error>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            errors: Vec::new(),
            alternatives: Vec::new(),
            retry_after_seconds: None,
            source: None,
        }
    }

    pub fn bad_request(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, detail)
    }

    pub fn unauthenticated(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code, detail)
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", detail)
    }

    /// The answer for an object that does not exist *or belongs to another
    /// tenant*: the two are indistinguishable so ids never leak.
    pub fn not_found(resource: Resource, id: impl std::fmt::Display) -> Self {
        let (code, name) = resource.describe();
        Self::new(
            StatusCode::NOT_FOUND,
            code,
            format!("no {name} with id {id}"),
        )
    }

    pub fn conflict(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, detail)
    }

    pub fn unprocessable(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, detail)
    }

    /// A request body that parsed but failed validation, field by field.
    pub fn validation(errors: Vec<FieldError>) -> Self {
        let detail = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect::<Vec<_>>()
            .join("; ");
        Self {
            errors,
            ..Self::unprocessable("validation_failed", detail)
        }
    }

    pub fn too_many_requests(retry_after_seconds: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("too many requests; retry after {retry_after_seconds} s"),
        )
        .with_retry_after(retry_after_seconds)
    }

    /// An address that sent too many bad credentials waits before any are
    /// read again.
    pub fn too_many_failed_credentials(retry_after_seconds: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_failed_credentials",
            format!(
                "too many invalid credentials from this address; retry after {retry_after_seconds} s"
            ),
        )
        .with_retry_after(retry_after_seconds)
    }

    /// Names the windows that would fit instead of the one refused.
    pub fn with_alternatives(self, alternatives: Vec<Window>) -> Self {
        Self {
            alternatives,
            ..self
        }
    }

    /// Adds a `Retry-After` header to the answer.
    pub fn with_retry_after(self, seconds: u64) -> Self {
        Self {
            retry_after_seconds: Some(seconds),
            ..self
        }
    }

    pub fn internal(source: impl Into<anyhow::Error>) -> Self {
        Self {
            source: Some(source.into()),
            ..Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "the server failed to handle this request; it has been logged with the request id",
            )
        }
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The problem document this error is answered with.
    pub fn into_problem(self) -> Problem {
        Problem {
            problem_type: format!("urn:gantry:problem:{}", self.code),
            title: self.status.canonical_reason().unwrap_or("Error").to_owned(),
            status: self.status.as_u16(),
            detail: self.detail,
            code: self.code.to_owned(),
            errors: self.errors,
            alternatives: self.alternatives,
        }
    }
}

/// The kinds of object the API can fail to find.
#[derive(Debug, Clone, Copy)]
pub enum Resource {
    Organization,
    Project,
    Member,
    ApiKey,
    Region,
    GpuModel,
    InstanceType,
    Price,
    Node,
    Order,
    JoinToken,
    Invoice,
    UsageRecord,
    Image,
    SshKey,
    Reservation,
    MaintenanceWindow,
    Invitation,
    WebhookEndpoint,
    WebhookDelivery,
    IdentityProvider,
    RegistryCredential,
    Volume,
    SharedFileSystem,
    SlurmCluster,
}

impl Resource {
    /// The stable not-found code and the name used in messages.
    fn describe(self) -> (&'static str, &'static str) {
        match self {
            Self::Organization => ("organization_not_found", "organization"),
            Self::Project => ("project_not_found", "project"),
            Self::Member => ("member_not_found", "member"),
            Self::ApiKey => ("api_key_not_found", "API key"),
            Self::Region => ("region_not_found", "region"),
            Self::GpuModel => ("gpu_model_not_found", "GPU model"),
            Self::InstanceType => ("instance_type_not_found", "instance type"),
            Self::Price => ("price_not_found", "price version"),
            Self::Node => ("node_not_found", "node"),
            Self::Order => ("order_not_found", "order"),
            Self::JoinToken => ("join_token_not_found", "join token"),
            Self::Invoice => ("invoice_not_found", "invoice"),
            Self::UsageRecord => ("usage_record_not_found", "usage record"),
            Self::Image => ("image_not_found", "image"),
            Self::SshKey => ("ssh_key_not_found", "SSH key"),
            Self::RegistryCredential => ("registry_credential_not_found", "registry credential"),
            Self::Volume => ("volume_not_found", "volume"),
            Self::SharedFileSystem => (
                "shared_file_system_not_found",
                "shared file system for region",
            ),
            Self::SlurmCluster => ("slurm_cluster_not_found", "Slurm cluster for region"),
            Self::Reservation => ("reservation_not_found", "reservation"),
            Self::MaintenanceWindow => ("maintenance_window_not_found", "maintenance window"),
            Self::Invitation => ("invitation_not_found", "invitation"),
            Self::WebhookEndpoint => ("webhook_endpoint_not_found", "webhook endpoint"),
            Self::IdentityProvider => ("identity_provider_not_found", "identity provider"),
            Self::WebhookDelivery => ("webhook_delivery_not_found", "webhook delivery"),
        }
    }
}

impl From<DbErr> for ApiError {
    fn from(err: DbErr) -> Self {
        // Constraint violations that survive the domain's own checks are
        // races between two writers: the loser is told, not given a 500.
        match err.sql_err() {
            Some(SqlErr::UniqueConstraintViolation(_)) => Self::conflict(
                "already_exists",
                "an object with these unique fields already exists",
            ),
            Some(SqlErr::ForeignKeyConstraintViolation(_)) => Self::conflict(
                "conflict",
                "the object refers to something that no longer exists",
            ),
            _ => Self::internal(err),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Some(source) = &self.source {
            // The request id is on the enclosing span of the trace layer.
            tracing::error!(error = ?source, code = self.code, "request failed");
        }
        let status = self.status;
        let retry_after = self.retry_after_seconds;
        let body = serde_json::to_vec(&self.into_problem()).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
        );
        if let Some(seconds) = retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The error responses every operation can give, for the OpenAPI document.
pub struct ProblemResponses;

impl utoipa::IntoResponses for ProblemResponses {
    fn responses()
    -> std::collections::BTreeMap<String, utoipa::openapi::RefOr<utoipa::openapi::Response>> {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let problem = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    PROBLEM_CONTENT_TYPE,
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("Problem")))
                        .build(),
                )
                .build()
                .into()
        };
        [
            (
                "4XX".to_owned(),
                problem("The request was refused; `code` says why."),
            ),
            (
                "5XX".to_owned(),
                problem("The server failed; the request id identifies it in the logs."),
            ),
        ]
        .into_iter()
        .collect()
    }
}
