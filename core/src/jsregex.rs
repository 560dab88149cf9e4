//! ECMAScript regular expressions, as Node runs them, on top of `regex` and `fancy-regex`.
//! (Placeholder until the translator lands.)

/// A compiled JavaScript regular expression.
#[derive(Debug, Clone)]
pub struct JsRegex {
    regex: regex::Regex,
    source: String,
    flags: String,
}

/// Why a pattern could not be compiled or run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JsRegexError {
    /// The pattern is not valid.
    #[error("invalid subjectPattern: {0}")]
    Pattern(String),
}

impl JsRegex {
    /// Compiles `pattern` with `flags`.
    pub fn new(pattern: &str, flags: &str) -> Result<JsRegex, JsRegexError> {
        let prefix = if flags.contains('i') { "(?i)" } else { "" };
        let regex = regex::Regex::new(&format!("{prefix}{pattern}"))
            .map_err(|e| JsRegexError::Pattern(e.to_string()))?;
        Ok(JsRegex {
            regex,
            source: pattern.to_owned(),
            flags: flags.to_owned(),
        })
    }
    /// Whether the regex matches `subject`.
    pub fn is_match(&self, subject: &str) -> Result<bool, JsRegexError> {
        Ok(self.regex.is_match(subject))
    }
    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }
    /// The flags.
    pub fn flags(&self) -> &str {
        &self.flags
    }
}
