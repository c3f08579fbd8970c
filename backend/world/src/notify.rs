//! Changes made through other replicas, told at once. On PostgreSQL the
//! change-log trigger also sends `NOTIFY gantry_changes` with the writing
//! connection's application name (this replica's name on the scheduler
//! lease) and the table, delivered when the change commits. Each replica
//! listens: a change to orders, nodes, quotas or the catalog wakes its loop
//! (which only acts if it leads), and a change to allocations wakes the
//! agent fetches waiting on it. Its own changes it already woke for.
//!
//! A notification lost while the listening connection was down is made up
//! for by waking everything once it listens again; without PostgreSQL the
//! loop's interval and the fetches' recheck remain.

use std::time::Duration;

use sea_orm::DbBackend;
use sea_orm::sqlx::postgres::PgListener;
use tokio::sync::watch;

use gantry_core::state::AppState;

/// The channel the change-log trigger notifies.
pub const CHANNEL: &str = "gantry_changes";

/// How long to wait before listening again after the connection failed.
const RETRY: Duration = Duration::from_secs(1);

/// The application name a replica's connections carry.
pub fn application_name(replica: &str) -> String {
    format!("gantry {replica}")
}

/// Listens until `stop` turns true; returns at once without PostgreSQL.
pub async fn listen(state: AppState, mut stop: watch::Receiver<bool>) {
    if state.db.get_database_backend() != DbBackend::Postgres {
        return;
    }
    let own = application_name(state.scheduler.holder());
    loop {
        let listened = tokio::select! {
            listened = follow(&state, &own) => listened,
            _ = stop.changed() => return,
        };
        if let Err(error) = listened {
            tracing::warn!(%error, "lost the change notifications; listening again");
        }
        tokio::select! {
            () = tokio::time::sleep(RETRY) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn follow(state: &AppState, own: &str) -> Result<(), sea_orm::sqlx::Error> {
    let pool = state.db.get_postgres_connection_pool();
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    // Whatever changed while nobody listened.
    state.scheduler.wake();
    state.scheduler.assignments_may_have_changed();
    loop {
        let notification = listener.recv().await?;
        let Some((writer, table)) = notification.payload().rsplit_once(' ') else {
            continue;
        };
        if writer == own {
            continue;
        }
        if table == "allocations" {
            state.scheduler.assignments_may_have_changed();
        }
        state.scheduler.wake();
    }
}
