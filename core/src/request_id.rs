//! The name a request carries from its input to its answer.

/// Names one request to [`crate::api::Api`] from [`crate::api::Api::handle_request`]
/// to its answer: its job, its parked wait, its held response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);
