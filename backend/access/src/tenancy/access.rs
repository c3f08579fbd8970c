//! Organization access, decided in one place.
//!
//! [`OrgAccess`] reads `{org_id}` from the path, finds the caller's role in
//! that organization and checks it against the route's requirement. A caller
//! with no role there gets 404 (the organization's existence does not leak);
//! one with too small a role gets 403. A platform operator who is not a
//! member may read any organization (safe methods only, as a `viewer` that
//! passes read requirements), so the console can show operators a tenant's
//! orders, usage and invoices as the tenant sees them, and change nothing.
//! Every query on tenant data then goes through [`OrgScope`], which adds the
//! `org_id` filter itself.

use std::marker::PhantomData;

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, Select};
use uuid::Uuid;

use super::roles::{OrgRole, Requirement};
use gantry_core::auth::principal::{Actor, Authenticated, Principal};
use gantry_core::error::{ApiError, Resource};
use gantry_core::http::extract::path_uuid;
use gantry_core::state::AppState;
use gantry_entities::{
    api_key, audit_log, invitation, invoice, membership, order, organization, private_network,
    project, registry_credential, reservation, usage_record, volume, webhook_delivery,
    webhook_endpoint,
};

/// The organization a request acts in, and the caller's role there.
#[derive(Debug, Clone)]
pub struct OrgScope {
    pub org_id: Uuid,
    pub role: OrgRole,
    pub principal: Principal,
    /// A platform operator reading an organization it is not a member of.
    pub operator_view: bool,
}

/// A table whose rows belong to one organization.
pub trait TenantOwned: EntityTrait {
    const ORG_ID: Self::Column;
}

impl TenantOwned for project::Entity {
    const ORG_ID: Self::Column = project::Column::OrgId;
}
impl TenantOwned for api_key::Entity {
    const ORG_ID: Self::Column = api_key::Column::OrgId;
}
impl TenantOwned for membership::Entity {
    const ORG_ID: Self::Column = membership::Column::OrgId;
}
impl TenantOwned for order::Entity {
    const ORG_ID: Self::Column = order::Column::OrgId;
}
impl TenantOwned for invoice::Entity {
    const ORG_ID: Self::Column = invoice::Column::OrgId;
}
impl TenantOwned for usage_record::Entity {
    const ORG_ID: Self::Column = usage_record::Column::OrgId;
}
impl TenantOwned for invitation::Entity {
    const ORG_ID: Self::Column = invitation::Column::OrgId;
}
impl TenantOwned for reservation::Entity {
    const ORG_ID: Self::Column = reservation::Column::OrgId;
}
impl TenantOwned for webhook_endpoint::Entity {
    const ORG_ID: Self::Column = webhook_endpoint::Column::OrgId;
}
impl TenantOwned for registry_credential::Entity {
    const ORG_ID: Self::Column = registry_credential::Column::OrgId;
}
impl TenantOwned for private_network::Entity {
    const ORG_ID: Self::Column = private_network::Column::OrgId;
}
impl TenantOwned for webhook_delivery::Entity {
    const ORG_ID: Self::Column = webhook_delivery::Column::OrgId;
}
impl TenantOwned for volume::Entity {
    const ORG_ID: Self::Column = volume::Column::OrgId;
}

impl OrgScope {
    /// Every row of `E` that belongs to this organization.
    pub fn select<E: TenantOwned>(&self) -> Select<E> {
        E::find().filter(E::ORG_ID.eq(self.org_id))
    }

    /// This organization's audit rows. The audit log keeps rows of deleted
    /// organizations, so it has no foreign key and is scoped here by hand.
    pub fn audit_log(&self) -> Select<audit_log::Entity> {
        audit_log::Entity::find().filter(audit_log::Column::OrgId.eq(self.org_id))
    }
}

/// Marker types naming what a route requires.
pub mod need {
    use super::Requirement;

    pub trait Need: Send + Sync + 'static {
        const REQUIREMENT: Requirement;
    }
    /// Any role in the organization.
    pub struct AnyRole;
    /// `member` or above.
    pub struct Member;
    /// `admin` or above.
    pub struct Admin;
    /// `billing`, `admin` or `owner`.
    pub struct Billing;

    impl Need for AnyRole {
        const REQUIREMENT: Requirement = Requirement::AnyRole;
    }
    impl Need for Member {
        const REQUIREMENT: Requirement = Requirement::Member;
    }
    impl Need for Admin {
        const REQUIREMENT: Requirement = Requirement::Admin;
    }
    impl Need for Billing {
        const REQUIREMENT: Requirement = Requirement::Billing;
    }
}

/// Authorization for a route under `/orgs/{org_id}`.
pub struct OrgAccess<N: need::Need> {
    pub scope: OrgScope,
    pub actor: Actor,
    _need: PhantomData<N>,
}

impl<N: need::Need> FromRequestParts<AppState> for OrgAccess<N> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Authenticated(principal) = Authenticated::from_request_parts(parts, state).await?;
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(ApiError::internal)?;
        let org_id = path_uuid(&params, "org_id", Resource::Organization)?;
        let (role, operator_view) = match role_in(state, &principal, org_id).await? {
            Some(role) => (role, false),
            None if operator_may_read(state, &principal, org_id).await? => {
                if !parts.method.is_safe() {
                    return Err(ApiError::forbidden(
                        "operators see tenant organizations read-only; change them through /admin",
                    ));
                }
                (OrgRole::Viewer, true)
            }
            None => return Err(ApiError::not_found(Resource::Organization, org_id)),
        };
        if !operator_view && !role.satisfies(N::REQUIREMENT) {
            return Err(ApiError::forbidden(format!(
                "this action needs {}; the caller is {}",
                N::REQUIREMENT.describe(),
                role.as_str()
            )));
        }
        let actor = Actor::from_request_parts(parts, state).await?;
        Ok(Self {
            scope: OrgScope {
                org_id,
                role,
                principal,
                operator_view,
            },
            actor,
            _need: PhantomData,
        })
    }
}

async fn role_in(
    state: &AppState,
    principal: &Principal,
    org_id: Uuid,
) -> Result<Option<OrgRole>, ApiError> {
    match principal {
        Principal::ApiKey {
            org_id: key_org,
            role,
            ..
        } => Ok((*key_org == org_id).then_some(*role)),
        Principal::User { user_id } => Ok(state
            .identities
            .user(&state.db, *user_id)
            .await?
            .and_then(|identity| identity.role_in(org_id))),
    }
}

/// Whether `principal` is a platform operator and the organization exists.
async fn operator_may_read(
    state: &AppState,
    principal: &Principal,
    org_id: Uuid,
) -> Result<bool, ApiError> {
    let Principal::User { user_id } = principal else {
        return Ok(false);
    };
    let operator = state
        .identities
        .user(&state.db, *user_id)
        .await?
        .is_some_and(|identity| identity.user.is_operator);
    Ok(operator
        && organization::Entity::find_by_id(org_id)
            .one(&state.db)
            .await?
            .is_some())
}
