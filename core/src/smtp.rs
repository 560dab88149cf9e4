//! A sans-IO SMTP server session.
//!
//! [`Session`] is the whole server side of one SMTP connection as a state
//! machine. The host feeds it the bytes it reads with [`Session::receive`] and
//! writes out the [`Output::Reply`]s it gets back, in order; it stores each
//! [`Output::Message`] before writing the reply that follows it, so a message
//! is never acknowledged before it is safe. The session never reads a clock:
//! the host keeps the timers and, when one fires, calls [`Session::expire`]
//! with the [`Deadline`] that passed. [`Session::line_in_progress`] and
//! [`Session::message_in_progress`] tell it which deadlines run: one command
//! line must arrive within a time counted from its first byte, one message's
//! text within a time counted from the 354 or the first BDAT, and the idle
//! timer counts from the last read.
//!
//! Memory: what a session holds (message text and envelope paths) is asked of
//! a [`Budget`] before it grows, when the host feeds bytes with
//! [`Session::receive_within`]. A refused message is read to its end without
//! being kept and answered `452 4.3.1`; a refused MAIL or RCPT gets `452 4.3.1`
//! at once; a message acknowledged with 250 is always whole. Message text is
//! counted by the capacity it occupies, so the count is what it costs. A message
//! handed out stays counted until the host calls [`Session::settle`] after
//! storing it. [`Session::receive`] uses an unlimited budget.
//!
//! Feeding the same bytes in any chunking gives the same outputs.
//!
//! ```
//! use mailjar_core::smtp::{Config, Output, Session};
//!
//! let mut session = Session::new(Config::default());
//! assert_eq!(session.greeting().code, 220);
//! let outputs = session.receive(
//!     b"EHLO client\r\nMAIL FROM:<a@example.com>\r\nRCPT TO:<b@example.com>\r\n\
//!       DATA\r\nSubject: hi\r\n\r\nHello\r\n.\r\nQUIT\r\n",
//! );
//! let message = outputs.iter().find_map(|o| match o {
//!     Output::Message(m) => Some(m),
//!     _ => None,
//! });
//! assert_eq!(message.unwrap().raw, b"Subject: hi\r\n\r\nHello\r\n");
//! assert!(matches!(outputs.last(), Some(Output::Close)));
//! ```

mod auth;
mod budget;
mod faults;
mod path;
mod reply;
mod security;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

/// Limits and names a [`Session`] works with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The name the server gives itself in the greeting and the EHLO reply.
    pub hostname: String,
    /// The largest message accepted, in bytes after dot-unstuffing (552 above it).
    pub max_message_bytes: usize,
    /// The most recipients one message may have (452 above it).
    pub max_recipients: usize,
    /// The longest command line, in bytes without its CRLF (500 above it).
    pub max_line_bytes: usize,
    /// How many bad commands in a row close the connection with 421.
    pub max_errors: usize,
    /// STARTTLS offered, TLS or AUTH required, the credentials AUTH checks.
    pub security: Security,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            hostname: "mailjar".to_owned(),
            max_message_bytes: 25 * 1024 * 1024,
            max_recipients: 1000,
            max_line_bytes: 4096,
            max_errors: 20,
            security: Security::default(),
        }
    }
}

pub use budget::{Budget, Unlimited};
pub use path::MAX_PATH_OCTETS;
use path::{parse_path, refuse_mailbox, strip_prefix_ignore_case};
pub use reply::Reply;
use reply::{MAX_ECHOED_DOMAIN, printable, shown};
pub use security::{AuthInfo, Credentials, Security, SessionFacts, SmtpFacts, TlsInfo};

/// A timer of the host that can end a session (see [`Session::expire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// Nothing was read for too long.
    Idle,
    /// A command line did not end in time, counted from its first byte.
    Command,
    /// A message's text did not end in time, counted from the 354 or the first BDAT.
    Data,
}

/// The SMTP envelope of a message: what MAIL FROM and RCPT TO said.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Envelope {
    /// The reverse path without angle brackets; "" for the null sender `<>`.
    pub from: String,
    /// The forward paths without angle brackets, in the order given.
    pub to: Vec<String>,
}

/// A message the session accepted, to be stored before its 250 is written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Incoming {
    /// MAIL FROM and RCPT TO.
    pub envelope: Envelope,
    /// The message exactly as the client sent it, dot-unstuffed.
    pub raw: Vec<u8>,
    /// What the client said in HELO or EHLO, if it did.
    pub helo: Option<String>,
    /// What the session knew of its connection: remote address, TLS, AUTH.
    pub session: SessionFacts,
}

/// What the host must do after feeding bytes to a [`Session`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Write this reply to the client.
    Reply(Reply),
    /// Store this message; the reply that follows acknowledges it.
    Message(Incoming),
    /// Close the connection after writing the replies before this.
    Close,
    /// A fault rule fired (log it); for a delay, wait that long before going on.
    Fault(crate::faults::Fired),
    /// Write the replies before this, run the TLS handshake, then call
    /// [`Session::tls_started`]; input until then is dropped.
    StartTls,
}

/// How the session reads the bytes it is fed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Command lines, ended by LF (an optional CR before it is dropped).
    Command,
    /// A command line longer than the limit: dropped up to its LF.
    Overlong,
    /// The message text after DATA, up to CRLF.CRLF.
    Data(DataScan),
    /// `remaining` bytes of a BDAT chunk; `last` when it was BDAT ... LAST.
    /// `keep` is false when the chunk is consumed only to be discarded.
    Bdat {
        remaining: u64,
        last: bool,
        keep: bool,
    },
    /// Waiting for the client's answer to an AUTH challenge.
    Auth(AuthStep),
    /// STARTTLS answered: nothing is read until the host's handshake is done.
    StartingTls,
    /// The session is over; nothing more is read.
    Closed,
}

/// Where the DATA scanner stands relative to line starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DataScan {
    /// Just after CRLF (or at the start of the text).
    LineStart,
    /// Inside a line.
    Middle,
    /// Inside a line, just after a CR.
    Cr,
    /// A line that started with a dot; the dot is held back.
    Dot,
    /// A line that is a dot and a CR so far; both held back.
    DotCr,
}

/// Which AUTH answer the session waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AuthStep {
    /// AUTH PLAIN without an initial response: the credentials.
    Plain,
    /// AUTH LOGIN: the user name.
    LoginUser,
    /// AUTH LOGIN: the password.
    LoginPassword,
    /// AUTH CRAM-MD5: the user name and digest.
    CramMd5,
}

/// The mail transaction under way.
#[derive(Debug, Clone, Default)]
struct Transaction {
    /// Set by MAIL FROM; None when no transaction is open.
    from: Option<String>,
    to: Vec<String>,
    smtputf8: bool,
    /// The message text received so far (DATA or BDAT chunks).
    body: Vec<u8>,
    /// The text went over the size limit: it is being discarded.
    too_big: bool,
    /// BDAT chunks have been received for this transaction.
    chunking: bool,
    /// The budget refused room for the text: it is being discarded (452 at its end).
    over_budget: bool,
    /// The bytes the envelope paths hold, as counted against the budget.
    envelope_bytes: usize,
}

/// The server side of one SMTP connection, as a state machine.
///
/// See the [module documentation](self) for how a host drives it.
#[derive(Debug, Clone)]
pub struct Session {
    config: Config,
    mode: Mode,
    /// The partial command line carried over between calls to `receive`.
    line: Vec<u8>,
    helo: Option<String>,
    authenticated: bool,
    transaction: Transaction,
    errors_in_a_row: usize,
    /// The reply to a refused BDAT, written once its chunk has been read and dropped.
    pending_bdat_reply: Option<Reply>,
    /// Bytes of the messages handed out since the last [`Session::settle`].
    handed_out: usize,
    /// How many command lines have ended: names the line in progress.
    lines_ended: u64,
    /// How many message texts have begun: names the message in progress.
    messages_begun: u64,
    /// The fault rules this session asks at each stage, if any.
    faults: Option<crate::faults::FaultRules>,
    /// TLS, AUTH and the connection's facts.
    security: security::SecurityState,
}

impl Session {
    /// A session that has not yet greeted the client.
    pub fn new(config: Config) -> Session {
        Session {
            config,
            mode: Mode::Command,
            line: Vec::new(),
            helo: None,
            authenticated: false,
            transaction: Transaction::default(),
            errors_in_a_row: 0,
            pending_bdat_reply: None,
            handed_out: 0,
            lines_ended: 0,
            messages_begun: 0,
            faults: None,
            security: security::SecurityState::default(),
        }
    }

    /// The 220 greeting the host writes as soon as the connection opens.
    pub fn greeting(&self) -> Reply {
        Reply::new(220, format!("{} ESMTP mailjar ready", self.config.hostname))
    }

    /// The 421 the host writes when the client was idle too long; the session is closed after it.
    pub fn timeout(&mut self) -> Reply {
        self.expire(Deadline::Idle)
    }

    /// The 421 the host writes when one of its deadlines passed; the session is closed after it.
    pub fn expire(&mut self, deadline: Deadline) -> Reply {
        self.mode = Mode::Closed;
        self.transaction = Transaction::default();
        let text = match deadline {
            Deadline::Idle => "4.4.2 Idle timeout, closing connection",
            Deadline::Command => "4.4.2 Command line took too long, closing connection",
            Deadline::Data => "4.4.2 Message data took too long, closing connection",
        };
        Reply::new(421, text)
    }

    /// Some(n) while part of a command line (or an AUTH answer) has been read
    /// and not its end; `n` changes with every new line, so the host can start
    /// the line's deadline at its first byte.
    pub fn line_in_progress(&self) -> Option<u64> {
        match self.mode {
            Mode::Command | Mode::Auth(_) if !self.line.is_empty() => Some(self.lines_ended),
            Mode::Overlong => Some(self.lines_ended),
            _ => None,
        }
    }

    /// Some(n) while a message's text is being received (from the 354 or the
    /// first BDAT to the final reply); `n` changes with every message.
    pub fn message_in_progress(&self) -> Option<u64> {
        self.is_receiving_message().then_some(self.messages_begun)
    }

    /// The bytes the session holds now against its [`Budget`]: the text and
    /// envelope of the transaction under way, and the messages handed out since
    /// the last [`Session::settle`].
    pub fn held_bytes(&self) -> usize {
        let t = &self.transaction;
        t.body.capacity() + t.envelope_bytes + self.handed_out
    }

    /// Tells the budget what the session still holds, once the host has stored
    /// the messages it was handed: their room is released.
    pub fn settle(&mut self, budget: &mut dyn Budget) {
        self.handed_out = 0;
        budget.hold(self.held_bytes());
    }

    /// The 421 the host writes when it shuts down; the session is closed after it.
    pub fn shutdown(&mut self) -> Reply {
        self.mode = Mode::Closed;
        Reply::new(421, "4.3.2 Service shutting down, try again later")
    }

    /// Whether the session is in the middle of receiving a message (DATA or BDAT).
    pub fn is_receiving_message(&self) -> bool {
        matches!(self.mode, Mode::Data(_) | Mode::Bdat { .. }) || self.transaction.chunking
    }

    /// Whether the session has ended; a closed session ignores further input.
    pub fn is_closed(&self) -> bool {
        self.mode == Mode::Closed
    }

    /// Feeds bytes read from the client with no bound on what the session
    /// holds; returns what the host must do, in order.
    pub fn receive(&mut self, input: &[u8]) -> Vec<Output> {
        let out = self.receive_within(input, &mut Unlimited);
        self.handed_out = 0;
        out
    }

    /// Feeds bytes read from the client, asking `budget` for room before
    /// holding more; returns what the host must do, in order. The host stores
    /// the messages handed out (before writing the replies after them) and
    /// then calls [`Session::settle`].
    pub fn receive_within(&mut self, mut input: &[u8], budget: &mut dyn Budget) -> Vec<Output> {
        // The host stores what it was handed before it feeds more.
        self.handed_out = 0;
        let mut out = Vec::new();
        while !input.is_empty() {
            let used = match self.mode {
                Mode::Closed | Mode::StartingTls => break,
                Mode::Command | Mode::Auth(_) => self.receive_line_bytes(input, &mut out, budget),
                Mode::Overlong => match memchr::memchr(b'\n', input) {
                    Some(lf) => {
                        self.lines_ended += 1;
                        self.mode = Mode::Command;
                        let reply = Reply::new(500, "5.5.6 Line too long");
                        self.error(reply, &mut out);
                        lf + 1
                    }
                    None => input.len(),
                },
                Mode::Data(scan) => self.receive_data(scan, input, &mut out, budget),
                Mode::Bdat {
                    remaining,
                    last,
                    keep,
                } => {
                    let take =
                        usize::try_from(remaining).map_or(input.len(), |r| r.min(input.len()));
                    if keep {
                        self.append_body(&input[..take], budget);
                    }
                    let remaining = remaining - take as u64;
                    if remaining == 0 {
                        self.mode = Mode::Command;
                        self.finish_chunk(last, keep, &mut out);
                    } else {
                        self.mode = Mode::Bdat {
                            remaining,
                            last,
                            keep,
                        };
                    }
                    take
                }
            };
            input = &input[used..];
        }
        out
    }

    /// Collects command-line bytes; handles each complete line. Returns the bytes used.
    fn receive_line_bytes(
        &mut self,
        input: &[u8],
        out: &mut Vec<Output>,
        budget: &mut dyn Budget,
    ) -> usize {
        match memchr::memchr(b'\n', input) {
            Some(lf) => {
                self.lines_ended += 1;
                self.line.extend_from_slice(&input[..lf]);
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.len() > self.config.max_line_bytes {
                    self.mode = Mode::Command;
                    self.error(Reply::new(500, "5.5.6 Line too long"), out);
                } else {
                    self.handle_line(&line, out, budget);
                }
                line.clear();
                if self.line.is_empty() {
                    // Reuse the allocation for the next line.
                    self.line = line;
                }
                lf + 1
            }
            None => {
                self.line.extend_from_slice(input);
                // One more byte than the limit may be the CR of a line that is just short enough.
                if self.line.len() > self.config.max_line_bytes + 1 {
                    self.line.clear();
                    self.mode = Mode::Overlong;
                }
                input.len()
            }
        }
    }

    /// Scans message text after DATA. Returns the bytes used.
    fn receive_data(
        &mut self,
        mut scan: DataScan,
        input: &[u8],
        out: &mut Vec<Output>,
        budget: &mut dyn Budget,
    ) -> usize {
        let mut i = 0;
        let mut kept_from = 0;
        while i < input.len() {
            match scan {
                DataScan::Middle => match memchr::memchr(b'\r', &input[i..]) {
                    Some(cr) => {
                        i += cr + 1;
                        scan = DataScan::Cr;
                    }
                    None => i = input.len(),
                },
                DataScan::Cr => {
                    scan = match input[i] {
                        b'\n' => DataScan::LineStart,
                        b'\r' => DataScan::Cr,
                        _ => DataScan::Middle,
                    };
                    i += 1;
                }
                DataScan::LineStart => {
                    if input[i] == b'.' {
                        self.append_body(&input[kept_from..i], budget);
                        i += 1;
                        kept_from = i;
                        scan = DataScan::Dot;
                    } else {
                        scan = if input[i] == b'\r' {
                            DataScan::Cr
                        } else {
                            DataScan::Middle
                        };
                        i += 1;
                    }
                }
                DataScan::Dot => {
                    if input[i] == b'\r' {
                        i += 1;
                        kept_from = i;
                        scan = DataScan::DotCr;
                    } else {
                        // A dot-stuffed line: the held-back dot is dropped.
                        scan = DataScan::Middle;
                    }
                }
                DataScan::DotCr => {
                    if input[i] == b'\n' {
                        self.mode = Mode::Command;
                        self.finish_message(out);
                        return i + 1;
                    }
                    // The dot is dropped, the CR is text and this byte is read after it.
                    self.append_body(b"\r", budget);
                    scan = DataScan::Cr;
                }
            }
        }
        self.append_body(&input[kept_from..], budget);
        self.mode = Mode::Data(scan);
        input.len()
    }

    /// Keeps message text, growing the body only with room from the budget.
    fn append_body(&mut self, bytes: &[u8], budget: &mut dyn Budget) {
        let held = self.held_bytes();
        let max = self.config.max_message_bytes;
        let t = &mut self.transaction;
        if t.too_big || t.over_budget || bytes.is_empty() {
            return;
        }
        let len = t.body.len() + bytes.len();
        if len > max {
            t.too_big = true;
            t.body = Vec::new();
            return;
        }
        let capacity = t.body.capacity();
        if len > capacity {
            // Grows by half (not double) and never past the limit: the budget is
            // charged for the capacity, so slack is kept small. The capacity for a
            // length is always the same step of one sequence, however the text
            // was chunked, so the budget sees the same totals.
            let mut target = capacity.max(MIN_BODY_CAPACITY);
            while target < len {
                target += target / 2;
            }
            let target = target.min(max);
            if !budget.hold(held + (target - capacity)) {
                t.over_budget = true;
                t.body = Vec::new();
                return;
            }
            t.body.reserve_exact(target - t.body.len());
        }
        t.body.extend_from_slice(bytes);
    }

    /// The reply to a transaction, MAIL or RCPT the budget had no room for.
    fn no_room_reply() -> Reply {
        Reply::new(452, "4.3.1 Insufficient system storage")
    }

    /// DATA ended with CRLF.CRLF: hand out the message and acknowledge it, or refuse it.
    fn finish_message(&mut self, out: &mut Vec<Output>) {
        let t = std::mem::take(&mut self.transaction);
        if t.too_big {
            out.push(Output::Reply(self.too_big_reply()));
            return;
        }
        if t.over_budget {
            out.push(Output::Reply(Session::no_room_reply()));
            return;
        }
        self.deliver(t, out);
    }

    fn deliver(&mut self, mut t: Transaction, out: &mut Vec<Output>) {
        let fired = self.fault_for(crate::faults::Stage::Message, t.from.as_deref(), &t.to);
        if !self.go_on(fired, out) {
            return;
        }
        // Counted until the host settles, as the capacity it had.
        self.handed_out += t.body.capacity() + t.envelope_bytes;
        // Within the capacity: in place, and the store keeps no slack.
        t.body.shrink_to_fit();
        let size = t.body.len();
        out.push(Output::Message(Incoming {
            envelope: Envelope {
                from: t.from.unwrap_or_default(),
                to: t.to,
            },
            raw: t.body,
            helo: self.helo.clone(),
            session: self.security.facts.clone(),
        }));
        out.push(Output::Reply(Reply::new(
            250,
            format!("2.0.0 Message accepted ({size} bytes)"),
        )));
    }

    fn too_big_reply(&self) -> Reply {
        Reply::new(
            552,
            format!(
                "5.3.4 Message too big: the limit is {} bytes",
                self.config.max_message_bytes
            ),
        )
    }

    /// A BDAT chunk has been read in full.
    fn finish_chunk(&mut self, last: bool, keep: bool, out: &mut Vec<Output>) {
        if !keep {
            // The reply was decided when the BDAT command was read.
            if let Some(reply) = self.pending_bdat_reply.take() {
                self.error(reply, out);
            }
            return;
        }
        if self.transaction.too_big {
            self.transaction = Transaction::default();
            out.push(Output::Reply(self.too_big_reply()));
            return;
        }
        if self.transaction.over_budget {
            self.transaction = Transaction::default();
            out.push(Output::Reply(Session::no_room_reply()));
            return;
        }
        if last {
            let t = std::mem::take(&mut self.transaction);
            self.deliver(t, out);
        } else {
            let size = self.transaction.body.len();
            out.push(Output::Reply(Reply::new(
                250,
                format!("2.0.0 {size} bytes received so far"),
            )));
        }
    }
}

/// Command handling: one complete line at a time.
impl Session {
    fn handle_line(&mut self, line: &[u8], out: &mut Vec<Output>, budget: &mut dyn Budget) {
        if let Mode::Auth(step) = self.mode {
            self.mode = Mode::Command;
            self.auth_answer(step, line, out);
            return;
        }
        let Ok(line) = std::str::from_utf8(line) else {
            self.error(
                Reply::new(500, "5.5.2 Syntax error: the command is not valid UTF-8"),
                out,
            );
            return;
        };
        let (verb, args) = match line.find(' ') {
            Some(space) => (&line[..space], line[space + 1..].trim()),
            None => (line, ""),
        };
        match verb.to_ascii_uppercase().as_str() {
            "HELO" => self.helo(args, false, out),
            "EHLO" => self.helo(args, true, out),
            "MAIL" => self.mail(args, out, budget),
            "RCPT" => self.rcpt(args, out, budget),
            "DATA" => self.data(args, out),
            "BDAT" => self.bdat(args, out),
            "RSET" => {
                self.transaction = Transaction::default();
                self.ok(Reply::new(250, "2.0.0 OK"), out);
            }
            "NOOP" => self.ok(Reply::new(250, "2.0.0 OK"), out),
            "QUIT" => {
                out.push(Output::Reply(Reply::new(221, "2.0.0 Bye")));
                out.push(Output::Close);
                self.mode = Mode::Closed;
            }
            "VRFY" => self.ok(
                Reply::new(252, "2.5.0 Cannot verify the user, but will accept the message"),
                out,
            ),
            "HELP" => self.ok(
                Reply {
                    code: 214,
                    lines: vec![
                        "2.0.0 mailjar captures every message for tests".to_owned(),
                        "2.0.0 Commands: HELO EHLO MAIL RCPT DATA BDAT RSET NOOP QUIT VRFY HELP AUTH"
                            .to_owned(),
                        "2.0.0 End of HELP info".to_owned(),
                    ],
                },
                out,
            ),
            "AUTH" => self.auth(args, out),
            "STARTTLS" => self.starttls(args, out),
            "" => self.error(Reply::new(500, "5.5.2 Syntax error: empty command"), out),
            _ => {
                let shown = shown(verb);
                self.error(
                    Reply::new(502, format!("5.5.1 Command not recognised: {shown}")),
                    out,
                );
            }
        }
    }

    /// A reply to a command that was understood: the run of bad commands ends.
    fn ok(&mut self, reply: Reply, out: &mut Vec<Output>) {
        self.errors_in_a_row = 0;
        out.push(Output::Reply(reply));
    }

    /// A 334 AUTH challenge: not a success, so it does not forgive earlier
    /// failures (failed logins in a row still close the session).
    fn challenge(&mut self, reply: Reply, out: &mut Vec<Output>) {
        out.push(Output::Reply(reply));
    }

    /// A reply to a bad command; too many in a row close the session.
    fn error(&mut self, reply: Reply, out: &mut Vec<Output>) {
        out.push(Output::Reply(reply));
        self.errors_in_a_row += 1;
        if self.errors_in_a_row >= self.config.max_errors {
            out.push(Output::Reply(Reply::new(
                421,
                "4.7.0 Too many bad commands, closing connection",
            )));
            out.push(Output::Close);
            self.mode = Mode::Closed;
        }
    }

    fn helo(&mut self, args: &str, extended: bool, out: &mut Vec<Output>) {
        let Some(client) = args.split_whitespace().next() else {
            let verb = if extended { "EHLO" } else { "HELO" };
            self.error(
                Reply::new(501, format!("5.5.4 {verb} requires a domain or address")),
                out,
            );
            return;
        };
        let fired = self.fault_for(crate::faults::Stage::Helo, None, &[]);
        if !self.go_on(fired, out) {
            return;
        }
        self.helo = Some(client.to_owned());
        self.transaction = Transaction::default();
        // The argument is echoed only as printable text (no escape sequences).
        let greeting = format!(
            "{} greets {}",
            self.config.hostname,
            printable(client, MAX_ECHOED_DOMAIN)
        );
        let reply = if extended {
            let mut reply = Reply {
                code: 250,
                lines: vec![
                    greeting,
                    "PIPELINING".to_owned(),
                    format!("SIZE {}", self.config.max_message_bytes),
                    "8BITMIME".to_owned(),
                    "SMTPUTF8".to_owned(),
                    "ENHANCEDSTATUSCODES".to_owned(),
                    "CHUNKING".to_owned(),
                    self.auth_advert(),
                ],
            };
            if self.offers_starttls() {
                reply.lines.push("STARTTLS".to_owned());
            }
            reply
        } else {
            Reply::new(250, greeting)
        };
        self.ok(reply, out);
    }

    fn mail(&mut self, args: &str, out: &mut Vec<Output>, budget: &mut dyn Budget) {
        if let Some(reply) = self.mail_refused() {
            self.error(reply, out);
            return;
        }
        if self.transaction.from.is_some() {
            self.error(
                Reply::new(503, "5.5.1 Nested MAIL command: send RSET first"),
                out,
            );
            return;
        }
        let Some(rest) = strip_prefix_ignore_case(args, "FROM:") else {
            self.error(Reply::new(501, "5.5.4 Syntax: MAIL FROM:<address>"), out);
            return;
        };
        let (path, params) = match parse_path(rest) {
            Ok(parsed) => parsed,
            Err(why) => {
                self.error(
                    Reply::new(501, format!("5.1.7 Bad sender address: {why}")),
                    out,
                );
                return;
            }
        };
        let mut smtputf8 = false;
        for param in params.split_whitespace() {
            let (key, value) = match param.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (param, None),
            };
            match (key.to_ascii_uppercase().as_str(), value) {
                ("SIZE", Some(v)) => match v.parse::<u64>() {
                    Ok(size) if size > self.config.max_message_bytes as u64 => {
                        out.push(Output::Reply(self.too_big_reply()));
                        return;
                    }
                    Ok(_) => {}
                    Err(_) => {
                        self.error(Reply::new(501, "5.5.4 SIZE must be a number of bytes"), out);
                        return;
                    }
                },
                ("BODY", Some(v))
                    if v.eq_ignore_ascii_case("7BIT") || v.eq_ignore_ascii_case("8BITMIME") => {}
                ("BODY", _) => {
                    self.error(Reply::new(501, "5.5.4 BODY must be 7BIT or 8BITMIME"), out);
                    return;
                }
                ("SMTPUTF8", None) => smtputf8 = true,
                ("AUTH", Some(_)) => {}
                _ => {
                    let shown = shown(key);
                    self.error(
                        Reply::new(
                            555,
                            format!("5.5.4 Unsupported MAIL FROM parameter: {shown}"),
                        ),
                        out,
                    );
                    return;
                }
            }
        }
        if !path.is_empty()
            && let Some(reply) = refuse_mailbox(&path, smtputf8, "5.1.7 Bad sender address")
        {
            self.error(reply, out);
            return;
        }
        let fired = self.fault_for(crate::faults::Stage::Mail, Some(&path), &[]);
        if !self.go_on(fired, out) {
            return;
        }
        self.transaction = Transaction::default();
        let envelope_bytes = path.len();
        if !budget.hold(self.held_bytes() + envelope_bytes) {
            out.push(Output::Reply(Session::no_room_reply()));
            return;
        }
        self.transaction = Transaction {
            from: Some(path),
            smtputf8,
            envelope_bytes,
            ..Transaction::default()
        };
        self.ok(Reply::new(250, "2.1.0 Sender OK"), out);
    }

    fn rcpt(&mut self, args: &str, out: &mut Vec<Output>, budget: &mut dyn Budget) {
        if self.transaction.from.is_none() {
            self.error(Reply::new(503, "5.5.1 Send MAIL FROM first"), out);
            return;
        }
        let Some(rest) = strip_prefix_ignore_case(args, "TO:") else {
            self.error(Reply::new(501, "5.5.4 Syntax: RCPT TO:<address>"), out);
            return;
        };
        let (path, params) = match parse_path(rest) {
            Ok(parsed) => parsed,
            Err(why) => {
                self.error(
                    Reply::new(501, format!("5.1.3 Bad recipient address: {why}")),
                    out,
                );
                return;
            }
        };
        if let Some(param) = params.split_whitespace().next() {
            let key = param.split('=').next().unwrap_or(param);
            let shown = shown(key);
            self.error(
                Reply::new(555, format!("5.5.4 Unsupported RCPT TO parameter: {shown}")),
                out,
            );
            return;
        }
        if path.is_empty() {
            self.error(Reply::new(501, "5.1.3 Bad recipient address: empty"), out);
            return;
        }
        if !path.eq_ignore_ascii_case("postmaster")
            && let Some(reply) = refuse_mailbox(
                &path,
                self.transaction.smtputf8,
                "5.1.3 Bad recipient address",
            )
        {
            self.error(reply, out);
            return;
        }
        if self.transaction.to.len() >= self.config.max_recipients {
            out.push(Output::Reply(Reply::new(
                452,
                format!(
                    "4.5.3 Too many recipients: the limit is {}",
                    self.config.max_recipients
                ),
            )));
            return;
        }
        let (stage, from) = (crate::faults::Stage::Rcpt, self.transaction.from.as_deref());
        let fired = self.fault_for(stage, from, std::slice::from_ref(&path));
        if !self.go_on(fired, out) {
            return;
        }
        let bytes = path.len() + std::mem::size_of::<String>();
        if !budget.hold(self.held_bytes() + bytes) {
            out.push(Output::Reply(Session::no_room_reply()));
            return;
        }
        self.transaction.envelope_bytes += bytes;
        self.transaction.to.push(path);
        self.ok(Reply::new(250, "2.1.5 Recipient OK"), out);
    }

    /// Why a transaction cannot take message text now, if it cannot.
    fn transaction_not_ready(&self) -> Option<Reply> {
        if self.transaction.from.is_none() {
            Some(Reply::new(503, "5.5.1 Send MAIL FROM first"))
        } else if self.transaction.to.is_empty() {
            Some(Reply::new(503, "5.5.1 Send RCPT TO first"))
        } else {
            None
        }
    }

    fn data(&mut self, args: &str, out: &mut Vec<Output>) {
        if !args.is_empty() {
            self.error(Reply::new(501, "5.5.4 DATA takes no arguments"), out);
        } else if let Some(reply) = self.transaction_not_ready() {
            self.error(reply, out);
        } else if self.transaction.chunking {
            self.error(Reply::new(503, "5.5.1 DATA cannot follow BDAT"), out);
        } else if self.go_on(self.data_fault(), out) {
            self.mode = Mode::Data(DataScan::LineStart);
            self.messages_begun += 1;
            self.ok(Reply::new(354, "End data with <CR><LF>.<CR><LF>"), out);
        }
    }

    fn bdat(&mut self, args: &str, out: &mut Vec<Output>) {
        let mut words = args.split_whitespace();
        let size = words.next().and_then(|w| w.parse::<u64>().ok());
        let last = match words.next() {
            None => Some(false),
            Some(w) if w.eq_ignore_ascii_case("LAST") => Some(true),
            Some(_) => None,
        };
        let (Some(size), Some(last), None) = (size, last, words.next()) else {
            // Without a size the chunk cannot be skipped: what follows is read as commands.
            self.error(Reply::new(501, "5.5.4 Syntax: BDAT <size> [LAST]"), out);
            return;
        };
        let keep = match self.transaction_not_ready() {
            Some(reply) => {
                self.pending_bdat_reply = Some(reply);
                self.messages_begun += 1;
                false
            }
            None => {
                self.errors_in_a_row = 0;
                if !self.transaction.chunking {
                    self.messages_begun += 1;
                }
                let refused = (!self.transaction.chunking)
                    .then(|| self.bdat_fault(out))
                    .flatten();
                if self.is_closed() {
                    return;
                }
                if let Some(reply) = refused {
                    self.pending_bdat_reply = Some(reply);
                    false
                } else {
                    self.transaction.chunking = true;
                    true
                }
            }
        };
        if size == 0 {
            self.finish_chunk(last, keep, out);
        } else {
            self.mode = Mode::Bdat {
                remaining: size,
                last,
                keep,
            };
        }
    }

    fn auth(&mut self, args: &str, out: &mut Vec<Output>) {
        if self.authenticated {
            self.error(Reply::new(503, "5.5.1 Already authenticated"), out);
            return;
        }
        if self.transaction.from.is_some() {
            self.error(
                Reply::new(503, "5.5.1 AUTH is not allowed during a mail transaction"),
                out,
            );
            return;
        }
        let mut words = args.split_whitespace();
        let mechanism = words.next().unwrap_or("").to_ascii_uppercase();
        let initial = words.next();
        match (mechanism.as_str(), initial) {
            ("", _) => self.error(Reply::new(501, "5.5.4 Syntax: AUTH <mechanism>"), out),
            ("PLAIN", None) => {
                self.mode = Mode::Auth(AuthStep::Plain);
                self.challenge(Reply::new(334, ""), out);
            }
            ("PLAIN", Some(answer)) => self.auth_answer(AuthStep::Plain, answer.as_bytes(), out),
            ("LOGIN", None) => {
                self.mode = Mode::Auth(AuthStep::LoginUser);
                self.challenge(Reply::new(334, "VXNlcm5hbWU6"), out);
            }
            ("LOGIN", Some(answer)) => {
                self.auth_answer(AuthStep::LoginUser, answer.as_bytes(), out)
            }
            ("CRAM-MD5", None) if self.offers_cram_md5() => self.start_cram_md5(out),
            _ => self.error(
                Reply::new(
                    504,
                    "5.5.4 Unrecognised authentication type: use PLAIN or LOGIN",
                ),
                out,
            ),
        }
    }

    /// The client's answer to an AUTH challenge (or its initial response).
    fn auth_answer(&mut self, step: AuthStep, answer: &[u8], out: &mut Vec<Output>) {
        let answer = answer.trim_ascii();
        if answer == b"*" {
            self.error(Reply::new(501, "5.7.0 Authentication cancelled"), out);
            return;
        }
        // "=" is an empty initial response (RFC 4954).
        let decoded = match answer {
            b"=" => Vec::new(),
            _ => match BASE64.decode(answer) {
                Ok(decoded) => decoded,
                Err(_) => {
                    self.error(Reply::new(501, "5.5.2 Invalid base64 in AUTH answer"), out);
                    return;
                }
            },
        };
        self.auth_decoded(step, decoded, out);
    }
}

/// The least capacity a message body starts with.
const MIN_BODY_CAPACITY: usize = 256;

#[cfg(test)]
mod tests;
