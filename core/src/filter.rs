//! Which stored messages a request asks for: the `to`, `subject`,
//! `subjectPattern`/`subjectFlags` and `afterId` filters, all ANDed.
//!
//! A request's filter is checked in two steps: [`FilterSpec::new`] does the
//! cheap checks (it runs under the host's lock), and [`FilterSpec::compile`]
//! compiles the pattern, which can take milliseconds, outside it.

use std::sync::Arc;

use crate::budget::{Budget, Clock};
use crate::email::Email;
use crate::error::ApiError;
use crate::id::MessageId;
use crate::jsregex::JsRegex;
use crate::patterns::PatternCache;

/// The longest `subjectPattern` accepted, in characters.
pub const MAX_PATTERN_CHARS: usize = 1000;

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

/// A filter whose values are checked but whose pattern is not compiled yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterSpec {
    to: Option<String>,
    subject: Option<String>,
    /// The pattern source and its flags.
    pattern: Option<(String, String)>,
    after: Option<MessageId>,
}

/// A validated filter with its pattern compiled; an empty one matches every message.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// A recipient address, lower-cased and trimmed.
    to: Option<String>,
    /// A subject substring, lower-cased.
    subject: Option<String>,
    /// Its source and flags, and the program shared by every request with the same ones.
    pattern: Option<Compiled>,
    after: Option<MessageId>,
}

/// A compiled `subjectPattern` with the source and flags it was compiled from.
#[derive(Debug, Clone)]
struct Compiled {
    source: String,
    flags: String,
    program: Arc<JsRegex>,
}

/// The value, unless it is absent or empty.
fn present(v: Option<&str>) -> Option<&str> {
    v.filter(|s| !s.is_empty())
}

impl FilterSpec {
    /// Checks the parameters; an empty value is no filter. Compiles nothing.
    pub fn new(params: FilterParams<'_>) -> Result<FilterSpec, ApiError> {
        let pattern = match (
            present(params.subject_pattern),
            present(params.subject_flags),
        ) {
            (Some(p), flags) => {
                if p.chars().count() > MAX_PATTERN_CHARS {
                    return Err(ApiError::BadRequest(format!(
                        "subjectPattern is longer than {MAX_PATTERN_CHARS} characters"
                    )));
                }
                Some((p.to_owned(), flags.unwrap_or("").to_owned()))
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
        Ok(FilterSpec {
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

    /// Makes `id` the `afterId` bound (an event stream resuming from `Last-Event-ID`).
    pub fn resume_after(&mut self, id: MessageId) {
        self.after = Some(id);
    }

    /// Whether it has a `subjectPattern` (whose matching has a budget).
    pub fn has_pattern(&self) -> bool {
        self.pattern.is_some()
    }

    /// The pattern as the cache knows it (`cache.get(source, flags)`), if any.
    pub fn cached(&self, cache: &PatternCache) -> Option<Arc<JsRegex>> {
        let (source, flags) = self.pattern.as_ref()?;
        cache.get(source, flags)
    }

    /// The filter with its pattern compiled, or `cached` (what [`FilterSpec::cached`] gave) when
    /// another request compiled it. Compiling grows with the pattern: run it outside the lock.
    pub fn compile(&self, cached: Option<Arc<JsRegex>>) -> Result<Filter, ApiError> {
        let pattern = match &self.pattern {
            Some((source, flags)) => {
                let program = match cached {
                    Some(program) => program,
                    None => Arc::new(
                        JsRegex::new(source, flags)
                            .map_err(|e| ApiError::BadRequest(e.to_string()))?,
                    ),
                };
                Some(Compiled {
                    source: source.clone(),
                    flags: flags.clone(),
                    program,
                })
            }
            None => None,
        };
        Ok(Filter {
            to: self.to.clone(),
            subject: self.subject.clone(),
            pattern,
            after: self.after,
        })
    }
}

impl Filter {
    /// Hands its compiled pattern to `cache` for later requests to share,
    /// taking the cache's instead when another request kept one first.
    pub fn share_pattern(&mut self, cache: &mut PatternCache) {
        if let Some(p) = &mut self.pattern {
            p.program = cache.keep(&p.source, &p.flags, p.program.clone());
        }
    }

    /// Whether it has a `subjectPattern` (whose matching has a budget).
    pub fn has_pattern(&self) -> bool {
        self.pattern.is_some()
    }

    /// The `afterId` bound, if any.
    pub fn after(&self) -> Option<MessageId> {
        self.after
    }

    /// Whether the message passes every filter; the pattern, tried last,
    /// spends from `budget`.
    ///
    /// Fails when the budget runs out or the pattern gives up on this subject.
    pub fn matches(
        &self,
        email: &Email,
        budget: &mut Budget,
        clock: &dyn Clock,
    ) -> Result<bool, ApiError> {
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
            Some(p) => budget.run(&p.program, subject, clock),
            None => Ok(true),
        }
    }
}

/// Whether `haystack` contains `needle_lower` (already lower-cased), ignoring case.
fn contains_ignore_case(haystack: &str, needle_lower: &str) -> bool {
    if haystack.is_ascii() && needle_lower.is_ascii() {
        let (h, n) = (haystack.as_bytes(), needle_lower.as_bytes());
        n.is_empty() || memchr::memmem::find(&h.to_ascii_lowercase(), n).is_some()
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
        let err = |p: FilterParams| {
            FilterSpec::new(p)
                .and_then(|spec| spec.compile(None))
                .unwrap_err()
                .to_string()
        };
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
        let long = "é".repeat(MAX_PATTERN_CHARS + 1);
        assert!(
            err(FilterParams {
                subject_pattern: Some(&long),
                ..Default::default()
            })
            .contains("longer")
        );
        let just = "é".repeat(MAX_PATTERN_CHARS);
        assert!(
            FilterSpec::new(FilterParams {
                subject_pattern: Some(&just),
                ..Default::default()
            })
            .is_ok()
        );
    }
}
