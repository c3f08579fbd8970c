//! Gantry's own CSV formats for clusters and workload traces.
//!
//! Cluster: `name,region,rack,cpu_milli,memory_mib,gpus,model,labels`, one
//! node per line; `labels` are `;`-separated. Workloads:
//! `id,queue,submit,run,num_gpu,gpu_milli,node_count,models,cpu_milli,memory_mib,priority,class`,
//! one job per line; `models` are `|`-separated, `priority` one of
//! `preemptible`, `batch`, `standard`, `production`, `class` one of
//! `training`, `fine_tuning`, `inference`, `dev`, `batch`, `hpo`. The run
//! time doubles as the duration estimate.

use gantry_scheduler::{GpuRequest, Node, PriorityClass, Workload, WorkloadClass};

use crate::replay::Job;
use crate::trace::{TraceError, data_lines, expect_header, field, gpu_count, gpus, list};

/// The cluster header.
pub const CLUSTER_HEADER: &str = "name,region,rack,cpu_milli,memory_mib,gpus,model,labels";
/// The workload header.
pub const WORKLOAD_HEADER: &str =
    "id,queue,submit,run,num_gpu,gpu_milli,node_count,models,cpu_milli,memory_mib,priority,class";

fn text(fields: &[&str], index: usize, name: &str, line: usize) -> Result<String, TraceError> {
    let value = fields.get(index).map(|f| f.trim()).unwrap_or_default();
    if value.is_empty() {
        return Err(TraceError::new(line, format!("{name} is empty")));
    }
    Ok(value.to_owned())
}

/// Reads a cluster.
pub fn cluster(input: &str) -> Result<Vec<Node>, TraceError> {
    let columns: Vec<&str> = CLUSTER_HEADER.split(',').collect();
    expect_header(input.lines().next(), &columns)?;
    data_lines(input)
        .map(|(line, fields)| {
            let count = gpu_count(&fields, 5, line)?;
            let model = text(&fields, 6, "model", line)?;
            Ok(Node {
                name: text(&fields, 0, "name", line)?,
                region: text(&fields, 1, "region", line)?,
                rack: text(&fields, 2, "rack", line)?,
                labels: list(fields.get(7), ';').into_iter().collect(),
                cpu_milli: field(&fields, 3, "cpu_milli", line)?,
                memory_mib: field(&fields, 4, "memory_mib", line)?,
                schedulable: true,
                gpus: gpus(count, &model, 4),
            })
        })
        .collect()
}

fn priority(value: &str, line: usize) -> Result<PriorityClass, TraceError> {
    Ok(match value.trim() {
        "preemptible" => PriorityClass::Preemptible,
        "batch" => PriorityClass::Batch,
        "standard" | "" => PriorityClass::Standard,
        "production" => PriorityClass::Production,
        other => return Err(TraceError::new(line, format!("unknown priority {other:?}"))),
    })
}

fn class(value: &str, line: usize) -> Result<WorkloadClass, TraceError> {
    Ok(match value.trim() {
        "training" | "" => WorkloadClass::Training,
        "fine_tuning" => WorkloadClass::FineTuning,
        "inference" => WorkloadClass::Inference,
        "dev" => WorkloadClass::Dev,
        "batch" => WorkloadClass::Batch,
        "hpo" => WorkloadClass::Hpo,
        other => return Err(TraceError::new(line, format!("unknown class {other:?}"))),
    })
}

/// Reads a workload trace.
pub fn workloads(input: &str) -> Result<Vec<Job>, TraceError> {
    let columns: Vec<&str> = WORKLOAD_HEADER.split(',').collect();
    expect_header(input.lines().next(), &columns)?;
    data_lines(input)
        .map(|(line, fields)| {
            let num_gpu: u32 = field(&fields, 4, "num_gpu", line)?;
            let gpu_milli: u32 = field(&fields, 5, "gpu_milli", line)?;
            let gpus = match (num_gpu, gpu_milli) {
                (0, _) => GpuRequest::Whole(0),
                (1, milli) if (1..1000).contains(&milli) => GpuRequest::Milli(milli),
                (count, 1000) => GpuRequest::Whole(count),
                _ => {
                    return Err(TraceError::new(
                        line,
                        "gpu_milli must be 1000, or 1 to 999 for one GPU",
                    ));
                }
            };
            let submit: i64 = field(&fields, 2, "submit", line)?;
            let run: i64 = field(&fields, 3, "run", line)?;
            if run < 0 {
                return Err(TraceError::new(line, "run must not be negative"));
            }
            Ok(Job {
                workload: Workload {
                    id: text(&fields, 0, "id", line)?,
                    queue: text(&fields, 1, "queue", line)?,
                    gpu_models: list(fields.get(7), '|'),
                    gpus,
                    node_count: field(&fields, 6, "node_count", line)?,
                    cpu_milli_per_node: field(&fields, 8, "cpu_milli", line)?,
                    memory_mib_per_node: field(&fields, 9, "memory_mib", line)?,
                    priority: priority(fields.get(10).copied().unwrap_or_default(), line)?,
                    class: class(fields.get(11).copied().unwrap_or_default(), line)?,
                    submitted_at: submit,
                    duration_estimate: Some(run),
                    ..Workload::default()
                },
                submit,
                run,
            })
        })
        .collect()
}
