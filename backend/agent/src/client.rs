//! The agent API as the agent calls it.

use std::collections::HashMap;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::discovery::{Gpu, Sample};
use crate::output::Line;
use crate::runtime::AssignedImage;
use crate::volumes::{Attachment, NodeVolume, VolumeStanding};

#[derive(Debug, Serialize)]
pub struct Registration<'a> {
    pub name: &'a str,
    pub rack: &'a str,
    pub labels: &'a [String],
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub gpus: &'a [Gpu],
    /// How this node isolates workloads.
    pub runtime: &'a str,
}

#[derive(Debug, Deserialize)]
pub struct Registered {
    pub node_id: Uuid,
    pub credential: String,
}

#[derive(Debug, Deserialize)]
pub struct HeartbeatAck {
    /// An operator asked for a new node credential.
    #[serde(default)]
    pub rotate_credential: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Run,
    Stop,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Assignment {
    pub order_id: Uuid,
    /// The organization it runs for, by id and name: the labels of its
    /// GPUs' telemetry. Absent from control planes that do not say.
    #[serde(default)]
    pub org_id: Option<Uuid>,
    #[serde(default)]
    pub organization: String,
    pub action: Action,
    pub gpu_ids: Vec<u32>,
    /// The MIG instances it holds, by UUID.
    #[serde(default)]
    pub mig_devices: Vec<String>,
    /// Its share of each of its GPUs, in thousandths (below 1000: a GPU
    /// shared with other workloads).
    #[serde(default = "thousand")]
    pub gpu_milli: u32,
    pub env: HashMap<String, String>,
    /// A job's command line, run instead of the agent's workload command.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub working_dir: Option<String>,
    /// The instance type's CPU and memory on this node.
    #[serde(default)]
    pub limits: Option<AssignedLimits>,
    /// OpenSSH public keys an instance admits.
    #[serde(default)]
    pub ssh_keys: Vec<String>,
    /// Ports the order exposes; each gets a node port.
    #[serde(default)]
    pub ports: Vec<u16>,
    #[serde(default)]
    pub image: Option<AssignedImage>,
    /// Nodes the order runs on together.
    #[serde(default = "one")]
    pub node_count: u32,
    /// Its address on its organization's private network, where this
    /// node carries one.
    #[serde(default)]
    pub network: Option<AssignedNetwork>,
    /// The node's volumes it attaches, and where it sees them.
    #[serde(default)]
    pub volumes: Vec<Attachment>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssignedNetwork {
    /// The network's VXLAN identifier.
    pub vni: u32,
    /// The workload's address with the network's prefix.
    pub address: ipnet::Ipv4Net,
    /// The fabric addresses of the other nodes with workloads on it.
    #[serde(default)]
    pub peers: Vec<std::net::Ipv4Addr>,
    /// Every workload on the network by name, this one included.
    #[serde(default)]
    pub hosts: Vec<NetworkHost>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkHost {
    pub address: std::net::Ipv4Addr,
    /// Its host name first.
    pub names: Vec<String>,
}

fn one() -> u32 {
    1
}

fn thousand() -> u32 {
    1000
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub struct AssignedLimits {
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// The instance type's disk; 0 where it sells none.
    #[serde(default)]
    pub disk_gib: u64,
}

/// What the control plane wants of this node.
#[derive(Debug, Clone, Deserialize)]
pub struct Assignments {
    pub assignments: Vec<Assignment>,
    /// The volumes the node keeps or erases; absent from control planes
    /// without volumes.
    #[serde(default)]
    pub volumes: Option<Vec<NodeVolume>>,
    /// Absent from control planes that cannot wait for changes.
    #[serde(default)]
    version: Option<String>,
}

impl Assignments {
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }
}

/// The long-poll's latest answer, kept for the agent's rounds so that a
/// change costs one request, not an answer and then a fetch. An answer is
/// good only while no report has been sent since its request left: one
/// from before a report may still list work the report ended, and would
/// start it again.
#[derive(Debug, Default)]
pub struct Delivered {
    /// Moves on before and after every report.
    epoch: u64,
    answer: Option<Assignments>,
}

impl Delivered {
    /// What a request about to leave is stamped with.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Keeps `answer` to a request stamped `epoch`, unless a report went
    /// out since it left; says whether it was kept.
    pub fn offer(&mut self, epoch: u64, answer: Assignments) -> bool {
        let current = epoch == self.epoch && answer.version.is_some();
        self.answer = current.then_some(answer);
        current
    }

    /// Answers kept so far may be stale: a report is leaving or has left,
    /// or the long-poll failed (the control plane may have moved on while
    /// it could not say).
    pub fn invalidate(&mut self) {
        self.epoch += 1;
        self.answer = None;
    }

    /// The kept answer, if it is still good.
    pub fn current(&self) -> Option<Assignments> {
        self.answer.clone()
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadState {
    Running,
    Exited,
    Stopped,
    Failed,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub order_id: Uuid,
    pub state: WorkloadState,
    pub exit_code: Option<i32>,
    pub message: Option<String>,
    /// How the tenant reaches the workload, once running.
    pub access: Option<serde_json::Value>,
}

/// What became of each report of a call.
#[derive(Debug, Deserialize)]
struct ReportResults {
    results: Vec<ReportResult>,
}

#[derive(Debug, Deserialize)]
struct ReportResult {
    order_id: Uuid,
    /// Why the control plane refused the report, when it did.
    problem: Option<serde_json::Value>,
}

/// Why a call failed: the credential was refused (register again), or
/// anything else (retry later).
#[derive(Debug)]
pub enum CallError {
    Unauthorized,
    Other(anyhow::Error),
}

impl From<reqwest::Error> for CallError {
    fn from(error: reqwest::Error) -> Self {
        Self::Other(error.into())
    }
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    pub fn new(server: &str) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(10))
                .build()?,
            base: format!("{}/api/v1/agent", server.trim_end_matches('/')),
        })
    }

    pub async fn register(
        &self,
        join_token: &str,
        registration: &Registration<'_>,
    ) -> anyhow::Result<Registered> {
        let response = self
            .http
            .post(format!("{}/register", self.base))
            .bearer_auth(join_token)
            .json(registration)
            .send()
            .await
            .context("reaching the control plane")?;
        if !response.status().is_success() {
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            bail!("registration refused ({status}): {body}");
        }
        Ok(response.json().await?)
    }

    async fn call<T: for<'de> Deserialize<'de>>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        let response = request.send().await?;
        match response.status() {
            reqwest::StatusCode::UNAUTHORIZED => Err(CallError::Unauthorized),
            status if status.is_success() => Ok(response.json().await?),
            status => {
                let body = response.text().await.unwrap_or_default();
                Err(CallError::Other(anyhow::anyhow!("{status}: {body}")))
            }
        }
    }

    /// `volumes` says how the node's volumes stand and how much room is
    /// left for more, where it keeps them.
    pub async fn heartbeat(
        &self,
        credential: &str,
        gpus: &[Sample],
        fabric_address: Option<std::net::Ipv4Addr>,
        volumes: Option<VolumeStanding>,
    ) -> Result<HeartbeatAck, CallError> {
        let mut body = serde_json::json!({ "gpus": gpus, "fabric_address": fabric_address });
        if let Some(standing) = volumes {
            body["volumes"] = serde_json::json!(standing.reports);
            body["volume_free_bytes"] = serde_json::json!(standing.free_bytes);
            if let Some(free) = standing.shared_free_bytes {
                body["shared_free_bytes"] = serde_json::json!(free);
            }
        }
        let request = self
            .http
            .post(format!("{}/heartbeat", self.base))
            .bearer_auth(credential)
            .json(&body);
        self.call(request).await
    }

    /// Trades the node credential for a new one; the old one keeps working
    /// until the new one is first used.
    pub async fn rotate_credential(&self, credential: &str) -> Result<Registered, CallError> {
        let request = self
            .http
            .post(format!("{}/credential", self.base))
            .bearer_auth(credential);
        self.call(request).await
    }

    pub async fn assignments(&self, credential: &str) -> Result<Assignments, CallError> {
        let request = self
            .http
            .get(format!("{}/assignments", self.base))
            .bearer_auth(credential);
        self.call::<Assignments>(request).await
    }

    /// This node's assignments, answered once their version differs from
    /// `since` or after about `wait`, whichever comes first; without a
    /// version from a control plane that cannot wait.
    pub async fn assignments_changed(
        &self,
        credential: &str,
        since: Option<&str>,
        wait: std::time::Duration,
    ) -> Result<Assignments, CallError> {
        let mut url = format!("{}/assignments?wait_ms={}", self.base, wait.as_millis());
        // Versions are hex digests; anything else is not sent back.
        if let Some(since) = since.filter(|s| s.bytes().all(|b| b.is_ascii_alphanumeric())) {
            url.push_str("&since=");
            url.push_str(since);
        }
        // The wait may outlast the client's usual timeout.
        let request = self
            .http
            .get(url)
            .bearer_auth(credential)
            .timeout(wait + std::time::Duration::from_secs(10));
        self.call::<Assignments>(request).await
    }

    /// Ships a workload's output. Output of work this node no longer holds
    /// is not wanted (404) and is dropped.
    pub async fn send_output(
        &self,
        credential: &str,
        order_id: Uuid,
        lines: &[Line],
    ) -> Result<(), CallError> {
        let lines: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::json!({ "stream": l.stream, "line": l.line }))
            .collect();
        let response = self
            .http
            .post(format!("{}/logs", self.base))
            .bearer_auth(credential)
            .json(&serde_json::json!({ "order_id": order_id, "lines": lines }))
            .send()
            .await?;
        match response.status() {
            reqwest::StatusCode::UNAUTHORIZED => Err(CallError::Unauthorized),
            reqwest::StatusCode::NOT_FOUND => Ok(()),
            status if status.is_success() => Ok(()),
            status => {
                let body = response.text().await.unwrap_or_default();
                Err(CallError::Other(anyhow::anyhow!("{status}: {body}")))
            }
        }
    }

    /// Reports what workloads did, in one call. A report the control plane
    /// refuses for good (the work is no longer this node's, or the report
    /// makes no sense for it) is dropped rather than retried for ever.
    pub async fn report(&self, credential: &str, reports: &[Report]) -> Result<(), CallError> {
        let request = self
            .http
            .post(format!("{}/statuses", self.base))
            .bearer_auth(credential)
            .json(&serde_json::json!({ "reports": reports }));
        let taken: ReportResults = self.call(request).await?;
        for refused in taken.results.iter().filter(|r| r.problem.is_some()) {
            tracing::warn!(order = %refused.order_id, problem = ?refused.problem, "report refused; dropped");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Assignments, Delivered};

    fn answer(version: Option<&str>) -> Assignments {
        Assignments {
            assignments: Vec::new(),
            volumes: None,
            version: version.map(str::to_owned),
        }
    }

    #[test]
    fn an_answer_asked_for_before_a_report_is_never_used() {
        let mut delivered = Delivered::default();
        let asked = delivered.epoch();
        assert!(delivered.offer(asked, answer(Some("a1"))));
        assert_eq!(
            delivered.current().and_then(|a| a.version).as_deref(),
            Some("a1")
        );

        // A report leaves: the kept answer goes, and one to a request that
        // left before the report is refused.
        let before = delivered.epoch();
        delivered.invalidate();
        assert!(delivered.current().is_none());
        assert!(!delivered.offer(before, answer(Some("a2"))));
        assert!(delivered.current().is_none());

        // Asked for after the report: kept.
        let after = delivered.epoch();
        assert!(delivered.offer(after, answer(Some("a3"))));
        assert!(delivered.current().is_some());

        // An answer without a version (a control plane that cannot wait)
        // is never kept.
        assert!(!delivered.offer(delivered.epoch(), answer(None)));
        assert!(delivered.current().is_none());
    }
}
