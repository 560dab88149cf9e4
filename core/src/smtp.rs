//! A sans-IO SMTP server session.
//!
//! [`Session`] is the whole server side of one SMTP connection as a state
//! machine that reads no socket and no clock. Its calling contract follows
//! quinn-proto's `Connection`: the host hands it *inputs* with the `handle_*`
//! methods and then drains *one queue of outputs* with
//! [`Session::poll_output`], in order, until it gives `None`.
//!
//! - **Inputs.** [`Session::open`] when the connection opens (it queues the
//!   greeting); [`Session::handle_input`] with every chunk of bytes the client
//!   sends; [`Session::handle_stored`] with the outcome of storing a message;
//!   [`Session::handle_timeout`] when the deadline passed;
//!   [`Session::tls_started`] after a handshake; [`Session::handle_shutdown`]
//!   when the host stops.
//! - **Outputs.** [`Output::Reply`] is written to the client, [`Output::Close`]
//!   closes the connection after the replies before it, [`Output::StartTls`]
//!   asks for a handshake, [`Output::Fault`] is logged (and a delay waited
//!   before going on), [`Output::Message`] is stored.
//! - **Storage is an input.** After an [`Output::Message`], `poll_output`
//!   gives nothing more until the host calls [`Session::handle_stored`]: with
//!   `Ok` the session writes the 250, with `Err` a `452 4.3.1`. A message is
//!   so never acknowledged before it is safe, and the replies to commands
//!   pipelined after it come after its own, in order.
//! - **Time** is milliseconds on a monotonic scale the host chooses, passed
//!   in as `now_ms`. The session keeps its own deadlines from [`Config`]: the
//!   idle timer counts from the last input (a host that waited on its own, for
//!   a fault's delay, feeds no bytes to restart it), one command line must end
//!   within the command timeout of its first byte, one message's text within
//!   the data timeout of its 354 or first BDAT.
//!   [`Session::poll_timeout`] gives the earliest; at that time the host calls
//!   [`Session::handle_timeout`], which queues `421 4.4.2` and a close (a call
//!   before the deadline does nothing).
//! - **Memory.** What a session holds (message text and envelope paths) is
//!   asked of the [`Budget`] passed to `handle_input` before it grows. A
//!   refused message is read to its end without being kept and answered
//!   `452 4.3.1`; a refused MAIL or RCPT gets `452 4.3.1` at once; a message
//!   acknowledged with 250 is always whole. Message text is counted by the
//!   capacity it occupies. A message handed out stays counted until its
//!   `handle_stored`; [`Session::settle`] then tells the budget.
//! - **Faults.** At each stage the session asks the [`FaultCheck`] passed to
//!   `open` and `handle_input` (see [`FaultEvent`]).
//!
//! Feeding the same bytes in any chunking gives the same outputs.
//!
//! ```
//! use mailjar_core::smtp::{Config, NoFaults, Output, Session, Unlimited};
//!
//! let mut session = Session::new(Config::default());
//! session.open(0, &mut NoFaults);
//! session.handle_input(
//!     b"EHLO client\r\nMAIL FROM:<a@example.com>\r\nRCPT TO:<b@example.com>\r\n\
//!       DATA\r\nSubject: hi\r\n\r\nHello\r\n.\r\nQUIT\r\n",
//!     10,
//!     &mut Unlimited,
//!     &mut NoFaults,
//! );
//! let (mut wire, mut stored, mut closed) = (Vec::new(), Vec::new(), false);
//! while let Some(output) = session.poll_output() {
//!     match output {
//!         Output::Reply(reply) => reply.write_to(&mut wire),
//!         // Store it, then say so: the session writes the 250 (or a 452).
//!         Output::Message(message) => {
//!             stored.push(message.raw);
//!             session.handle_stored(Ok(()));
//!         }
//!         Output::Close => closed = true,
//!         Output::Fault(_) | Output::StartTls => {}
//!     }
//! }
//! assert_eq!(stored, [b"Subject: hi\r\n\r\nHello\r\n".to_vec()]);
//! let wire = String::from_utf8(wire).unwrap();
//! assert!(wire.starts_with("220 mailjar ESMTP mailjar ready\r\n"));
//! assert!(wire.ends_with("250 2.0.0 Message accepted (22 bytes)\r\n221 2.0.0 Bye\r\n"));
//! assert!(closed);
//!
//! // A client that sends nothing: the idle deadline passes.
//! let mut idle = Session::new(Config::default());
//! idle.open(1_000, &mut NoFaults);
//! let greeting = idle.poll_output();
//! assert!(matches!(greeting, Some(Output::Reply(r)) if r.code == 220));
//! let deadline = idle.poll_timeout().unwrap();
//! assert_eq!(deadline, 1_000 + Config::default().idle_timeout_ms);
//! idle.handle_timeout(deadline);
//! assert!(matches!(idle.poll_output(), Some(Output::Reply(r)) if r.code == 421));
//! assert_eq!(idle.poll_output(), Some(Output::Close));
//! ```

mod auth;
pub(crate) use auth::split_plain;
mod budget;
mod faults;
mod inboxes;
mod path;
mod reply;
mod security;
mod transcript;

use std::collections::VecDeque;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

/// Limits, names and timeouts a [`Session`] works with.
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
    /// How long the client may send nothing, in milliseconds, before 421.
    pub idle_timeout_ms: u64,
    /// How long one command line may take from its first byte, in milliseconds.
    pub command_timeout_ms: u64,
    /// How long one message's text may take from its 354 or first BDAT, in milliseconds.
    pub data_timeout_ms: u64,
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
            idle_timeout_ms: 5 * 60 * 1000,
            command_timeout_ms: 60 * 1000,
            data_timeout_ms: 10 * 60 * 1000,
        }
    }
}

pub use budget::{Budget, Unlimited};
pub use faults::{Action, FaultCheck, FaultEvent, Fired, NoFaults, Stage};
pub use inboxes::{InboxCheck, InboxLogin};
pub use path::MAX_PATH_OCTETS;
use path::{parse_path, refuse_mailbox, strip_prefix_ignore_case};
pub use reply::Reply;
use reply::{MAX_ECHOED_DOMAIN, printable, shown};
pub use security::{AuthInfo, Credentials, Security, SessionFacts, SmtpFacts, TlsInfo};
pub use transcript::{Direction, Line, MAX_TRANSCRIPT_BYTES, Transcript};

/// A deadline of the session (see [`Session::poll_timeout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deadline {
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
    /// The SMTP dialogue that delivered it (empty for a message that came another way).
    pub transcript: Transcript,
}

/// What the host must do, as [`Session::poll_output`] gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Write this reply to the client.
    Reply(Reply),
    /// Store this message, then call [`Session::handle_stored`]; nothing more
    /// comes out until then.
    Message(Incoming),
    /// Close the connection after writing the replies before this.
    Close,
    /// A fault rule fired (log it); for a delay, wait that long before going on.
    Fault(Fired),
    /// Write the replies before this, run the TLS handshake, then call
    /// [`Session::tls_started`]; input until then is dropped.
    StartTls,
}

/// One entry of the output queue.
#[derive(Debug, Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "almost every entry is an output: boxing them would cost an allocation each"
)]
enum Queued {
    Output(Output),
    /// The reply to the message handed out just before: 250 once the host
    /// says it is stored, 452 when it could not be; `held` is its budget charge.
    Stored {
        size: usize,
        held: usize,
    },
}

/// The outputs a session has queued for the host, and the dialogue so far
/// (each reply is recorded as it is queued).
#[derive(Debug, Clone, Default)]
struct Outputs {
    list: VecDeque<Queued>,
    transcript: transcript::Recorder,
}

impl Outputs {
    fn push(&mut self, output: Output) {
        if let Output::Reply(reply) = &output {
            self.transcript.reply(reply);
        }
        self.list.push_back(Queued::Output(output));
    }

    fn push_stored(&mut self, size: usize, held: usize) {
        self.list.push_back(Queued::Stored { size, held });
    }
}

/// The reply to a message stored, as [`Session::handle_stored`] queues it.
fn accepted_reply(size: usize) -> Reply {
    Reply::new(250, format!("2.0.0 Message accepted ({size} bytes)"))
}

/// What the host lends a session while it reads input.
struct Env<'a> {
    budget: &'a mut dyn Budget,
    faults: &'a mut dyn FaultCheck,
}

/// The line or message a deadline runs for (its sequence number) and when it began.
type Timer = Option<(u64, u64)>;

/// Keeps the timer of the line or message the session names, starting a new
/// one at `now_ms` when it names another, and none when it names none.
fn follow(timer: Timer, current: Option<u64>, now_ms: u64) -> Timer {
    match (timer, current) {
        (_, None) => None,
        (Some((seq, at)), Some(current)) if seq == current => Some((seq, at)),
        (_, Some(current)) => Some((current, now_ms)),
    }
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
    /// The partial command line carried over between inputs.
    line: Vec<u8>,
    helo: Option<String>,
    authenticated: bool,
    transaction: Transaction,
    errors_in_a_row: usize,
    /// The reply to a refused BDAT, written once its chunk has been read and dropped.
    pending_bdat_reply: Option<Reply>,
    /// Bytes of the messages handed out and not yet reported stored.
    handed_out: usize,
    /// How many command lines have ended: names the line in progress.
    lines_ended: u64,
    /// How many message texts have begun: names the message in progress.
    messages_begun: u64,
    /// What the host has yet to do, in order.
    queue: Outputs,
    /// When the last input came: the idle timer counts from it.
    idle_since: u64,
    /// The line in progress and when its first byte came.
    line_timer: Timer,
    /// The message in progress and when its 354 or first BDAT came.
    data_timer: Timer,
    /// TLS, AUTH and the connection's facts.
    security: security::SecurityState,
}

impl Session {
    /// A session that has not yet greeted the client (see [`Session::open`]).
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
            queue: Outputs::default(),
            idle_since: 0,
            line_timer: None,
            data_timer: None,
            security: security::SecurityState::default(),
        }
    }

    /// The 220 greeting, which [`Session::open`] queues unless a fault replaces it.
    pub fn greeting(&self) -> Reply {
        Reply::new(220, format!("{} ESMTP mailjar ready", self.config.hostname))
    }

    /// The next thing the host must do; None when there is nothing, or while a
    /// message handed out waits for [`Session::handle_stored`].
    pub fn poll_output(&mut self) -> Option<Output> {
        if let Queued::Stored { .. } = self.queue.list.front()? {
            return None;
        }
        match self.queue.list.pop_front() {
            Some(Queued::Output(output)) => Some(output),
            _ => None,
        }
    }

    /// The outcome of storing the message last handed out as
    /// [`Output::Message`]: `Ok` queues its 250, `Err` a `452 4.3.1` (the
    /// reason stays with the host, which logs it; the client gets the
    /// standard text). Its room is released at the next [`Session::settle`].
    pub fn handle_stored(&mut self, outcome: Result<(), String>) {
        let refused = Reply::new(
            452,
            "4.3.1 Insufficient system storage: the message could not be written to disk",
        );
        self.answer_stored(outcome.map_err(|_| refused));
    }

    /// The message last handed out as [`Output::Message`] could not be
    /// stored because the storage it goes to is unreachable (a database
    /// shared by several nodes): `451 4.3.0`, try again later.
    pub fn handle_unavailable(&mut self) {
        self.answer_stored(Err(Reply::new(
            451,
            "4.3.0 Mail system temporarily unavailable: the message could not be stored, try again later",
        )));
    }

    /// Queues the 250 of the stored message, or `refused`.
    fn answer_stored(&mut self, outcome: Result<(), Reply>) {
        let slot = self
            .queue
            .list
            .iter_mut()
            .find(|q| matches!(q, Queued::Stored { .. }));
        let Some(slot) = slot else {
            return;
        };
        let Queued::Stored { size, held } = *slot else {
            return;
        };
        self.handed_out = self.handed_out.saturating_sub(held);
        let reply = match outcome {
            Ok(()) => accepted_reply(size),
            Err(refused) => refused,
        };
        *slot = Queued::Output(Output::Reply(reply));
    }

    /// The time (in the host's milliseconds) at which [`Session::handle_timeout`]
    /// must be called if no input comes first; None once the session is closed
    /// or while it waits for a TLS handshake (the host times that itself).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.next_deadline().map(|(at, _)| at)
    }

    /// The earliest deadline and which it is; on a tie the narrower one names it.
    fn next_deadline(&self) -> Option<(u64, Deadline)> {
        if matches!(self.mode, Mode::Closed | Mode::StartingTls) {
            return None;
        }
        let c = &self.config;
        let mut next = (
            self.idle_since.saturating_add(c.idle_timeout_ms),
            Deadline::Idle,
        );
        for (timer, limit, which) in [
            (self.line_timer, c.command_timeout_ms, Deadline::Command),
            (self.data_timer, c.data_timeout_ms, Deadline::Data),
        ] {
            if let Some((_, started)) = timer
                && started.saturating_add(limit) <= next.0
            {
                next = (started.saturating_add(limit), which);
            }
        }
        Some(next)
    }

    /// The time is `now_ms`: when a deadline has passed, queues its `421 4.4.2`
    /// and a close; before that it does nothing.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        let Some((at, which)) = self.next_deadline() else {
            return;
        };
        if now_ms < at {
            return;
        }
        let text = match which {
            Deadline::Idle => "4.4.2 Idle timeout, closing connection",
            Deadline::Command => "4.4.2 Command line took too long, closing connection",
            Deadline::Data => "4.4.2 Message data took too long, closing connection",
        };
        let mut out = std::mem::take(&mut self.queue);
        out.transcript.at(now_ms);
        out.push(Output::Reply(Reply::new(421, text)));
        self.close_now(&mut out);
        self.queue = out;
    }

    /// The host shuts down: queues the 421 and a close.
    pub fn handle_shutdown(&mut self) {
        let mut out = std::mem::take(&mut self.queue);
        out.push(Output::Reply(Reply::new(
            421,
            "4.3.2 Service shutting down, try again later",
        )));
        self.close_now(&mut out);
        self.queue = out;
    }

    /// Some(n) while part of a command line (or an AUTH answer) has been read
    /// and not its end; `n` changes with every new line.
    fn line_in_progress(&self) -> Option<u64> {
        match self.mode {
            Mode::Command | Mode::Auth(_) if !self.line.is_empty() => Some(self.lines_ended),
            Mode::Overlong => Some(self.lines_ended),
            _ => None,
        }
    }

    /// Some(n) while a message's text is being received (from the 354 or the
    /// first BDAT to the final reply); `n` changes with every message.
    fn message_in_progress(&self) -> Option<u64> {
        self.is_receiving_message().then_some(self.messages_begun)
    }

    /// The bytes the session holds now against its [`Budget`]: the text and
    /// envelope of the transaction under way, and the messages handed out
    /// and not yet reported stored.
    pub fn held_bytes(&self) -> usize {
        let t = &self.transaction;
        t.body.capacity() + t.envelope_bytes + self.handed_out
    }

    /// Tells the budget what the session holds now, once the host has
    /// reported the messages it was handed stored: their room is released.
    pub fn settle(&mut self, budget: &mut dyn Budget) {
        budget.hold(self.held_bytes());
    }

    /// Whether the session is in the middle of receiving a message (DATA or BDAT).
    pub fn is_receiving_message(&self) -> bool {
        matches!(self.mode, Mode::Data(_) | Mode::Bdat { .. }) || self.transaction.chunking
    }

    /// Whether the session has ended; a closed session ignores further input.
    pub fn is_closed(&self) -> bool {
        self.mode == Mode::Closed
    }

    /// Bytes read from the client at `now_ms`: the session asks `budget` for
    /// room before it holds more and `faults` at each stage, and queues what
    /// the host must do (drain it with [`Session::poll_output`]). Any input,
    /// even none, restarts the idle timer.
    pub fn handle_input(
        &mut self,
        input: &[u8],
        now_ms: u64,
        budget: &mut dyn Budget,
        faults: &mut dyn FaultCheck,
    ) {
        self.idle_since = now_ms;
        let mut out = std::mem::take(&mut self.queue);
        out.transcript.at(now_ms);
        self.consume(input, &mut out, &mut Env { budget, faults });
        self.queue = out;
        self.line_timer = follow(self.line_timer, self.line_in_progress(), now_ms);
        self.data_timer = follow(self.data_timer, self.message_in_progress(), now_ms);
    }

    /// Reads `input` in the current mode, mode after mode.
    fn consume(&mut self, mut input: &[u8], out: &mut Outputs, env: &mut Env<'_>) {
        while !input.is_empty() {
            let used = match self.mode {
                Mode::Closed | Mode::StartingTls => break,
                Mode::Command | Mode::Auth(_) => self.receive_line_bytes(input, out, env),
                Mode::Overlong => match memchr::memchr(b'\n', input) {
                    Some(lf) => {
                        self.lines_ended += 1;
                        self.mode = Mode::Command;
                        out.transcript.overlong();
                        let reply = Reply::new(500, "5.5.6 Line too long");
                        self.error(reply, out);
                        lf + 1
                    }
                    None => input.len(),
                },
                Mode::Data(scan) => self.receive_data(scan, input, out, env),
                Mode::Bdat {
                    remaining,
                    last,
                    keep,
                } => self.receive_chunk(input, remaining, last, keep, out, env),
            };
            input = &input[used..];
        }
    }

    /// Reads BDAT chunk bytes. Returns the bytes used.
    fn receive_chunk(
        &mut self,
        input: &[u8],
        remaining: u64,
        last: bool,
        keep: bool,
        out: &mut Outputs,
        env: &mut Env<'_>,
    ) -> usize {
        let take = usize::try_from(remaining).map_or(input.len(), |r| r.min(input.len()));
        out.transcript.text(take);
        if keep {
            self.append_body(&input[..take], env);
        }
        let remaining = remaining - take as u64;
        if remaining == 0 {
            self.mode = Mode::Command;
            out.transcript.text_end();
            self.finish_chunk(last, keep, out, env);
        } else {
            self.mode = Mode::Bdat {
                remaining,
                last,
                keep,
            };
        }
        take
    }
    /// Collects command-line bytes; handles each complete line. Returns the bytes used.
    fn receive_line_bytes(&mut self, input: &[u8], out: &mut Outputs, env: &mut Env<'_>) -> usize {
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
                    out.transcript.overlong();
                    self.error(Reply::new(500, "5.5.6 Line too long"), out);
                } else {
                    let auth_answer = matches!(self.mode, Mode::Auth(_));
                    out.transcript.client(&line, auth_answer);
                    self.handle_line(&line, out, env);
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
        out: &mut Outputs,
        env: &mut Env<'_>,
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
                        self.append_body(&input[kept_from..i], env);
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
                        out.transcript.text(i + 1);
                        out.transcript.text_end();
                        self.finish_message(out, env);
                        return i + 1;
                    }
                    // The dot is dropped, the CR is text and this byte is read after it.
                    self.append_body(b"\r", env);
                    scan = DataScan::Cr;
                }
            }
        }
        self.append_body(&input[kept_from..], env);
        self.mode = Mode::Data(scan);
        out.transcript.text(input.len());
        input.len()
    }

    /// Keeps message text, growing the body only with room from the budget.
    fn append_body(&mut self, bytes: &[u8], env: &mut Env<'_>) {
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
            if !env.budget.hold(held + (target - capacity)) {
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
    fn finish_message(&mut self, out: &mut Outputs, env: &mut Env<'_>) {
        let t = std::mem::take(&mut self.transaction);
        if t.too_big {
            out.push(Output::Reply(self.too_big_reply()));
            return;
        }
        if t.over_budget {
            out.push(Output::Reply(Session::no_room_reply()));
            return;
        }
        self.deliver(t, out, env);
    }

    fn deliver(&mut self, mut t: Transaction, out: &mut Outputs, env: &mut Env<'_>) {
        let fired = self.fault_for(env.faults, Stage::Message, t.from.as_deref(), &t.to);
        if !self.go_on(fired, out) {
            return;
        }
        // Counted until the host says it is stored, as the capacity it had.
        let held = t.body.capacity() + t.envelope_bytes;
        self.handed_out += held;
        // Within the capacity: in place, and the store keeps no slack.
        t.body.shrink_to_fit();
        let size = t.body.len();
        let transcript = out.transcript.take(&accepted_reply(size));
        out.push(Output::Message(Incoming {
            envelope: Envelope {
                from: t.from.unwrap_or_default(),
                to: t.to,
            },
            raw: t.body,
            helo: self.helo.clone(),
            session: self.security.facts.clone(),
            transcript,
        }));
        out.push_stored(size, held);
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
    fn finish_chunk(&mut self, last: bool, keep: bool, out: &mut Outputs, env: &mut Env<'_>) {
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
            self.deliver(t, out, env);
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
    fn handle_line(&mut self, line: &[u8], out: &mut Outputs, env: &mut Env<'_>) {
        if let Mode::Auth(step) = self.mode {
            self.mode = Mode::Command;
            self.auth_answer(step, line, out, env.faults);
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
            "HELO" => self.helo(args, false, out, env),
            "EHLO" => self.helo(args, true, out, env),
            "MAIL" => self.mail(args, out, env),
            "RCPT" => self.rcpt(args, out, env),
            "DATA" => self.data(args, out, env),
            "BDAT" => self.bdat(args, out, env),
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
            "AUTH" => self.auth(args, out, env.faults),
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
    fn ok(&mut self, reply: Reply, out: &mut Outputs) {
        self.errors_in_a_row = 0;
        out.push(Output::Reply(reply));
    }

    /// A 334 AUTH challenge: not a success, so it does not forgive earlier
    /// failures (failed logins in a row still close the session).
    fn challenge(&mut self, reply: Reply, out: &mut Outputs) {
        out.push(Output::Reply(reply));
    }

    /// A reply to a bad command; too many in a row close the session.
    fn error(&mut self, reply: Reply, out: &mut Outputs) {
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

    fn helo(&mut self, args: &str, extended: bool, out: &mut Outputs, env: &mut Env<'_>) {
        let Some(client) = args.split_whitespace().next() else {
            let verb = if extended { "EHLO" } else { "HELO" };
            self.error(
                Reply::new(501, format!("5.5.4 {verb} requires a domain or address")),
                out,
            );
            return;
        };
        let fired = self.fault_for(env.faults, Stage::Helo, None, &[]);
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

    fn mail(&mut self, args: &str, out: &mut Outputs, env: &mut Env<'_>) {
        out.transcript.mail();
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
        let smtputf8 = match self.mail_params(params) {
            Ok(smtputf8) => smtputf8,
            Err((reply, true)) => return self.error(reply, out),
            Err((reply, false)) => return out.push(Output::Reply(reply)),
        };
        if !path.is_empty()
            && let Some(reply) = refuse_mailbox(&path, smtputf8, "5.1.7 Bad sender address")
        {
            self.error(reply, out);
            return;
        }
        let fired = self.fault_for(env.faults, Stage::Mail, Some(&path), &[]);
        if !self.go_on(fired, out) {
            return;
        }
        self.transaction = Transaction::default();
        let envelope_bytes = path.len();
        if !env.budget.hold(self.held_bytes() + envelope_bytes) {
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

    /// The MAIL FROM parameters: whether SMTPUTF8 was given, or the reply
    /// refusing them and whether it counts as a bad command.
    fn mail_params(&self, params: &str) -> Result<bool, (Reply, bool)> {
        let mut smtputf8 = false;
        for param in params.split_whitespace() {
            let (key, value) = match param.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (param, None),
            };
            match (key.to_ascii_uppercase().as_str(), value) {
                ("SIZE", Some(v)) => match v.parse::<u64>() {
                    Ok(size) if size > self.config.max_message_bytes as u64 => {
                        return Err((self.too_big_reply(), false));
                    }
                    Ok(_) => {}
                    Err(_) => {
                        return Err((
                            Reply::new(501, "5.5.4 SIZE must be a number of bytes"),
                            true,
                        ));
                    }
                },
                ("BODY", Some(v))
                    if v.eq_ignore_ascii_case("7BIT") || v.eq_ignore_ascii_case("8BITMIME") => {}
                ("BODY", _) => {
                    return Err((Reply::new(501, "5.5.4 BODY must be 7BIT or 8BITMIME"), true));
                }
                ("SMTPUTF8", None) => smtputf8 = true,
                ("AUTH", Some(_)) => {}
                _ => {
                    let shown = shown(key);
                    let text = format!("5.5.4 Unsupported MAIL FROM parameter: {shown}");
                    return Err((Reply::new(555, text), true));
                }
            }
        }
        Ok(smtputf8)
    }

    fn rcpt(&mut self, args: &str, out: &mut Outputs, env: &mut Env<'_>) {
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
        if !self.takes_recipient(env.faults.inboxes(), &path) {
            out.push(Output::Reply(inboxes::unrouted()));
            return;
        }
        let from = self.transaction.from.as_deref();
        let fired = self.fault_for(env.faults, Stage::Rcpt, from, std::slice::from_ref(&path));
        if !self.go_on(fired, out) {
            return;
        }
        let bytes = path.len() + std::mem::size_of::<String>();
        if !env.budget.hold(self.held_bytes() + bytes) {
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

    fn data(&mut self, args: &str, out: &mut Outputs, env: &mut Env<'_>) {
        if !args.is_empty() {
            self.error(Reply::new(501, "5.5.4 DATA takes no arguments"), out);
        } else if let Some(reply) = self.transaction_not_ready() {
            self.error(reply, out);
        } else if self.transaction.chunking {
            self.error(Reply::new(503, "5.5.1 DATA cannot follow BDAT"), out);
        } else if self.go_on(self.data_fault(env.faults), out) {
            self.mode = Mode::Data(DataScan::LineStart);
            self.messages_begun += 1;
            self.ok(Reply::new(354, "End data with <CR><LF>.<CR><LF>"), out);
        }
    }

    fn bdat(&mut self, args: &str, out: &mut Outputs, env: &mut Env<'_>) {
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
                    .then(|| self.bdat_fault(out, env.faults))
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
            self.finish_chunk(last, keep, out, env);
        } else {
            self.mode = Mode::Bdat {
                remaining: size,
                last,
                keep,
            };
        }
    }

    fn auth(&mut self, args: &str, out: &mut Outputs, host: &mut dyn FaultCheck) {
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
            ("PLAIN", Some(answer)) => {
                self.auth_answer(AuthStep::Plain, answer.as_bytes(), out, host)
            }
            ("LOGIN", None) => {
                self.mode = Mode::Auth(AuthStep::LoginUser);
                self.challenge(Reply::new(334, "VXNlcm5hbWU6"), out);
            }
            ("LOGIN", Some(answer)) => {
                self.auth_answer(AuthStep::LoginUser, answer.as_bytes(), out, host)
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
    fn auth_answer(
        &mut self,
        step: AuthStep,
        answer: &[u8],
        out: &mut Outputs,
        host: &mut dyn FaultCheck,
    ) {
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
        self.auth_decoded(step, decoded, out, host);
    }
}

/// The least capacity a message body starts with.
const MIN_BODY_CAPACITY: usize = 256;

#[cfg(test)]
mod tests;
