//! The Alibaba GPU cluster trace 2023 ("openb", the data of the FGD paper):
//! its GPU node list and its pod lists.

use gantry_scheduler::{GpuRequest, MAX_GPUS_PER_NODE, Node, Workload};

use crate::trace::{TraceError, data_lines, expect_header, field, gpu_count, gpus, list};

/// The region and rack every trace node is put in: the trace has neither.
pub const REGION: &str = "openb";

/// One pod of a pod list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    /// Pod name.
    pub name: String,
    /// CPU in thousandths of a core.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// GPUs; 0 for CPU-only pods.
    pub num_gpu: u32,
    /// Thousandths of each GPU: below 1000 shares one GPU.
    pub gpu_milli: u32,
    /// Acceptable GPU models; any when empty.
    pub gpu_spec: Vec<String>,
}

impl Pod {
    /// The GPU request in thousandths of a GPU.
    pub fn gpu_request_milli(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }

    /// The pod as an engine workload; `models` are the cluster's GPU models,
    /// for pods that accept any.
    pub fn workload(&self, id: String, models: &[String]) -> Workload {
        let gpus = match (self.num_gpu, self.gpu_milli) {
            (0, _) => GpuRequest::Whole(0),
            (1, milli) if milli < 1000 => GpuRequest::Milli(milli),
            (count, _) => GpuRequest::Whole(count),
        };
        Workload {
            id,
            queue: REGION.into(),
            gpu_models: if self.gpu_spec.is_empty() {
                models.to_vec()
            } else {
                self.gpu_spec.clone()
            },
            gpus,
            node_count: 1,
            cpu_milli_per_node: self.cpu_milli,
            memory_mib_per_node: self.memory_mib,
            ..Workload::default()
        }
    }
}

/// Reads a node list (`sn,cpu_milli,memory_mib,gpu,model`).
pub fn nodes(text: &str) -> Result<Vec<Node>, TraceError> {
    expect_header(
        text.lines().next(),
        &["sn", "cpu_milli", "memory_mib", "gpu", "model"],
    )?;
    data_lines(text)
        .map(|(line, fields)| {
            let count = gpu_count(&fields, 3, line)?;
            let model = fields.get(4).map(|m| m.trim()).unwrap_or_default();
            if count > 0 && model.is_empty() {
                return Err(TraceError::new(line, "a node with GPUs needs a model"));
            }
            Ok(Node {
                name: fields[0].trim().to_owned(),
                region: REGION.into(),
                rack: REGION.into(),
                labels: Default::default(),
                cpu_milli: field(&fields, 1, "cpu_milli", line)?,
                memory_mib: field(&fields, 2, "memory_mib", line)?,
                schedulable: true,
                gpus: gpus(count, model, 8),
            })
        })
        .collect()
}

/// Reads a pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli` and
/// optionally `gpu_spec` and more, which are ignored).
pub fn pods(text: &str) -> Result<Vec<Pod>, TraceError> {
    expect_header(
        text.lines().next(),
        &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"],
    )?;
    data_lines(text)
        .map(|(line, fields)| {
            let num_gpu: u32 = field(&fields, 3, "num_gpu", line)?;
            let gpu_milli: u32 = field(&fields, 4, "gpu_milli", line)?;
            if gpu_milli > 1000 || (num_gpu > 0 && gpu_milli == 0) {
                return Err(TraceError::new(
                    line,
                    "gpu_milli must be 1 to 1000 for a GPU pod",
                ));
            }
            if num_gpu > 1 && gpu_milli < 1000 {
                return Err(TraceError::new(line, "only a one-GPU pod may share a GPU"));
            }
            if num_gpu as usize > MAX_GPUS_PER_NODE {
                return Err(TraceError::new(line, "more GPUs than any node has"));
            }
            Ok(Pod {
                name: fields[0].trim().to_owned(),
                cpu_milli: field(&fields, 1, "cpu_milli", line)?,
                memory_mib: field(&fields, 2, "memory_mib", line)?,
                num_gpu,
                gpu_milli,
                gpu_spec: list(fields.get(5), '|'),
            })
        })
        .collect()
}
