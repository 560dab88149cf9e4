//! An IMAP4rev1 session (RFC 3501 as clients use it, with IDLE from RFC
//! 2177, UIDPLUS from RFC 4315 and STARTTLS) as a state machine with no IO:
//! bytes in, bytes and requests out, like the POP3 and SMTP sessions. A host
//! feeds what it reads with [`Session::handle_input`], writes what
//! [`Session::poll_transmit`] gives, and answers what
//! [`Session::poll_output`] asks: a login ([`Session::handle_login`] with the
//! mailbox of those credentials), a message ([`Session::handle_message`]),
//! the deletions of EXPUNGE or CLOSE ([`Session::handle_deleted`]), a TLS
//! handshake, or the end of the connection. It tells the session of mail that
//! arrives ([`Session::handle_new_mail`]) and leaves the store
//! ([`Session::handle_removed`]); those reach the client as `EXISTS` and
//! `EXPUNGE` when IMAP allows it (at once while IDLE). While a request is
//! unanswered the session reads no further commands, so any split of the
//! input gives the same replies.
//!
//! Commands are framed by imap-codec's `Fragmentizer` (lines and literals,
//! a command of more than [`Config::max_command_bytes`] refused however its
//! literals are announced) and parsed and answered with imap-codec's types,
//! so nothing of the grammar is kept by hand. `imap-next` (the same authors'
//! server flow) was considered: it wants every response owned (`'static`),
//! which would copy each message once more before it is encoded, and it
//! brings `tracing`; its flow is the few lines of `session` that feed the
//! fragmentizer.
//!
//! Memory per session: its mailbox (an [`Entry`] and two flags a message,
//! never the messages), the command being read (bounded), and one message's
//! FETCH response at a time: a FETCH of many messages is rendered message by
//! message as the host asks for more bytes, so a client that does not read
//! holds one.

mod commands;
mod fetch;
mod mailbox;
mod refresh;
mod search;
mod sequence;
mod session;
mod structure;
#[cfg(test)]
mod tests;

pub use session::Session;

use crate::id::MessageId;

/// What a session is allowed and how big its commands may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// STARTTLS is offered (the host has a certificate).
    pub starttls: bool,
    /// The most bytes of one command, literals included; a bigger
    /// synchronising literal is refused before it is sent, anything else
    /// bigger is read to its end, dropped and answered `BAD`.
    pub max_command_bytes: u32,
    /// Milliseconds without a command before the session ends (RFC 3501
    /// asks for at least 30 minutes).
    pub idle_timeout_ms: u64,
    /// The mailbox's UIDVALIDITY (stable for the life of the store).
    pub uid_validity: u32,
}

impl Default for Config {
    /// No STARTTLS, 64 KiB commands, 30 minutes, UIDVALIDITY 1.
    fn default() -> Self {
        Config {
            starttls: false,
            max_command_bytes: 64 * 1024,
            idle_timeout_ms: 30 * 60 * 1000,
            uid_validity: 1,
        }
    }
}

/// One message of the mailbox as the host lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its id in the store.
    pub id: MessageId,
    /// Its UID: increasing in the mailbox, never reused.
    pub uid: u32,
    /// Its size in bytes.
    pub size: u64,
    /// When it was received (its INTERNALDATE), in milliseconds since 1970.
    pub received_ms: u64,
    /// The shared seen flag.
    pub seen: bool,
}

/// What the session asks of its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Check these credentials; answer with [`Session::handle_login`].
    Login {
        /// The user name given.
        user: String,
        /// The password given.
        password: String,
    },
    /// Look this message up in the store; answer with [`Session::handle_message`].
    Message(MessageId),
    /// Set the shared seen flag of these messages (STORE, or a FETCH of a
    /// body without PEEK); no answer is needed.
    Seen {
        /// The messages.
        ids: Vec<MessageId>,
        /// Seen (true) or unseen.
        seen: bool,
    },
    /// EXPUNGE or CLOSE: delete these from the store, then answer with
    /// [`Session::handle_deleted`].
    Delete(Vec<MessageId>),
    /// Shake hands now (the `OK` of STARTTLS has been transmitted), then call
    /// [`Session::tls_started`].
    StartTls,
    /// Close the connection once everything transmitted has been written.
    Close,
}

/// The most bytes [`Session::poll_transmit`] adds at once, besides one
/// message's FETCH response (which is as big as the parts it sends).
pub const CHUNK: usize = 64 * 1024;
