//! What a tenant reads about its organization: the catalog, usage and
//! cost so far, invoices, quotas.

use chrono::{Datelike as _, NaiveDate, TimeZone as _, Utc};
use serde_json::json;

use crate::api::{Api, read};
use crate::args::{self, Output, UsageArgs};
use crate::error::CliResult;
use crate::output::{self, or_dash};
use crate::routes;
use crate::views::{InstanceType, InvoiceSummary, Page, Quota, Spend, Usage};

pub async fn catalog(api: &mut Api, output: Output) -> CliResult<()> {
    let path = format!("{}?limit=200", routes::INSTANCE_TYPES.template);
    let page = api.get(routes::INSTANCE_TYPES, &path).await?;
    output::show(output, page, |value| {
        let page: Page<InstanceType> = read(value)?;
        let mut table = output::table(&[
            "NAME",
            "GPUS",
            "GPU MODEL",
            "VCPUS",
            "MEMORY",
            "PRICE / HOUR",
        ]);
        for instance in page.items {
            let gpus = match (&instance.mig_profile, instance.gpu_milli) {
                (Some(profile), _) => format!("MIG {profile}"),
                (None, Some(milli)) => format!("{:.2} shared", f64::from(milli) / 1000.0),
                (None, None) => instance.gpus_per_node.to_string(),
            };
            let prices: Vec<String> = instance
                .prices
                .iter()
                .map(|p| {
                    format!(
                        "{} {}{}",
                        output::money(p.hourly_micros),
                        p.pricing_class,
                        p.region
                            .as_ref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default()
                    )
                })
                .collect();
            table.add_row([
                instance.name,
                gpus,
                instance.gpu_model,
                instance.vcpus.to_string(),
                format!("{} GiB", instance.memory_gib),
                prices.join(", "),
            ]);
        }
        Ok(table)
    })
}

pub async fn usage(api: &mut Api, output: Output, args: UsageArgs) -> CliResult<()> {
    let org = api.org_id().await?;
    let now = Utc::now();
    let month_start =
        NaiveDate::from_ymd_opt(now.year(), now.month(), 1).unwrap_or(now.date_naive());
    let midnight = |day: NaiveDate| Utc.from_utc_datetime(&day.and_time(chrono::NaiveTime::MIN));
    let from = midnight(args.from.unwrap_or(month_start));
    let to = args.to.map_or(now, midnight);
    let range = format!(
        "from={}&to={}",
        from.format("%Y-%m-%dT%H:%M:%SZ"),
        to.format("%Y-%m-%dT%H:%M:%SZ")
    );
    let usage = api
        .get(
            routes::USAGE,
            &format!(
                "{}?{range}&group_by={}",
                routes::USAGE.path(&[&org]),
                args::api_name(args.by)
            ),
        )
        .await?;
    let spend = api
        .get(
            routes::SPEND,
            &format!("{}?{range}", routes::SPEND.path(&[&org])),
        )
        .await?;
    if output == Output::Json {
        return output::json(&json!({ "usage": usage, "spend": spend }));
    }
    let usage: Usage = read(usage)?;
    let spend: Spend = read(spend)?;
    let mut table = output::table(&["", "GPU-HOURS", "BILLABLE GPU-HOURS"]);
    for group in usage.groups {
        table.add_row([
            group.label,
            output::gpu_hours(group.gpu_seconds),
            output::gpu_hours(group.billable_gpu_seconds),
        ]);
    }
    table.add_row([
        "Total".to_owned(),
        output::gpu_hours(usage.totals.gpu_seconds),
        output::gpu_hours(usage.totals.billable_gpu_seconds),
    ]);
    output::print(&table);
    println!(
        "\nCost so far, {} to {}: {} {}",
        from.format("%Y-%m-%d"),
        to.format("%Y-%m-%d %H:%M UTC"),
        output::money(spend.total_micros),
        spend.currency
    );
    Ok(())
}

pub async fn invoices(api: &mut Api, output: Output) -> CliResult<()> {
    let org = api.org_id().await?;
    let path = format!("{}?limit=200", routes::INVOICES.path(&[&org]));
    let page = api.get(routes::INVOICES, &path).await?;
    output::show(output, page, |value| {
        let page: Page<InvoiceSummary> = read(value)?;
        let mut table = output::table(&["PERIOD", "STATUS", "TOTAL", "ID"]);
        for invoice in page.items {
            table.add_row([
                format!(
                    "{} to {}",
                    invoice.period_start.format("%Y-%m-%d"),
                    invoice.period_end.format("%Y-%m-%d")
                ),
                invoice.status,
                format!(
                    "{} {}",
                    output::money(invoice.total_micros),
                    invoice.currency
                ),
                invoice.id.to_string(),
            ]);
        }
        Ok(table)
    })
}

pub async fn quota(api: &mut Api, output: Output) -> CliResult<()> {
    let org = api.org_id().await?;
    let quotas = api
        .get(routes::QUOTAS, &routes::QUOTAS.path(&[&org]))
        .await?;
    output::show(output, quotas, |value| {
        let quotas: Vec<Quota> = read(value)?;
        let mut table = output::table(&[
            "GPU MODEL",
            "REGION",
            "PROJECT",
            "GUARANTEED",
            "MAX",
            "IN USE",
        ]);
        for quota in quotas {
            table.add_row([
                quota.gpu_model,
                quota.region.unwrap_or_else(|| "all".into()),
                quota
                    .project_id
                    .map_or_else(|| "whole organization".into(), |p| p.to_string()),
                quota.guaranteed_gpus.to_string(),
                or_dash(quota.max_gpus),
                quota.used_gpus.to_string(),
            ]);
        }
        Ok(table)
    })
}
