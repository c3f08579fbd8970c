//! Changing the values a CHECK constraint allows on an enum-like column,
//! on both engines.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::TransactionTrait;

/// Replaces the check `column IN (from)` on `table` with `column IN (to)`.
/// `marker` is a value only that check lists, which finds it by its text
/// on PostgreSQL.
pub async fn allow(
    manager: &SchemaManager<'_>,
    table: &str,
    column: &str,
    marker: &str,
    from: &str,
    to: &str,
) -> Result<(), DbErr> {
    let db = manager.get_connection();
    match manager.get_database_backend() {
        sea_orm::DbBackend::Postgres => {
            db.execute_unprepared(&format!(
                "DO $$ DECLARE name text; BEGIN \
                   SELECT conname INTO name FROM pg_constraint \
                    WHERE conrelid = '{table}'::regclass AND contype = 'c' \
                      AND pg_get_constraintdef(oid) LIKE '%''{marker}''%'; \
                   IF name IS NOT NULL THEN EXECUTE format('ALTER TABLE {table} DROP CONSTRAINT %I', name); END IF; \
                 END $$; \
                 ALTER TABLE {table} ADD CONSTRAINT {table}_{column}_check CHECK ({column} IN ({to}))"
            ))
            .await?;
        }
        // SQLite cannot alter a constraint. Its documented way to change a
        // CHECK (which leaves stored rows as they are) is to edit the
        // table's schema text and bump the schema version, on one
        // connection, since the pragma is per connection.
        _ => {
            let db = db.begin().await?;
            let version = db
                .query_one_raw(sea_orm::Statement::from_string(
                    sea_orm::DbBackend::Sqlite,
                    "PRAGMA schema_version",
                ))
                .await?
                .map(|row| row.try_get_by_index::<i64>(0))
                .transpose()?
                .unwrap_or(0);
            let check = |values: &str| format!("\"{column}\" IN ({values}))").replace('\'', "''");
            db.execute_unprepared("PRAGMA writable_schema = ON").await?;
            let changed = db
                .execute_unprepared(&format!(
                    "UPDATE sqlite_schema SET sql = replace(sql, '{}', '{}') \
                     WHERE type = 'table' AND name = '{table}'",
                    check(from),
                    check(to),
                ))
                .await?;
            db.execute_unprepared(&format!("PRAGMA schema_version = {}", version + 1))
                .await?;
            db.execute_unprepared("PRAGMA writable_schema = OFF")
                .await?;
            if changed.rows_affected() != 1 {
                return Err(DbErr::Custom(format!(
                    "the {table} table has no {column} check to change"
                )));
            }
            db.commit().await?;
        }
    }
    Ok(())
}
