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

    Migrator::down(server.db(), None)
        .await
        .expect("roll back every migration");
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

    Migrator::up(server.db(), None).await.expect("re-apply");
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
