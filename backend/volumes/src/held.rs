//! What volumes held over a period: their sizes, cut to the period, for
//! invoices, spend and usage.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, Condition, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect};
use uuid::Uuid;

use gantry_core::error::ApiResult;
use gantry_entities::{storage_price, volume, volume_size};
use gantry_types::classes::VolumeKind;

/// A volume and the sizes it held inside the period.
#[derive(Debug, Clone)]
pub struct HeldVolume {
    pub volume_id: Uuid,
    pub name: String,
    pub region_id: Uuid,
    pub kind: VolumeKind,
    /// Size in GiB, from, to; in time order.
    pub sizes: Vec<(i64, DateTime<Utc>, DateTime<Utc>)>,
}

/// Sizes held at some moment of `[start, end)`.
fn overlapping(start: DateTime<Utc>, end: DateTime<Utc>) -> Condition {
    Condition::all()
        .add(volume_size::Column::StartsAt.lt(end))
        .add(
            Condition::any()
                .add(volume_size::Column::EndsAt.is_null())
                .add(volume_size::Column::EndsAt.gt(start)),
        )
}

/// A size one volume held, cut to a period.
#[derive(Debug, Clone)]
pub struct HeldSpan {
    pub volume_id: Uuid,
    pub org_id: Uuid,
    pub project_id: Option<Uuid>,
    pub region_id: Uuid,
    pub size_gib: i64,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

/// Every size held in `[start, end)` (by organization `org_id`'s volumes
/// only, where given), cut to the period, with the volumes they are of.
pub async fn spans(
    db: &impl ConnectionTrait,
    org_id: Option<Uuid>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> ApiResult<(Vec<HeldSpan>, HashMap<Uuid, volume::Model>)> {
    if end <= start {
        return Ok((Vec::new(), HashMap::new()));
    }
    let mut select = volume_size::Entity::find().filter(overlapping(start, end));
    if let Some(org_id) = org_id {
        select = select.filter(volume_size::Column::OrgId.eq(org_id));
    }
    let rows = select.all(db).await?;
    if rows.is_empty() {
        return Ok((Vec::new(), HashMap::new()));
    }
    let volumes: HashMap<Uuid, volume::Model> = volume::Entity::find()
        .filter(volume::Column::Id.is_in(rows.iter().map(|r| r.volume_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|v| (v.id, v))
        .collect();
    let spans = rows
        .into_iter()
        .filter_map(|row| {
            let v = volumes.get(&row.volume_id)?;
            let from = row.starts_at.max(start);
            let to = row.ends_at.map_or(end, |e| e.min(end));
            (from < to).then_some(HeldSpan {
                volume_id: v.id,
                org_id: v.org_id,
                project_id: v.project_id,
                region_id: v.region_id,
                size_gib: row.size_gib,
                from,
                to,
            })
        })
        .collect();
    Ok((spans, volumes))
}

/// The organization's volumes that held space in `[start, end)`, by name.
pub async fn held(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> ApiResult<Vec<HeldVolume>> {
    let (spans, volumes) = spans(db, Some(org_id), start, end).await?;
    let mut held: HashMap<Uuid, HeldVolume> = HashMap::new();
    for span in spans {
        let Some(v) = volumes.get(&span.volume_id) else {
            continue;
        };
        held.entry(v.id)
            .or_insert_with(|| HeldVolume {
                volume_id: v.id,
                name: v.name.clone(),
                region_id: v.region_id,
                kind: v.kind,
                sizes: Vec::new(),
            })
            .sizes
            .push((span.size_gib, span.from, span.to));
    }
    let mut held: Vec<HeldVolume> = held.into_values().collect();
    for h in &mut held {
        h.sizes.sort_by_key(|(_, from, _)| *from);
    }
    held.sort_by(|a, b| a.name.cmp(&b.name).then(a.volume_id.cmp(&b.volume_id)));
    Ok(held)
}

/// Organizations whose volumes held space in `[start, end)`: they owe
/// for the period whether or not they ran anything.
pub async fn holders(
    db: &impl ConnectionTrait,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<Vec<Uuid>, sea_orm::DbErr> {
    volume_size::Entity::find()
        .filter(overlapping(start, end))
        .select_only()
        .column(volume_size::Column::OrgId)
        .distinct()
        .into_tuple()
        .all(db)
        .await
}

/// Every version of every storage price.
pub async fn prices(db: &impl ConnectionTrait) -> ApiResult<Vec<storage_price::Model>> {
    Ok(storage_price::Entity::find().all(db).await?)
}
