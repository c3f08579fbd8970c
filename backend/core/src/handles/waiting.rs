//! What may still wait, counted in the intake's transaction.

use std::collections::{BTreeSet, HashMap};

use axum::http::StatusCode;
use gantry_entities::{organization, queue_limit, waiting_count, waiting_move};
use gantry_types::classes::OrderStatus;
use sea_orm::sea_query::{Alias, Expr, ExprTrait, Query, UnionType};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};

/// Statuses of work that waits for the scheduler (the waiting moves'
/// trigger names them too).
pub const WAITING: [OrderStatus; 2] = [OrderStatus::Queued, OrderStatus::Preempted];

/// What may still wait, per organization and project, as read in the
/// transaction that inserts orders. Reading locks the organizations' rows,
/// so concurrent inserts of one organization (from any replica) are counted
/// one after another.
pub struct Waiting {
    default: u64,
    limits: HashMap<(Uuid, Option<Uuid>), u64>,
    /// Orders waiting now, per organization (`None`) and project.
    counts: HashMap<(Uuid, Option<Uuid>), u64>,
}

impl Waiting {
    /// Locks `orgs` (in id order, so that two writers cannot deadlock) and
    /// reads their limits and waiting orders.
    pub async fn read(
        txn: &impl ConnectionTrait,
        orgs: &BTreeSet<Uuid>,
        default: u32,
    ) -> Result<Self, sea_orm::DbErr> {
        organization::Entity::find()
            .filter(organization::Column::Id.is_in(orgs.iter().copied()))
            .order_by_asc(organization::Column::Id)
            .lock_exclusive()
            .all(txn)
            .await?;
        let limits = queue_limit::Entity::find()
            .filter(queue_limit::Column::OrgId.is_in(orgs.iter().copied()))
            .all(txn)
            .await?
            .into_iter()
            .map(|l| {
                let limit = u64::try_from(l.max_waiting_orders).unwrap_or(0);
                ((l.org_id, l.project_id), limit)
            })
            .collect();
        // The folded counts and the moves not folded yet, in one statement:
        // a fold between two reads would count its moves twice or never.
        let mut folded = Query::select()
            .column(waiting_count::Column::OrgId)
            .column(waiting_count::Column::ProjectId)
            .expr_as(Expr::col(waiting_count::Column::Orders), Alias::new("n"))
            .from(waiting_count::Entity)
            .and_where(waiting_count::Column::OrgId.is_in(orgs.iter().copied()))
            .to_owned();
        let moved = Query::select()
            .column(waiting_move::Column::OrgId)
            .column(waiting_move::Column::ProjectId)
            .expr_as(Expr::col(waiting_move::Column::Delta), Alias::new("n"))
            .from(waiting_move::Entity)
            .and_where(waiting_move::Column::OrgId.is_in(orgs.iter().copied()))
            .to_owned();
        let both = folded.union(UnionType::All, moved).to_owned();
        let (org, project) = (Alias::new("org_id"), Alias::new("project_id"));
        let statement = Query::select()
            .column(org.clone())
            .column(project.clone())
            .expr(
                Expr::col(Alias::new("n"))
                    .sum()
                    .cast_as(Alias::new("BIGINT")),
            )
            .from_subquery(both, Alias::new("waiting"))
            .group_by_col(org)
            .group_by_col(project)
            .to_owned();
        let grouped: Vec<(Uuid, Option<Uuid>, i64)> = txn
            .query_all(&statement)
            .await?
            .iter()
            .map(|row| row.try_get_many_by_index())
            .collect::<Result<_, _>>()?;
        let mut counts = HashMap::new();
        for (org_id, project_id, waiting) in grouped {
            let waiting = u64::try_from(waiting).unwrap_or(0);
            *counts.entry((org_id, None)).or_default() += waiting;
            if project_id.is_some() {
                *counts.entry((org_id, project_id)).or_default() += waiting;
            }
        }
        Ok(Self {
            default: u64::from(default),
            limits,
            counts,
        })
    }

    /// Counts `adding` more waiting orders of the organization (and
    /// project), or refuses them when they would pass a limit.
    pub fn admit(&mut self, org_id: Uuid, project_id: Option<Uuid>, adding: u64) -> ApiResult<()> {
        let org_limit = self
            .limits
            .get(&(org_id, None))
            .copied()
            .unwrap_or(self.default);
        let refuse = |scope: &str, now: u64, limit: u64| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_waiting_orders",
                format!(
                    "{scope} has {now} orders waiting and may have at most {limit}; {adding} \
                     more would pass that. Cancel some, or wait for them to start; an operator \
                     can raise the limit"
                ),
            )
        };
        let org_waiting = self.counts.get(&(org_id, None)).copied().unwrap_or(0);
        if org_waiting + adding > org_limit {
            return Err(refuse("the organization", org_waiting, org_limit));
        }
        let project = project_id.map(|p| (org_id, Some(p)));
        if let Some(key) = project
            && let Some(limit) = self.limits.get(&key).copied()
        {
            let now = self.counts.get(&key).copied().unwrap_or(0);
            if now + adding > limit {
                return Err(refuse("the project", now, limit));
            }
        }
        *self.counts.entry((org_id, None)).or_default() += adding;
        if let Some(key) = project {
            *self.counts.entry(key).or_default() += adding;
        }
        Ok(())
    }
}

/// At most this many moves are folded at once; the rest wait for the next
/// fold.
const FOLD_MAX: u64 = 50_000;

/// Folds the waiting moves into `waiting_counts`: the scheduling leader's,
/// with each publish, so that the moves the intake sums stay few.
pub async fn fold(db: &DatabaseConnection) -> Result<(), sea_orm::DbErr> {
    use waiting_count::Column as Count;
    use waiting_move::Column as Move;
    let txn = crate::db::write(db).await?;
    let mut deltas: HashMap<(Uuid, Option<Uuid>), i64> = HashMap::new();
    for moved in crate::db::take_oldest::<waiting_move::Entity>(&txn, Move::Id, FOLD_MAX).await? {
        *deltas.entry((moved.org_id, moved.project_id)).or_default() += i64::from(moved.delta);
    }
    deltas.retain(|_, delta| *delta != 0);
    if deltas.is_empty() {
        return txn.commit().await;
    }
    let rows: HashMap<(Uuid, Option<Uuid>), i64> = waiting_count::Entity::find()
        .filter(Count::OrgId.is_in(deltas.keys().map(|(org, _)| *org)))
        .all(&txn)
        .await?
        .into_iter()
        .map(|row| ((row.org_id, row.project_id), row.id))
        .collect();
    for ((org_id, project_id), delta) in deltas {
        match rows.get(&(org_id, project_id)) {
            Some(id) => {
                waiting_count::Entity::update_many()
                    .col_expr(Count::Orders, Expr::col(Count::Orders).add(delta))
                    .filter(Count::Id.eq(*id))
                    .exec(&txn)
                    .await?;
            }
            None => {
                waiting_count::Entity::insert(waiting_count::ActiveModel {
                    org_id: Set(org_id),
                    project_id: Set(project_id),
                    orders: Set(delta),
                    ..Default::default()
                })
                .exec(&txn)
                .await?;
            }
        }
    }
    txn.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(
        limits: &[((Uuid, Option<Uuid>), u64)],
        counts: &[((Uuid, Option<Uuid>), u64)],
    ) -> Waiting {
        Waiting {
            default: 10,
            limits: limits.iter().copied().collect(),
            counts: counts.iter().copied().collect(),
        }
    }

    #[test]
    fn orders_admitted_in_one_batch_count_against_the_next() {
        let (org, project) = (Uuid::now_v7(), Uuid::now_v7());
        let mut seen = waiting(&[((org, Some(project)), 3)], &[((org, None), 6)]);
        assert!(seen.admit(org, Some(project), 2).is_ok());
        let refused = seen.admit(org, Some(project), 2).expect_err("project full");
        assert!(
            format!("{refused:?}").contains("the project has 2"),
            "{refused:?}"
        );
        assert!(seen.admit(org, None, 2).is_ok());
        let refused = seen.admit(org, None, 1).expect_err("organization full");
        assert!(
            format!("{refused:?}").contains("the organization has 10"),
            "{refused:?}"
        );
        // Another organization has the default all to itself.
        assert!(seen.admit(Uuid::now_v7(), None, 10).is_ok());
    }
}
