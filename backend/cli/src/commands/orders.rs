//! `order …`: create, list, show, cancel, wait; and finding an order by
//! name or id, which the other commands share.

use std::time::Duration;

use chrono::Utc;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api::{Api, read};
use crate::args::{self, CreateOrder, ListOrders, Output, Until, WaitArgs};
use crate::error::{CliError, CliResult};
use crate::output::{self, or_dash};
use crate::routes;
use crate::views::{Order, Page};

/// How often a wait looks at the order.
const POLL: Duration = Duration::from_millis(500);

/// The order `reference` names: its id, or the name of exactly one of the
/// organization's orders.
pub async fn find(api: &mut Api, org: Uuid, reference: &str) -> CliResult<Value> {
    if let Ok(id) = reference.parse::<Uuid>() {
        return api
            .get(routes::ORDER, &routes::ORDER.path(&[&org, &id]))
            .await;
    }
    let path = format!("{}?", routes::ORDERS.path(&[&org]));
    let mut matches: Vec<Value> = api
        .every_page(routes::ORDERS, &path)
        .await?
        .into_iter()
        .filter(|o| o["name"] == reference)
        .collect();
    match matches.len() {
        0 => Err(CliError::Usage(format!(
            "no order is called {reference:?} in this organization"
        ))),
        1 => Ok(matches.remove(0)),
        _ => {
            let ids: Vec<String> = matches
                .iter()
                .map(|o| {
                    format!(
                        "{} ({})",
                        o["id"].as_str().unwrap_or("?"),
                        o["status"].as_str().unwrap_or("?")
                    )
                })
                .collect();
            Err(CliError::Usage(format!(
                "{} orders are called {reference:?}; name one by its id: {}",
                matches.len(),
                ids.join(", ")
            )))
        }
    }
}

pub async fn create(api: &mut Api, output: Output, args: CreateOrder) -> CliResult<()> {
    let org = api.org_id().await?;
    let mut body = json!({ "instance_type": args.instance_type, "node_count": args.nodes });
    let optional = [
        ("region", json!(args.region)),
        ("name", json!(args.name)),
        ("image", json!(args.image)),
        ("pricing_class", json!(args.pricing.map(args::api_name))),
        ("priority_class", json!(args.priority.map(args::api_name))),
        (
            "duration_seconds",
            json!(args.duration.map(|d| d.as_secs())),
        ),
    ];
    for (key, value) in optional {
        if !value.is_null() {
            body[key] = value;
        }
    }
    if !args.volumes.is_empty() {
        let mut attached = Vec::with_capacity(args.volumes.len());
        for spec in &args.volumes {
            attached.push(crate::commands::volumes::attachment(api, org, spec).await?);
        }
        body["volumes"] = Value::Array(attached);
    }
    let created = api
        .call(
            routes::CREATE_ORDER,
            &routes::CREATE_ORDER.path(&[&org]),
            Some(&body),
        )
        .await?;
    let order: Order = read(created.clone())?;
    if !args.wait {
        return output::show(output, created, details);
    }
    let done = wait_for(api, org, &order, Until::Running, args.timeout).await?;
    let finished: Order = read(done.clone())?;
    output::show(output, done, details)?;
    outcome(&finished, Until::Running)
}

pub async fn list(api: &mut Api, output: Output, args: ListOrders) -> CliResult<()> {
    let org = api.org_id().await?;
    let mut path = format!("{}?limit={}", routes::ORDERS.path(&[&org]), args.limit);
    if let Some(status) = &args.status {
        path.push_str(&format!("&status={status}"));
    }
    let page = api.get(routes::ORDERS, &path).await?;
    output::show(output, page, |value| {
        let page: Page<Order> = read(value)?;
        let now = Utc::now();
        let mut table = output::table(&["NAME", "STATUS", "TYPE", "NODES", "AGE", "ID", "NOTE"]);
        for order in page.items {
            let note = order
                .failure_reason
                .or(order.pending_reason)
                .unwrap_or_default();
            table.add_row([
                order.name,
                order.status,
                order.instance_type,
                order.node_count.to_string(),
                output::age(order.created_at, now),
                order.id.to_string(),
                note.chars().take(80).collect(),
            ]);
        }
        Ok(table)
    })
}

/// One order as label/value rows.
pub fn details(value: Value) -> CliResult<comfy_table::Table> {
    let order: Order = read(value)?;
    let mut table = output::table(&[]);
    let mut rows = vec![
        ("Name", order.name.clone()),
        ("Id", order.id.to_string()),
        ("Kind", order.kind.clone()),
        ("Status", order.status.clone()),
        (
            "Instance type",
            format!("{} × {} node(s)", order.instance_type, order.node_count),
        ),
        ("Region", or_dash(order.region.clone())),
        ("Created", output::time(order.created_at)),
        ("Started", or_dash(order.started_at.map(output::time))),
        ("Ended", or_dash(order.ended_at.map(output::time))),
        ("Attempts", order.attempts.to_string()),
    ];
    if let Some(reason) = &order.pending_reason {
        rows.push(("Waiting", reason.clone()));
    }
    if let Some(at) = order.estimated_start {
        rows.push(("Expected start", output::time(at)));
    }
    if let Some(reason) = &order.failure_reason {
        rows.push(("Why it ended", reason.clone()));
    }
    if let Some(job) = &order.job {
        rows.push(("Command", job.command.clone()));
        rows.push(("Exit code", or_dash(job.exit_code)));
    }
    for host in order.access.iter().flat_map(|a| &a.hosts) {
        if let Some(ssh) = &host.ssh {
            rows.push(("Access", format!("{}: {}", host.node, ssh.command)));
        }
    }
    for (label, value) in rows {
        table.add_row([label.to_owned(), value]);
    }
    Ok(table)
}

pub async fn show(api: &mut Api, output: Output, reference: &str) -> CliResult<()> {
    let org = api.org_id().await?;
    let order = find(api, org, reference).await?;
    output::show(output, order, details)
}

pub async fn cancel(api: &mut Api, output: Output, reference: &str) -> CliResult<()> {
    let org = api.org_id().await?;
    let order: Order = read(find(api, org, reference).await?)?;
    let cancelled = api
        .call(
            routes::CANCEL_ORDER,
            &routes::CANCEL_ORDER.path(&[&org, &order.id]),
            Some(&json!({})),
        )
        .await?;
    output::show(output, cancelled, details)
}

pub async fn wait(api: &mut Api, output: Output, args: WaitArgs) -> CliResult<()> {
    let org = api.org_id().await?;
    let order: Order = read(find(api, org, &args.order).await?)?;
    let until = args.until.unwrap_or(if order.kind == "job" {
        Until::Ended
    } else {
        Until::Running
    });
    let done = wait_for(api, org, &order, until, args.timeout).await?;
    let finished: Order = read(done.clone())?;
    output::show(output, done, details)?;
    outcome(&finished, until)
}

/// Polls `order` until it runs or ends (`until`), showing its status and
/// why it waits on a spinner; a `timeout` that passes first is an error.
pub async fn wait_for(
    api: &mut Api,
    org: Uuid,
    order: &Order,
    until: Until,
    timeout: Option<Duration>,
) -> CliResult<Value> {
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(
        ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    spinner.enable_steady_tick(Duration::from_millis(120));
    let path = routes::ORDER.path(&[&org, &order.id]);
    let polling = async {
        loop {
            let value = api.get(routes::ORDER, &path).await?;
            let now: Order = read(value.clone())?;
            if now.ended() || (until == Until::Running && now.status == "running") {
                return Ok::<_, CliError>(value);
            }
            spinner.set_message(match &now.pending_reason {
                Some(reason) => format!("{}: {} ({reason})", now.name, now.status),
                None => format!("{}: {}", now.name, now.status),
            });
            tokio::time::sleep(POLL).await;
        }
    };
    let verb = if until == Until::Running {
        "start"
    } else {
        "end"
    };
    let result = within(timeout, format!("{} did not {verb}", order.name), polling).await;
    spinner.finish_and_clear();
    result
}

/// `work`, or [`CliError::TimedOut`] saying `what` when `limit` passes
/// first.
pub async fn within<T>(
    limit: Option<Duration>,
    what: String,
    work: impl Future<Output = CliResult<T>>,
) -> CliResult<T> {
    let Some(limit) = limit else {
        return work.await;
    };
    tokio::time::timeout(limit, work).await.map_err(|_| {
        CliError::TimedOut(format!(
            "{what} within {}",
            humantime::format_duration(limit)
        ))
    })?
}

/// Success when the order got where it was waited for; an ended order
/// that did not complete is [`CliError::OrderFailed`].
pub fn outcome(order: &Order, until: Until) -> CliResult<()> {
    let reached = match until {
        Until::Running => order.status == "running" || order.status == "completed",
        Until::Ended => order.status == "completed",
    };
    if reached {
        return Ok(());
    }
    Err(CliError::OrderFailed(format!(
        "{} ended {}{}",
        order.name,
        order.status,
        order
            .failure_reason
            .as_ref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    )))
}
