//! The errors an API request can end in, each with the HTTP status it deserves.

use crate::response::Response;

/// A request the API refuses, with the status it deserves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed; the text says what to fix.
    #[error("{0}")]
    BadRequest(String),
    /// 400: the request's `subjectPattern` used up its matching budget.
    #[error("subjectPattern too expensive")]
    TooExpensive,
    /// 404: no such route or message.
    #[error("{0}")]
    NotFound(String),
    /// 401: the credentials that admitted the request are no longer valid
    /// (its inbox's token was rotated, or the inbox deleted).
    #[error("unauthorized")]
    Unauthorized,
    /// 403: the token may not do this (an inbox token on an admin route).
    #[error("{0}")]
    Forbidden(String),
    /// 409: the name is taken.
    #[error("{0}")]
    Conflict(String),
    /// 405: the path exists but not with this method.
    #[error("method {method} is not allowed here; allowed: {allow}")]
    MethodNotAllowed {
        /// The method that was used.
        method: String,
        /// The methods that are allowed.
        allow: &'static str,
    },
    /// 408: a wait ended without a matching message.
    #[error("no matching message arrived within {0} ms")]
    Timeout(u64),
    /// 503: every slot for parked waits is taken.
    #[error("too many waits")]
    TooManyWaits,
    /// 503: every slot for event subscribers is taken.
    #[error("too many subscribers")]
    TooManySubscribers,
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::BadRequest(_) | ApiError::TooExpensive => 400,
            ApiError::Unauthorized => 401,
            ApiError::Forbidden(_) => 403,
            ApiError::NotFound(_) => 404,
            ApiError::Conflict(_) => 409,
            ApiError::MethodNotAllowed { .. } => 405,
            ApiError::Timeout(_) => 408,
            ApiError::TooManyWaits | ApiError::TooManySubscribers => 503,
        }
    }

    /// The `{"error": ...}` response.
    pub fn response(&self) -> Response {
        let mut response = Response::error(self.status(), &self.to_string());
        match self {
            ApiError::MethodNotAllowed { allow, .. } => {
                response.headers.push(("allow", (*allow).to_owned()));
            }
            ApiError::Unauthorized => {
                response
                    .headers
                    .push(("www-authenticate", "Bearer".to_owned()));
            }
            _ => {}
        }
        response
    }
}
