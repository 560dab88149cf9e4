//! Helpers shared by the cross-host tests: the conformance vectors under
//! `tests/vectors/` (SMTP transcripts and API cases), read into plain Rust
//! values, and the small JSON matcher their expectations use.
//!
//! The same files are run against `mailjar-core` directly, against the
//! native host over real sockets, and against the wasm build in Node
//! (`tests/js/`). `tests/vectors/README.md` describes the format.

pub mod matcher;
pub mod vectors;
