//! Connecting to the database and keeping its schema current. The same code
//! serves SQLite (the embedded default) and PostgreSQL.

use std::time::Duration;

use anyhow::Context;
use gantry_migrations::{Migrator, MigratorTrait};
use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{
    ActiveModelTrait, ConnectOptions, ConnectionTrait, Database, DatabaseConnection,
    DatabaseTransaction, DbBackend, DbErr, EntityTrait, Iterable, SqliteTransactionMode,
    TransactionOptions, TransactionTrait,
};

/// Opens a pool. For SQLite the file and its directory are created when
/// missing, and every pooled connection gets the pragmas it needs (they are
/// per connection in SQLite, so they cannot be set once). On PostgreSQL
/// every connection carries `name` as its application name, which the
/// change notifications repeat, so a replica can tell its own from others'.
pub async fn connect(
    url: &str,
    max_connections: u32,
    name: &str,
) -> anyhow::Result<DatabaseConnection> {
    if let Some(path) = sqlite_path(url)
        && let Some(dir) = std::path::Path::new(path).parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the database directory {}", dir.display()))?;
    }
    let mut options = ConnectOptions::new(url);
    options
        .max_connections(max_connections)
        .min_connections(1)
        .connect_timeout(Duration::from_secs(10))
        .acquire_timeout(Duration::from_secs(10))
        // A ping on every checkout doubles the round trips of every query
        // outside a transaction; a connection in steady use is known to be
        // alive, and one idle long enough to have been cut is still tested.
        .test_before_acquire_if_idle_for(Duration::from_secs(30))
        .sqlx_logging(false)
        .map_sqlx_postgres_opts({
            let name = name.to_owned();
            move |opts| opts.application_name(&name)
        })
        .map_sqlx_sqlite_opts(|opts| {
            opts.foreign_keys(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10))
        });
    Database::connect(options)
        .await
        .with_context(|| format!("connecting to {}", crate::config::redacted_url(url)))
}

fn sqlite_path(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    (!path.is_empty() && path != ":memory:").then_some(path)
}

/// Begins a transaction that may write. On SQLite it takes the write lock
/// at once (`BEGIN IMMEDIATE`): a deferred transaction that read first
/// cannot upgrade after another writer committed, and would fail instead of
/// waiting its turn. PostgreSQL ignores the option.
pub async fn write(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    db.begin_with_options(TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..TransactionOptions::default()
    })
    .await
}

/// Rows keyed by their id.
pub fn by_id<T>(
    rows: Vec<T>,
    id: impl Fn(&T) -> uuid::Uuid,
) -> std::collections::HashMap<uuid::Uuid, T> {
    rows.into_iter().map(|row| (id(&row), row)).collect()
}

/// Bound parameters one statement may carry: under SQLite's limit (32,766)
/// and PostgreSQL's (65,535).
const PARAMETERS_MAX: usize = 30_000;

/// Inserts `rows` with as few statements as the engines' parameter limits
/// allow.
pub async fn insert_batched<A>(db: &impl ConnectionTrait, rows: Vec<A>) -> Result<(), DbErr>
where
    A: ActiveModelTrait + Send,
{
    insert_chunked(db, rows, None).await
}

/// As [`insert_batched`], skipping rows that `conflict` says are there.
pub async fn insert_batched_new<A>(
    db: &impl ConnectionTrait,
    rows: Vec<A>,
    conflict: sea_orm::sea_query::OnConflict,
) -> Result<(), DbErr>
where
    A: ActiveModelTrait + Send,
{
    insert_chunked(db, rows, Some(conflict)).await
}

async fn insert_chunked<A>(
    db: &impl ConnectionTrait,
    rows: Vec<A>,
    conflict: Option<sea_orm::sea_query::OnConflict>,
) -> Result<(), DbErr>
where
    A: ActiveModelTrait + Send,
{
    let columns = <<A::Entity as EntityTrait>::Column as Iterable>::iter().count();
    let per_statement = (PARAMETERS_MAX / columns.max(1)).max(1);
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let mut insert =
            A::Entity::insert_many(rows.by_ref().take(per_statement).collect::<Vec<_>>());
        if let Some(conflict) = &conflict {
            insert = insert.on_conflict(conflict.clone());
        }
        insert.exec_without_returning(db).await?;
    }
    Ok(())
}

/// Deletes and returns the oldest rows of a table of logged moves, at most
/// `max` of them by `id`: one fold's share. The rows folded are those
/// deleted, so a row committed while a fold runs is folded by the next one,
/// never twice or never.
pub async fn take_oldest<E>(
    txn: &impl ConnectionTrait,
    id: E::Column,
    max: u64,
) -> Result<Vec<E::Model>, DbErr>
where
    E: EntityTrait,
    E::Model: sea_orm::FromQueryResult + Send + Sync,
{
    use sea_orm::{ColumnTrait, QueryFilter, QueryOrder, QuerySelect};
    let mut taking = E::delete_many();
    if let Some(last) = E::find()
        .select_only()
        .column(id)
        .order_by_asc(id)
        .offset(max.saturating_sub(1))
        .limit(1)
        .into_tuple::<i64>()
        .one(txn)
        .await?
    {
        taking = taking.filter(id.lte(last));
    }
    taking.exec_with_returning(txn).await
}

/// The PostgreSQL advisory lock migrations are applied under.
const MIGRATION_LOCK: i64 = 0x6761_6e74_7279;

/// Applies every pending migration, in one transaction that holds the
/// database's write lock (SQLite) or an advisory lock (PostgreSQL): replicas
/// starting together on a new database would otherwise each apply the same
/// migrations and all but one fail. The others wait, then find nothing to do.
pub async fn migrate(db: &DatabaseConnection) -> anyhow::Result<()> {
    let txn = write(db).await.context("starting the migration")?;
    if db.get_database_backend() == DbBackend::Postgres {
        txn.execute_unprepared(&format!("SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))
            .await
            .context("waiting for another replica's migration")?;
    }
    Migrator::up(&txn, None)
        .await
        .context("applying migrations")?;
    txn.commit().await.context("committing the migrations")
}

/// Whether the database answers and every migration is applied.
pub async fn is_ready(db: &DatabaseConnection) -> anyhow::Result<()> {
    db.execute_unprepared("SELECT 1").await?;
    let pending = Migrator::get_pending_migrations(db).await?;
    anyhow::ensure!(
        pending.is_empty(),
        "{} migrations are not applied",
        pending.len()
    );
    Ok(())
}

/// Whether PostgreSQL broke a deadlock by aborting this transaction (or a
/// serializable one could not commit): running it again is the cure.
pub fn is_retryable(error: &DbErr) -> bool {
    use sea_orm::RuntimeErr;
    match error {
        DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e)) => e
            .as_database_error()
            .and_then(|d| d.code())
            .is_some_and(|code| code == "40P01" || code == "40001"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_paths_are_found_in_urls() {
        assert_eq!(
            sqlite_path("sqlite://./data/gantry.db?mode=rwc"),
            Some("./data/gantry.db")
        );
        assert_eq!(sqlite_path("sqlite:/tmp/x.db"), Some("/tmp/x.db"));
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_path("postgres://localhost/gantry"), None);
    }
}
