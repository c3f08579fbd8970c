//! Triggers that run the same statement after every change to a set of
//! tables, written once for both engines: PostgreSQL shares one plpgsql
//! function among the tables, SQLite (which has no such functions) repeats
//! the statement in one trigger per event.

use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, DbErr};

/// What the triggers named `{table}_{name}` run, and on which tables.
pub struct Triggers<'a> {
    pub name: &'a str,
    /// Tables, each with the columns whose update is a change (any column
    /// when empty).
    pub tables: &'a [(&'a str, &'a [&'a str])],
    /// The PostgreSQL function's name.
    pub function: &'a str,
    /// The function's statements, for a row (`row` true: `TG_TABLE_NAME`,
    /// `NEW` and `OLD` are at hand) or for a whole statement.
    pub statement: &'a str,
    pub row: bool,
    /// The same statement for SQLite, given the table and `NEW` or `OLD`.
    pub sqlite: fn(&str, &str) -> String,
}

impl Triggers<'_> {
    pub async fn create(&self, db: &impl ConnectionTrait, backend: DbBackend) -> Result<(), DbErr> {
        if backend == DbBackend::Postgres {
            define_function(db, self.function, self.statement).await?;
        }
        self.attach(db, backend).await
    }

    /// Creates the triggers on the tables only: on PostgreSQL they call the
    /// function as an earlier migration left it, which may do more than
    /// `statement` (notify, say).
    pub async fn attach(&self, db: &impl ConnectionTrait, backend: DbBackend) -> Result<(), DbErr> {
        let name = self.name;
        match backend {
            DbBackend::Postgres => {
                let each = if self.row { "ROW" } else { "STATEMENT" };
                for (table, columns) in self.tables {
                    db.execute_unprepared(&format!(
                        "CREATE TRIGGER {table}_{name} AFTER INSERT OR {} OR DELETE ON {table} \
                         FOR EACH {each} EXECUTE FUNCTION {}()",
                        update_event(columns),
                        self.function
                    ))
                    .await?;
                }
            }
            _ => {
                for (table, columns) in self.tables {
                    for (suffix, event, row) in [
                        ("insert", "INSERT".to_owned(), "NEW"),
                        ("update", update_event(columns), "NEW"),
                        ("delete", "DELETE".to_owned(), "OLD"),
                    ] {
                        db.execute_unprepared(&format!(
                            "CREATE TRIGGER {table}_{name}_{suffix} AFTER {event} ON {table} \
                             BEGIN {}; END",
                            (self.sqlite)(table, row)
                        ))
                        .await?;
                    }
                }
            }
        }
        Ok(())
    }

    pub async fn drop(&self, db: &impl ConnectionTrait, backend: DbBackend) -> Result<(), DbErr> {
        self.detach(db, backend).await?;
        if backend == DbBackend::Postgres {
            db.execute_unprepared(&format!("DROP FUNCTION {}()", self.function))
                .await?;
        }
        Ok(())
    }

    /// Drops the triggers on the tables only, leaving the function.
    pub async fn detach(&self, db: &impl ConnectionTrait, backend: DbBackend) -> Result<(), DbErr> {
        let name = self.name;
        match backend {
            DbBackend::Postgres => {
                for (table, _) in self.tables {
                    db.execute_unprepared(&format!("DROP TRIGGER {table}_{name} ON {table}"))
                        .await?;
                }
            }
            _ => {
                for (table, _) in self.tables {
                    for suffix in ["insert", "update", "delete"] {
                        db.execute_unprepared(&format!("DROP TRIGGER {table}_{name}_{suffix}"))
                            .await?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Defines (or redefines) a PostgreSQL trigger function that runs
/// `statement`.
pub async fn define_function(
    db: &impl ConnectionTrait,
    function: &str,
    statement: &str,
) -> Result<(), DbErr> {
    db.execute_unprepared(&format!(
        "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN {statement}; RETURN NULL; END $$"
    ))
    .await
    .map(drop)
}

/// The trigger event for an update of `columns` (any column when empty).
fn update_event(columns: &[&str]) -> String {
    if columns.is_empty() {
        "UPDATE".to_owned()
    } else {
        format!("UPDATE OF {}", columns.join(", "))
    }
}
