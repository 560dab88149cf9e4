//! Which stored messages a request asks for: the `to`, `subject`,
//! `subjectPattern`/`subjectFlags` and `afterId` filters, all ANDed.

use crate::error::ApiError;
use crate::id::MessageId;
use crate::jsregex::JsRegex;
use crate::store::Email;

/// A validated filter; an empty one matches every message.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// A recipient address, lower-cased and trimmed.
    to: Option<String>,
    /// A subject substring, lower-cased.
    subject: Option<String>,
    /// Boxed: a parked wait keeps its filter, and most have no pattern.
    pattern: Option<Box<JsRegex>>,
    after: Option<MessageId>,
}

/// The raw filter values of a request, before validation.
#[derive(Debug, Clone, Copy, Default)]
pub struct FilterParams<'a> {
    /// `to`
    pub to: Option<&'a str>,
    /// `subject`
    pub subject: Option<&'a str>,
    /// `subjectPattern`
    pub subject_pattern: Option<&'a str>,
    /// `subjectFlags`
    pub subject_flags: Option<&'a str>,
    /// `afterId`
    pub after_id: Option<&'a str>,
}

/// The value, unless it is absent or empty.
fn present(v: Option<&str>) -> Option<&str> {
    v.filter(|s| !s.is_empty())
}

/// The longest `subjectPattern` accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;

impl Filter {
    /// Validates the parameters; an empty value is no filter.
    pub fn new(params: FilterParams<'_>) -> Result<Filter, ApiError> {
        let pattern = match (
            present(params.subject_pattern),
            present(params.subject_flags),
        ) {
            (Some(p), flags) => {
                if p.len() > MAX_PATTERN_BYTES {
                    return Err(ApiError::BadRequest(format!(
                        "subjectPattern is longer than {MAX_PATTERN_BYTES} bytes"
                    )));
                }
                Some(Box::new(
                    JsRegex::new(p, flags.unwrap_or(""))
                        .map_err(|e| ApiError::BadRequest(e.to_string()))?,
                ))
            }
            (None, Some(_)) => {
                return Err(ApiError::BadRequest(
                    "subjectFlags needs a subjectPattern".to_owned(),
                ));
            }
            (None, None) => None,
        };
        let after = match present(params.after_id) {
            Some(id) => Some(
                id.parse()
                    .map_err(|e| ApiError::BadRequest(format!("afterId is {e}")))?,
            ),
            None => None,
        };
        Ok(Filter {
            to: present(params.to)
                .map(|t| t.trim().to_lowercase())
                .filter(|t| !t.is_empty()),
            subject: present(params.subject).map(str::to_lowercase),
            pattern,
            after,
        })
    }

    /// The `afterId` bound, if any.
    pub fn after(&self) -> Option<MessageId> {
        self.after
    }

    /// Whether the message passes every filter.
    ///
    /// Fails only when the pattern gives up (backtracking limit) on this subject.
    pub fn matches(&self, email: &Email) -> Result<bool, ApiError> {
        if self.after.is_some_and(|after| email.id <= after) {
            return Ok(false);
        }
        if let Some(to) = &self.to
            && !email.is_addressed_to(to)
        {
            return Ok(false);
        }
        let subject = email.subject();
        if let Some(part) = &self.subject
            && !contains_ignore_case(subject, part)
        {
            return Ok(false);
        }
        match &self.pattern {
            Some(re) => re
                .is_match(subject)
                .map_err(|e| ApiError::BadRequest(e.to_string())),
            None => Ok(true),
        }
    }
}

/// Whether `haystack` contains `needle_lower` (already lower-cased), ignoring case.
fn contains_ignore_case(haystack: &str, needle_lower: &str) -> bool {
    if haystack.is_ascii() && needle_lower.is_ascii() {
        let (h, n) = (haystack.as_bytes(), needle_lower.as_bytes());
        n.is_empty() || h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
    } else {
        haystack.to_lowercase().contains(needle_lower)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_ignores_case_in_any_script() {
        assert!(contains_ignore_case("Reset YOUR password", "your"));
        assert!(contains_ignore_case("Ünïcode SUBJECT", "ünïcode"));
        assert!(!contains_ignore_case("abc", "abd"));
        assert!(contains_ignore_case("abc", ""));
    }

    #[test]
    fn bad_values_are_400_with_a_reason() {
        let err = |p: FilterParams| Filter::new(p).unwrap_err().to_string();
        assert!(
            err(FilterParams {
                after_id: Some("xyz"),
                ..Default::default()
            })
            .contains("afterId")
        );
        assert!(
            err(FilterParams {
                subject_flags: Some("i"),
                ..Default::default()
            })
            .contains("subjectPattern")
        );
        assert!(
            err(FilterParams {
                subject_pattern: Some("("),
                ..Default::default()
            })
            .contains("subjectPattern")
        );
        let long = "a".repeat(MAX_PATTERN_BYTES + 1);
        assert!(
            err(FilterParams {
                subject_pattern: Some(&long),
                ..Default::default()
            })
            .contains("longer")
        );
    }
}
