//! Configuration: defaults that work on a fresh machine, an optional TOML
//! file, then environment variables, each overriding the one before.

pub mod oidc;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

/// Environment variables and the configuration keys they set. `DATABASE_URL`
/// is the conventional unprefixed name; every other variable carries the
/// `GANTRY_` prefix.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    ("GANTRY_LISTEN", "listen"),
    ("DATABASE_URL", "database_url"),
    ("GANTRY_DATA_DIR", "data_dir"),
    ("GANTRY_JWT_SECRET", "jwt_secret"),
    ("GANTRY_JWT_TTL_SECONDS", "jwt_ttl_seconds"),
    ("GANTRY_REFRESH_TTL_SECONDS", "refresh_ttl_seconds"),
    ("GANTRY_CORS_ALLOWED_ORIGINS", "cors_allowed_origins"),
    ("GANTRY_RATE_LIMIT_PER_SECOND", "rate_limit_per_second"),
    ("GANTRY_RATE_LIMIT_BURST", "rate_limit_burst"),
    ("GANTRY_BODY_LIMIT_BYTES", "body_limit_bytes"),
    ("GANTRY_REQUEST_TIMEOUT_SECONDS", "request_timeout_seconds"),
    (
        "GANTRY_DATABASE_MAX_CONNECTIONS",
        "database_max_connections",
    ),
    ("GANTRY_AUTH_CACHE_SECONDS", "auth_cache_seconds"),
    ("GANTRY_LOGIN_MAX_FAILURES", "login_max_failures"),
    ("GANTRY_FAILED_AUTH_PER_MINUTE", "failed_auth_per_minute"),
    ("GANTRY_MAX_WAITING_ORDERS", "max_waiting_orders"),
    ("GANTRY_DEMO", "demo"),
    ("GANTRY_SCHEDULER_INTERVAL_MS", "scheduler_interval_ms"),
    (
        "GANTRY_SCHEDULER_WHOLE_PLAN_BELOW",
        "scheduler_whole_plan_below",
    ),
    ("GANTRY_SCHEDULER_LEASE_SECONDS", "scheduler_lease_seconds"),
    ("GANTRY_SIMULATED_PROVISION_MS", "simulated_provision_ms"),
    ("GANTRY_SIMULATED_STOP_MS", "simulated_stop_ms"),
    ("GANTRY_SIMULATED_FAILURE_RATE", "simulated_failure_rate"),
    (
        "GANTRY_AGENT_HEARTBEAT_DEADLINE_SECONDS",
        "agent_heartbeat_deadline_seconds",
    ),
    (
        "GANTRY_METERING_INTERVAL_SECONDS",
        "metering_interval_seconds",
    ),
    ("GANTRY_CURRENCY", "currency"),
    ("GANTRY_PRIVATE_NETWORKS", "private_networks"),
    ("GANTRY_PRIVATE_NETWORK_PREFIX", "private_network_prefix"),
    ("GANTRY_PREPAID_GRACE_SECONDS", "prepaid_grace_seconds"),
    ("GANTRY_CONSOLE_DIR", "console_dir"),
    ("GANTRY_DOCS_DIR", "docs_dir"),
    ("GANTRY_JOB_LOG_LIMIT_BYTES", "job_log_limit_bytes"),
    ("GANTRY_JOB_LOG_RETENTION_DAYS", "job_log_retention_days"),
    (
        "GANTRY_HISTORY_INTERVAL_SECONDS",
        "history_interval_seconds",
    ),
    ("GANTRY_HISTORY_RETENTION_DAYS", "history_retention_days"),
    (
        "GANTRY_DEFRAG_BUDGET_GPU_SECONDS_PER_ORG_HOUR",
        "defrag_budget_gpu_seconds_per_org_hour",
    ),
    ("GANTRY_EXPOSABLE_PORTS", "exposable_ports"),
    ("GANTRY_METRICS_LISTEN", "metrics_listen"),
    ("GANTRY_METRICS_TOKEN", "metrics_token"),
    ("GANTRY_TRUSTED_PROXIES", "trusted_proxies"),
    (
        "GANTRY_WEBHOOK_ALLOWED_NETWORKS",
        "webhook_allowed_networks",
    ),
    ("GANTRY_WEBHOOK_ALLOW_HTTP", "webhook_allow_http"),
    ("GANTRY_PASSWORD_SIGN_IN", "password_sign_in"),
    ("GANTRY_PUBLIC_URL", "public_url"),
    (
        "GANTRY_RESERVATION_FREE_CANCEL_HOURS",
        "reservation_free_cancel_hours",
    ),
    (
        "GANTRY_RESERVATION_CANCEL_FEE_PERCENT",
        "reservation_cancel_fee_percent",
    ),
];

/// Keys whose environment value is a comma-separated list.
const LISTS: &[&str] = &[
    "cors_allowed_origins",
    "exposable_ports",
    "trusted_proxies",
    "webhook_allowed_networks",
];

#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address the HTTP server listens on.
    pub listen: SocketAddr,
    /// `sqlite://…` or `postgres://…`; a SQLite file in `data_dir` when unset.
    pub database_url: Option<String>,
    /// Where the SQLite database and the generated JWT secret live.
    pub data_dir: PathBuf,
    /// Secret for signing session tokens. Generated into `data_dir` when unset;
    /// set it explicitly when several replicas serve the API.
    pub jwt_secret: Option<String>,
    /// Lifetime of a session token.
    pub jwt_ttl_seconds: u64,
    /// How long a browser session lasts without being used: its refresh
    /// token's lifetime, renewed on every refresh.
    pub refresh_ttl_seconds: u64,
    /// Origins allowed by CORS; empty turns CORS off.
    pub cors_allowed_origins: Vec<String>,
    /// Sustained requests per second allowed per API key, user or, for
    /// anonymous calls, source address.
    pub rate_limit_per_second: u32,
    /// Requests allowed in a burst above the sustained rate.
    pub rate_limit_burst: u32,
    /// Largest request body accepted.
    pub body_limit_bytes: usize,
    /// Longest a request may take before it is answered with 503.
    pub request_timeout_seconds: u64,
    /// Size of the database connection pool.
    pub database_max_connections: u32,
    /// How long a replica keeps a caller's identity and memberships in
    /// memory; a change made through another replica is seen within this
    /// bound. Zero reads them from the database on every request.
    pub auth_cache_seconds: u64,
    /// Failed sign-ins to one account from one source address within 15
    /// minutes before that address may not try it again for the rest of
    /// the window; an address gets three times as many over all accounts.
    /// The account itself is never locked: past this many failures from
    /// anywhere, each further attempt on it is slowed instead.
    pub login_max_failures: u32,
    /// Requests with invalid credentials allowed per source address and
    /// minute (a third of them at once) before its credentials are refused
    /// unread until its allowance is back.
    pub failed_auth_per_minute: u32,
    /// Orders an organization may have waiting (queued or being requeued)
    /// at once, unless an operator set its own limit.
    pub max_waiting_orders: u32,
    /// Seed a demo catalog, simulated cluster and demo logins into an empty
    /// database at start.
    pub demo: bool,
    /// The longest the scheduling loop sleeps between cycles; new orders and
    /// releases wake it sooner.
    pub scheduler_interval_ms: u64,
    /// Below this many waiting orders every cycle plans the whole queue;
    /// from it on, a cycle that only saw new orders arrive plans them alone
    /// against the last whole plan (see the ordering guide).
    pub scheduler_whole_plan_below: usize,
    /// How long the scheduler lease lasts unrenewed: how soon another
    /// replica takes over when the leader dies. The leader renews it four
    /// times per life, apart from its cycles; a shorter lease means a
    /// faster take-over and more renewals (one small write each).
    pub scheduler_lease_seconds: u64,
    /// How long the simulated driver takes to bring an instance up.
    pub simulated_provision_ms: u64,
    /// How long the simulated driver takes to stop one.
    pub simulated_stop_ms: u64,
    /// The share of simulated starts that fail, 0 to 1.
    pub simulated_failure_rate: f64,
    /// An agent node silent for longer than this becomes unhealthy.
    pub agent_heartbeat_deadline_seconds: u64,
    /// The length of a usage record of running work; a divisor of 3600, so
    /// that records never cross an hour.
    pub metering_interval_seconds: u64,
    /// The one currency prices and invoices are in (ISO 4217); amounts are
    /// integer micro-units of it.
    pub currency: String,
    /// How long a prepaid organization whose balance ran out keeps its
    /// running non-production work before it is stopped.
    pub prepaid_grace_seconds: u64,
    /// The built web console (`npm run build` in frontend/), served at `/`;
    /// without an `index.html` there only the API is served.
    pub console_dir: PathBuf,
    /// The built manual (`mdbook build docs`), served at `/docs`; without an
    /// `index.html` there it is not served.
    pub docs_dir: PathBuf,
    /// Output kept per job; later lines are dropped.
    pub job_log_limit_bytes: u64,
    /// How long a job's output is kept after it ended.
    pub job_log_retention_days: u64,
    /// How often the fleet history the console charts is written: each
    /// point is the mean of the figures the scheduler saw in the interval.
    pub history_interval_seconds: u64,
    /// How long fleet history is kept (the console's longest view is a
    /// week).
    pub history_retention_days: u64,
    /// Above zero, the scheduler carries out defragmentation plans by
    /// itself: it moves preemptible work when that lets work blocked by
    /// fragmentation start, each organization losing at most this many
    /// GPU-seconds of work to moves per hour. Zero leaves plans to the
    /// what-if.
    pub defrag_budget_gpu_seconds_per_org_hour: f64,
    /// Ports an order may ask to expose on its nodes (each gets a node
    /// port from the agent's range).
    pub exposable_ports: Vec<u16>,
    /// A reservation cancelled at least this many hours before its window
    /// costs nothing.
    pub reservation_free_cancel_hours: u64,
    /// The share of the reserved time not yet begun that a later
    /// cancellation costs, 0 to 100.
    pub reservation_cancel_fee_percent: u32,
    /// A private address that serves `/metrics` alone, without
    /// credentials, for Prometheus; none when unset.
    pub metrics_listen: Option<SocketAddr>,
    /// A bearer token that lets `/metrics` be scraped on the main listener;
    /// without one, `/metrics` is not served there (its figures name
    /// tenants).
    pub metrics_token: Option<String>,
    /// Load balancers and reverse proxies (addresses or networks) whose
    /// `X-Forwarded-For` names the client; from anyone else it is ignored.
    pub trusted_proxies: Vec<String>,
    /// Networks webhook deliveries may reach although they are private,
    /// loopback or link-local (all other addresses of those kinds are
    /// refused when the URL is resolved for each attempt).
    pub webhook_allowed_networks: Vec<String>,
    /// Lets webhook URLs use plain `http://`, and only towards loopback
    /// addresses: for a receiver on the same machine.
    pub webhook_allow_http: bool,
    /// Whether users may sign up and sign in with a password; off, only the
    /// OpenID providers below let anyone in.
    pub password_sign_in: bool,
    /// OpenID Connect providers users may sign in with (the TOML file's
    /// `[[oidc_providers]]` tables).
    pub oidc_providers: Vec<crate::config::oidc::Provider>,
    /// The address people reach the console at (`https://gpu.example.com`):
    /// providers send the browser back under it. Unset, the address the
    /// browser used is taken (`Host`, `X-Forwarded-Proto`).
    pub public_url: Option<String>,
    /// The IPv4 range organizations' private networks are cut from, one
    /// of `private_network_prefix` per organization and region. It must
    /// not overlap the nodes' own networks.
    pub private_networks: String,
    /// The size of each private network, as a prefix length (20: 4,094
    /// addresses).
    pub private_network_prefix: u8,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            database_url: None,
            data_dir: PathBuf::from("./data"),
            jwt_secret: None,
            jwt_ttl_seconds: 900,
            refresh_ttl_seconds: 14 * 24 * 3600,
            cors_allowed_origins: Vec::new(),
            rate_limit_per_second: 50,
            rate_limit_burst: 100,
            body_limit_bytes: 256 * 1024,
            request_timeout_seconds: 30,
            database_max_connections: 16,
            auth_cache_seconds: 5,
            login_max_failures: 10,
            failed_auth_per_minute: 60,
            max_waiting_orders: 10_000,
            demo: true,
            scheduler_interval_ms: 2000,
            scheduler_whole_plan_below: 1000,
            scheduler_lease_seconds: 3,
            simulated_provision_ms: 2000,
            simulated_stop_ms: 500,
            simulated_failure_rate: 0.0,
            agent_heartbeat_deadline_seconds: 30,
            metering_interval_seconds: 60,
            currency: "USD".into(),
            prepaid_grace_seconds: 3600,
            console_dir: PathBuf::from("frontend/dist"),
            docs_dir: PathBuf::from("docs/book"),
            job_log_limit_bytes: 1024 * 1024,
            job_log_retention_days: 14,
            history_interval_seconds: 60,
            defrag_budget_gpu_seconds_per_org_hour: 0.0,
            history_retention_days: 8,
            exposable_ports: vec![6006, 7860, 8000, 8080, 8265, 8888],
            reservation_free_cancel_hours: 48,
            reservation_cancel_fee_percent: 50,
            metrics_listen: None,
            private_networks: "10.128.0.0/9".into(),
            private_network_prefix: 20,
            metrics_token: None,
            trusted_proxies: Vec::new(),
            webhook_allowed_networks: Vec::new(),
            webhook_allow_http: false,
            password_sign_in: true,
            oidc_providers: Vec::new(),
            public_url: None,
        }
    }
}

// The secret must never reach a log line.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("database", &redacted_url(&self.database_url()))
            .field("data_dir", &self.data_dir)
            .field("jwt_secret", &self.jwt_secret.as_ref().map(|_| "<set>"))
            .field("jwt_ttl_seconds", &self.jwt_ttl_seconds)
            .field("refresh_ttl_seconds", &self.refresh_ttl_seconds)
            .field("cors_allowed_origins", &self.cors_allowed_origins)
            .field("rate_limit_per_second", &self.rate_limit_per_second)
            .field("rate_limit_burst", &self.rate_limit_burst)
            .field("body_limit_bytes", &self.body_limit_bytes)
            .field("request_timeout_seconds", &self.request_timeout_seconds)
            .field("database_max_connections", &self.database_max_connections)
            .field("auth_cache_seconds", &self.auth_cache_seconds)
            .field("login_max_failures", &self.login_max_failures)
            .field("failed_auth_per_minute", &self.failed_auth_per_minute)
            .field("max_waiting_orders", &self.max_waiting_orders)
            .field("demo", &self.demo)
            .field("scheduler_interval_ms", &self.scheduler_interval_ms)
            .field(
                "scheduler_whole_plan_below",
                &self.scheduler_whole_plan_below,
            )
            .field("scheduler_lease_seconds", &self.scheduler_lease_seconds)
            .field("simulated_provision_ms", &self.simulated_provision_ms)
            .field("simulated_stop_ms", &self.simulated_stop_ms)
            .field("simulated_failure_rate", &self.simulated_failure_rate)
            .field(
                "agent_heartbeat_deadline_seconds",
                &self.agent_heartbeat_deadline_seconds,
            )
            .field("metering_interval_seconds", &self.metering_interval_seconds)
            .field("currency", &self.currency)
            .field("prepaid_grace_seconds", &self.prepaid_grace_seconds)
            .field("console_dir", &self.console_dir)
            .field("docs_dir", &self.docs_dir)
            .field("job_log_limit_bytes", &self.job_log_limit_bytes)
            .field("job_log_retention_days", &self.job_log_retention_days)
            .field("history_interval_seconds", &self.history_interval_seconds)
            .field(
                "defrag_budget_gpu_seconds_per_org_hour",
                &self.defrag_budget_gpu_seconds_per_org_hour,
            )
            .field("history_retention_days", &self.history_retention_days)
            .field("exposable_ports", &self.exposable_ports)
            .field(
                "reservation_free_cancel_hours",
                &self.reservation_free_cancel_hours,
            )
            .field(
                "reservation_cancel_fee_percent",
                &self.reservation_cancel_fee_percent,
            )
            .field("metrics_listen", &self.metrics_listen)
            .field(
                "metrics_token",
                &self.metrics_token.as_ref().map(|_| "<set>"),
            )
            .field("trusted_proxies", &self.trusted_proxies)
            .field("webhook_allowed_networks", &self.webhook_allowed_networks)
            .field("webhook_allow_http", &self.webhook_allow_http)
            .field("private_networks", &self.private_networks)
            .field("private_network_prefix", &self.private_network_prefix)
            .field("password_sign_in", &self.password_sign_in)
            .field("oidc_providers", &self.oidc_providers)
            .field("public_url", &self.public_url)
            .finish()
    }
}

impl Config {
    /// Reads the optional TOML file, then the environment.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        let mut builder = config::Config::builder();
        if let Some(file) = file {
            builder = builder.add_source(config::File::from(file).required(true));
        }
        for (variable, key) in ENVIRONMENT {
            let Ok(value) = std::env::var(variable) else {
                continue;
            };
            builder = if LISTS.contains(key) {
                let items: Vec<String> = value
                    .split(',')
                    .map(str::trim)
                    .filter(|o| !o.is_empty())
                    .map(str::to_owned)
                    .collect();
                builder.set_override(*key, items)?
            } else {
                builder.set_override(*key, value)?
            };
        }
        let config: Self = builder
            .build()?
            .try_deserialize()
            .context("invalid configuration")?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.jwt_ttl_seconds > 0, "jwt_ttl_seconds must be positive");
        anyhow::ensure!(
            self.refresh_ttl_seconds >= self.jwt_ttl_seconds,
            "refresh_ttl_seconds must be at least jwt_ttl_seconds"
        );
        anyhow::ensure!(
            self.reservation_cancel_fee_percent <= 100,
            "reservation_cancel_fee_percent must be 0 to 100"
        );
        anyhow::ensure!(
            self.rate_limit_per_second > 0 && self.rate_limit_burst > 0,
            "rate_limit_per_second and rate_limit_burst must be positive"
        );
        anyhow::ensure!(
            self.body_limit_bytes >= 1024,
            "body_limit_bytes must be at least 1024"
        );
        anyhow::ensure!(
            self.request_timeout_seconds > 0,
            "request_timeout_seconds must be positive"
        );
        anyhow::ensure!(
            self.login_max_failures > 0 && self.failed_auth_per_minute >= 3,
            "login_max_failures must be positive and failed_auth_per_minute at least 3"
        );
        anyhow::ensure!(
            self.max_waiting_orders > 0,
            "max_waiting_orders must be positive"
        );
        anyhow::ensure!(
            self.database_max_connections > 0,
            "database_max_connections must be positive"
        );
        anyhow::ensure!(
            self.scheduler_interval_ms > 0 && self.scheduler_lease_seconds > 0,
            "scheduler_interval_ms and scheduler_lease_seconds must be positive"
        );
        anyhow::ensure!(
            self.agent_heartbeat_deadline_seconds > 0,
            "agent_heartbeat_deadline_seconds must be positive"
        );
        anyhow::ensure!(
            (1..=3600).contains(&self.metering_interval_seconds)
                && 3600 % self.metering_interval_seconds == 0,
            "metering_interval_seconds must divide 3600 (1, 2, …, 60, …, 3600)"
        );
        anyhow::ensure!(
            self.currency.len() == 3 && self.currency.bytes().all(|b| b.is_ascii_uppercase()),
            "currency must be an ISO 4217 code such as USD"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.simulated_failure_rate),
            "simulated_failure_rate must be between 0 and 1"
        );
        anyhow::ensure!(
            self.job_log_limit_bytes >= 1024 && self.job_log_retention_days > 0,
            "job_log_limit_bytes must be at least 1024 and job_log_retention_days positive"
        );
        anyhow::ensure!(
            (1..=3600).contains(&self.history_interval_seconds),
            "history_interval_seconds must be between 1 and 3600"
        );
        anyhow::ensure!(
            (1..=3650).contains(&self.history_retention_days),
            "history_retention_days must be between 1 and 3650"
        );
        anyhow::ensure!(
            (0.0..=1e9).contains(&self.defrag_budget_gpu_seconds_per_org_hour),
            "defrag_budget_gpu_seconds_per_org_hour must be between 0 and 1000000000"
        );
        if let Some(secret) = &self.jwt_secret {
            anyhow::ensure!(secret.len() >= 32, "jwt_secret must be at least 32 bytes");
        }
        crate::config::oidc::check_providers(&self.oidc_providers)?;
        if let Some(public) = &self.public_url {
            let parsed = url::Url::parse(public)
                .map_err(|e| anyhow::anyhow!("public_url {public:?}: {e}"))?;
            anyhow::ensure!(
                matches!(parsed.scheme(), "https" | "http")
                    && parsed.host().is_some()
                    && parsed.path() == "/"
                    && parsed.query().is_none(),
                "public_url must be the console's address alone, such as https://gpu.example.com"
            );
        }
        let pool = self.private_network_pool()?;
        anyhow::ensure!(
            (pool.prefix_len()..=28).contains(&self.private_network_prefix),
            "private_network_prefix must be between the prefix of private_networks ({}) and 28",
            pool.prefix_len()
        );
        anyhow::ensure!(
            self.password_sign_in || !self.oidc_providers.is_empty(),
            "password_sign_in = false needs at least one of oidc_providers, or no one could sign in"
        );
        Ok(())
    }

    /// The range private networks are cut from.
    pub fn private_network_pool(&self) -> anyhow::Result<ipnet::Ipv4Net> {
        let pool: ipnet::Ipv4Net = self.private_networks.parse().map_err(|_| {
            anyhow::anyhow!(
                "private_networks must be an IPv4 network such as 10.128.0.0/9, not {:?}",
                self.private_networks
            )
        })?;
        Ok(pool.trunc())
    }

    /// The database to use: the configured URL, or a SQLite file in the data
    /// directory that is created on first start.
    pub fn database_url(&self) -> String {
        match &self.database_url {
            Some(url) => url.clone(),
            None => format!(
                "sqlite://{}?mode=rwc",
                self.data_dir.join("gantry.db").display()
            ),
        }
    }
}

/// A database URL without its credentials and parameters, for logs.
pub fn redacted_url(url: &str) -> String {
    let without_query = url.split('?').next().unwrap_or_default();
    match (without_query.find("://"), without_query.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!(
                "{}://***{}",
                &without_query[..scheme_end],
                &without_query[at..]
            )
        }
        _ => without_query.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_use_a_sqlite_file_in_the_data_dir() {
        let config = Config::default();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.database_url(), "sqlite://./data/gantry.db?mode=rwc");
        config.validate().expect("defaults are valid");
    }

    #[test]
    fn debug_output_hides_the_secret() {
        let config = Config {
            jwt_secret: Some("a-very-secret-value-that-is-long-enough".into()),
            database_url: Some("postgres://u:pw@db/gantry?sslmode=require".into()),
            ..Config::default()
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("a-very-secret"));
        assert!(!shown.contains("sslmode"));
        assert!(!shown.contains("pw"));
        assert!(shown.contains("postgres://***@db/gantry"));
    }

    #[test]
    fn a_toml_file_is_read_and_unknown_keys_are_refused() {
        let dir = std::env::temp_dir().join(format!("gantry-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let good = dir.join("good.toml");
        std::fs::write(&good, "listen = \"0.0.0.0:9000\"\njwt_ttl_seconds = 60\n").expect("write");
        let config = Config::load(Some(&good)).expect("valid file");
        assert_eq!(config.listen.port(), 9000);
        assert_eq!(config.jwt_ttl_seconds, 60);

        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "lisen = \"0.0.0.0:9000\"\n").expect("write");
        assert!(Config::load(Some(&bad)).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn single_sign_on_is_configured_in_the_file_and_checked() {
        let dir = std::env::temp_dir().join(format!("gantry-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("write");
            Config::load(Some(&path))
        };
        let provider = "[[oidc_providers]]\nname = \"corp\"\ndisplay_name = \"Corp\"\n\
                        issuer_url = \"https://login.example.com\"\nclient_id = \"gantry\"\n\
                        client_secret = \"s\"\nallowed_domains = [\"example.com\"]\n";
        let config = file(
            "sso.toml",
            &format!(
                "password_sign_in = false\npublic_url = \"https://gpu.example.com\"\n{provider}"
            ),
        )
        .expect("valid");
        assert_eq!(config.oidc_providers[0].name, "corp");
        assert!(!config.password_sign_in);
        assert!(file("locked-out.toml", "password_sign_in = false\n").is_err());
        assert!(
            file(
                "path.toml",
                "public_url = \"https://gpu.example.com/console\"\n"
            )
            .is_err()
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
