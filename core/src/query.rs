//! Query strings and percent-encoded paths, decoded strictly: a malformed
//! escape, invalid UTF-8 or a repeated name is a 400, never a guess.

use crate::error::ApiError;
use crate::filter::{FilterParams, FilterSpec};

/// A parsed query string: decoded names and values, in order.
#[derive(Debug, Default)]
pub(crate) struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Parses `a=1&b=2`, with `+` as space; malformed percent-encoding and repeated names are 400s.
    pub(crate) fn parse(query: &str) -> Result<Query, ApiError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            let name = percent_decode(name, true)?;
            let value = percent_decode(value, true)?;
            if pairs.iter().any(|(n, _)| *n == name) {
                return Err(ApiError::BadRequest(format!(
                    "query parameter {} is given more than once",
                    truncate(&name, 50)
                )));
            }
            pairs.push((name, value));
        }
        Ok(Query { pairs })
    }

    /// Refuses parameters outside `allowed`, so a typo is an error and not a filter silently ignored.
    pub(crate) fn only(&self, allowed: &[&str]) -> Result<(), ApiError> {
        match self
            .pairs
            .iter()
            .find(|(n, _)| !allowed.contains(&n.as_str()))
        {
            None => Ok(()),
            Some((name, _)) if allowed.is_empty() => Err(ApiError::BadRequest(format!(
                "unknown query parameter {}: this endpoint takes none",
                truncate(name, 50)
            ))),
            Some((name, _)) => Err(ApiError::BadRequest(format!(
                "unknown query parameter {}: this endpoint takes {}",
                truncate(name, 50),
                allowed.join(", ")
            ))),
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The filter parameters, checked but not compiled.
    pub(crate) fn filter(&self) -> Result<FilterSpec, ApiError> {
        FilterSpec::new(FilterParams {
            to: self.get("to"),
            subject: self.get("subject"),
            subject_pattern: self.get("subjectPattern"),
            subject_flags: self.get("subjectFlags"),
            after_id: self.get("afterId"),
        })
    }

    /// An optional integer parameter in `min..=max`; anything else is a 400 that says so.
    pub(crate) fn integer(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>, ApiError> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        let valid = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        match text.parse::<u64>() {
            Ok(n) if valid && (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(ApiError::BadRequest(format!(
                "{name} must be an integer from {min} to {max}, not {:?}",
                truncate(text, 30)
            ))),
        }
    }
}

/// Decodes `%XX` escapes (and `+` as a space in query strings); a malformed escape or invalid UTF-8 is a 400.
pub(crate) fn percent_decode(s: &str, plus_is_space: bool) -> Result<String, ApiError> {
    if !s.contains(['%', '+']) {
        return Ok(s.to_owned());
    }
    let bad = || {
        ApiError::BadRequest(format!(
            "malformed percent-encoding in {:?}",
            truncate(s, 100)
        ))
    };
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .ok_or_else(bad)?;
                let digit = |h: u8| (h as char).to_digit(16).unwrap_or(0) as u8;
                out.push(digit(hex[0]) << 4 | digit(hex[1]));
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| {
        ApiError::BadRequest(format!(
            "percent-encoding in {:?} is not UTF-8",
            truncate(s, 100)
        ))
    })
}

/// The first `max` characters of `s`.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
