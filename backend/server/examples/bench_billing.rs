//! Billing benchmarks against a real database (build with `--release`):
//!
//! 1. one metering tick over 10,000 running allocations (each due one new
//!    usage record), as the scheduling leader runs it;
//! 2. rating and invoicing a month of 1,000,000 usage records of one
//!    organization (a draft invoice, then finalizing it).
//!
//!   cargo run --release -p gantry-server --example bench_billing -- sqlite://bench.db?mode=rwc
//!   cargo run --release -p gantry-server --example bench_billing -- postgres://postgres@127.0.0.1:5432/gantry_bench
//!
//! The database must be empty; the demo catalog and logins are seeded into it.

use std::time::Instant;

use chrono::{DateTime, Datelike, TimeDelta, TimeZone, Utc};
use gantry_billing::invoices;
use gantry_core::auth::password::PasswordHasher;
use gantry_entities::{
    allocation, gpu_model, instance_type, order, organization, price, region, usage_record,
};
use gantry_inventory::nodes;
use gantry_types::classes::{
    AllocationState, DriverKind, OrderStatus, PricingClass, PriorityClass, UsageKind, WorkloadClass,
};
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, Set};
use uuid::Uuid;

const ALLOCATIONS: usize = 10_000;
const NODES: usize = 1_250;
const RECORDS: usize = 1_000_000;
const BATCH: usize = 1_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: bench_billing DATABASE_URL"))?;
    let db = gantry_core::db::connect(&url, 8, "gantry").await?;
    gantry_core::db::migrate(&db).await?;
    anyhow::ensure!(
        gantry_server::demo::seed(&db, &PasswordHasher::new()?).await?,
        "the database must be empty"
    );
    let org = organization::Entity::find()
        .all(&db)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("the demo seeded no organization"))?;
    let shape = instance_type::Entity::find()
        .filter(instance_type::Column::Name.eq("h100x8"))
        .one(&db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no h100x8 in the demo catalog"))?;
    let model = gpu_model::Entity::find_by_id(shape.gpu_model_id)
        .one(&db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no GPU model"))?;
    let place = region::Entity::find()
        .one(&db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no region"))?;

    metering_tick(&db, &org, &shape, &model, &place).await?;
    rating_a_month(&db, &org, &shape, &place).await?;
    Ok(())
}

async fn metering_tick(
    db: &DatabaseConnection,
    org: &organization::Model,
    shape: &instance_type::Model,
    model: &gpu_model::Model,
    place: &region::Model,
) -> anyhow::Result<()> {
    let mut node_ids = Vec::new();
    for i in 0..NODES {
        let spec = nodes::simulated_spec(
            format!("bench-{i}"),
            place.id,
            format!("rack-{}", i / 40),
            Vec::new(),
            shape,
            model,
        );
        node_ids.push(
            nodes::insert(
                db,
                nodes::NodeSpec {
                    driver: DriverKind::Simulated,
                    ..spec
                },
            )
            .await?
            .id,
        );
    }
    // Each allocation ran for ten minutes and is metered to a minute ago.
    let now = Utc::now();
    let grid = now.timestamp() / 60 * 60;
    let metered = DateTime::from_timestamp(grid - 60, 0).unwrap_or(now);
    let began = metered - TimeDelta::minutes(9);
    for chunk in (0..ALLOCATIONS).collect::<Vec<_>>().chunks(BATCH) {
        let mut orders = Vec::new();
        let mut allocations = Vec::new();
        for &i in chunk {
            let id = Uuid::now_v7();
            orders.push(order_row(id, org.id, shape, began));
            allocations.push(allocation::ActiveModel {
                id: Set(Uuid::now_v7()),
                order_id: Set(id),
                org_id: Set(org.id),
                node_id: Set(node_ids[i % NODES]),
                gpu_indices: Set("[0]".into()),
                state: Set(AllocationState::Active),
                stop_at: Set(None),
                created_at: Set(began),
                released_at: Set(None),
                running_since: Set(Some(began)),
                down_from: Set(None),
                metered_until: Set(Some(metered)),
                attempt: Set(1),
                exit_code: Set(None),
                outcome: Set(None),
                gpu_milli: Set(1000),
                mig_device: Set(None),
                private_address: Set(None),
                private_network_id: Set(None),
                stop_cause: Set(None),
            });
        }
        order::Entity::insert_many(orders)
            .exec_without_returning(db)
            .await?;
        allocation::Entity::insert_many(allocations)
            .exec_without_returning(db)
            .await?;
    }
    for step in 0..3 {
        let settled = metered + TimeDelta::minutes(1 + step);
        let started = Instant::now();
        let done = gantry_metering::meter(db, settled, 60).await?;
        println!(
            "metering tick {}: {} allocations, {} records in {:.0} ms",
            step + 1,
            done.allocations,
            done.records,
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    Ok(())
}

fn order_row(
    id: Uuid,
    org_id: Uuid,
    shape: &instance_type::Model,
    at: DateTime<Utc>,
) -> order::ActiveModel {
    order::ActiveModel {
        id: Set(id),
        name: Set(None),
        org_id: Set(org_id),
        project_id: Set(None),
        created_by_kind: Set("user".into()),
        created_by: Set(None),
        kind: Set("instance".into()),
        instance_type_id: Set(shape.id),
        gpu_model_id: Set(shape.gpu_model_id),
        gpus_per_node: Set(shape.gpus_per_node),
        node_count: Set(1),
        gpu_milli: Set(None),
        mig_profile: Set(None),
        region_id: Set(None),
        priority_class: Set(PriorityClass::Standard),
        pricing_class: Set(PricingClass::OnDemand),
        workload_class: Set(WorkloadClass::Training),
        duration_seconds: Set(None),
        deadline: Set(None),
        status: Set(OrderStatus::Running),
        pending_reason: Set(None),
        pending_details: Set(None),
        estimated_start: Set(None),
        estimate_confidence: Set(None),
        checkpointable: Set(false),
        failure_reason: Set(None),
        access: Set(None),
        attempts: Set(1),
        idempotency_key: Set(None),
        job: Set(None),
        max_runtime_seconds: Set(None),
        retry_on_failure: Set(false),
        max_retries: Set(0),
        array_id: Set(None),
        array_index: Set(None),
        exit_code: Set(None),
        log_bytes: Set(0),
        ssh_key_ids: Set(None),
        ports: Set(None),
        image_id: Set(None),
        image_reference: Set(None),
        reservation_id: Set(None),
        node_id: Set(None),
        started_at: Set(Some(at)),
        ended_at: Set(None),
        created_at: Set(at),
        updated_at: Set(at),
    }
}

async fn rating_a_month(
    db: &DatabaseConnection,
    org: &organization::Model,
    shape: &instance_type::Model,
    place: &region::Model,
) -> anyhow::Result<()> {
    // Last month: 400 allocations, each with 2,500 records of 17 minutes
    // (29.5 days), a fifth of them spot, some with excluded downtime.
    let now = Utc::now();
    let this = Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .ok_or_else(|| anyhow::anyhow!("month"))?;
    let start = invoices::previous_month(now)
        .map(|(start, _)| start)
        .ok_or_else(|| anyhow::anyhow!("month"))?;
    // The demo's prices start today; last month had these (and a change
    // mid-month on demand).
    for (class, hourly, from) in [
        (
            PricingClass::OnDemand,
            16_000_000,
            start - TimeDelta::days(1),
        ),
        (PricingClass::Spot, 6_400_000, start - TimeDelta::days(1)),
        (
            PricingClass::OnDemand,
            18_000_000,
            start + TimeDelta::days(14),
        ),
    ] {
        price::Entity::insert(price::ActiveModel {
            id: Set(Uuid::now_v7()),
            instance_type_id: Set(shape.id),
            region_id: Set(None),
            pricing_class: Set(class),
            hourly_micros: Set(hourly),
            effective_from: Set(from),
            created_at: Set(now),
        })
        .exec(db)
        .await?;
    }
    let per_allocation = 2_500;
    let span = 17 * 60;
    let seeding = Instant::now();
    let mut batch = Vec::with_capacity(BATCH);
    for n in 0..RECORDS {
        let allocation = n / per_allocation;
        let k = i64::try_from(n % per_allocation)?;
        let from = start + TimeDelta::seconds(k * span);
        batch.push(usage_record::ActiveModel {
            id: Set(Uuid::now_v7()),
            org_id: Set(org.id),
            project_id: Set(None),
            order_id: Set(Uuid::from_u128(allocation as u128 + 1)),
            allocation_id: Set(Uuid::from_u128(allocation as u128 + 1)),
            node_id: Set(Uuid::nil()),
            region_id: Set(place.id),
            gpu_model_id: Set(shape.gpu_model_id),
            instance_type_id: Set(shape.id),
            pricing_class: Set(if allocation % 5 == 0 {
                PricingClass::Spot
            } else {
                PricingClass::OnDemand
            }),
            usage_day: Set(from.format("%Y-%m-%d").to_string()),
            period_start: Set(from),
            period_end: Set(from + TimeDelta::seconds(span)),
            gpus: Set(8),
            seconds: Set(span),
            gpu_milli: Set(1000),
            excluded_seconds: Set(if k % 97 == 0 { 60 } else { 0 }),
            kind: Set(UsageKind::Metered),
            seq: Set(0),
            reason: Set(None),
            author: Set(None),
            created_at: Set(now),
        });
        if batch.len() == BATCH {
            usage_record::Entity::insert_many(std::mem::take(&mut batch))
                .exec_without_returning(db)
                .await?;
        }
    }
    println!(
        "seeded {RECORDS} usage records in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let draft = invoices::create_draft(db, org.id, start, this, "USD", now)
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let rated = started.elapsed().as_secs_f64();
    let finalized = invoices::finalize(db, draft.id, now, TimeDelta::zero())
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    println!(
        "rated and invoiced {RECORDS} records: draft in {rated:.2} s, finalized (rated again) in {:.2} s in all; total {} micro-units",
        started.elapsed().as_secs_f64(),
        finalized.total_micros
    );
    Ok(())
}
