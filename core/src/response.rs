//! What an API answer is made of: a status, a content type, headers, and a
//! body that is either bytes or a stream of chunks.
//!
//! A streamed body is produced piece by piece as the host writes it: the
//! host asks for the next chunk only once the previous one is on its way, so
//! a client that does not read holds one chunk and pauses its own
//! serialisation, and nobody else's.

use serde::Serialize;

/// An HTTP response: a status and a JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// The JSON body.
    pub body: String,
    /// The methods a path allows, for the `Allow` header of a 405.
    pub allow: Option<&'static str>,
}

impl Response {
    pub(crate) fn json(status: u16, body: &impl Serialize) -> Response {
        Response {
            status,
            body: serde_json::to_string(body).unwrap_or_else(|e| {
                format!("{{\"error\":\"could not serialise the response: {e}\"}}")
            }),
            allow: None,
        }
    }
}

/// The largest chunk a [`ChunkSource`] should produce at once, in bytes.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// A body produced piece by piece.
pub trait ChunkSource: Send {
    /// Appends the next piece of the body to `out`, about [`CHUNK_BYTES`] at
    /// most; returns false, appending nothing, once the body is complete.
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool;
}

/// A response body.
pub enum Body {
    /// The whole body, already built; cheap to clone and share.
    Full(bytes::Bytes),
    /// A body built as it is written.
    Stream(Box<dyn ChunkSource>),
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Full(bytes) => f.debug_tuple("Full").field(&bytes.len()).finish(),
            Body::Stream(_) => f.write_str("Stream"),
        }
    }
}

impl Body {
    /// Builds the whole body (for hosts and tests that want it in one piece).
    pub fn collect(self) -> Vec<u8> {
        match self {
            Body::Full(bytes) => bytes.to_vec(),
            Body::Stream(mut source) => {
                let mut out = Vec::new();
                while source.next_chunk(&mut out) {}
                out
            }
        }
    }
}
