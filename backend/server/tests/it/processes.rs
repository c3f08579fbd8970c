//! The `gantry` binary as separate processes on one database: killed with
//! SIGKILL while it places and provisions orders, meters, delivers
//! webhooks, or submits to a real Slurm cluster, and run as two replicas
//! sharing the scheduler lease.

use gantry_test_support as support;
use gantry_test_support::on_both_engines;
use gantry_test_support::receiver;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::slurm::{SlurmCluster, UnixUsers};
use support::{Engine, JWT_SECRET, Tenant, TestServer};

on_both_engines!(
    kill_9_while_placing_loses_and_duplicates_nothing,
    kill_9_while_metering_loses_and_double_counts_no_usage,
    two_replicas_share_one_lease_and_a_killed_leader_hands_it_over,
    replicas_starting_together_on_an_empty_database_all_come_up,
    kill_9_while_delivering_webhooks_loses_no_event_and_keeps_each_id,
    kill_9_while_submitting_to_slurm_submits_nothing_twice,
);

/// A `gantry serve` process, killed with SIGKILL when dropped.
struct Server {
    child: Child,
    base: String,
    http: reqwest::Client,
    _data: tempdir::Dir,
}

mod tempdir {
    /// A directory removed when dropped.
    pub struct Dir(pub std::path::PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            std::fs::remove_dir_all(&self.0).ok();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

impl Server {
    async fn start(database_url: &str) -> Self {
        Self::start_with_env(database_url, &[]).await
    }

    /// Starts one with `env` added to (or replacing in) its environment.
    async fn start_with_env(database_url: &str, env: &[(&str, String)]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let data = std::env::temp_dir().join(format!("gantry-process-{}", uuid::Uuid::new_v4()));
        let child = Command::new(env!("CARGO_BIN_EXE_gantry"))
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("GANTRY_DATA_DIR", &data)
            .env("GANTRY_LISTEN", format!("127.0.0.1:{port}"))
            .env("GANTRY_JWT_SECRET", JWT_SECRET)
            .env("GANTRY_DEMO", "false")
            .env("GANTRY_RATE_LIMIT_PER_SECOND", "100000")
            .env("GANTRY_RATE_LIMIT_BURST", "100000")
            .env("GANTRY_REQUEST_TIMEOUT_SECONDS", "1")
            .env("GANTRY_SCHEDULER_INTERVAL_MS", "200")
            .env("GANTRY_SCHEDULER_LEASE_SECONDS", "2")
            .env("GANTRY_SIMULATED_PROVISION_MS", "2000")
            .env("GANTRY_SIMULATED_STOP_MS", "100")
            .env("GANTRY_DATABASE_MAX_CONNECTIONS", "5")
            .env("GANTRY_METERING_INTERVAL_SECONDS", "1")
            .env("GANTRY_AGENT_HEARTBEAT_DEADLINE_SECONDS", "1")
            .env("GANTRY_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8")
            .env("GANTRY_WEBHOOK_ALLOW_HTTP", "true")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start gantry serve");
        let server = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            _data: tempdir::Dir(data),
        };
        for _ in 0..200 {
            if let Ok(reply) = server
                .http
                .get(format!("{}/readyz", server.base))
                .send()
                .await
                && reply.status() == StatusCode::OK
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("gantry serve did not become ready");
    }

    fn kill_9(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().ok();
    }

    async fn post(&self, path: &str, token: &str, body: &Value) -> (StatusCode, Value) {
        let reply = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("request");
        let status = reply.status();
        (status, reply.json().await.unwrap_or_default())
    }

    async fn get(&self, path: &str, token: &str) -> Value {
        let reply = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
            .send()
            .await
            .expect("request");
        assert_eq!(reply.status(), StatusCode::OK);
        reply.json().await.expect("json")
    }

    /// Creates an order with a key, retrying while the key is held by a
    /// request the killed process never finished.
    async fn order(&self, tenant: &Tenant, key: &str) -> String {
        for _ in 0..200 {
            let reply = self
                .http
                .post(format!(
                    "{}/api/v1/orgs/{}/orders",
                    self.base, tenant.org_id
                ))
                .bearer_auth(&tenant.token)
                .header("Idempotency-Key", key)
                .json(&json!({ "instance_type": "h100x1" }))
                .send()
                .await
                .expect("request");
            match reply.status() {
                StatusCode::CREATED => {
                    let order: Value = reply.json().await.expect("json");
                    return order["id"].as_str().expect("id").to_owned();
                }
                StatusCode::CONFLICT => tokio::time::sleep(Duration::from_millis(100)).await,
                other => panic!(
                    "order {key}: {other}: {}",
                    reply.text().await.unwrap_or_default()
                ),
            }
        }
        panic!("order {key} stayed locked");
    }
}

/// A database with a 4-node, 32-GPU cluster, a tenant and an operator; the
/// in-process server that built it is shut down.
async fn prepared(engine: Engine) -> (TestServer, Tenant, Tenant) {
    let mut setup = TestServer::start(engine).await;
    let operator = setup.operator().await;
    setup.cluster(&operator, 4).await;
    let tenant = setup.signup("tenant").await;
    setup.stop().await;
    (setup, operator, tenant)
}

async fn kill_9_while_placing_loses_and_duplicates_nothing(engine: Engine) {
    let (setup, _operator, tenant) = prepared(engine).await;
    let url = setup.state.config.database_url();
    let first = Server::start(&url).await;
    let sent: Vec<_> = (0..40)
        .map(|i| {
            let http = first.http.clone();
            let request = http
                .post(format!(
                    "{}/api/v1/orgs/{}/orders",
                    first.base, tenant.org_id
                ))
                .bearer_auth(&tenant.token)
                .header("Idempotency-Key", format!("crash-{i}"))
                .json(&json!({ "instance_type": "h100x1" }));
            tokio::spawn(async move { request.send().await.map(|r| r.status()) })
        })
        .collect();
    // Killed once some orders are being brought up (each takes 2 s), however
    // long the machine takes to get there.
    let bringing_up = "SELECT COUNT(*) FROM orders WHERE status IN ('scheduled', 'provisioning')";
    let mut mid_flight = 0;
    for _ in 0..500 {
        mid_flight = setup.count(bringing_up).await;
        if mid_flight > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(mid_flight > 0, "no order was ever brought up");
    first.kill_9();
    for request in sent {
        // Requests in flight when the process died fail; their retries follow.
        request.await.ok();
    }
    assert!(
        setup.count(bringing_up).await > 0,
        "the process died while bringing orders up"
    );

    let second = Server::start(&url).await;
    let mut ids = std::collections::HashSet::new();
    for i in 0..40 {
        ids.insert(second.order(&tenant, &format!("crash-{i}")).await);
    }
    assert_eq!(ids.len(), 40, "one order per key");
    assert_eq!(setup.count("SELECT COUNT(*) FROM orders").await, 40);

    // The loop resumes: every GPU is placed and brought up, the rest waits.
    let orders_path = format!("/api/v1/orgs/{}/orders?limit=200", tenant.org_id);
    let mut orders = Value::Null;
    for _ in 0..200 {
        orders = second.get(&orders_path, &tenant.token).await;
        let running = orders["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter(|o| o["status"] == "running")
            .count();
        if running == 32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let items = orders["items"].as_array().expect("items");
    let mut gpus = std::collections::HashSet::new();
    for order in items {
        for placement in order["placement"].as_array().expect("placement") {
            for gpu in placement["gpu_ids"].as_array().expect("gpus") {
                assert!(
                    gpus.insert((placement["node_name"].to_string(), gpu.to_string())),
                    "a GPU is held twice"
                );
            }
        }
    }
    let status = |s: &str| items.iter().filter(|o| o["status"] == s).count();
    assert_eq!((status("running"), status("queued")), (32, 8), "{orders:#}");
    assert_eq!(gpus.len(), 32);
    assert_eq!(setup.count("SELECT COUNT(*) FROM gpu_claims").await, 32);
}

async fn kill_9_while_metering_loses_and_double_counts_no_usage(engine: Engine) {
    let (setup, _operator, tenant) = prepared(engine).await;
    let url = setup.state.config.database_url();
    let mut server = Server::start(&url).await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(server.order(&tenant, &format!("metered-{i}")).await);
    }
    for id in &ids {
        let path = format!("/api/v1/orgs/{}/orders/{id}", tenant.org_id);
        for _ in 0..100 {
            if server.get(&path, &tenant.token).await["status"] == "running" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Killed at uneven moments while metering runs every second, and down
    // for a while each time: the records written so far stay, the time the
    // process was away is metered once it is back.
    for pause_ms in [1_300, 3_100, 2_700] {
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        server.kill_9();
        tokio::time::sleep(Duration::from_millis(700)).await;
        server = Server::start(&url).await;
    }
    assert!(setup.count("SELECT COUNT(*) FROM usage_records").await > 0);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for id in &ids {
        let reply = server
            .http
            .post(format!(
                "{}/api/v1/orgs/{}/orders/{id}/cancel",
                server.base, tenant.org_id
            ))
            .bearer_auth(&tenant.token)
            .json(&json!({}))
            .send()
            .await
            .expect("cancel");
        assert_eq!(reply.status(), StatusCode::OK);
    }
    // Each allocation is covered second by second from its start to its
    // release, with no gap and no span counted twice.
    let gpu_seconds = setup.metered_exactly().await;
    assert!(
        gpu_seconds >= 6 * 6,
        "six 1-GPU orders ran over six seconds: {gpu_seconds}"
    );
}

async fn two_replicas_share_one_lease_and_a_killed_leader_hands_it_over(engine: Engine) {
    let (_setup, operator, tenant) = prepared(engine).await;
    let url = _setup.state.config.database_url();
    let replicas = [Server::start(&url).await, Server::start(&url).await];
    let mut leaders = Vec::new();
    for _ in 0..100 {
        leaders.clear();
        for (i, replica) in replicas.iter().enumerate() {
            let status = replica
                .get("/api/v1/admin/scheduler", &operator.token)
                .await;
            if status["leading"] == true {
                assert_eq!(status["lease_holder"], status["replica"]);
                leaders.push(i);
            }
        }
        if !leaders.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(leaders.len(), 1, "exactly one replica runs the loop");
    let [a, b] = replicas;
    let (leader, follower) = if leaders[0] == 0 { (a, b) } else { (b, a) };
    leader.kill_9();

    // The lease expires unrenewed and the follower takes it.
    let mut took_over = false;
    for _ in 0..100 {
        let status = follower
            .get("/api/v1/admin/scheduler", &operator.token)
            .await;
        if status["leading"] == true {
            took_over = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(took_over, "the follower took the lease over");
    let id = follower.order(&tenant, "after-failover").await;
    for _ in 0..100 {
        let order = follower
            .get(
                &format!("/api/v1/orgs/{}/orders/{id}", tenant.org_id),
                &tenant.token,
            )
            .await;
        if order["status"] == "running" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the new leader never ran the order");
}

/// A deployment rolls out several replicas at once onto a new database:
/// one applies the migrations, the others wait for it, and all serve.
async fn replicas_starting_together_on_an_empty_database_all_come_up(engine: Engine) {
    use gantry_migrations::{Migrator, MigratorTrait};

    let mut setup = TestServer::start(engine).await;
    setup.stop().await;
    Migrator::down(setup.db(), None)
        .await
        .expect("an empty database");
    let url = setup.state.config.database_url();
    let replicas = tokio::join!(
        Server::start(&url),
        Server::start(&url),
        Server::start(&url)
    );
    let tenant = replicas
        .0
        .http
        .post(format!("{}/api/v1/auth/signup", replicas.1.base))
        .json(&json!({
            "email": "first@example.com",
            "password": support::PASSWORD,
            "name": "First",
            "organization": "First",
        }))
        .send()
        .await
        .expect("sign up");
    assert_eq!(tenant.status(), StatusCode::CREATED);
    assert_eq!(
        setup.count("SELECT COUNT(*) FROM seaql_migrations").await,
        i64::try_from(Migrator::migrations().len()).expect("count")
    );
}

/// Killed while a delivery is on the wire (the receiver holds its first
/// request) and later events wait in the outbox: the next process sends
/// every event, the one on the wire again under the same `webhook-id`, and
/// no event arrives under two ids.
async fn kill_9_while_delivering_webhooks_loses_no_event_and_keeps_each_id(engine: Engine) {
    let (setup, _operator, tenant) = prepared(engine).await;
    let url = setup.state.config.database_url();
    let receiver = receiver::Receiver::start(&["--delay-first", "3"]);
    let first = Server::start(&url).await;
    let created: Value = first
        .http
        .post(format!(
            "{}/api/v1/orgs/{}/webhooks",
            first.base, tenant.org_id
        ))
        .bearer_auth(&tenant.token)
        .json(&json!({ "url": receiver.url(), "event_types": ["order.queued"] }))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    receiver
        .set_secret(created["secret"].as_str().expect("secret"))
        .await;
    let mut orders = vec![first.order(&tenant, "hooked-0").await];
    for _ in 0..200 {
        if setup.count("SELECT COUNT(*) FROM webhook_deliveries").await >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The first delivery is on the wire and held; the rest wait behind it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 1..5 {
        orders.push(first.order(&tenant, &format!("hooked-{i}")).await);
    }
    first.kill_9();
    assert_eq!(
        setup
            .count("SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'succeeded'")
            .await,
        0,
        "the process died before recording an answer"
    );
    assert!(
        setup
            .count("SELECT COUNT(*) FROM webhook_events WHERE dispatched = false")
            .await
            >= 4,
        "later events wait in the outbox"
    );

    let _second = Server::start(&url).await;
    let of = |request: &Value, order: &str| {
        request["type"] == "order.queued" && request["body"]["data"]["order"]["id"] == order
    };
    let requests = receiver
        .wait("every order's queued event, the first one twice", |r| {
            orders.iter().all(|o| r.iter().any(|e| of(e, o)))
                && r.iter().filter(|e| of(e, &orders[0])).count() == 2
        })
        .await;
    assert!(
        requests.iter().all(|r| r["verified"] == true),
        "{requests:#?}"
    );
    for order in &orders {
        let ids: std::collections::HashSet<&str> = requests
            .iter()
            .filter(|r| of(r, order))
            .filter_map(|r| r["id"].as_str())
            .collect();
        assert_eq!(ids.len(), 1, "{order}: {requests:#?}");
    }
}

/// Killed while `sbatch` has made the job but not yet answered (Slurm slow
/// to answer, standing in for every moment between the two): the order
/// waits where it was, and the next process finds the job by its name
/// instead of submitting it again.
async fn kill_9_while_submitting_to_slurm_submits_nothing_twice(engine: Engine) {
    let mut setup = TestServer::start(engine).await;
    let operator = setup.operator().await;
    setup.cluster(&operator, 0).await;
    let tenant = setup.signup("slurm-tenant").await;
    let slurm = SlurmCluster::start(1);
    let _users = UnixUsers::make("k", &[tenant.org_id]);
    setup
        .put(
            "/api/v1/admin/slurm-clusters",
            &operator.token,
            json!({
                "region": "r2", "partition": "gpu", "account": "gantry",
                "conf_path": slurm.conf, "output_dir": slurm.output_dir(),
                "gres_types": { "H100": "h100" }, "user_prefix": "k",
            }),
        )
        .await
        .expect(StatusCode::OK);
    // The node comes in on the next read of Slurm.
    for _ in 0..300 {
        let nodes = setup
            .get("/api/v1/admin/nodes?region=r2", &operator.token)
            .await;
        if nodes.body["items"][0]["state"] == "ready" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    setup.stop().await;

    // `sbatch` as a slow Slurm answers it: the job is made, the answer
    // comes half a minute later.
    let slow = slurm.dir.join("slow");
    std::fs::create_dir_all(&slow).expect("slow dir");
    let made = slow.join("made");
    let wrapper = slow.join("sbatch");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nout=$(/usr/bin/sbatch \"$@\") || exit $?\necho \"$out\" > {}\nsleep 30\necho \"$out\"\n",
            made.display()
        ),
    )
    .expect("wrapper");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let path = format!(
        "{}:{}",
        slow.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let url = setup.state.config.database_url();
    let first = Server::start_with_env(&url, &[("PATH", path)]).await;
    let (status, order) = first
        .post(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &tenant.token,
            &json!({ "instance_type": "h100x1", "region": "r2", "job": { "command": "echo once" } }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{order:#}");
    let id = order["id"].as_str().expect("id").to_owned();
    let order_path = format!("/api/v1/orgs/{}/orders/{id}", tenant.org_id);
    // The nodes come in, the order is placed and handed to Slurm.
    for _ in 0..600 {
        if made.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let job_id = std::fs::read_to_string(&made).expect("sbatch made the job");
    assert_eq!(
        first.get(&order_path, &tenant.token).await["status"],
        "scheduled"
    );
    first.kill_9();

    let second = Server::start(&url).await;
    let mut order = Value::Null;
    // A try whose process died is taken over once its time is up (40 s).
    for _ in 0..1200 {
        order = second.get(&order_path, &tenant.token).await;
        if order["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(order["status"], "completed", "{order:#}");
    assert_eq!(order["attempts"], 1, "{order:#}");
    let name = format!("gantry-{}-1", id.replace('-', ""));
    let accounted = slurm.accounted(&[&format!("--name={name}")], "JobID,State");
    assert_eq!(
        accounted.trim(),
        format!("{}|COMPLETED", job_id.trim()),
        "one job, the one the killed process made"
    );
    assert_eq!(
        setup
            .count(&format!(
                "SELECT COUNT(*) FROM slurm_jobs WHERE job_id = {}",
                job_id.trim()
            ))
            .await,
        1
    );
}
