//! Leadership through a lease row: the process whose name is on the
//! unexpired lease runs the job; it renews well before expiry, and another
//! takes over once a holder stops renewing. The same conditional UPDATE
//! works on SQLite and PostgreSQL.

use chrono::{Duration, Utc};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set};

use gantry_entities::lease;

/// Takes or renews the lease `name` for `holder`; `true` when it holds it.
pub async fn hold(
    db: &impl ConnectionTrait,
    name: &str,
    holder: &str,
    ttl: Duration,
) -> Result<bool, DbErr> {
    let now = Utc::now();
    let renewed = lease::Entity::update_many()
        .col_expr(lease::Column::Holder, Expr::value(holder))
        .col_expr(lease::Column::ExpiresAt, Expr::value(now + ttl))
        .filter(lease::Column::Name.eq(name))
        .filter(
            Condition::any()
                .add(lease::Column::Holder.eq(holder))
                .add(lease::Column::ExpiresAt.lt(now)),
        )
        .exec(db)
        .await?;
    if renewed.rows_affected == 1 {
        return Ok(true);
    }
    let inserted = lease::Entity::insert(lease::ActiveModel {
        name: Set(name.to_owned()),
        holder: Set(holder.to_owned()),
        expires_at: Set(now + ttl),
    })
    .on_conflict(
        OnConflict::column(lease::Column::Name)
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(db)
    .await;
    match inserted {
        Ok(rows) => Ok(rows == 1),
        Err(DbErr::RecordNotInserted) => Ok(false),
        Err(error) => Err(error),
    }
}

/// Gives the lease up at shutdown so another process takes over at once.
pub async fn release(db: &impl ConnectionTrait, name: &str, holder: &str) -> Result<(), DbErr> {
    lease::Entity::delete_many()
        .filter(lease::Column::Name.eq(name))
        .filter(lease::Column::Holder.eq(holder))
        .exec(db)
        .await?;
    Ok(())
}

/// Who holds the lease now, if anyone.
pub async fn holder(db: &impl ConnectionTrait, name: &str) -> Result<Option<String>, DbErr> {
    Ok(lease::Entity::find_by_id(name.to_owned())
        .one(db)
        .await?
        .filter(|l| l.expires_at > Utc::now())
        .map(|l| l.holder))
}
