//! Errors and field parsing shared by the trace adapters.

use std::str::FromStr;

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
