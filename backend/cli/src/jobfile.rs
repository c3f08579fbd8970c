//! A job described in YAML, as `job submit` reads it:
//!
//! ```yaml
//! name: train-llama            # optional; generated when absent
//! instance_type: h100x8
//! nodes: 2                     # started together
//! command: torchrun train.py
//! args: [--epochs, "3"]
//! env: { WANDB_MODE: offline }
//! secret_env: [HF_TOKEN]       # values from this shell; stored sealed, never shown
//! walltime: 12h                # stopped and marked timed_out past it
//! retries: { on_failure: true, max: 2 }
//! array: 16                    # 16 copies, each told GANTRY_ARRAY_INDEX
//! depends_on: [prepare-data, { order: eval-base, condition: after_any }]
//! volumes:                     # the organization's volumes, by name or id
//!   - { volume: checkpoints, path: /ckpt }
//!   - { volume: imagenet, path: /data, read_only: true }
//! ```
//!
//! Unknown fields and wrong types are refused with the line and field.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use uuid::Uuid;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    pub name: Option<String>,
    pub instance_type: String,
    pub nodes: Option<u32>,
    pub region: Option<String>,
    pub project_id: Option<Uuid>,
    pub priority: Option<Priority>,
    pub pricing: Option<Pricing>,
    pub workload: Option<Workload>,
    pub checkpointable: Option<bool>,
    pub deadline: Option<DateTime<Utc>>,
    /// How long it is expected to run (a simulated node runs it this long).
    #[serde(default, deserialize_with = "duration")]
    pub duration: Option<Duration>,
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables whose values come from the environment `job submit` runs
    /// in, so that no token is written into a file.
    #[serde(default)]
    pub secret_env: Vec<String>,
    pub working_dir: Option<String>,
    pub image: Option<String>,
    #[serde(default, deserialize_with = "duration")]
    pub walltime: Option<Duration>,
    pub retries: Option<Retries>,
    pub array: Option<u32>,
    #[serde(default)]
    pub depends_on: Vec<DependsOn>,
    #[serde(default)]
    pub volumes: Vec<VolumeMount>,
}

/// A volume the job attaches, and where it sees it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeMount {
    /// By name or id.
    pub volume: String,
    pub path: String,
    #[serde(default)]
    pub read_only: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Preemptible,
    Batch,
    Standard,
    Production,
}

#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pricing {
    OnDemand,
    Spot,
    Reserved,
}

#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    Training,
    FineTuning,
    Inference,
    Dev,
    Batch,
    Hpo,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retries {
    #[serde(default)]
    pub on_failure: bool,
    pub max: Option<u32>,
}

/// Another job, by name or id, that must end first: `after_ok` (it must
/// complete, the default) or `after_any`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum DependsOn {
    Order(String),
    WithCondition { order: String, condition: Condition },
}

#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    AfterOk,
    AfterAny,
}

impl DependsOn {
    pub fn order(&self) -> &str {
        match self {
            Self::Order(order) | Self::WithCondition { order, .. } => order,
        }
    }

    fn condition(&self) -> Condition {
        match self {
            Self::Order(_) => Condition::AfterOk,
            Self::WithCondition { condition, .. } => *condition,
        }
    }
}

fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    deserializer.deserialize_option(HumanDuration)
}

/// Reads `90s`, `30m`, `12h`. A visitor rather than parsing a string
/// afterwards, so that a bad value is reported where it stands.
struct HumanDuration;

impl<'de> Visitor<'de> for HumanDuration {
    type Value = Option<Duration>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a duration such as 90s, 30m or 12h")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        humantime::parse_duration(text).map(Some).map_err(|e| {
            E::custom(format!(
                "{text:?} is not a duration such as 90s, 30m or 12h ({e})"
            ))
        })
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

/// Reads a job file; the error names the line, column and field.
pub fn parse(text: &str) -> Result<JobFile, String> {
    yaml_serde::from_str(text).map_err(|e| e.to_string())
}

impl JobFile {
    /// The values of `secret_env` in `environment`; the error names each
    /// one that is not set there.
    pub fn secrets(
        &self,
        environment: impl Fn(&str) -> Option<String>,
    ) -> Result<BTreeMap<String, String>, String> {
        let mut values = BTreeMap::new();
        let mut missing = Vec::new();
        for name in &self.secret_env {
            match environment(name) {
                Some(value) => {
                    values.insert(name.clone(), value);
                }
                None => missing.push(name.as_str()),
            }
        }
        if missing.is_empty() {
            Ok(values)
        } else {
            Err(format!(
                "secret_env names {} but this shell does not set it; export it first",
                missing.join(", ")
            ))
        }
    }

    /// The order to create, with `dependencies` the ids its `depends_on`
    /// entries name and `volumes` the ids its `volumes` name, each in the
    /// same order, and `secrets` the values of its secret variables.
    pub fn order(
        &self,
        dependencies: &[Uuid],
        volumes: &[Uuid],
        secrets: &BTreeMap<String, String>,
    ) -> Value {
        let depends_on: Vec<Value> = self
            .depends_on
            .iter()
            .zip(dependencies)
            .map(|(entry, id)| json!({ "order_id": id, "condition": entry.condition() }))
            .collect();
        let mut job = json!({
            "command": self.command,
            "args": self.args,
            "env": self.env,
            "depends_on": depends_on,
        });
        if !secrets.is_empty() {
            job["secret_env"] = json!(secrets);
        }
        let fields = [
            ("working_dir", json!(self.working_dir)),
            ("image", json!(self.image)),
            (
                "max_runtime_seconds",
                json!(self.walltime.map(|d| d.as_secs())),
            ),
            ("array_count", json!(self.array)),
            (
                "retry",
                self.retries.as_ref().map_or(Value::Null, |r| {
                    let mut retry = json!({ "on_failure": r.on_failure });
                    if let Some(max) = r.max {
                        retry["max_retries"] = json!(max);
                    }
                    retry
                }),
            ),
        ];
        for (key, value) in fields {
            if !value.is_null() {
                job[key] = value;
            }
        }
        let mut order = json!({ "instance_type": self.instance_type, "job": job });
        if !self.volumes.is_empty() {
            let attached: Vec<Value> = self
                .volumes
                .iter()
                .zip(volumes)
                .map(|(v, id)| json!({ "volume_id": id, "mount_path": v.path, "read_only": v.read_only }))
                .collect();
            order["volumes"] = json!(attached);
        }
        let fields = [
            ("name", json!(self.name)),
            ("node_count", json!(self.nodes)),
            ("region", json!(self.region)),
            ("project_id", json!(self.project_id)),
            ("priority_class", json!(self.priority)),
            ("pricing_class", json!(self.pricing)),
            ("workload_class", json!(self.workload)),
            ("checkpointable", json!(self.checkpointable)),
            ("deadline", json!(self.deadline)),
            (
                "duration_seconds",
                json!(self.duration.map(|d| d.as_secs())),
            ),
        ];
        for (key, value) in fields {
            if !value.is_null() {
                order[key] = value;
            }
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_job_file_becomes_the_order_the_api_takes() {
        let file = parse(
            "name: train\ninstance_type: h100x8\nnodes: 2\ncommand: torchrun train.py\n\
             args: [--epochs, \"3\"]\nenv: { MODE: fast }\nsecret_env: [HF_TOKEN]\nwalltime: 2h\n\
             retries: { on_failure: true, max: 2 }\narray: 4\npriority: batch\n\
             depends_on: [prep, { order: base, condition: after_any }]\n\
             volumes: [{ volume: ckpt, path: /ckpt }, { volume: data, path: /data, read_only: true }]\n",
        )
        .expect("parses");
        let first = Uuid::now_v7();
        let second = Uuid::now_v7();
        let (ckpt, data) = (Uuid::now_v7(), Uuid::now_v7());
        let secrets = file
            .secrets(|name| (name == "HF_TOKEN").then(|| "hf_abc".to_owned()))
            .expect("set");
        let order = file.order(&[first, second], &[ckpt, data], &secrets);
        assert_eq!(
            order["volumes"],
            json!([
                { "volume_id": ckpt, "mount_path": "/ckpt", "read_only": false },
                { "volume_id": data, "mount_path": "/data", "read_only": true },
            ])
        );
        assert_eq!(order["job"]["secret_env"], json!({ "HF_TOKEN": "hf_abc" }));
        let unset = file.secrets(|_| None).expect_err("unset");
        assert!(unset.contains("HF_TOKEN"), "{unset}");
        assert_eq!(order["name"], "train");
        assert_eq!(order["node_count"], 2);
        assert_eq!(order["priority_class"], "batch");
        assert_eq!(order["job"]["max_runtime_seconds"], 7200);
        assert_eq!(
            order["job"]["retry"],
            json!({ "on_failure": true, "max_retries": 2 })
        );
        assert_eq!(order["job"]["array_count"], 4);
        assert_eq!(order["job"]["env"]["MODE"], "fast");
        assert_eq!(
            order["job"]["depends_on"],
            json!([
                { "order_id": first, "condition": "after_ok" },
                { "order_id": second, "condition": "after_any" },
            ])
        );
        assert!(order.get("region").is_none());
    }

    #[test]
    fn a_mistake_is_named_with_its_line_and_field() {
        let unknown = parse("instance_type: h100x1\ncommand: x\ninstanc_type: h100x8\n")
            .expect_err("unknown field");
        assert!(unknown.contains("instanc_type"), "{unknown}");
        assert!(unknown.contains("line 3"), "{unknown}");
        let wrong_type =
            parse("instance_type: h100x1\ncommand: x\nnodes: two\n").expect_err("wrong type");
        assert!(wrong_type.contains("nodes"), "{wrong_type}");
        assert!(wrong_type.contains("line 3"), "{wrong_type}");
        let nested = parse("instance_type: h100x1\ncommand: x\nretries:\n  max: lots\n")
            .expect_err("nested");
        assert!(nested.contains("retries.max"), "{nested}");
        assert!(nested.contains("line 4"), "{nested}");
        let duration =
            parse("instance_type: h100x1\ncommand: x\nwalltime: forever\n").expect_err("duration");
        assert!(duration.contains("walltime"), "{duration}");
        assert!(duration.contains("line 3"), "{duration}");
        let missing = parse("instance_type: h100x1\n").expect_err("missing");
        assert!(missing.contains("command"), "{missing}");
    }
}
