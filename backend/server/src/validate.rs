//! Field-by-field validation of request bodies, so one response names every
//! invalid field at once.

use crate::error::{ApiError, FieldError};

#[derive(Default)]
pub struct Fields {
    errors: Vec<FieldError>,
}

impl Fields {
    pub fn push(&mut self, field: &str, message: impl Into<String>) {
        self.errors.push(FieldError {
            field: field.to_owned(),
            message: message.into(),
        });
    }

    /// A display name: trimmed, 1 to `max` characters, no control characters.
    /// Returns the trimmed value (empty when invalid; `finish` then fails).
    pub fn name(&mut self, field: &str, value: &str, max: usize) -> String {
        let trimmed = value.trim();
        let length = trimmed.chars().count();
        if length == 0 {
            self.push(field, "must not be empty");
        } else if length > max {
            self.push(field, format!("must be at most {max} characters"));
        } else if trimmed.chars().any(char::is_control) {
            self.push(field, "must not contain control characters");
        }
        trimmed.to_owned()
    }

    /// Free text: at most `max` characters; newlines and tabs allowed.
    pub fn text(&mut self, field: &str, value: &str, max: usize) -> String {
        if value.chars().count() > max {
            self.push(field, format!("must be at most {max} characters"));
        } else if value
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
        {
            self.push(field, "must not contain control characters");
        }
        value.to_owned()
    }

    pub fn finish(self) -> Result<(), ApiError> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(self.errors))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_invalid_field_is_reported() {
        let mut fields = Fields::default();
        assert_eq!(fields.name("name", "  GPU team ", 20), "GPU team");
        fields.name("org", "   ", 20);
        fields.name("label", "a\u{0007}b", 20);
        fields.text("description", &"x".repeat(11), 10);
        let error = fields.finish().unwrap_err();
        assert_eq!(error.code(), "validation_failed");
        assert_eq!(error.status(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
    }
}
