//! Sans-IO core of mailjar.
//!
//! Everything that decides lives here: the SMTP session state machine
//! ([`smtp::Session`]), the message store ([`store::Store`]), the filter
//! engine ([`filter::Filter`]) and the JSON API ([`api::Api`]). Nothing in
//! this crate touches a socket, a thread, a clock or a random number
//! generator: hosts pass bytes, time and entropy in, and carry replies and
//! responses out.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
pub mod budget;
pub mod download;
pub mod email;
pub mod error;
pub mod events;
pub mod faults;
pub mod filter;
pub mod head;
pub mod id;
pub mod inbox;
pub mod job;
pub mod json_text;
pub mod jsregex;
pub mod message;
pub mod patterns;
mod query;
pub mod request_id;
pub mod response;
pub mod smtp;
pub mod store;
pub mod summary;
pub mod timestamp;
mod transfer;
pub mod view;
pub mod waits;
