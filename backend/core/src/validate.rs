//! Field-by-field validation of request bodies, so one response names every
//! invalid field at once.

use crate::error::{ApiError, FieldError};

/// The longest reason a person gives for a change of money or usage.
pub const REASON_MAX: usize = 500;

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

    /// Why a person changes money or usage: 1 to [`REASON_MAX`] characters,
    /// not only blanks, as the schemas of top-ups, adjustments and
    /// corrections say.
    pub fn reason(&mut self, field: &str, value: &str) -> String {
        if value.trim().is_empty() {
            self.push(field, "must not be empty");
        }
        self.text(field, value, REASON_MAX)
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

    /// A lowercase identifier: a letter or digit, then letters, digits and
    /// dashes, at most 63 characters (the `SLUG` pattern).
    pub fn slug(&mut self, field: &str, value: &str) {
        if !is_slug(value) {
            self.push(
                field,
                "must be 1 to 63 lowercase letters, digits or dashes, starting with a letter or digit",
            );
        }
    }

    /// A model or label name: a letter or digit, then letters, digits, `.`,
    /// `_` and `-`, at most 64 characters (the `LABEL` pattern).
    pub fn label(&mut self, field: &str, value: &str) {
        if !is_label(value) {
            self.push(
                field,
                "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            );
        }
    }

    /// A number within `min..=max`.
    pub fn range<T: PartialOrd + std::fmt::Display>(
        &mut self,
        field: &str,
        value: T,
        min: T,
        max: T,
    ) {
        if value < min || value > max {
            self.push(field, format!("must be between {min} and {max}"));
        }
    }

    pub fn finish(self) -> Result<(), ApiError> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(self.errors))
        }
    }
}

/// For `#[serde(default, deserialize_with = "present")]` on an
/// `Option<Option<T>>`: absent stays `None`, `null` becomes `Some(None)`, so
/// a PATCH can clear a field as well as leave it alone.
pub fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    serde::Deserialize::deserialize(deserializer).map(Some)
}

/// The schema pattern of [`Fields::slug`].
pub const SLUG: &str = "^[a-z0-9][a-z0-9-]{0,62}$";
/// The schema pattern of [`Fields::label`].
pub const LABEL: &str = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$";

pub fn is_slug(value: &str) -> bool {
    let mut chars = value.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && value.len() <= 63
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn is_label(value: &str) -> bool {
    let mut chars = value.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && value.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
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
        fields.slug("region", "EU-West");
        fields.label("gpu_model", "H100 SXM");
        fields.range("gpus", 65, 1, 64);
        let error = fields.finish().unwrap_err();
        assert_eq!(error.code(), "validation_failed");
        assert_eq!(error.status(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
    }
}

#[cfg(test)]
mod pattern_tests {
    use super::*;

    #[test]
    fn slugs_and_labels_follow_their_patterns() {
        assert!(is_slug("eu-central-1"));
        assert!(!is_slug("-eu") && !is_slug("") && !is_slug("Eu") && !is_slug(&"a".repeat(64)));
        assert!(is_label("H100-SXM-80GB") && is_label("a100_40.gb"));
        assert!(!is_label(".x") && !is_label("a b") && !is_label(&"a".repeat(65)));
    }
}
