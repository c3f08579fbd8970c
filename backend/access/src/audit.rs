//! The audit log: every change records who made it, what it was, when, in
//! which request and from which address. Rows are written in the same
//! transaction as the change they describe, so neither exists without the
//! other.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Select};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::tenancy::access::{OrgAccess, need};
use gantry_core::auth::principal::Operator;
use gantry_core::error::ApiResult;
use gantry_core::http::extract::ApiQuery;
use gantry_core::http::pagination::{Page, PageQuery, PageRequest};
use gantry_core::state::AppState;
use gantry_entities::{api_key, audit_log, user};

/// One audit row.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEntry {
    pub id: Uuid,
    pub org_id: Option<Uuid>,
    /// `user`, `api_key` or `anonymous`.
    pub actor_kind: String,
    pub actor_id: Option<Uuid>,
    /// Who that is: a user's email; none for an API key, the system or an
    /// operator seen from a tenant's log.
    pub actor_email: Option<String>,
    /// A user's name, an API key's name, or `Platform operator` in a
    /// tenant's log.
    pub actor_name: Option<String>,
    /// What was done, such as `project.create` or `member.role_change`.
    pub action: String,
    pub target_type: String,
    pub target_id: Option<String>,
    pub details: serde_json::Value,
    pub request_id: String,
    pub source_address: String,
    pub created_at: DateTime<Utc>,
}

impl From<audit_log::Model> for AuditEntry {
    fn from(row: audit_log::Model) -> Self {
        Self {
            id: row.id,
            org_id: row.org_id,
            actor_kind: row.actor_kind,
            actor_id: row.actor_id,
            actor_email: None,
            actor_name: None,
            action: row.action,
            target_type: row.target_type,
            target_id: row.target_id,
            details: serde_json::from_str(&row.details).unwrap_or(serde_json::Value::Null),
            request_id: row.request_id,
            source_address: row.source_address,
            created_at: row.created_at,
        }
    }
}

/// Whose eyes a page of the log is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reader {
    Operator,
    /// A tenant sees operators who acted on its organization as such, not
    /// by their email.
    Tenant,
}

/// Newest first, with each actor's email and name.
async fn page(
    db: &impl ConnectionTrait,
    select: Select<audit_log::Entity>,
    request: PageRequest,
    reader: Reader,
) -> ApiResult<Page<AuditEntry>> {
    let rows = request
        .descending(select, audit_log::Column::Id)
        .all(db)
        .await?;
    let mut page = Page::from_rows(rows, request, |row| row.id, AuditEntry::from);
    let of_kind = |kind: &str| -> Vec<Uuid> {
        page.items
            .iter()
            .filter(|e| e.actor_kind == kind)
            .filter_map(|e| e.actor_id)
            .collect()
    };
    let (user_ids, key_ids) = (of_kind("user"), of_kind("api_key"));
    let users: HashMap<Uuid, user::Model> = if user_ids.is_empty() {
        HashMap::new()
    } else {
        user::Entity::find()
            .filter(user::Column::Id.is_in(user_ids))
            .all(db)
            .await?
            .into_iter()
            .map(|u| (u.id, u))
            .collect()
    };
    let keys: HashMap<Uuid, String> = if key_ids.is_empty() {
        HashMap::new()
    } else {
        api_key::Entity::find()
            .filter(api_key::Column::Id.is_in(key_ids))
            .all(db)
            .await?
            .into_iter()
            .map(|k| (k.id, k.name))
            .collect()
    };
    for entry in &mut page.items {
        let Some(id) = entry.actor_id else { continue };
        if let Some(u) = users.get(&id) {
            if u.is_operator && reader == Reader::Tenant {
                entry.actor_name = Some("Platform operator".to_owned());
            } else {
                entry.actor_email = Some(u.email.clone());
                entry.actor_name = Some(u.name.clone());
            }
        } else if let Some(name) = keys.get(&id) {
            entry.actor_name = Some(name.clone());
        }
    }
    Ok(page)
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_org_audit_log))
        .routes(routes!(list_all_audit_log))
}

/// The organization's audit log, newest first.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/audit-log",
    tag = "audit",
    params(("org_id" = Uuid, Path, description = "Organization id"), PageQuery),
    responses(
        (status = 200, description = "A page of audit rows", body = Page<AuditEntry>),
        gantry_core::error::ProblemResponses,
    ),
    security(("bearer" = []))
)]
async fn list_org_audit_log(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<AuditEntry>>> {
    let request = query.validate()?;
    Ok(Json(
        page(&state.db, access.scope.audit_log(), request, Reader::Tenant).await?,
    ))
}

/// Every audit row on the platform, newest first.
#[utoipa::path(
    get,
    path = "/admin/audit-log",
    tag = "admin",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of audit rows", body = Page<AuditEntry>),
        gantry_core::error::ProblemResponses,
    ),
    security(("bearer" = []))
)]
async fn list_all_audit_log(
    State(state): State<AppState>,
    _operator: Operator,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<AuditEntry>>> {
    let request = query.validate()?;
    Ok(Json(
        page(
            &state.db,
            audit_log::Entity::find(),
            request,
            Reader::Operator,
        )
        .await?,
    ))
}
