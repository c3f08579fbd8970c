//! The Standard Workload Format of the Parallel Workloads Archive.

use gantry_scheduler::{GpuRequest, Node, Workload};

use crate::replay::Job;
use crate::trace::{TraceError, field, gpus};

/// The model name a processor of an SWF machine is given.
pub const PROCESSOR: &str = "PROC";

/// One SWF job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwfJob {
    /// Job number.
    pub id: u64,
    /// Submit time, seconds.
    pub submit: i64,
    /// Run time, seconds.
    pub run: i64,
    /// Processors: requested, else allocated.
    pub processors: u32,
    /// Requested time, when known.
    pub requested_time: Option<i64>,
}

/// Reads an SWF file: 18 whitespace-separated fields per job, `;` comments,
/// -1 for unknown. Jobs without a run time or processors are skipped, as
/// SWF users do with cancelled entries.
pub fn jobs(text: &str) -> Result<Vec<SwfJob>, TraceError> {
    let mut jobs = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let raw = raw.trim();
        if raw.is_empty() || raw.starts_with(';') {
            continue;
        }
        let fields: Vec<&str> = raw.split_whitespace().collect();
        if fields.len() < 18 {
            return Err(TraceError::new(
                line,
                format!("expected 18 fields, found {}", fields.len()),
            ));
        }
        let run: i64 = field(&fields, 3, "run time", line)?;
        let allocated: i64 = field(&fields, 4, "allocated processors", line)?;
        let requested: i64 = field(&fields, 7, "requested processors", line)?;
        let requested_time: i64 = field(&fields, 8, "requested time", line)?;
        let processors = if requested > 0 { requested } else { allocated };
        if run < 0 || processors <= 0 {
            continue;
        }
        jobs.push(SwfJob {
            id: field(&fields, 0, "job number", line)?,
            submit: field(&fields, 1, "submit time", line)?,
            run,
            processors: u32::try_from(processors)
                .map_err(|_| TraceError::new(line, "too many processors"))?,
            requested_time: (requested_time > 0).then_some(requested_time),
        });
    }
    Ok(jobs)
}

/// A machine of `processors` single-processor nodes in one rack, so that a
/// job of k processors is a gang of k nodes.
pub fn machine(processors: u32) -> Vec<Node> {
    (0..processors)
        .map(|i| Node {
            name: format!("p{i:04}"),
            region: "swf".into(),
            rack: "swf".into(),
            labels: Default::default(),
            cpu_milli: 1_000,
            memory_mib: 1_024,
            schedulable: true,
            gpus: gpus(1, PROCESSOR, 1),
        })
        .collect()
}

/// SWF jobs as replay jobs whose estimate is the requested time, or the run
/// time when that is unknown.
pub fn replay_jobs(jobs: &[SwfJob]) -> Vec<Job> {
    jobs.iter()
        .map(|job| Job {
            workload: Workload {
                id: format!("job-{}", job.id),
                queue: "swf".into(),
                gpu_models: vec![PROCESSOR.into()],
                gpus: GpuRequest::Whole(1),
                node_count: job.processors,
                submitted_at: job.submit,
                duration_estimate: Some(job.requested_time.unwrap_or(job.run).max(job.run)),
                ..Workload::default()
            },
            submit: job.submit,
            run: job.run,
        })
        .collect()
}
