//! The OpenAPI document. Routes register themselves through `routes!()`, so
//! the document and the router are built from one list and cannot drift; the
//! committed copy in `openapi/openapi.json` is checked against it by a test.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use gantry_core::error::Problem;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Gantry API",
        description = "The REST API of Gantry, a multi-tenant GPU cloud control plane. \
Errors are RFC 9457 problem documents with a stable `code`; lists are cursor-paginated \
(`limit`, `cursor`, `next_cursor`); creating POSTs accept `Idempotency-Key`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(Problem, gantry_core::http::csv::Format)),
    modifiers(&BearerAuth),
    tags(
        (name = "auth", description = "Sign-up, sign-in and the caller"),
        (name = "organizations", description = "Tenants"),
        (name = "members", description = "Who belongs to an organization, with which role"),
        (name = "projects", description = "How an organization splits its work"),
        (name = "api-keys", description = "Credentials for automation"),
        (name = "audit", description = "Who changed what"),
        (name = "catalog", description = "Regions, GPU models, instance types and prices"),
        (name = "orders", description = "GPU capacity a tenant orders, and where it runs"),
        (name = "reservations", description = "GPUs held for a tenant over a window of hours"),
        (name = "networks", description = "Private networks: an organization's workloads reach each other there"),
        (name = "volumes", description = "Storage an organization keeps apart from its orders, attached by them"),
        (name = "quotas", description = "How many GPUs an organization may hold"),
        (name = "usage", description = "Metered GPU-seconds, measured and billable"),
        (name = "billing", description = "Invoices rated from usage"),
        (name = "sla", description = "Availability and queue waits against what was promised"),
        (name = "webhooks", description = "Signed events sent to an organization's endpoints (Standard Webhooks)"),
        (name = "agent", description = "The node agent's API: join token, then node credential"),
        (name = "admin", description = "The operator API"),
        (name = "health", description = "Liveness and readiness"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description =
            Some("A session token from `/auth/login` or an API key (`gk_…`).".into());
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The document, as served at `/api/v1/openapi.json` and committed.
pub fn document() -> utoipa::openapi::OpenApi {
    crate::router::routes().split_for_parts().1
}

/// The document as committed: pretty JSON with a trailing newline.
pub fn to_committed_json() -> anyhow::Result<String> {
    Ok(format!("{}\n", document().to_pretty_json()?))
}
