//! What people read: orders have names, waiting orders say why as data
//! that names the order they wait for (only to its own tenant), the audit
//! log names its actors, an operator may read a tenant's organization but
//! change nothing in it, and users keep the language and time zone they
//! read in. Before ordering, a tenant sees how many instances of a type
//! could start now in each region, and how many GPUs already wait there.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Engine, TestServer};

crate::on_both_engines!(
    orders_are_named_given_or_generated,
    waiting_orders_say_why_as_data_naming_only_their_own_orders,
    the_audit_log_names_its_actors,
    operators_read_a_tenant_organization_and_change_nothing,
    users_keep_the_language_and_time_zone_they_read_in,
    a_launch_is_shown_the_room_and_the_queue_per_region_before_ordering,
);

async fn orders_are_named_given_or_generated(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let orders = format!("/api/v1/orgs/{}/orders", tenant.org_id);

    let named = server
        .post(
            &orders,
            &tenant.token,
            json!({ "instance_type": "h100x1", "name": "train-llama-7b" }),
        )
        .await;
    named.expect(StatusCode::CREATED);
    assert_eq!(named.body["name"], "train-llama-7b");

    // Orders made in the same moment read differently.
    let mut generated = Vec::new();
    for _ in 0..6 {
        let made = server
            .post(&orders, &tenant.token, json!({ "instance_type": "h100x1" }))
            .await;
        made.expect(StatusCode::CREATED);
        let name = made.body["name"].as_str().expect("name").to_owned();
        let words: Vec<&str> = name.split('-').collect();
        assert_eq!(words.len(), 3, "{name}");
        assert_eq!(words[0], "h100x1");
        assert!(
            words[1..]
                .iter()
                .all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase())),
            "{name}"
        );
        generated.push(name);
    }
    generated.sort();
    generated.dedup();
    assert!(generated.len() >= 5, "{generated:?}");

    // An array's members carry its name and their index.
    let array = server
        .post(
            &orders,
            &tenant.token,
            json!({ "instance_type": "h100x1", "name": "sweep",
                    "job": { "command": "true", "array_count": 3 } }),
        )
        .await;
    array.expect(StatusCode::CREATED);
    let array_id = array.body["job"]["array_id"].as_str().expect("array id");
    let members = server
        .get(&format!("{orders}?array_id={array_id}"), &tenant.token)
        .await;
    let mut names: Vec<&str> = members
        .items()
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["sweep-0", "sweep-1", "sweep-2"]);

    // A bad name is refused with the field named, and nothing is made
    // (while the loop goes on starting what was ordered above).
    let orders_made = || server.count("SELECT COUNT(*) FROM orders");
    let before = orders_made().await;
    for bad in [
        json!("Train"),
        json!("-x"),
        json!(""),
        json!("a".repeat(64)),
    ] {
        server
            .post(
                &orders,
                &tenant.token,
                json!({ "instance_type": "h100x1", "name": bad }),
            )
            .await
            .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    server
        .post(
            &orders,
            &tenant.token,
            json!({ "instance_type": "h100x1", "name": 7 }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    assert_eq!(orders_made().await, before);
}

async fn waiting_orders_say_why_as_data_naming_only_their_own_orders(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let first = server.signup("first").await;
    let second = server.signup("second").await;

    let blocker = server
        .order(
            &first,
            json!({ "instance_type": "h100x8", "name": "blocker", "duration_seconds": 3600 }),
        )
        .await;
    server.wait_status(&first, blocker, "running").await;
    let capacity = |o: &Value| {
        o["pending_details"][0]["kind"] == "capacity"
            && o["pending_details"][0]["next_release"]["order"]["id"] == json!(blocker)
    };
    let own = server
        .order(&first, json!({ "instance_type": "h100x8" }))
        .await;
    let own = server
        .wait_order(&first, own, "waiting for the blocker", capacity)
        .await;
    let reason = &own["pending_details"][0];
    assert_eq!(reason["gpu_model"], "H100");
    assert_eq!(reason["free_gpus"], 0.0);
    assert_eq!(reason["needed_gpus"], 8.0);
    assert_eq!(reason["next_release"]["order"]["name"], "blocker");
    assert_eq!(reason["next_release"]["node"], "n1");
    let frees = reason["next_release"]["at"].as_str().expect("a time");
    let frees = chrono::DateTime::parse_from_rfc3339(frees).expect("RFC 3339");
    let started = own["created_at"].as_str().expect("created");
    let started = chrono::DateTime::parse_from_rfc3339(started).expect("RFC 3339");
    assert!(
        (frees - started).num_seconds() <= 3600,
        "{frees} vs {started}"
    );
    // The text stays, for readers of the API who want one line.
    assert!(
        own["pending_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("capacity:"))
    );

    // Another tenant learns when the GPUs free, not whose order holds them.
    let theirs = server
        .order(&second, json!({ "instance_type": "h100x8" }))
        .await;
    let theirs = server
        .wait_order(&second, theirs, "waiting for the blocker", capacity)
        .await;
    assert_eq!(
        theirs["pending_details"][0]["next_release"]["order"]["name"],
        Value::Null
    );

    // A running order has no reasons left.
    server.cancel(&first, blocker).await;
    let started = server
        .wait_order(
            &first,
            own["id"].as_str().expect("id").parse().expect("uuid"),
            "started",
            |o| o["status"] != "queued",
        )
        .await;
    assert_eq!(started["pending_details"], json!([]));
}

async fn the_audit_log_names_its_actors(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let (_, key) = server.api_key(&tenant, "member").await;
    server
        .post(
            &format!("/api/v1/orgs/{}/projects", tenant.org_id),
            &key,
            json!({ "name": "by-key" }),
        )
        .await;
    server
        .put(
            &format!("/api/v1/admin/orgs/{}/quotas", tenant.org_id),
            &operator.token,
            json!({ "quotas": [{ "gpu_model": "H100", "guaranteed_gpus": 0, "max_gpus": 16 }] }),
        )
        .await
        .expect(StatusCode::OK);
    let order = server
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;

    let tenant_log = server
        .get(
            &format!("/api/v1/orgs/{}/audit-log", tenant.org_id),
            &tenant.token,
        )
        .await;
    tenant_log.expect(StatusCode::OK);
    let entry = |log: &Value, action: &str| -> Value {
        log["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|e| e["action"] == action)
            .unwrap_or_else(|| panic!("no {action} in {log:#}"))
            .clone()
    };
    let created = entry(&tenant_log.body, "order.create");
    assert_eq!(created["target_id"], json!(order));
    assert_eq!(created["actor_email"], json!(tenant.email));
    assert!(created["actor_name"].is_string());
    // The operator who changed the quota is named as such, without email.
    let quota = entry(&tenant_log.body, "quota.set");
    assert_eq!(quota["actor_name"], "Platform operator");
    assert_eq!(quota["actor_email"], Value::Null);

    let all = server
        .get("/api/v1/admin/audit-log?limit=200", &operator.token)
        .await;
    all.expect(StatusCode::OK);
    assert_eq!(
        entry(&all.body, "quota.set")["actor_email"],
        json!(operator.email)
    );
}

async fn operators_read_a_tenant_organization_and_change_nothing(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let stranger = server.signup("stranger").await;
    let order = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x1", "name": "seen" }),
        )
        .await;
    let org = format!("/api/v1/orgs/{}", tenant.org_id);

    for path in [
        format!("{org}/orders"),
        format!("{org}/orders/{order}"),
        format!("{org}/usage"),
        format!("{org}/spend"),
        format!("{org}/invoices"),
        format!("{org}/quotas"),
        format!("{org}/billing"),
        format!("{org}/audit-log"),
    ] {
        server
            .get(&path, &operator.token)
            .await
            .expect(StatusCode::OK);
    }
    let seen = server
        .get(&format!("{org}/orders/{order}"), &operator.token)
        .await;
    assert_eq!(seen.body["name"], "seen");

    let before = server.table_counts().await;
    server
        .post(
            &format!("{org}/orders/{order}/cancel"),
            &operator.token,
            json!({}),
        )
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    server
        .post(
            &format!("{org}/orders"),
            &operator.token,
            json!({ "instance_type": "h100x1" }),
        )
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(server.table_counts().await, before);

    // Tenants stay walled off from each other as before.
    server
        .get(&format!("{org}/orders"), &stranger.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "organization_not_found");
}

async fn users_keep_the_language_and_time_zone_they_read_in(engine: Engine) {
    let server = TestServer::start(engine).await;
    let tenant = server.signup("tenant").await;
    let me = server.get("/api/v1/me", &tenant.token).await;
    assert_eq!(me.body["user"]["locale"], Value::Null);
    assert_eq!(me.body["user"]["time_zone"], Value::Null);

    let changed = server
        .patch(
            "/api/v1/me",
            &tenant.token,
            json!({ "locale": "ko", "time_zone": "Asia/Seoul" }),
        )
        .await;
    changed.expect(StatusCode::OK);
    assert_eq!(changed.body["locale"], "ko");
    let me = server.get("/api/v1/me", &tenant.token).await;
    assert_eq!(me.body["user"]["locale"], "ko");
    assert_eq!(me.body["user"]["time_zone"], "Asia/Seoul");

    // Refused whole: nothing of a bad request is kept.
    server
        .patch(
            "/api/v1/me",
            &tenant.token,
            json!({ "locale": "en", "time_zone": "Mars/Olympus" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    server
        .patch("/api/v1/me", &tenant.token, json!({ "locale": "fr" }))
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    let me = server.get("/api/v1/me", &tenant.token).await;
    assert_eq!(me.body["user"]["locale"], "ko");

    // Null goes back to the browser's; a field left out stays.
    let reset = server
        .patch("/api/v1/me", &tenant.token, json!({ "locale": null }))
        .await;
    reset.expect(StatusCode::OK);
    assert_eq!(reset.body["locale"], Value::Null);
    assert_eq!(reset.body["time_zone"], "Asia/Seoul");

    let (_, key) = server.api_key(&tenant, "member").await;
    server
        .patch("/api/v1/me", &key, json!({ "locale": "ko" }))
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
}

async fn a_launch_is_shown_the_room_and_the_queue_per_region_before_ordering(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    server.add_nodes(&operator, "r2", 3..=3).await;
    let tenant = server.signup("tenant").await;
    let types = server
        .get("/api/v1/catalog/instance-types", &tenant.token)
        .await;
    types.expect(StatusCode::OK);
    let id_of = |name: &str| {
        types
            .items()
            .iter()
            .find(|t| t["name"] == name)
            .expect(name)["id"]
            .as_str()
            .expect("id")
            .to_owned()
    };
    let availability = format!(
        "/api/v1/catalog/instance-types/{}/availability",
        id_of("h100x4")
    );
    let room = |body: &Value| -> Vec<(String, u64, u64)> {
        body["regions"]
            .as_array()
            .expect("regions")
            .iter()
            .map(|r| {
                (
                    r["region"].as_str().expect("region").to_owned(),
                    r["instances_now"].as_u64().expect("instances"),
                    r["waiting_gpus"].as_u64().expect("waiting"),
                )
            })
            .collect()
    };

    // Two 4-GPU instances fit on each 8-GPU node, CPU and memory included.
    // The scheduler works the figures out within a second of a change.
    let idle_room = vec![("r1".into(), 4, 0), ("r2".into(), 2, 0)];
    let idle = server
        .wait_get(&availability, &tenant.token, "room on idle nodes", |b| {
            room(b) == idle_room
        })
        .await;
    assert_eq!(idle["instance_type"], "h100x4");
    assert_eq!(idle["gpu_model"], "H100");
    let as_of: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(idle["as_of"].clone()).expect("as_of");
    assert!((chrono::Utc::now() - as_of).num_seconds() < 10, "{as_of}");

    // A whole node taken in r1; in r2 one whole node runs and a second
    // waits there, which r1 does not see.
    let whole = json!({ "instance_type": "h100x8", "region": "r1" });
    let running = server.order(&tenant, whole).await;
    server.wait_status(&tenant, running, "running").await;
    let in_r2 = json!({ "instance_type": "h100x8", "region": "r2" });
    let first = server.order(&tenant, in_r2.clone()).await;
    server.wait_status(&tenant, first, "running").await;
    server.order(&tenant, in_r2).await;
    let busy_room = vec![("r1".into(), 2, 0), ("r2".into(), 0, 8)];
    let busy = server
        .wait_get(&availability, &tenant.token, "room on busy nodes", |b| {
            room(b) == busy_room
        })
        .await;

    // Every tenant reads the same sums, and only signed in.
    let other = server.signup("other").await;
    let seen = server.get(&availability, &other.token).await;
    seen.expect(StatusCode::OK);
    assert_eq!(room(&seen.body), room(&busy));
    server
        .get(&availability, "not-a-token")
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_token");
    server
        .get(
            &format!(
                "/api/v1/catalog/instance-types/{}/availability",
                uuid::Uuid::now_v7()
            ),
            &tenant.token,
        )
        .await
        .expect(StatusCode::NOT_FOUND);
}
