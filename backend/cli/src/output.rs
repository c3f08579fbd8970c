//! How answers are shown: tables for people, JSON for scripts, and the
//! figures in them (money, durations, ages) in one spelling.

use chrono::{DateTime, Utc};
use comfy_table::{Table, presets};
use serde_json::Value;

use crate::args::Output;
use crate::error::{CliError, CliResult};

pub fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        .set_header(header.iter().copied());
    table
}

/// Prints `value` as JSON, or `render`'s table of it.
pub fn show(
    output: Output,
    value: Value,
    render: impl FnOnce(Value) -> CliResult<Table>,
) -> CliResult<()> {
    match output {
        Output::Json => json(&value),
        Output::Table => {
            print(&render(value)?);
            Ok(())
        }
    }
}

/// Prints `table` without the blank lines its empty borders leave.
pub fn print(table: &Table) {
    for line in table.lines() {
        if !line.trim().is_empty() {
            println!("{}", line.trim_end());
        }
    }
}

pub fn json(value: &Value) -> CliResult<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Local(format!("printing JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

/// Micro-units of a currency as an amount with cents.
pub fn money(micros: i64) -> String {
    let cents = (micros as f64 / 10_000.0).round() as i64;
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100)
}

/// GPU-seconds as GPU-hours with one decimal.
pub fn gpu_hours(seconds: i64) -> String {
    format!("{:.1}", seconds as f64 / 3600.0)
}

/// How long ago `at` was, roughly: `45s`, `12m`, `3h`, `2d`.
pub fn age(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let seconds = (now - at).num_seconds().max(0);
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        3600..86_400 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

pub fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

pub fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_as_people_write_them() {
        assert_eq!(money(19_880_000), "19.88");
        assert_eq!(money(-5_000), "-0.01");
        assert_eq!(money(0), "0.00");
        assert_eq!(gpu_hours(5400), "1.5");
        let now = Utc::now();
        assert_eq!(age(now - chrono::TimeDelta::seconds(59), now), "59s");
        assert_eq!(age(now - chrono::TimeDelta::minutes(90), now), "1h");
        assert_eq!(age(now - chrono::TimeDelta::days(3), now), "3d");
        assert_eq!(or_dash(None::<i32>), "-");
    }
}
