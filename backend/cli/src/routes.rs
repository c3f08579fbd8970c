//! Every API route the client calls, by method and path template; a test
//! checks each against `openapi/openapi.json`.

use std::fmt::Display;

use http::Method;

#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub method: &'static str,
    pub template: &'static str,
}

const fn get(template: &'static str) -> Route {
    Route {
        method: "GET",
        template,
    }
}

const fn post(template: &'static str) -> Route {
    Route {
        method: "POST",
        template,
    }
}

const fn patch(template: &'static str) -> Route {
    Route {
        method: "PATCH",
        template,
    }
}

const fn delete(template: &'static str) -> Route {
    Route {
        method: "DELETE",
        template,
    }
}

pub const LOGIN: Route = post("/api/v1/auth/login");
pub const REFRESH: Route = post("/api/v1/auth/refresh");
pub const LOGOUT: Route = post("/api/v1/auth/logout");
pub const ME: Route = get("/api/v1/me");
pub const INSTANCE_TYPES: Route = get("/api/v1/catalog/instance-types");
pub const ORDERS: Route = get("/api/v1/orgs/{org_id}/orders");
pub const CREATE_ORDER: Route = post("/api/v1/orgs/{org_id}/orders");
pub const ORDER: Route = get("/api/v1/orgs/{org_id}/orders/{order_id}");
pub const CANCEL_ORDER: Route = post("/api/v1/orgs/{org_id}/orders/{order_id}/cancel");
pub const LOGS: Route = get("/api/v1/orgs/{org_id}/orders/{order_id}/logs");
pub const USAGE: Route = get("/api/v1/orgs/{org_id}/usage");
pub const SPEND: Route = get("/api/v1/orgs/{org_id}/spend");
pub const INVOICES: Route = get("/api/v1/orgs/{org_id}/invoices");
pub const QUOTAS: Route = get("/api/v1/orgs/{org_id}/quotas");
pub const NODES: Route = get("/api/v1/admin/nodes");
pub const DRAIN: Route = post("/api/v1/admin/nodes/{node_id}/drain");
pub const CORDON: Route = post("/api/v1/admin/nodes/{node_id}/cordon");
pub const UNCORDON: Route = post("/api/v1/admin/nodes/{node_id}/uncordon");
pub const WHAT_IF: Route = post("/api/v1/admin/what-if");
pub const VOLUMES: Route = get("/api/v1/orgs/{org_id}/volumes");
pub const CREATE_VOLUME: Route = post("/api/v1/orgs/{org_id}/volumes");
pub const UPDATE_VOLUME: Route = patch("/api/v1/orgs/{org_id}/volumes/{volume_id}");
pub const DELETE_VOLUME: Route = delete("/api/v1/orgs/{org_id}/volumes/{volume_id}");

impl Route {
    pub fn method(&self) -> Method {
        match self.method {
            "POST" => Method::POST,
            "PATCH" => Method::PATCH,
            "DELETE" => Method::DELETE,
            _ => Method::GET,
        }
    }

    /// The path with each `{…}` replaced by the next of `values`.
    pub fn path(&self, values: &[&dyn Display]) -> String {
        let mut path = String::with_capacity(self.template.len() + 40);
        let mut rest = self.template;
        let mut values = values.iter();
        while let Some(open) = rest.find('{') {
            path.push_str(&rest[..open]);
            let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
            if let Some(value) = values.next() {
                path.push_str(&value.to_string());
            }
            rest = &rest[close..];
        }
        path.push_str(rest);
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Route; 23] = [
        LOGIN,
        REFRESH,
        LOGOUT,
        ME,
        INSTANCE_TYPES,
        ORDERS,
        CREATE_ORDER,
        ORDER,
        CANCEL_ORDER,
        LOGS,
        USAGE,
        SPEND,
        INVOICES,
        QUOTAS,
        NODES,
        DRAIN,
        CORDON,
        UNCORDON,
        WHAT_IF,
        VOLUMES,
        CREATE_VOLUME,
        UPDATE_VOLUME,
        DELETE_VOLUME,
    ];

    #[test]
    fn every_route_the_client_calls_is_in_the_api_contract() {
        let spec: serde_json::Value =
            serde_json::from_str(include_str!("../../../openapi/openapi.json")).expect("spec");
        for route in ALL {
            let operation = &spec["paths"][route.template][route.method.to_lowercase()];
            assert!(
                operation.is_object(),
                "{} {} is not in the API",
                route.method,
                route.template
            );
        }
    }

    #[test]
    fn values_fill_the_template_in_order() {
        assert_eq!(
            ORDER.path(&[&"org", &42]),
            "/api/v1/orgs/org/orders/42".to_owned()
        );
        assert_eq!(ME.path(&[]), "/api/v1/me");
    }
}
