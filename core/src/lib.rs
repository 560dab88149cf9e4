//! Sans-IO core of mailjar.
//!
//! Everything that decides lives here: the SMTP session state machine, the
//! message store, the filter engine and the JSON API. Nothing in this crate
//! touches a socket, a thread, a clock or a random number generator: hosts
//! pass bytes, time and entropy in, and carry replies and responses out.

pub mod jsregex;
pub mod message;
pub mod smtp;
