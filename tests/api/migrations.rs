//! The schema migrates down and up again on both engines, and the server
//! works on the re-created schema.

use gantry_migrations::{Migrator, MigratorTrait};
use reqwest::StatusCode;

use crate::support::{Engine, TestServer};

crate::on_both_engines!(migrations_roll_back_and_reapply);

async fn migrations_roll_back_and_reapply(engine: Engine) {
    let server = TestServer::start(engine).await;
    let before = server.signup("before").await;
    assert!(
        Migrator::get_pending_migrations(server.db())
            .await
            .expect("status")
            .is_empty()
    );

    // Both directions run on one connection, as the server applies them: a
    // pooled SQLite connection that has not read since another changed the
    // schema still sees the old one, and a statement it prepares can then
    // find an index that was dropped.
    let txn = gantry_core::db::write(server.db()).await.expect("begin");
    Migrator::down(&txn, None)
        .await
        .expect("roll back every migration");
    txn.commit().await.expect("commit the rollback");
    let pending = Migrator::get_pending_migrations(server.db())
        .await
        .expect("status");
    assert_eq!(pending.len(), Migrator::migrations().len());
    let ready = server
        .http
        .get(server.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(
        ready.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "not ready without a schema"
    );

    gantry_core::db::migrate(server.db())
        .await
        .expect("re-apply");
    server
        .get("/api/v1/me", &before.token)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_token");
    let after = server.signup("after").await;
    server
        .get("/api/v1/me", &after.token)
        .await
        .expect(StatusCode::OK);
}
