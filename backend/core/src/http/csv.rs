//! CSV answers (RFC 4180): usage and invoices for spreadsheets. Text from
//! tenants (an organization's or project's name, a description) is written
//! so that no spreadsheet runs it as a formula: a cell starting with `=`,
//! `+`, `-`, `@`, a tab or a carriage return gets a leading `'`, as OWASP's
//! CSV injection guidance advises, unless it is a plain number.

use std::borrow::Cow;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::error::ApiError;

/// How a report is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    #[default]
    Json,
    Csv,
}

/// A CSV document being written, header first.
pub struct Table {
    writer: csv::Writer<Vec<u8>>,
    failed: Option<csv::Error>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        let mut table = Self {
            writer: csv::Writer::from_writer(Vec::new()),
            failed: None,
        };
        table.row(header.iter().copied());
        table
    }

    /// Adds a row; every cell is made safe to open in a spreadsheet.
    pub fn row<'a>(&mut self, cells: impl IntoIterator<Item = &'a str>) {
        if self.failed.is_some() {
            return;
        }
        let record: Vec<Cow<'a, str>> = cells.into_iter().map(neutralized).collect();
        if let Err(error) = self
            .writer
            .write_record(record.iter().map(|c| c.as_bytes()))
        {
            self.failed = Some(error);
        }
    }

    fn finish(self) -> Result<Vec<u8>, ApiError> {
        if let Some(error) = self.failed {
            return Err(ApiError::internal(error));
        }
        self.writer
            .into_inner()
            .map_err(|error| ApiError::internal(anyhow::anyhow!("writing CSV: {error}")))
    }

    /// The document as text, as a report's tests read it.
    pub fn text(self) -> Result<String, ApiError> {
        String::from_utf8(self.finish()?).map_err(ApiError::internal)
    }

    /// The document as a download named `filename`.
    pub fn download(self, filename: &str) -> Response {
        match self.finish() {
            Ok(body) => (
                [
                    (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
                    (
                        header::CONTENT_DISPOSITION,
                        format!("attachment; filename=\"{filename}\""),
                    ),
                ],
                body,
            )
                .into_response(),
            Err(error) => error.into_response(),
        }
    }
}

/// `-12.50`, `+3`, `7`: what a spreadsheet may read as a number safely.
fn is_plain_number(cell: &str) -> bool {
    let digits = cell.strip_prefix(['-', '+']).unwrap_or(cell);
    let mut parts = digits.splitn(2, '.');
    let whole = parts.next().unwrap_or_default();
    let fraction = parts.next().unwrap_or("0");
    !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && fraction.bytes().all(|b| b.is_ascii_digit())
}

fn neutralized(cell: &str) -> Cow<'_, str> {
    if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) && !is_plain_number(cell) {
        Cow::Owned(format!("'{cell}"))
    } else {
        Cow::Borrowed(cell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(cells: &[&str]) -> String {
        let mut table = Table::new(&vec!["h"; cells.len()]);
        table.row(cells.iter().copied());
        let text = table.text().expect("CSV as text");
        text.split_once('\n').expect("header").1.to_owned()
    }

    #[test]
    fn formulas_are_neutralized_and_numbers_kept() {
        assert_eq!(
            written(&[
                r#"=HYPERLINK("http://evil.example/x","Click")"#,
                "-12.50",
                "@SUM(A1)"
            ]),
            "\"'=HYPERLINK(\"\"http://evil.example/x\"\",\"\"Click\"\")\",-12.50,'@SUM(A1)\n"
        );
        assert_eq!(
            written(&["+1", "-1+cmd|' /C calc'!A0", "\tx", "\rx", "a-b"]),
            "+1,'-1+cmd|' /C calc'!A0,'\tx,\"'\rx\",a-b\n"
        );
    }

    #[test]
    fn quotes_and_separators_are_quoted() {
        assert_eq!(written(&[r#"a "b", c"#]), "\"a \"\"b\"\", c\"\n");
    }
}
