//! Operators' commands: the fleet's nodes, cordon, drain, and what-if.

use chrono::Utc;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api::{Api, read};
use crate::args::{self, NodesArgs, Output, WhatIfArgs};
use crate::error::{CliError, CliResult};
use crate::output::{self, or_dash};
use crate::routes::{self, Route};
use crate::views::{Node, Outcome, WhatIfResult};

pub async fn nodes(api: &mut Api, output: Output, args: NodesArgs) -> CliResult<()> {
    let mut path = format!("{}?", routes::NODES.template);
    for (key, value) in [("region", &args.region), ("state", &args.state)] {
        if let Some(value) = value {
            path.push_str(&format!("{key}={value}&"));
        }
    }
    let nodes = api.every_page(routes::NODES, &path).await?;
    output::show(output, Value::Array(nodes), |value| {
        let nodes: Vec<Node> = read(value)?;
        let now = Utc::now();
        let mut table = output::table(&[
            "NAME", "REGION", "STATE", "GPUS", "IN USE", "RUNTIME", "SEEN", "ID",
        ]);
        for node in nodes {
            let busy = node
                .gpus
                .iter()
                .filter(|g| g.order_id.is_some() || !g.shares.is_empty())
                .count();
            let unhealthy = node.gpus.iter().filter(|g| !g.healthy).count();
            let mut gpus = match node.gpus.first() {
                Some(first) => format!("{} × {}", node.gpus.len(), first.model),
                None => "0".to_owned(),
            };
            if unhealthy > 0 {
                gpus.push_str(&format!(" ({unhealthy} unhealthy)"));
            }
            table.add_row([
                node.name,
                node.region,
                node.state,
                gpus,
                busy.to_string(),
                or_dash(node.runtime),
                or_dash(
                    node.last_heartbeat_at
                        .map(|at| format!("{} ago", output::age(at, now))),
                ),
                node.id.to_string(),
            ]);
        }
        Ok(table)
    })
}

async fn find_node(api: &mut Api, reference: &str) -> CliResult<Uuid> {
    if let Ok(id) = reference.parse() {
        return Ok(id);
    }
    let path = format!("{}?", routes::NODES.template);
    let nodes: Vec<Node> = read(Value::Array(api.every_page(routes::NODES, &path).await?))?;
    nodes
        .into_iter()
        .find(|n| n.name == reference)
        .map(|n| n.id)
        .ok_or_else(|| CliError::Usage(format!("no node is called {reference:?}")))
}

/// Cordons, drains or uncordons a node and shows what it is now.
pub async fn act(
    api: &mut Api,
    output: Output,
    route: Route,
    reference: &str,
    force: bool,
    reason: Option<&str>,
) -> CliResult<()> {
    let id = find_node(api, reference).await?;
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    if force {
        query.append_pair("force", "true");
    }
    if let Some(reason) = reason {
        query.append_pair("reason", reason);
    }
    let query = query.finish();
    let mut path = route.path(&[&id]);
    if !query.is_empty() {
        path.push('?');
        path.push_str(&query);
    }
    let node = api.call(route, &path, Some(&json!({}))).await?;
    output::show(output, node, |value| {
        let node: Node = read(value)?;
        let mut table = output::table(&["NAME", "STATE", "REASON", "ID"]);
        table.add_row([
            node.name,
            node.state,
            node.state_reason.unwrap_or_default(),
            node.id.to_string(),
        ]);
        Ok(table)
    })
}

pub async fn what_if(api: &mut Api, output: Output, args: WhatIfArgs) -> CliResult<()> {
    let mut extra_nodes = Vec::with_capacity(args.add_nodes.len());
    for spec in &args.add_nodes {
        let parts: Vec<&str> = spec.split(':').collect();
        let [instance_type, region, count] = parts[..] else {
            return Err(CliError::Usage(format!(
                "--add-nodes {spec:?}: give it as INSTANCE_TYPE:REGION:COUNT"
            )));
        };
        let count: u32 = count.parse().map_err(|_| {
            CliError::Usage(format!("--add-nodes {spec:?}: {count:?} is not a count"))
        })?;
        extra_nodes
            .push(json!({ "instance_type": instance_type, "region": region, "count": count }));
    }
    let mut body = json!({ "extra_nodes": extra_nodes });
    if let Some(placement) = args.placement {
        body["placement"] = json!(args::api_name(placement));
    }
    if let Some(budget) = args.defragment {
        body["defragment"] = json!({ "budget_gpu_seconds_per_org_hour": budget });
    }
    let result = api
        .call(routes::WHAT_IF, routes::WHAT_IF.template, Some(&body))
        .await?;
    output::show(output, result, |value| {
        let result: WhatIfResult = read(value)?;
        let mut table = output::table(&["NEXT CYCLE", "AS IS", "WITH THE CHANGE"]);
        type Figure = fn(&Outcome) -> String;
        let rows: [(&str, Figure); 6] = [
            ("Starts", |o| o.starts.to_string()),
            ("GPUs started", |o| format!("{:.1}", o.started_gpus)),
            ("Waiting", |o| o.waiting.to_string()),
            ("Rejected", |o| o.rejected.to_string()),
            ("Preempted", |o| o.preempted.to_string()),
            ("Mean expected wait", |o| {
                or_dash(o.mean_estimated_wait_seconds.map(|s| format!("{:.0} s", s)))
            }),
        ];
        for (label, figure) in rows {
            table.add_row([
                label.to_owned(),
                figure(&result.before),
                figure(&result.after),
            ]);
        }
        Ok(table)
    })
}
