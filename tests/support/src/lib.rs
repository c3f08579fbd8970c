//! What Gantry's test binaries share: a real Gantry server per test, with
//! its own database (a fresh SQLite file, or a fresh PostgreSQL database
//! that is dropped afterwards), listening on a random local port, driven
//! over real HTTP; and a webhook receiver that checks every signature.

pub mod db;
pub mod receiver;
pub mod slurm;

pub use db::TestDatabase;

use std::path::PathBuf;

use gantry_core::config::Config;
use gantry_core::state::AppState;
use gantry_server::{serve, state};
use reqwest::{Method, StatusCode};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use serde_json::{Value, json};
use uuid::Uuid;

pub const PASSWORD: &str = "correct horse battery staple";
pub const JWT_SECRET: &str = "test-secret-0123456789abcdef0123456789abcdef";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// Where the PostgreSQL half of the suite creates its databases.
pub fn postgres_admin_url() -> String {
    std::env::var("GANTRY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// `GANTRY_TEST_POSTGRES=skip` skips the PostgreSQL half locally; CI refuses
/// the switch so the half always runs there.
pub fn postgres_skipped() -> bool {
    let skip = std::env::var("GANTRY_TEST_POSTGRES").is_ok_and(|v| v == "skip");
    if skip && std::env::var("CI").is_ok() {
        panic!("GANTRY_TEST_POSTGRES=skip is not allowed in CI: the PostgreSQL half must run");
    }
    if skip {
        eprintln!("skipping the PostgreSQL half (GANTRY_TEST_POSTGRES=skip)");
    }
    skip
}

pub struct TestServer {
    pub base: String,
    pub http: reqwest::Client,
    pub state: AppState,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    serving: Option<tokio::task::JoinHandle<()>>,
    data_dir: PathBuf,
    /// The database this server created, held to be dropped with it; a
    /// replica has none.
    _database: Option<TestDatabase>,
}

impl TestServer {
    pub async fn start(engine: Engine) -> Self {
        Self::start_with(engine, |_| {}).await
    }

    pub async fn start_with(engine: Engine, adjust: impl FnOnce(&mut Config)) -> Self {
        let database = TestDatabase::create(engine).await;
        let mut config = Config {
            listen: "127.0.0.1:0".parse().expect("address"),
            database_url: Some(database.url.clone()),
            data_dir: database.dir.clone(),
            jwt_secret: Some(JWT_SECRET.into()),
            rate_limit_per_second: 100_000,
            rate_limit_burst: 100_000,
            database_max_connections: 5,
            demo: false,
            scheduler_interval_ms: 250,
            scheduler_lease_seconds: 3,
            simulated_provision_ms: 200,
            simulated_stop_ms: 100,
            ..Config::default()
        };
        adjust(&mut config);
        let data_dir = config.data_dir.clone();
        Self::serve(config, data_dir, Some(database)).await
    }

    /// A second server on the same database, as another replica behind a
    /// load balancer would be. The first server owns the database.
    pub async fn replica(&self, adjust: impl FnOnce(&mut Config)) -> Self {
        let mut config = self.state.config.clone();
        config.data_dir =
            std::env::temp_dir().join(format!("gantry-test-{}", Uuid::new_v4().simple()));
        adjust(&mut config);
        let data_dir = config.data_dir.clone();
        Self::serve(config, data_dir, None).await
    }

    async fn serve(config: Config, data_dir: PathBuf, database: Option<TestDatabase>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let (state, shutdown, serving) = Self::serve_on(config, listener).await;
        Self {
            base,
            http: reqwest::Client::new(),
            state,
            shutdown: Some(shutdown),
            serving: Some(serving),
            data_dir,
            _database: database,
        }
    }

    async fn serve_on(
        config: Config,
        listener: tokio::net::TcpListener,
    ) -> (
        AppState,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let state = state::start(config).await.expect("server state");
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = state.clone();
        let handle = tokio::spawn(async move {
            serve::serve(listener, serving, async {
                stopped.await.ok();
            })
            .await
            .expect("serve");
        });
        (state, shutdown, handle)
    }

    /// Restarts the server on the same address and database as a deploy
    /// would: it shuts down gracefully (scheduler lease included), stays
    /// away for `downtime`, and comes back with fresh in-memory state.
    #[allow(dead_code, reason = "only the agent's tests restart a server")]
    pub async fn restart(&mut self, downtime: std::time::Duration) {
        self.stop().await;
        tokio::time::sleep(downtime).await;
        let address = self.base.trim_start_matches("http://");
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .expect("bind the same address again");
        let (state, shutdown, serving) = Self::serve_on(self.state.config.clone(), listener).await;
        self.state = state;
        self.shutdown = Some(shutdown);
        self.serving = Some(serving);
    }

    /// Shuts the server down as SIGTERM would, keeping its database, and
    /// waits until it has.
    pub async fn stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            shutdown.send(()).ok();
        }
        if let Some(serving) = self.serving.take() {
            serving.await.expect("the server shut down cleanly");
        }
    }

    pub fn db(&self) -> &DatabaseConnection {
        &self.state.db
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with an optional bearer token and JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut request = self.http.request(method, self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        Reply::from_response(request.send().await.expect("request")).await
    }

    pub async fn get(&self, path: &str, token: &str) -> Reply {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    pub async fn patch(&self, path: &str, token: &str, body: Value) -> Reply {
        self.call(Method::PATCH, path, Some(token), Some(body))
            .await
    }

    pub async fn put(&self, path: &str, token: &str, body: Value) -> Reply {
        self.call(Method::PUT, path, Some(token), Some(body)).await
    }

    pub async fn delete(&self, path: &str, token: &str) -> Reply {
        self.call(Method::DELETE, path, Some(token), None).await
    }

    /// A POST with an `Idempotency-Key`, left unsent so a test can send it
    /// as often and as concurrently as it likes.
    pub fn keyed_post(
        &self,
        path: &str,
        token: &str,
        key: &str,
        body: &Value,
    ) -> reqwest::RequestBuilder {
        self.http
            .post(self.url(path))
            .bearer_auth(token)
            .header("Idempotency-Key", key)
            .json(body)
    }

    pub async fn login(&self, email: &str, password: &str) -> Reply {
        self.call(
            Method::POST,
            "/api/v1/auth/login",
            None,
            Some(json!({ "email": email, "password": password })),
        )
        .await
    }

    /// Signs up a new user with their own organization.
    pub async fn signup(&self, label: &str) -> Tenant {
        let email = format!("{label}-{}@example.com", Uuid::new_v4().simple());
        let reply = self
            .call(
                Method::POST,
                "/api/v1/auth/signup",
                None,
                Some(json!({ "email": email, "password": PASSWORD, "name": label, "organization": format!("{label} org") })),
            )
            .await;
        reply.expect(StatusCode::CREATED);
        Tenant {
            email,
            user_id: reply.id("/user/id"),
            org_id: reply.id("/organization/id"),
            token: reply.str("/access_token"),
        }
    }

    /// A new user whom `org`'s owner adds with `role`; the returned tenant
    /// acts in `org`.
    pub async fn member_of(&self, org: &Tenant, label: &str, role: &str) -> Tenant {
        let user = self.signup(label).await;
        self.post(
            &format!("/api/v1/orgs/{}/members", org.org_id),
            &org.token,
            json!({ "email": user.email, "role": role }),
        )
        .await
        .expect(StatusCode::CREATED);
        Tenant {
            org_id: org.org_id,
            ..user
        }
    }

    /// Creates an API key with `role` in the tenant's organization.
    pub async fn api_key(&self, tenant: &Tenant, role: &str) -> (Uuid, String) {
        let reply = self
            .post(
                &format!("/api/v1/orgs/{}/api-keys", tenant.org_id),
                &tenant.token,
                json!({ "name": format!("{role} key"), "role": role }),
            )
            .await;
        reply.expect(StatusCode::CREATED);
        (reply.id("/id"), reply.str("/secret"))
    }

    /// A new platform operator.
    pub async fn operator(&self) -> Tenant {
        let tenant = self.signup("operator").await;
        gantry_access::operators::create_or_promote(self.db(), &tenant.email, PASSWORD)
            .await
            .expect("promote to operator");
        tenant
    }

    /// A catalog with regions `r1` and `r2`, the GPU model `H100`, instance
    /// types `h100x1`, `h100x4` and `h100x8` (whole node) priced on demand
    /// and spot, and `nodes` simulated 8-GPU nodes `n1…` in `r1`.
    pub async fn cluster(&self, operator: &Tenant, nodes: usize) {
        let token = &operator.token;
        for region in ["r1", "r2"] {
            self.post(
                "/api/v1/admin/catalog/regions",
                token,
                json!({ "name": region, "display_name": region, "time_zone": "Europe/Berlin" }),
            )
            .await
            .expect(StatusCode::CREATED);
        }
        self.post(
            "/api/v1/admin/catalog/gpu-models",
            token,
            json!({ "name": "H100", "vendor": "NVIDIA", "memory_gib": 80, "interconnect": "nvlink" }),
        )
        .await
        .expect(StatusCode::CREATED);
        for gpus in [1, 4, 8] {
            let created = self
                .post(
                    "/api/v1/admin/catalog/instance-types",
                    token,
                    json!({ "name": format!("h100x{gpus}"), "gpu_model": "H100", "gpus_per_node": gpus, "vcpus": 12 * gpus, "memory_gib": 128 * gpus }),
                )
                .await;
            created.expect(StatusCode::CREATED);
            for (class, micros) in [("on_demand", 2_000_000), ("spot", 800_000)] {
                self.post(
                    &format!(
                        "/api/v1/admin/catalog/instance-types/{}/prices",
                        created.id("/id")
                    ),
                    token,
                    json!({ "pricing_class": class, "hourly_micros": micros * gpus }),
                )
                .await
                .expect(StatusCode::CREATED);
            }
        }
        self.add_nodes(operator, "r1", 1..=nodes).await;
    }

    /// Simulated 8-GPU nodes named `n{i}` in `region`.
    pub async fn add_nodes(
        &self,
        operator: &Tenant,
        region: &str,
        range: std::ops::RangeInclusive<usize>,
    ) {
        for i in range {
            self.post(
                "/api/v1/admin/nodes",
                &operator.token,
                json!({ "name": format!("n{i}"), "region": region, "instance_type": "h100x8" }),
            )
            .await
            .expect(StatusCode::CREATED);
        }
    }

    /// Registers a node agent the test plays: `gpus` H100s on `name` in
    /// `region`, 32 cores and 256 GiB; answers the node's credential.
    pub async fn join_agent(
        &self,
        operator: &Tenant,
        region: &str,
        name: &str,
        gpus: u32,
    ) -> String {
        let join = self
            .post(
                "/api/v1/admin/join-tokens",
                &operator.token,
                json!({ "region": region }),
            )
            .await;
        join.expect(StatusCode::CREATED);
        let gpus: Vec<Value> = (0..gpus)
            .map(|i| {
                json!({ "index": i, "model": "H100", "uuid": format!("GPU-{name}-{i}"),
                        "memory_mib": 81920, "nvlink_domain": 0, "mig_enabled": false })
            })
            .collect();
        let registered = self
            .post(
                "/api/v1/agent/register",
                &join.str("/token"),
                json!({ "name": name, "cpu_milli": 32000, "memory_mib": 262144, "gpus": gpus }),
            )
            .await;
        registered.expect(StatusCode::CREATED);
        registered.str("/credential")
    }

    /// Places an order and expects it queued.
    pub async fn order(&self, tenant: &Tenant, body: Value) -> Uuid {
        let reply = self
            .post(
                &format!("/api/v1/orgs/{}/orders", tenant.org_id),
                &tenant.token,
                body,
            )
            .await;
        reply.expect(StatusCode::CREATED);
        assert_eq!(reply.body["status"], "queued");
        reply.id("/id")
    }

    /// Polls an order until `done` holds, for up to 20 s.
    pub async fn wait_order(
        &self,
        tenant: &Tenant,
        order: Uuid,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let path = format!("/api/v1/orgs/{}/orders/{order}", tenant.org_id);
        self.wait_get(&path, &tenant.token, &format!("order {order} {what}"), done)
            .await
    }

    /// Polls `path` until it answers 200 with a body `done` holds for, for
    /// up to 20 s.
    pub async fn wait_get(
        &self,
        path: &str,
        token: &str,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut last = Value::Null;
        for _ in 0..400 {
            let reply = self.get(path, token).await;
            reply.expect(StatusCode::OK);
            if done(&reply.body) {
                return reply.body;
            }
            last = reply.body;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("{what} never came; last seen: {last:#}");
    }

    /// The GPUs an order's first attempt held, as the API lists them: a
    /// short workload may end before its placement is ever seen, and its
    /// attempt keeps them.
    #[allow(dead_code, reason = "only the agent's tests run short workloads")]
    pub async fn first_attempt_gpus(&self, tenant: &Tenant, order: Uuid) -> Vec<String> {
        let attempts = self
            .get(
                &format!("/api/v1/orgs/{}/orders/{order}/attempts", tenant.org_id),
                &tenant.token,
            )
            .await;
        attempts.body[0]["nodes"][0]["gpu_ids"]
            .as_array()
            .unwrap_or_else(|| panic!("the attempt's GPUs: {:#}", attempts.body))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Cancels an order, which must be accepted.
    pub async fn cancel(&self, tenant: &Tenant, order: Uuid) {
        self.post(
            &format!("/api/v1/orgs/{}/orders/{order}/cancel", tenant.org_id),
            &tenant.token,
            json!({}),
        )
        .await
        .expect(StatusCode::OK);
    }

    /// Polls a queued order until its reason begins with `prefix`.
    pub async fn wait_reason(&self, tenant: &Tenant, order: Uuid, prefix: &str) -> Value {
        self.wait_order(tenant, order, prefix, |o| {
            o["pending_reason"]
                .as_str()
                .is_some_and(|r| r.starts_with(prefix))
        })
        .await
    }

    /// Polls an order until it reaches `status`.
    pub async fn wait_status(&self, tenant: &Tenant, order: Uuid, status: &str) -> Value {
        self.wait_order(tenant, order, status, |o| o["status"] == status)
            .await
    }

    /// One number from SQL.
    pub async fn count(&self, sql: &str) -> i64 {
        let row = self
            .db()
            .query_one_raw(Statement::from_string(
                self.db().get_database_backend(),
                sql,
            ))
            .await
            .expect("query")
            .expect("row");
        row.try_get_by_index::<i64>(0).expect("count value")
    }

    /// Waits until every allocation that ran has been released and metered
    /// to its end, then checks that its usage records cover it exactly once,
    /// from the second it began running to the second it was released;
    /// answers the GPU-seconds they hold.
    pub async fn metered_exactly(&self) -> i64 {
        use gantry_entities::{allocation, usage_record};
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
        let mut ran = Vec::new();
        for _ in 0..400 {
            ran = allocation::Entity::find()
                .filter(allocation::Column::RunningSince.is_not_null())
                .all(self.db())
                .await
                .expect("allocations");
            let closed = |a: &allocation::Model| {
                a.released_at.map(|r| r.timestamp()) == a.metered_until.map(|m| m.timestamp())
                    && a.released_at.is_some()
            };
            if ran.iter().all(closed) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let records = usage_record::Entity::find()
            .filter(usage_record::Column::Kind.eq(gantry_types::classes::UsageKind::Metered))
            .order_by_asc(usage_record::Column::PeriodStart)
            .all(self.db())
            .await
            .expect("usage records");
        let mut gpu_seconds = 0;
        for a in &ran {
            let (Some(began), Some(released)) = (a.running_since, a.released_at) else {
                panic!("allocation {} never ended: {a:?}", a.id);
            };
            let mut cursor = began.timestamp();
            for r in records.iter().filter(|r| r.allocation_id == a.id) {
                assert_eq!(
                    r.period_start.timestamp(),
                    cursor,
                    "a gap or overlap: {r:?}"
                );
                assert_eq!(r.seconds, r.period_end.timestamp() - cursor);
                assert!((0..=r.seconds).contains(&r.excluded_seconds));
                cursor = r.period_end.timestamp();
                gpu_seconds += i64::from(r.gpus) * r.seconds;
            }
            assert_eq!(
                cursor,
                released.timestamp(),
                "metered to its release: {a:?}"
            );
        }
        assert!(
            records
                .iter()
                .all(|r| ran.iter().any(|a| a.id == r.allocation_id)),
            "every record belongs to an allocation that ran"
        );
        gpu_seconds
    }

    /// Row counts of every table, to prove a refused request changed nothing.
    pub async fn table_counts(&self) -> Vec<(String, i64)> {
        let mut counts = Vec::new();
        for table in [
            "users",
            "organizations",
            "memberships",
            "projects",
            "api_keys",
            "audit_log",
            "idempotency_keys",
            "orders",
            "allocations",
            "gpu_claims",
            "gpu_shares",
            "instance_types",
            "quotas",
            "nodes",
            "gpus",
            "usage_records",
            "reservations",
            "reservation_nodes",
        ] {
            let row = self
                .db()
                .query_one_raw(Statement::from_string(
                    self.db().get_database_backend(),
                    format!("SELECT COUNT(*) AS n FROM {table}"),
                ))
                .await
                .expect("count")
                .expect("row");
            counts.push((
                table.to_owned(),
                row.try_get::<i64>("", "n").expect("count value"),
            ));
        }
        counts
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            shutdown.send(()).ok();
        }
        std::fs::remove_dir_all(&self.data_dir).ok();
    }
}

#[derive(Debug, Clone)]
pub struct Tenant {
    pub email: String,
    pub user_id: Uuid,
    pub org_id: Uuid,
    pub token: String,
}

#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Reply {
    pub async fn from_response(response: reqwest::Response) -> Self {
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("a JSON body, got {status}: {text}"))
        };
        Self {
            status,
            headers,
            body,
        }
    }

    #[track_caller]
    pub fn expect(&self, status: StatusCode) -> &Self {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.body
        );
        self
    }

    /// Asserts an RFC 9457 problem with this status and code.
    #[track_caller]
    pub fn expect_problem(&self, status: StatusCode, code: &str) -> &Self {
        self.expect(status);
        assert_eq!(
            self.headers
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/problem+json"),
            "problem content type; body: {}",
            self.body
        );
        assert_eq!(self.body["code"], code, "problem code; body: {}", self.body);
        assert_eq!(self.body["status"], status.as_u16());
        assert_eq!(self.body["type"], format!("urn:gantry:problem:{code}"));
        assert!(self.body["detail"].as_str().is_some_and(|d| !d.is_empty()));
        self
    }

    #[track_caller]
    pub fn str(&self, pointer: &str) -> String {
        self.body
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no string at {pointer} in {}", self.body))
            .to_owned()
    }

    #[track_caller]
    pub fn id(&self, pointer: &str) -> Uuid {
        Uuid::parse_str(&self.str(pointer)).expect("uuid")
    }

    pub fn items(&self) -> &Vec<Value> {
        self.body["items"].as_array().expect("a page of items")
    }
}

/// Runs each named `async fn(Engine)` once on SQLite and once on PostgreSQL,
/// as `<module>::sqlite::<name>` and `<module>::postgres::<name>`.
#[macro_export]
macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Engine::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if $crate::postgres_skipped() {
                        return;
                    }
                    super::$name($crate::Engine::Postgres).await;
                }
            )*
        }
    };
}

/// Sends `request` on a task of its own, so that requests made together
/// reach the server at once; the task answers the status and JSON body.
pub fn sent_at_once(
    request: reqwest::RequestBuilder,
) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let request = request.send();
    tokio::spawn(async move {
        let reply = request.await.expect("response");
        let status = reply.status();
        (status, reply.json::<Value>().await.expect("a JSON body"))
    })
}

/// An instant as a query parameter.
pub fn query_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        .replace('+', "%2B")
        .replace(':', "%3A")
}
