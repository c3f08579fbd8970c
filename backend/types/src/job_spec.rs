//! How a job names the jobs it waits for, and how a retry's waiting
//! reason begins.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// How the waiting reason of a job queued again after a failed attempt
/// begins, so that events can tell a retry from a preemption.
pub const RETRY_REASON_PREFIX: &str = "attempt ";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// Start once it completed with exit code 0; fail if it did not.
    AfterOk,
    /// Start once it ended, however.
    AfterAny,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AfterOk => "after_ok",
            Self::AfterAny => "after_any",
        }
    }

    pub fn parse(value: &str) -> Self {
        if value == "after_any" {
            Self::AfterAny
        } else {
            Self::AfterOk
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    pub order_id: Uuid,
    #[serde(default = "after_ok")]
    pub condition: Condition,
}

fn after_ok() -> Condition {
    Condition::AfterOk
}
