//! Errors and field parsing shared by the trace adapters.

use std::str::FromStr;

use gantry_scheduler::{Gpu, MAX_GPUS_PER_NODE};

/// A trace line that cannot be read, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct TraceError {
    /// 1-based line number in the file.
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

impl TraceError {
    pub(crate) fn new(line: usize, message: impl Into<String>) -> Self {
        Self {
            line,
            message: message.into(),
        }
    }
}

/// Parses field `index` (named `name`) of a split line.
pub(crate) fn field<T: FromStr>(
    fields: &[&str],
    index: usize,
    name: &str,
    line: usize,
) -> Result<T, TraceError> {
    let raw = fields
        .get(index)
        .ok_or_else(|| TraceError::new(line, format!("missing field {name}")))?;
    raw.trim()
        .parse()
        .map_err(|_| TraceError::new(line, format!("{name} is not a valid number: {raw:?}")))
}

/// Checks that a CSV header starts with the expected columns.
pub(crate) fn expect_header(header: Option<&str>, columns: &[&str]) -> Result<(), TraceError> {
    let header = header.ok_or_else(|| TraceError::new(1, "the file is empty"))?;
    let found: Vec<&str> = header.trim().split(',').map(str::trim).collect();
    if found.len() < columns.len() || found[..columns.len()] != *columns {
        return Err(TraceError::new(
            1,
            format!("expected the header {}", columns.join(",")),
        ));
    }
    Ok(())
}

/// Data lines of a CSV text after its header, numbered from 2, blank lines
/// skipped.
pub(crate) fn data_lines(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    text.lines()
        .enumerate()
        .skip(1)
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.split(',').collect()))
}

/// A `separator`-separated list field, empty entries dropped.
pub(crate) fn list(field: Option<&&str>, separator: char) -> Vec<String> {
    field
        .map(|value| {
            value
                .split(separator)
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Parses a node's GPU count, which the engine caps.
pub(crate) fn gpu_count(fields: &[&str], index: usize, line: usize) -> Result<u32, TraceError> {
    let gpus: u32 = field(fields, index, "gpus", line)?;
    if gpus as usize > MAX_GPUS_PER_NODE {
        return Err(TraceError::new(
            line,
            format!("more than {MAX_GPUS_PER_NODE} GPUs"),
        ));
    }
    Ok(gpus)
}

/// `count` healthy GPUs of `model`, `per_domain` to an NVLink domain.
pub(crate) fn gpus(count: u32, model: &str, per_domain: u32) -> Vec<Gpu> {
    (0..count)
        .map(|index| Gpu {
            index,
            model: model.to_owned(),
            nvlink_domain: index / per_domain.max(1),
            healthy: true,
            mig_slices: None,
            mig_instance_slices: None,
        })
        .collect()
}
