//! The parts of the API's answers the client shows in tables, typed.
//! `--output json` prints the server's answers whole instead.
//!
//! Each view names the schema of `openapi/openapi.json` it reads; a test
//! checks every field against it, so a renamed or removed field fails the
//! build's tests rather than a user's command.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Me {
    pub user: Option<User>,
    pub api_key: Option<CallingApiKey>,
    pub memberships: Vec<Membership>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct User {
    pub email: String,
    pub name: String,
    pub is_operator: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct CallingApiKey {
    pub org_id: Uuid,
    pub role: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Membership {
    pub organization: Organization,
    pub role: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Organization {
    pub id: Uuid,
    pub name: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct TokenResponse {
    pub access_token: String,
    pub expires_in: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Order {
    pub id: Uuid,
    pub name: String,
    pub kind: String,
    pub instance_type: String,
    pub node_count: i32,
    pub region: Option<String>,
    pub status: String,
    pub pending_reason: Option<String>,
    pub estimated_start: Option<DateTime<Utc>>,
    pub failure_reason: Option<String>,
    pub access: Option<OrderAccess>,
    pub attempts: i32,
    pub job: Option<JobView>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
}

impl Order {
    /// Whether it has ended: no status follows these.
    pub fn ended(&self) -> bool {
        ENDED.contains(&self.status.as_str())
    }
}

/// The statuses an order ends in.
pub const ENDED: [&str; 5] = ["completed", "failed", "cancelled", "preempted", "timed_out"];

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct OrderAccess {
    pub hosts: Vec<HostAccess>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct HostAccess {
    pub node: String,
    pub ssh: Option<SshAccess>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SshAccess {
    pub command: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct JobView {
    pub command: String,
    pub exit_code: Option<i32>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct LogLine {
    pub id: i64,
    pub attempt: i32,
    pub stream: String,
    pub line: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Logs {
    pub lines: Vec<LogLine>,
    pub next_after: Option<i64>,
    pub truncated: bool,
    pub ended: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct InstanceType {
    pub name: String,
    pub gpu_model: String,
    pub gpus_per_node: i32,
    pub gpu_milli: Option<i32>,
    pub mig_profile: Option<String>,
    pub vcpus: i32,
    pub memory_gib: i32,
    pub prices: Vec<Price>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Price {
    pub region: Option<String>,
    pub pricing_class: String,
    pub hourly_micros: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Quota {
    pub gpu_model: String,
    pub region: Option<String>,
    pub project_id: Option<Uuid>,
    pub guaranteed_gpus: i32,
    pub max_gpus: Option<i32>,
    pub used_gpus: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct InvoiceSummary {
    pub id: Uuid,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub status: String,
    pub currency: String,
    pub total_micros: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Usage {
    pub groups: Vec<UsageGroup>,
    pub totals: UsageFigures,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct UsageGroup {
    pub label: String,
    pub gpu_seconds: i64,
    pub billable_gpu_seconds: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct UsageFigures {
    pub gpu_seconds: i64,
    pub billable_gpu_seconds: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Spend {
    pub currency: String,
    pub total_micros: i64,
    pub orders: Vec<SpendPart>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SpendPart {
    pub key: String,
    pub amount_micros: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Node {
    pub id: Uuid,
    pub name: String,
    pub region: String,
    pub state: String,
    #[serde(default)]
    pub state_reason: Option<String>,
    pub runtime: Option<String>,
    pub gpus: Vec<NodeGpu>,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct NodeGpu {
    pub model: String,
    pub healthy: bool,
    pub order_id: Option<Uuid>,
    pub shares: Vec<serde_json::Value>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct WhatIfResult {
    pub before: Outcome,
    pub after: Outcome,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Outcome {
    pub starts: u64,
    pub started_gpus: f64,
    pub waiting: u64,
    pub rejected: u64,
    pub preempted: u64,
    pub mean_estimated_wait_seconds: Option<f64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Problem {
    pub title: String,
    pub detail: String,
    #[serde(default)]
    pub errors: Vec<FieldError>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    const SPEC: &str = include_str!("../../../openapi/openapi.json");

    /// The properties of a schema, through `allOf`, `oneOf` with null and
    /// `$ref`s.
    fn properties<'a>(spec: &'a Value, schema: &'a Value) -> serde_json::Map<String, Value> {
        let mut found = serde_json::Map::new();
        if let Some(reference) = schema["$ref"].as_str() {
            let name = reference.trim_start_matches("#/components/schemas/");
            return properties(spec, &spec["components"]["schemas"][name]);
        }
        if let Some(own) = schema["properties"].as_object() {
            found.extend(own.clone());
        }
        for key in ["allOf", "oneOf"] {
            for part in schema[key].as_array().into_iter().flatten() {
                found.extend(properties(spec, part));
            }
        }
        found
    }

    /// Each field of `view` is a property of `schema`, and each nested
    /// view a property of the schema that property refers to.
    fn check(spec: &Value, schema: &Value, view: &Value, at: &str) {
        let known = properties(spec, schema);
        let Some(fields) = view.as_object() else {
            return;
        };
        for (field, value) in fields {
            let property = known
                .get(field)
                .unwrap_or_else(|| panic!("{at}.{field} is not in the API's schema"));
            let inner = if property["type"] == "array"
                || property["type"]
                    .as_array()
                    .is_some_and(|t| t.contains(&Value::from("array")))
            {
                &property["items"]
            } else {
                property
            };
            check(spec, inner, value, &format!("{at}.{field}"));
        }
    }

    fn view<T: Serialize>(value: T) -> Value {
        serde_json::to_value(value).expect("serializes")
    }

    /// A view with one element in each list, so that nested views are
    /// checked too.
    fn order() -> Order {
        Order {
            access: Some(OrderAccess {
                hosts: vec![HostAccess {
                    ssh: Some(SshAccess::default()),
                    ..HostAccess::default()
                }],
            }),
            job: Some(JobView::default()),
            ..Order::default()
        }
    }

    #[test]
    fn every_field_the_client_reads_is_in_the_api_contract() {
        let spec: Value = serde_json::from_str(SPEC).expect("openapi.json");
        let schema = |name: &str| spec["components"]["schemas"][name].clone();
        let views = [
            (
                "Page_Order",
                view(Page {
                    items: vec![order()],
                    next_cursor: None,
                }),
            ),
            (
                "Me",
                view(Me {
                    user: Some(User::default()),
                    api_key: Some(CallingApiKey::default()),
                    memberships: vec![Membership::default()],
                }),
            ),
            ("TokenResponse", view(TokenResponse::default())),
            ("Order", view(order())),
            (
                "Logs",
                view(Logs {
                    lines: vec![LogLine::default()],
                    ..Logs::default()
                }),
            ),
            ("LogLine", view(LogLine::default())),
            (
                "Page_InstanceType",
                view(Page {
                    items: vec![InstanceType {
                        prices: vec![Price::default()],
                        ..InstanceType::default()
                    }],
                    next_cursor: None,
                }),
            ),
            ("Quota", view(Quota::default())),
            (
                "Page_InvoiceSummary",
                view(Page {
                    items: vec![InvoiceSummary::default()],
                    next_cursor: None,
                }),
            ),
            (
                "Usage",
                view(Usage {
                    groups: vec![UsageGroup::default()],
                    ..Usage::default()
                }),
            ),
            (
                "Spend",
                view(Spend {
                    orders: vec![SpendPart::default()],
                    ..Spend::default()
                }),
            ),
            (
                "Page_Node",
                view(Page {
                    items: vec![Node {
                        gpus: vec![NodeGpu::default()],
                        ..Node::default()
                    }],
                    next_cursor: None,
                }),
            ),
            ("WhatIfResult", view(WhatIfResult::default())),
            (
                "Problem",
                view(Problem {
                    errors: vec![FieldError::default()],
                    ..Problem::default()
                }),
            ),
        ];
        for (name, value) in views {
            let found = schema(name);
            assert!(found.is_object(), "no schema {name} in the API");
            check(&spec, &found, &value, name);
        }
    }
}
