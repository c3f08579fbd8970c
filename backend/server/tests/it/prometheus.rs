//! A real Prometheus scrapes a real `gantry serve` running the demo
//! cluster, and PromQL over what it stored answers as the API does: free
//! GPUs per model, the wait from creation to start of every order, and
//! what waits and why, an agent's GPU telemetry. The alerting rules in
//! `deploy/prometheus` pass `promtool`; they and the dashboards in
//! `deploy/grafana` read only metrics the server exports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// A child process, killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// A directory removed when dropped.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// The admission-wait bucket bounds the server uses, for checking an
/// interpolated quantile against the true one.
const WAIT_BOUNDS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0,
];

fn bucket_of(seconds: f64) -> (f64, f64) {
    let upper = WAIT_BOUNDS
        .iter()
        .copied()
        .find(|b| seconds <= *b)
        .unwrap_or(f64::INFINITY);
    let lower = WAIT_BOUNDS
        .iter()
        .copied()
        .rev()
        .find(|b| *b < upper)
        .unwrap_or(0.0);
    (lower, upper)
}

struct Gantry {
    base: String,
    http: reqwest::Client,
}

impl Gantry {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> Value {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let reply = request.send().await.expect("request");
        assert!(reply.status().is_success(), "{path}: {}", reply.status());
        reply.json().await.expect("json")
    }

    async fn get(&self, path: &str, token: &str) -> Value {
        self.call(reqwest::Method::GET, path, token, None).await
    }

    async fn login(&self, email: &str, password: &str) -> String {
        let reply: Value = self
            .http
            .post(format!("{}/api/v1/auth/login", self.base))
            .json(&json!({ "email": email, "password": password }))
            .send()
            .await
            .expect("login")
            .json()
            .await
            .expect("json");
        reply["access_token"].as_str().expect("token").to_owned()
    }

    /// Free GPUs per model as the operator's node list shows them: healthy,
    /// held by nothing, on a node that takes work.
    async fn free_gpus(&self, operator: &str) -> BTreeMap<String, f64> {
        let nodes = self.get("/api/v1/admin/nodes?limit=200", operator).await;
        let mut free = BTreeMap::new();
        for node in nodes["items"].as_array().expect("nodes") {
            for gpu in node["gpus"].as_array().expect("gpus") {
                let model = gpu["model"].as_str().expect("model").to_owned();
                let held = !gpu["order_id"].is_null()
                    || gpu["shares"].as_array().is_some_and(|s| !s.is_empty());
                let is_free = node["state"] == "ready" && gpu["healthy"] == true && !held;
                *free.entry(model).or_insert(0.0) += if is_free { 1.0 } else { 0.0 };
            }
        }
        free
    }
}

struct Prometheus {
    base: String,
    http: reqwest::Client,
}

impl Prometheus {
    fn start(dir: &Path, target: &str) -> (Process, Self) {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gantry\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("write the Prometheus configuration");
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus (Debian's `prometheus` package; .ci/run installs it)");
        (
            Process(child),
            Self {
                base: format!("http://127.0.0.1:{port}"),
                http: reqwest::Client::new(),
            },
        )
    }

    /// An instant query's samples, by the value of `label`.
    async fn query(&self, promql: &str, label: &str) -> BTreeMap<String, f64> {
        let Ok(url) = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query", self.base),
            [("query", promql)],
        ) else {
            return BTreeMap::new();
        };
        let Ok(reply) = self.http.get(url).send().await else {
            return BTreeMap::new();
        };
        let Ok(body) = reply.json::<Value>().await else {
            return BTreeMap::new();
        };
        body["data"]["result"]
            .as_array()
            .map(|samples| {
                samples
                    .iter()
                    .filter_map(|s| {
                        let key = s["metric"][label].as_str().unwrap_or_default().to_owned();
                        let value = s["value"][1].as_str()?.parse().ok()?;
                        Some((key, value))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Polls until `check` answers `Ok`, for up to 60 s; panics with its last
/// complaint.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut last = String::new();
    for _ in 0..120 {
        match check().await {
            Ok(()) => return,
            Err(complaint) => last = complaint,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("{what}: {last}");
}

#[tokio::test(flavor = "multi_thread")]
async fn promql_over_the_scraped_server_answers_as_the_api_does() {
    let dir = Dir(std::env::temp_dir().join(format!("gantry-prometheus-{}", uuid::Uuid::new_v4())));
    std::fs::create_dir_all(&dir.0).expect("temporary directory");
    let (api_port, metrics_port) = (free_port(), free_port());
    let _server = Process(
        Command::new(env!("CARGO_BIN_EXE_gantry"))
            .arg("serve")
            .env_remove("DATABASE_URL")
            .env("GANTRY_DATA_DIR", dir.0.join("gantry"))
            .env("GANTRY_LISTEN", format!("127.0.0.1:{api_port}"))
            .env("GANTRY_METRICS_LISTEN", format!("127.0.0.1:{metrics_port}"))
            .env("GANTRY_DEMO", "true")
            .env("GANTRY_SCHEDULER_INTERVAL_MS", "200")
            .env("GANTRY_SIMULATED_PROVISION_MS", "300")
            .env("GANTRY_RATE_LIMIT_PER_SECOND", "100000")
            .env("GANTRY_RATE_LIMIT_BURST", "100000")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start gantry serve"),
    );
    let gantry = Gantry {
        base: format!("http://127.0.0.1:{api_port}"),
        http: reqwest::Client::new(),
    };
    eventually("the server comes up", || async {
        match gantry
            .http
            .get(format!("{}/readyz", gantry.base))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (_prometheus, prometheus) = Prometheus::start(&dir.0, &format!("127.0.0.1:{metrics_port}"));

    use gantry_server::demo::{OPERATOR_EMAIL, OPERATOR_PASSWORD, TENANT_EMAIL, TENANT_PASSWORD};
    let operator = gantry.login(OPERATOR_EMAIL, OPERATOR_PASSWORD).await;
    let tenant = gantry.login(TENANT_EMAIL, TENANT_PASSWORD).await;
    let orgs = gantry.get("/api/v1/orgs", &tenant).await;
    let org = orgs["items"][0]["id"]
        .as_str()
        .expect("organization")
        .to_owned();
    let types = gantry
        .get("/api/v1/catalog/instance-types?limit=200", &tenant)
        .await;
    let whole: Vec<String> = types["items"]
        .as_array()
        .expect("types")
        .iter()
        .filter(|t| t["gpu_milli"].is_null() && t["mig_profile"].is_null())
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    assert!(whole.len() >= 3, "{whole:?}");
    let mut orders = Vec::new();
    for name in whole.iter().take(4) {
        for _ in 0..2 {
            let placed = gantry
                .call(
                    reqwest::Method::POST,
                    &format!("/api/v1/orgs/{org}/orders"),
                    &tenant,
                    Some(json!({ "instance_type": name })),
                )
                .await;
            orders.push(placed["id"].as_str().expect("id").to_owned());
        }
    }
    // A job held behind another, so that something waits.
    let first = gantry
        .call(
            reqwest::Method::POST,
            &format!("/api/v1/orgs/{org}/orders"),
            &tenant,
            Some(json!({ "instance_type": whole[0], "duration_seconds": 3600, "job": { "command": "train" } })),
        )
        .await;
    orders.push(first["id"].as_str().expect("id").to_owned());
    gantry
        .call(
            reqwest::Method::POST,
            &format!("/api/v1/orgs/{org}/orders"),
            &tenant,
            Some(
                json!({ "instance_type": whole[0], "job": { "command": "evaluate",
                "depends_on": [{ "order_id": first["id"], "condition": "after_ok" }] } }),
            ),
        )
        .await;
    let mut waits = Vec::new();
    for id in &orders {
        let path = format!("/api/v1/orgs/{org}/orders/{id}");
        let mut order = gantry.get(&path, &tenant).await;
        for _ in 0..120 {
            if order["status"] == "running" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            order = gantry.get(&path, &tenant).await;
        }
        assert_eq!(order["status"], "running", "{order:#}");
        let at = |field: &str| {
            chrono::DateTime::parse_from_rfc3339(order[field].as_str().expect(field)).expect("time")
        };
        waits.push((at("started_at") - at("created_at")).num_milliseconds() as f64 / 1000.0);
    }

    // Free GPUs per model: the leader publishes every 5 s and Prometheus
    // scrapes every second, so both converge on the API's count.
    eventually("free GPUs per model in PromQL match the API", || async {
        let api = gantry.free_gpus(&operator).await;
        let promql = prometheus
            .query(
                r#"sum by (gpu_model) (gantry_gpus{state="free"})"#,
                "gpu_model",
            )
            .await;
        if promql == api {
            Ok(())
        } else {
            Err(format!("PromQL {promql:?}, API {api:?}"))
        }
    })
    .await;

    // Every start is counted once, and the p95 PromQL interpolates lies in
    // the bucket that holds the true p95 (nearest rank).
    waits.sort_by(f64::total_cmp);
    let rank = (0.95 * waits.len() as f64).ceil() as usize;
    let p95 = waits[rank.saturating_sub(1).min(waits.len() - 1)];
    let (lower, upper) = bucket_of(p95);
    eventually("admission waits in PromQL match the API", || async {
        let count = prometheus
            .query("sum(gantry_admission_wait_seconds_count)", "")
            .await;
        let quantile = prometheus
            .query(
                "histogram_quantile(0.95, sum by (le) (gantry_admission_wait_seconds_bucket))",
                "",
            )
            .await;
        let (Some(count), Some(quantile)) = (count.get(""), quantile.get("")) else {
            return Err("no samples yet".into());
        };
        if *count == orders.len() as f64 && (lower..=upper).contains(quantile) {
            Ok(())
        } else {
            Err(format!(
                "count {count} of {} starts; p95 {quantile} outside [{lower}, {upper}] (true p95 {p95}, waits {waits:?})",
                orders.len()
            ))
        }
    })
    .await;

    eventually(
        "the held job is counted as waiting on its dependency",
        || async {
            let pending = prometheus
                .query("sum by (reason) (gantry_pending_orders)", "reason")
                .await;
            match pending.get("dependency") {
                Some(n) if *n == 1.0 => Ok(()),
                _ => Err(format!("{pending:?}")),
            }
        },
    )
    .await;

    // Every metric the alerting rules and the dashboards read is one the
    // server exports, and every dashboard query is one Prometheus accepts.
    // Per-GPU telemetry (`gantry_gpu_…`) is the agents' own: the agent's
    // tests check those names against a real agent.
    let dashboards = std::fs::read_dir(deploy().join("grafana"))
        .expect("dashboards")
        .map(|entry| std::fs::read_to_string(entry.expect("entry").path()).expect("dashboard"))
        .collect::<Vec<_>>();
    let mut queries = Vec::new();
    for text in &dashboards {
        let dashboard: Value = serde_json::from_str(text).expect("a dashboard is JSON");
        for panel in dashboard["panels"].as_array().expect("panels") {
            for target in panel["targets"].as_array().into_iter().flatten() {
                queries.push(target["expr"].as_str().expect("expr").to_owned());
            }
        }
    }
    assert!(queries.len() >= 20, "{queries:?}");
    for query in &queries {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query", prometheus.base),
            [("query", query.as_str())],
        )
        .expect("url");
        let reply: Value = prometheus
            .http
            .get(url)
            .send()
            .await
            .expect("query")
            .json()
            .await
            .expect("json");
        assert_eq!(reply["status"], "success", "{query}: {reply}");
    }
    let rules = std::fs::read_to_string(rules_path()).expect("alerting rules");
    let exported: Vec<String> = {
        let reply: Value = prometheus
            .http
            .get(format!("{}/api/v1/label/__name__/values", prometheus.base))
            .send()
            .await
            .expect("names")
            .json()
            .await
            .expect("json");
        serde_json::from_value(reply["data"].clone()).expect("names")
    };
    let names = metric_names(&rules)
        .into_iter()
        .chain(queries.iter().flat_map(|q| metric_names(q)))
        .collect::<std::collections::BTreeSet<_>>();
    for name in names.iter().filter(|n| !n.starts_with("gantry_gpu_")) {
        // A histogram is exported as its _bucket, _count and _sum series.
        assert!(
            exported
                .iter()
                .any(|e| e == name || e.strip_suffix("_bucket") == Some(name)),
            "{name} is read by the rules or dashboards but not exported: {exported:?}"
        );
    }

    // The leader says so, and no scrape failed.
    let up = prometheus.query("up", "job").await;
    assert_eq!(up.get("gantry"), Some(&1.0), "{up:?}");
    let leader = prometheus.query("gantry_scheduler_leader", "").await;
    assert_eq!(leader.get(""), Some(&1.0), "{leader:?}");
}

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn rules_path() -> PathBuf {
    deploy().join("prometheus/alerts.yml")
}

/// The `gantry_…` series names an expression text reads.
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("gantry_"))
        .map(str::to_owned)
        .collect()
}

/// The alerting rules are valid, and fire as their own tests say.
#[test]
fn alerting_rules_pass_promtool() {
    let dir = rules_path().parent().expect("directory").to_path_buf();
    for args in [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("run promtool (Debian's `prometheus` package; .ci/run installs it)");
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
