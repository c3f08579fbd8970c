//! The backup runbook, run: `pg_dump` of a working installation restored
//! with `pg_restore` into a new database holds every row of every table,
//! and a server started on it serves the same orders to the same logins.

use std::process::Command;

use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::{Value, json};

use crate::support::{Engine, Tenant, TestServer, postgres_admin_url, postgres_skipped};

/// One digest per table: every row, as text, in a fixed order.
async fn table_digests(db: &DatabaseConnection) -> Vec<(String, String, i64)> {
    let tables = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT table_name FROM information_schema.tables \
             WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name",
        ))
        .await
        .expect("tables");
    let mut digests = Vec::new();
    for row in tables {
        let table: String = row.try_get("", "table_name").expect("name");
        let digest = db
            .query_one_raw(Statement::from_string(
                db.get_database_backend(),
                format!(
                    "SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) AS digest, \
                     count(*) AS n FROM \"{table}\" t"
                ),
            ))
            .await
            .expect("digest")
            .expect("a row");
        digests.push((
            table,
            digest.try_get("", "digest").expect("digest"),
            digest.try_get("", "n").expect("count"),
        ));
    }
    digests
}

/// The tenant's orders as listed: id, name and creation time.
async fn listed(server: &TestServer, tenant: &Tenant) -> Vec<(Value, Value, Value)> {
    let reply = server
        .get(
            &format!("/api/v1/orgs/{}/orders?limit=200", tenant.org_id),
            &tenant.token,
        )
        .await;
    reply.expect(StatusCode::OK);
    let mut orders: Vec<(Value, Value, Value)> = reply
        .items()
        .iter()
        .map(|o| (o["id"].clone(), o["name"].clone(), o["created_at"].clone()))
        .collect();
    orders.sort_by_key(|o| o.0.to_string());
    orders
}

fn run(command: &mut Command) {
    let out = command.output().expect("run a PostgreSQL client tool");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dump_restored_into_a_new_database_serves_with_nothing_lost() {
    if postgres_skipped() {
        return;
    }
    let mut server = TestServer::start_with(Engine::Postgres, |config| {
        config.metering_interval_seconds = 1;
        config.agent_heartbeat_deadline_seconds = 1;
    })
    .await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("tenant").await;
    let mut orders = Vec::new();
    for body in [
        json!({ "instance_type": "h100x8" }),
        json!({ "instance_type": "h100x1", "priority_class": "batch" }),
        json!({ "instance_type": "h100x4", "region": "r1" }),
    ] {
        let order = server.order(&tenant, body).await;
        server.wait_status(&tenant, order, "running").await;
        orders.push(order);
    }
    server
        .post(
            &format!("/api/v1/orgs/{}/orders/{}/cancel", tenant.org_id, orders[1]),
            &tenant.token,
            json!({}),
        )
        .await
        .expect(StatusCode::OK);
    // A few seconds of metered usage.
    let usage_rows = "SELECT COUNT(*) FROM usage_records";
    for _ in 0..100 {
        if server.count(usage_rows).await >= 6 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(server.count(usage_rows).await >= 6);
    let before = listed(&server, &tenant).await;

    // The runbook: stop writes (here: stop the server), dump, restore.
    server.stop().await;
    let source = server
        .state
        .config
        .database_url
        .clone()
        .expect("database url");
    let admin = postgres_admin_url();
    let base = admin
        .rsplit_once('/')
        .map_or(admin.as_str(), |(b, _)| b)
        .to_owned();
    let restored_name = format!("gantry_restored_{}", uuid::Uuid::new_v4().simple());
    let restored_url = format!("{base}/{restored_name}");
    let dump = std::env::temp_dir().join(format!("{restored_name}.dump"));
    run(Command::new("pg_dump")
        .arg("--format=custom")
        .arg(format!("--file={}", dump.display()))
        .arg(format!("--dbname={source}")));
    let admin_db = Database::connect(&admin).await.expect("admin");
    admin_db
        .execute_unprepared(&format!("CREATE DATABASE {restored_name}"))
        .await
        .expect("create");
    run(Command::new("pg_restore")
        .arg("--no-owner")
        .arg("--exit-on-error")
        .arg(format!("--dbname={restored_url}"))
        .arg(&dump));
    std::fs::remove_file(&dump).ok();

    let original = Database::connect(&source).await.expect("original");
    let restored = Database::connect(&restored_url).await.expect("restored");
    let digests = table_digests(&original).await;
    assert!(
        digests
            .iter()
            .any(|(t, _, n)| t == "usage_records" && *n >= 6),
        "{digests:?}"
    );
    assert_eq!(table_digests(&restored).await, digests);
    original.close().await.ok();
    restored.close().await.ok();

    // A server on the restored database: the same orders, and the tenant
    // signs in with the same password.
    let revived = server
        .replica(|config| config.database_url = Some(restored_url.clone()))
        .await;
    assert_eq!(listed(&revived, &tenant).await, before);
    revived
        .call(
            reqwest::Method::POST,
            "/api/v1/auth/login",
            None,
            Some(json!({ "email": tenant.email, "password": crate::support::PASSWORD })),
        )
        .await
        .expect(StatusCode::OK);
    drop(revived);
    admin_db
        .execute_unprepared(&format!(
            "DROP DATABASE IF EXISTS {restored_name} WITH (FORCE)"
        ))
        .await
        .ok();
}
