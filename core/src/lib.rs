//! Sans-IO core of mailjar.
//!
//! Everything that decides lives here: the SMTP session state machine
//! ([`smtp::Session`]), the message store ([`store::Store`]), the filter
//! engine ([`store::Filter`]) and the JSON API ([`api::Api`]). Nothing in
//! this crate touches a socket, a thread, a clock or a random number
//! generator: hosts pass bytes, time and entropy in, and carry replies and
//! responses out.
//!
//! A host needs [`api`] (the API, its inputs and outputs, responses, event
//! streams, fault rules, the questions about inboxes and credentials, and
//! the defaults of its limits), [`smtp`] (the session), [`store`] (stored
//! messages, their limits, filters), [`id`] (message ids and their entropy)
//! and [`budget`] (the clock pattern budgets read).
//! [`message`] (the MIME parser) and [`jsregex`] (JavaScript regular
//! expressions) stand alone. Everything else is private to the crate.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
pub mod budget;
mod checks;
mod download;
mod email;
mod error;
mod events;
mod faults;
mod filter;
mod head;
pub mod id;
pub mod imap;
mod inbox;
mod input;
mod job;
mod json_text;
pub mod jsregex;
pub mod message;
mod patterns;
pub mod pop3;
mod query;
mod request_id;
mod response;
pub mod smtp;
pub mod store;
mod summary;
mod timestamp;
mod transfer;
mod view;
mod waits;

/// The host of the IMAP and POP3 session tests, shared with their fuzz targets.
#[cfg(test)]
#[path = "../tests/common/reader_host.rs"]
mod reader_host;
/// The crate by the name the shared test files give it (`mailjar_core` outside).
#[cfg(test)]
use crate as mj;
