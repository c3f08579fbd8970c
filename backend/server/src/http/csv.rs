//! CSV answers (RFC 4180): usage and invoices for spreadsheets.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;

/// How a report is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    #[default]
    Json,
    Csv,
}

/// A field in double quotes, its own quotes doubled.
pub fn quoted(field: &str) -> String {
    format!("\"{}\"", field.replace('"', "\"\""))
}

/// `body` as a CSV download named `filename`.
pub fn download(filename: &str, body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn quotes_are_doubled() {
        assert_eq!(super::quoted(r#"a "b", c"#), r#""a ""b"", c""#);
    }
}
