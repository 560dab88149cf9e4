//! A POP3 session (RFC 1939, with CAPA from RFC 2449, AUTH PLAIN from RFC
//! 5034 and STLS from RFC 2595) as a state machine with no IO: bytes in,
//! bytes and requests out. A host feeds what it reads with
//! [`Session::handle_input`], writes what [`Session::poll_transmit`] gives,
//! and answers what [`Session::poll_output`] asks: a login
//! ([`Session::handle_login`] with the maildrop of those credentials), a
//! message ([`Session::handle_message`], looked up in the live store by id),
//! the deletions of QUIT ([`Session::handle_deleted`]), a TLS handshake, or
//! the end of the connection. While a request is unanswered the session reads
//! no further commands: pipelined ones wait in its buffer, in order, so any
//! split of the input gives the same replies.
//!
//! The maildrop is the list of ids and sizes at login (24 bytes a message,
//! never the messages): a message deleted from the store meanwhile answers
//! `-ERR` when it is retrieved. A retrieval holds its one message while it is
//! sent and writes it in chunks of at most [`CHUNK`] of its bytes, dot-stuffed as it
//! goes, so memory per session is bounded by its maildrop's list and one chunk.
//!
//! Kept by hand: the protocol is a dozen line commands split at a space, and
//! what a session must do (the maildrop, DELE marks, chunked dot-stuffed
//! retrieval, the order of pipelined commands) is the state machine, which no
//! crate has. The parsers considered: `pop3-codec` (commands only, no
//! responses, last released in 2022) and `sawp-pop3` (a traffic-inspection
//! parser); either would replace a few lines of splitting, not the session.
//! Covered by the tests' split and pipelining properties and the
//! `pop3_session` fuzz target.

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::email::Email;
use crate::id::MessageId;
use crate::input::{Input, TooLong};

/// The most bytes of a message [`Session::poll_transmit`] adds at once (dot-stuffing
/// adds at most one a line, so at most twice this goes out).
pub const CHUNK: usize = 64 * 1024;

/// Commands in a row that fail before the session closes the connection.
const MAX_ERRORS: usize = 20;

/// What a session is allowed and how long it may idle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// STLS is offered (the host has a certificate).
    pub stls: bool,
    /// The longest command line in bytes (longer ones are refused).
    pub max_line_bytes: usize,
    /// Milliseconds without a command before the session ends (RFC 1939
    /// asks for at least ten minutes).
    pub idle_timeout_ms: u64,
}

impl Default for Config {
    /// No STLS, 4096-byte lines, ten minutes.
    fn default() -> Self {
        Config {
            stls: false,
            max_line_bytes: 4096,
            idle_timeout_ms: 10 * 60 * 1000,
        }
    }
}

/// One message of the maildrop as the host listed it at login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its id in the store (and its UIDL).
    pub id: MessageId,
    /// Its size in bytes.
    pub size: u64,
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
    Fetch(MessageId),
    /// RETR is about to send this message: mark it seen for every reader
    /// (nothing to answer). Comes just before its [`Output::Fetch`]; TOP
    /// does not mark.
    Seen(MessageId),
    /// QUIT in the transaction state: delete these from the store, then
    /// answer with [`Session::handle_deleted`].
    Delete(Vec<MessageId>),
    /// Shake hands now (the `+OK` of STLS has been transmitted), then call
    /// [`Session::tls_started`].
    StartTls,
    /// Close the connection once everything transmitted has been written.
    Close,
}

/// Where the session is in RFC 1939's states.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Before a login; `user` after USER.
    Authorization { user: Option<String> },
    /// After AUTH PLAIN without an initial response: the next line is it.
    AuthPlain,
    /// Logged in, with the maildrop and what DELE marked.
    Transaction {
        maildrop: Vec<Entry>,
        deleted: Vec<bool>,
    },
    /// The connection is ending: nothing more is read.
    Done,
}

/// What the session waits for before it reads the next command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    Nothing,
    Login,
    /// A message for RETR, or TOP with this many body lines.
    Message {
        top: Option<usize>,
    },
    Deleted(usize),
    Tls,
}

/// A retrieval being transmitted: its message and how far it has gone.
#[derive(Debug)]
struct Sending {
    email: Arc<Email>,
    at: usize,
    /// Where the transmission stops (the end of the message, or of TOP's lines).
    end: usize,
    at_line_start: bool,
}

/// A multi-line listing being transmitted (LIST or UIDL without an argument).
#[derive(Debug, Clone, Copy)]
struct Listing {
    next: usize,
    uidl: bool,
}

/// One POP3 connection; see the [module documentation](self).
#[derive(Debug)]
pub struct Session {
    config: Config,
    state: State,
    awaiting: Awaiting,
    /// Bytes read and not yet a whole command (and commands after one that waits).
    input: Input,
    tls: bool,
    errors: usize,
    transmit: Vec<u8>,
    sending: Option<Sending>,
    listing: Option<Listing>,
    outputs: VecDeque<Output>,
}

impl Session {
    /// A session whose greeting is ready to transmit; `now_ms` starts its idle timer.
    pub fn new(config: Config, now_ms: u64) -> Session {
        let mut session = Session {
            input: Input::new(config.idle_timeout_ms, now_ms),
            config,
            state: State::Authorization { user: None },
            awaiting: Awaiting::Nothing,
            tls: false,
            errors: 0,
            transmit: Vec::new(),
            sending: None,
            listing: None,
            outputs: VecDeque::new(),
        };
        session.reply("+OK mailjar POP3 ready");
        session
    }

    /// The connection is under TLS from the start (an implicit-TLS port).
    pub fn set_tls(&mut self) {
        self.tls = true;
    }

    /// Bytes the client sent.
    pub fn handle_input(&mut self, bytes: &[u8], now_ms: u64) {
        if self.state == State::Done {
            return;
        }
        self.input.push(bytes, now_ms);
        self.run();
    }

    /// The answer to [`Output::Login`]: the maildrop, or None when the
    /// credentials are wrong.
    pub fn handle_login(&mut self, maildrop: Option<Vec<Entry>>) {
        if self.awaiting != Awaiting::Login {
            return;
        }
        self.awaiting = Awaiting::Nothing;
        match maildrop {
            Some(maildrop) => {
                let (count, size) = (maildrop.len(), maildrop.iter().map(|e| e.size).sum::<u64>());
                self.reply(&format!(
                    "+OK maildrop has {count} messages ({size} octets)"
                ));
                let deleted = vec![false; maildrop.len()];
                self.state = State::Transaction { maildrop, deleted };
            }
            None => {
                self.reply("-ERR [AUTH] invalid user name or password");
                self.state = State::Authorization { user: None };
                self.failed();
            }
        }
        self.run();
    }

    /// The answer to [`Output::Fetch`]: the message, or None when it has
    /// left the store since the login.
    pub fn handle_message(&mut self, email: Option<Arc<Email>>) {
        let Awaiting::Message { top } = self.awaiting else {
            return;
        };
        self.awaiting = Awaiting::Nothing;
        match email {
            None => self.reply("-ERR message was deleted from the store"),
            Some(email) => {
                let raw = email.raw();
                let end = top.map_or(raw.len(), |lines| top_end(raw, lines));
                self.reply(&format!("+OK {} octets", raw.len()));
                self.sending = Some(Sending {
                    email,
                    at: 0,
                    end,
                    at_line_start: true,
                });
            }
        }
        self.run();
    }

    /// The answer to [`Output::Delete`]: whether the store removed them.
    pub fn handle_deleted(&mut self, ok: bool) {
        let Awaiting::Deleted(count) = self.awaiting else {
            return;
        };
        self.awaiting = Awaiting::Nothing;
        if ok {
            self.reply(&format!(
                "+OK mailjar POP3 signing off ({count} messages deleted)"
            ));
        } else {
            self.reply("-ERR [SYS/TEMP] some deleted messages were not removed");
        }
        self.close();
    }

    /// The TLS handshake of STLS finished: the session goes on under TLS.
    pub fn tls_started(&mut self) {
        if self.awaiting == Awaiting::Tls {
            self.awaiting = Awaiting::Nothing;
            self.tls = true;
            self.run();
        }
    }

    /// When [`Session::handle_timeout`] is due, in the host's milliseconds.
    pub fn poll_timeout(&self) -> Option<u64> {
        (self.state != State::Done).then(|| self.input.idle_until())
    }

    /// Time has passed: past the idle timeout the session ends, deleting nothing.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        if self.poll_timeout().is_some_and(|due| now_ms >= due) {
            self.reply("-ERR [IN-USE] autologout: idle for too long");
            self.close();
        }
    }

    /// Moves the next bytes to write into `out` (at most about [`CHUNK`]);
    /// false when there is nothing to write.
    pub fn poll_transmit(&mut self, out: &mut Vec<u8>) -> bool {
        let before = out.len();
        out.append(&mut self.transmit);
        if let Some(sending) = &mut self.sending {
            if stuff(sending, out, CHUNK) {
                self.sending = None;
                self.run();
                out.append(&mut self.transmit);
            }
        } else if let Some(listing) = self.listing {
            self.list_some(listing, out);
        }
        out.len() > before
    }

    /// The next request for the host, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Reads commands while nothing is awaited or being transmitted.
    fn run(&mut self) {
        while self.awaiting == Awaiting::Nothing
            && self.sending.is_none()
            && self.listing.is_none()
            && self.state != State::Done
        {
            let line = match self.input.line(self.config.max_line_bytes) {
                None => return,
                Some(Ok(line)) => line,
                Some(Err(TooLong)) => {
                    self.reply("-ERR line too long");
                    self.failed();
                    continue;
                }
            };
            let text = String::from_utf8_lossy(&line);
            self.command(text.trim_end_matches(['\r', '\n']));
        }
    }

    /// One command line, in the current state.
    fn command(&mut self, line: &str) {
        if self.state == State::AuthPlain {
            self.state = State::Authorization { user: None };
            return self.auth_plain(line);
        }
        let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
        let verb = verb.to_ascii_uppercase();
        let args: Vec<&str> = rest.split_whitespace().collect();
        match (&self.state, verb.as_str()) {
            (_, "CAPA") => self.capabilities(),
            (_, "NOOP") if matches!(self.state, State::Transaction { .. }) => self.reply("+OK"),
            (_, "QUIT") => self.quit(),
            (State::Authorization { .. }, _) => self.authorization(&verb, rest, &args),
            (State::Transaction { .. }, _) => self.transaction(&verb, &args),
            _ => {}
        }
    }

    fn capabilities(&mut self) {
        let mut caps = vec![
            "USER",
            "UIDL",
            "TOP",
            "PIPELINING",
            "RESP-CODES",
            "AUTH-RESP-CODE",
            "SASL PLAIN",
        ];
        if self.config.stls && !self.tls && matches!(self.state, State::Authorization { .. }) {
            caps.push("STLS");
        }
        caps.push("IMPLEMENTATION mailjar");
        self.reply("+OK capability list follows");
        for cap in caps {
            self.reply(cap);
        }
        self.reply(".");
    }

    fn authorization(&mut self, verb: &str, rest: &str, args: &[&str]) {
        match verb {
            "USER" if !rest.is_empty() => {
                self.state = State::Authorization {
                    user: Some(rest.to_owned()),
                };
                self.reply("+OK send PASS");
            }
            "PASS" => {
                let user = match &mut self.state {
                    State::Authorization { user } => user.take(),
                    _ => None,
                };
                match user {
                    Some(user) => self.login(user, rest.to_owned()),
                    None => self.error("-ERR USER first"),
                }
            }
            "AUTH" if args.is_empty() => {
                self.reply("+OK");
                self.reply("PLAIN");
                self.reply(".");
            }
            "AUTH" if args[0].eq_ignore_ascii_case("PLAIN") => match args.get(1) {
                Some(initial) => self.auth_plain(initial),
                None => {
                    self.state = State::AuthPlain;
                    self.reply("+ ");
                }
            },
            "AUTH" => self.error("-ERR unsupported SASL mechanism"),
            "STLS" if self.config.stls && !self.tls => {
                self.reply("+OK begin TLS negotiation");
                // Commands pipelined after STLS are not read (RFC 2595).
                self.input.clear();
                self.awaiting = Awaiting::Tls;
                self.outputs.push_back(Output::StartTls);
            }
            "STLS" => self.error("-ERR STLS is not available"),
            _ => self.error("-ERR unknown command, or not before a login"),
        }
    }

    /// The response of AUTH PLAIN: `authzid NUL authcid NUL passwd` in base64.
    fn auth_plain(&mut self, response: &str) {
        if response == "*" {
            return self.error("-ERR authentication cancelled");
        }
        let decoded = BASE64.decode(response.trim()).unwrap_or_default();
        match crate::smtp::split_plain(&decoded) {
            Some((user, password)) => self.login(
                String::from_utf8_lossy(user).into_owned(),
                String::from_utf8_lossy(password).into_owned(),
            ),
            None => self.error("-ERR [AUTH] malformed PLAIN response"),
        }
    }

    fn login(&mut self, user: String, password: String) {
        self.awaiting = Awaiting::Login;
        self.outputs.push_back(Output::Login { user, password });
    }

    fn transaction(&mut self, verb: &str, args: &[&str]) {
        match (verb, args) {
            ("STAT", []) => {
                let (count, size) = self
                    .live()
                    .fold((0, 0), |(n, bytes), (_, e)| (n + 1, bytes + e.size));
                self.reply(&format!("+OK {count} {size}"));
            }
            ("LIST" | "UIDL", []) => {
                let count = self.live().count();
                self.reply(&format!("+OK {count} messages"));
                self.listing = Some(Listing {
                    next: 0,
                    uidl: verb == "UIDL",
                });
            }
            ("LIST", [n]) => match self.message(n) {
                Some((number, entry)) => self.reply(&format!("+OK {number} {}", entry.size)),
                None => self.error("-ERR no such message"),
            },
            ("UIDL", [n]) => match self.message(n) {
                Some((number, entry)) => self.reply(&format!("+OK {number} {}", entry.id)),
                None => self.error("-ERR no such message"),
            },
            ("RETR", [n]) => self.fetch(n, None),
            ("TOP", [n, lines]) => match lines.parse::<usize>() {
                Ok(lines) => self.fetch(n, Some(lines)),
                Err(_) => self.error("-ERR TOP needs a message number and a line count"),
            },
            ("DELE", [n]) => match self.message(n) {
                Some((number, _)) => {
                    if let State::Transaction { deleted, .. } = &mut self.state {
                        deleted[number - 1] = true;
                    }
                    self.reply(&format!("+OK message {number} deleted"));
                }
                None => self.error("-ERR no such message"),
            },
            ("RSET", []) => {
                if let State::Transaction { deleted, .. } = &mut self.state {
                    deleted.fill(false);
                }
                let count = self.live().count();
                self.reply(&format!("+OK maildrop has {count} messages"));
            }
            _ => self.error("-ERR unknown command or wrong arguments"),
        }
    }

    fn fetch(&mut self, n: &str, top: Option<usize>) {
        match self.message(n) {
            Some((_, entry)) => {
                if top.is_none() {
                    self.outputs.push_back(Output::Seen(entry.id));
                }
                self.awaiting = Awaiting::Message { top };
                self.outputs.push_back(Output::Fetch(entry.id));
            }
            None => self.error("-ERR no such message"),
        }
    }

    fn quit(&mut self) {
        let gone: Vec<MessageId> = match &self.state {
            State::Transaction { maildrop, deleted } => maildrop
                .iter()
                .zip(deleted)
                .filter(|(_, d)| **d)
                .map(|(e, _)| e.id)
                .collect(),
            _ => Vec::new(),
        };
        if gone.is_empty() {
            self.reply("+OK mailjar POP3 signing off");
            return self.close();
        }
        self.awaiting = Awaiting::Deleted(gone.len());
        self.outputs.push_back(Output::Delete(gone));
    }

    /// The messages not marked deleted, with their numbers (from 1).
    fn live(&self) -> impl Iterator<Item = (usize, &Entry)> {
        let (maildrop, deleted): (&[Entry], &[bool]) = match &self.state {
            State::Transaction { maildrop, deleted } => (maildrop, deleted),
            _ => (&[], &[]),
        };
        maildrop
            .iter()
            .zip(deleted)
            .enumerate()
            .filter(|(_, (_, d))| !**d)
            .map(|(i, (e, _))| (i + 1, e))
    }

    /// The live message numbered `n`, if there is one.
    fn message(&self, n: &str) -> Option<(usize, Entry)> {
        let number: usize = n.parse().ok()?;
        self.live()
            .find(|(i, _)| *i == number)
            .map(|(i, e)| (i, *e))
    }

    /// Adds listing lines to `out` up to [`CHUNK`], and the final dot.
    fn list_some(&mut self, listing: Listing, out: &mut Vec<u8>) {
        use std::fmt::Write as _;
        let mut line = String::new();
        let mut next = listing.next;
        let start = out.len();
        let State::Transaction { maildrop, deleted } = &self.state else {
            self.listing = None;
            return;
        };
        while next < maildrop.len() && out.len() - start < CHUNK {
            if !deleted[next] {
                line.clear();
                let entry = maildrop[next];
                let _ = match listing.uidl {
                    true => write!(line, "{} {}\r\n", next + 1, entry.id),
                    false => write!(line, "{} {}\r\n", next + 1, entry.size),
                };
                out.extend_from_slice(line.as_bytes());
            }
            next += 1;
        }
        if next < maildrop.len() {
            self.listing = Some(Listing { next, ..listing });
        } else {
            out.extend_from_slice(b".\r\n");
            self.listing = None;
            self.run();
            out.append(&mut self.transmit);
        }
    }

    /// A failed command: its reply, and the end after too many in a row.
    fn error(&mut self, reply: &str) {
        self.reply(reply);
        self.failed();
    }

    fn failed(&mut self) {
        self.errors += 1;
        if self.errors >= MAX_ERRORS {
            self.reply("-ERR too many errors");
            self.close();
        }
    }

    fn reply(&mut self, line: &str) {
        if !line.starts_with("-ERR") {
            self.errors = 0;
        }
        self.transmit.extend_from_slice(line.as_bytes());
        self.transmit.extend_from_slice(b"\r\n");
    }

    fn close(&mut self) {
        self.state = State::Done;
        self.input.clear();
        self.outputs.push_back(Output::Close);
    }
}

/// Where TOP's text ends: after the header, its blank line and `lines` body lines.
fn top_end(raw: &[u8], lines: usize) -> usize {
    let mut at = 0;
    let mut in_header = true;
    let mut body_lines = 0;
    while at < raw.len() {
        if !in_header && body_lines == lines {
            break;
        }
        let end = memchr::memchr(b'\n', &raw[at..]).map_or(raw.len(), |i| at + i + 1);
        let line = &raw[at..end];
        if in_header {
            in_header = !(line == b"\r\n" || line == b"\n");
        } else {
            body_lines += 1;
        }
        at = end;
    }
    at
}

/// Adds the next piece of a retrieval to `out`, dot-stuffed, at most about
/// `max` bytes; true once it ended with its terminating line.
fn stuff(sending: &mut Sending, out: &mut Vec<u8>, max: usize) -> bool {
    let raw = sending.email.raw();
    let stop = sending.end.min(sending.at.saturating_add(max));
    while sending.at < stop {
        if sending.at_line_start && raw[sending.at] == b'.' {
            out.push(b'.');
        }
        let end =
            memchr::memchr(b'\n', &raw[sending.at..stop]).map_or(stop, |i| sending.at + i + 1);
        out.extend_from_slice(&raw[sending.at..end]);
        sending.at_line_start = raw[end - 1] == b'\n';
        sending.at = end;
    }
    if sending.at < sending.end {
        return false;
    }
    if !sending.at_line_start {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b".\r\n");
    true
}
