//! The one error type of the translator (a leaf: every other module may use it).

/// Why a pattern could not be compiled or run; the text is meant for API users.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JsRegexError {
    /// The flags string is not valid JS (unknown, repeated, or `u` with `v`).
    #[error("invalid subjectFlags: {0}")]
    Flags(String),
    /// The pattern is not valid JS: `new RegExp` would throw a SyntaxError.
    #[error("invalid subjectPattern: {message} at position {position}")]
    Syntax {
        /// What is wrong.
        message: String,
        /// Index (in UTF-16 code units without `u`/`v`, in characters with) where it was found.
        position: usize,
    },
    /// The pattern is valid JS but uses a construct this server cannot run.
    #[error("invalid subjectPattern: {0} is not supported")]
    Unsupported(String),
    /// The pattern is valid but its compiled form would exceed
    /// [`MAX_COMPILED_BYTES`](super::MAX_COMPILED_BYTES).
    #[error("invalid subjectPattern: pattern too large ({0})")]
    TooLarge(String),
    /// Matching gave up after too much backtracking.
    #[error(
        "subjectPattern is too slow to match this subject (backtracking limit exceeded); simplify the pattern"
    )]
    BacktrackLimit,
}
