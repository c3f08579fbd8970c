//! Organization roles and the one rule that decides what each may do.

use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A member's role in an organization.
///
/// `owner` ⊃ `admin` ⊃ `member` ⊃ `viewer` in what they may do; `billing`
/// sees the organization and its invoices and usage, and changes nothing else.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    EnumIter,
    DeriveActiveEnum,
    Serialize,
    Deserialize,
    ToSchema,
)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum OrgRole {
    #[sea_orm(string_value = "owner")]
    Owner,
    #[sea_orm(string_value = "admin")]
    Admin,
    #[sea_orm(string_value = "member")]
    Member,
    #[sea_orm(string_value = "viewer")]
    Viewer,
    #[sea_orm(string_value = "billing")]
    Billing,
}

/// What an action needs of the caller's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// Any role: the organization is visible.
    AnyRole,
    /// `member` or above: may create and change workloads.
    Member,
    /// `admin` or above: manages members, projects and keys.
    Admin,
    /// `owner` only.
    Owner,
    /// `billing`, `admin` or `owner`: reads usage, invoices and SLA reports.
    Billing,
}

impl OrgRole {
    pub fn satisfies(self, requirement: Requirement) -> bool {
        use OrgRole::*;
        match requirement {
            Requirement::AnyRole => true,
            Requirement::Member => matches!(self, Owner | Admin | Member),
            Requirement::Admin => matches!(self, Owner | Admin),
            Requirement::Owner => self == Owner,
            Requirement::Billing => matches!(self, Owner | Admin | Billing),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Owner => "owner",
            Self::Admin => "admin",
            Self::Member => "member",
            Self::Viewer => "viewer",
            Self::Billing => "billing",
        }
    }
}

impl Requirement {
    pub fn describe(self) -> &'static str {
        match self {
            Self::AnyRole => "membership",
            Self::Member => "the member role or above",
            Self::Admin => "the admin role or above",
            Self::Owner => "the owner role",
            Self::Billing => "the billing, admin or owner role",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OrgRole::*;

    #[test]
    fn roles_nest_and_billing_stands_apart() {
        let table = [
            (Owner, [true, true, true, true]),
            (Admin, [true, true, true, false]),
            (Member, [true, true, false, false]),
            (Viewer, [true, false, false, false]),
            (Billing, [true, false, false, false]),
        ];
        let requirements = [
            Requirement::AnyRole,
            Requirement::Member,
            Requirement::Admin,
            Requirement::Owner,
        ];
        for (role, expected) in table {
            for (requirement, allowed) in requirements.iter().zip(expected) {
                assert_eq!(
                    role.satisfies(*requirement),
                    allowed,
                    "{role:?} {requirement:?}"
                );
            }
        }
    }
}
