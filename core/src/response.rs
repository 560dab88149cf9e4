//! What an API answer is made of: a status, a content type, headers, and a
//! body that is either bytes or a stream of chunks.
//!
//! A streamed body is produced piece by piece as the host writes it: the
//! host asks for the next chunk only once the previous one is on its way, so
//! a client that does not read holds one chunk and pauses its own
//! serialisation, and nobody else's.

use std::borrow::Cow;

use serde::Serialize;

/// An HTTP response: a status, a content type, extra headers and a body.
#[derive(Debug)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type`, e.g. `application/json` (an attachment's declared type is not static).
    pub content_type: Cow<'static, str>,
    /// Headers besides `Content-Type` and the framing ones, e.g. `Allow` on a 405.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Body,
}

/// The content type of every JSON response.
pub const JSON: &str = "application/json";

impl Response {
    /// A JSON response built at once.
    pub fn json(status: u16, body: &impl Serialize) -> Response {
        let bytes = serde_json::to_vec(body).unwrap_or_else(|e| {
            format!("{{\"error\":\"could not serialise the response: {e}\"}}").into_bytes()
        });
        Response::json_bytes(status, bytes::Bytes::from(bytes))
    }

    /// A JSON response whose body is already built.
    pub fn json_bytes(status: u16, body: bytes::Bytes) -> Response {
        Response {
            status,
            content_type: Cow::Borrowed(JSON),
            headers: Vec::new(),
            body: Body::Full(body),
        }
    }

    /// A JSON response written as it is sent.
    pub fn json_stream(status: u16, body: Box<dyn ChunkSource>) -> Response {
        Response {
            status,
            content_type: Cow::Borrowed(JSON),
            headers: Vec::new(),
            body: Body::Stream(body),
        }
    }

    /// A 200 response of `content_type` with these extra headers.
    pub fn download(
        content_type: Cow<'static, str>,
        headers: Vec<(&'static str, String)>,
        body: Body,
    ) -> Response {
        Response {
            status: 200,
            content_type,
            headers,
            body,
        }
    }

    /// The `{"error": text}` response.
    pub fn error(status: u16, text: &str) -> Response {
        Response::json(status, &serde_json::json!({ "error": text }))
    }

    /// The value of an extra header, by name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The whole body as text (lossy for bytes that are not UTF-8), built now.
    pub fn into_text(self) -> String {
        match String::from_utf8(self.body.collect()) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
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

    /// Whether the body ended before it was complete: what it is made from
    /// went away (a download whose message was deleted meanwhile). Asked once
    /// [`ChunkSource::next_chunk`] has returned false; a host then ends the
    /// response so that the client sees it incomplete (HTTP/1.1: without
    /// the last chunk).
    fn cut_short(&self) -> bool {
        false
    }
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
