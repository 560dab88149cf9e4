//! The session: what it reads (commands, AUTHENTICATE's response, IDLE's
//! DONE), what it waits for from the host, and the public face the hosts
//! drive. The commands themselves are in [`super::commands`], the FETCH,
//! STORE and SEARCH work that spans several writes in [`jobs`].

mod jobs;

use std::collections::VecDeque;
use std::sync::Arc;

use imap_codec::encode::Encoder;
use imap_codec::fragmentizer::{FragmentInfo, Fragmentizer, LiteralAnnouncement};
use imap_codec::imap_types::IntoStatic as _;
use imap_codec::imap_types::auth::AuthenticateData;
use imap_codec::imap_types::core::{LiteralMode, Tag, Text};
use imap_codec::imap_types::response::{
    Code, CommandContinuationRequest, Data, Greeting, Response, Status, StatusBody, StatusKind,
    Tagged,
};
use imap_codec::{
    AuthenticateDataCodec, CommandCodec, GreetingCodec, IdleDoneCodec, ResponseCodec,
};

use super::mailbox::Mailbox;
use super::{CHUNK, Config, Entry, Output};
use crate::email::Email;
use crate::id::MessageId;
use crate::input::{Input, TooLong};
pub(crate) use jobs::Job;

/// Commands in a row that fail before the session closes the connection.
const MAX_ERRORS: usize = 20;

/// Bytes handed to the fragmentizer at once (its buffer holds at most a
/// command and this).
const FEED: usize = 4096;

/// RFC 3501's states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    NotAuthenticated,
    Authenticated,
    Selected { read_only: bool },
    Logout,
}

/// What the next complete message from the client is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reading {
    Command,
    /// The response to AUTHENTICATE PLAIN's empty challenge.
    AuthenticateData(Tag<'static>),
    /// IDLE: only DONE.
    IdleDone(Tag<'static>),
}

/// What the session waits for before it reads on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Awaiting {
    Nothing,
    Login(Tag<'static>),
    /// A message for the job in progress.
    Message,
    /// The deletions of EXPUNGE (`close` false) or CLOSE.
    Deleted {
        tag: Tag<'static>,
        ids: Vec<MessageId>,
        close: bool,
        uid: bool,
    },
    Tls,
}

/// One IMAP connection; see the [module documentation](super).
#[derive(Debug)]
pub struct Session {
    pub(crate) config: Config,
    pub(crate) state: State,
    pub(crate) reading: Reading,
    pub(crate) awaiting: Awaiting,
    pub(crate) mailbox: Mailbox,
    pub(crate) job: Option<Job>,
    pub(crate) tls: bool,
    fragmentizer: Fragmentizer,
    /// Bytes read and not yet handed to the fragmentizer.
    input: Input,
    errors: usize,
    pub(crate) transmit: Vec<u8>,
    pub(crate) outputs: VecDeque<Output>,
}

impl Session {
    /// A session whose greeting is ready to transmit; `now_ms` starts its idle timer.
    pub fn new(config: Config, now_ms: u64) -> Session {
        let fragmentizer = Fragmentizer::new(config.max_command_bytes);
        let input = Input::new(config.idle_timeout_ms, now_ms);
        let mut session = Session {
            config,
            state: State::NotAuthenticated,
            reading: Reading::Command,
            awaiting: Awaiting::Nothing,
            mailbox: Mailbox::default(),
            job: None,
            tls: false,
            fragmentizer,
            input,
            errors: 0,
            transmit: Vec::new(),
            outputs: VecDeque::new(),
        };
        let code = Some(Code::Capability(session.capabilities()));
        if let Ok(greeting) = Greeting::ok(code, "mailjar IMAP4rev1 ready") {
            let bytes = GreetingCodec::default().encode(&greeting).dump();
            session.transmit.extend_from_slice(&bytes);
        }
        session
    }

    /// The connection is under TLS from the start (an implicit-TLS port).
    pub fn set_tls(&mut self) {
        self.tls = true;
    }

    /// Bytes the client sent.
    pub fn handle_input(&mut self, bytes: &[u8], now_ms: u64) {
        if self.state == State::Logout {
            return;
        }
        self.input.push(bytes, now_ms);
        self.run();
    }

    /// The answer to [`Output::Login`]: the mailbox (in UID order), or None
    /// when the credentials are wrong.
    pub fn handle_login(&mut self, mailbox: Option<Vec<Entry>>) {
        let Awaiting::Login(tag) = std::mem::replace(&mut self.awaiting, Awaiting::Nothing) else {
            return;
        };
        match mailbox {
            Some(entries) => {
                self.mailbox = Mailbox::new(entries);
                self.state = State::Authenticated;
                let code = Some(Code::Capability(self.capabilities()));
                self.tagged(StatusKind::Ok, tag, code, "logged in");
            }
            None => {
                self.tagged(StatusKind::No, tag, None, "invalid user name or password");
                self.failed();
            }
        }
        self.run();
    }

    /// The answer to [`Output::Message`]: the message, or None when it has
    /// left the store.
    pub fn handle_message(&mut self, email: Option<Arc<Email>>) {
        if self.awaiting != Awaiting::Message {
            return;
        }
        self.awaiting = Awaiting::Nothing;
        if let Some(mut job) = self.job.take() {
            job.message(self, email.as_deref());
            self.job = Some(job);
        }
    }

    /// The answer to [`Output::Delete`]: whether the store removed them all.
    pub fn handle_deleted(&mut self, ok: bool) {
        let Awaiting::Deleted { .. } = self.awaiting else {
            return;
        };
        let Awaiting::Deleted {
            tag,
            ids,
            close,
            uid,
        } = std::mem::replace(&mut self.awaiting, Awaiting::Nothing)
        else {
            return;
        };
        self.deleted(tag, &ids, close, uid, ok);
        self.run();
    }

    /// New mail in the store (in UID order); the client hears of it as
    /// `EXISTS` when IMAP allows (at once while IDLE).
    pub fn handle_new_mail(&mut self, entries: Vec<Entry>) {
        self.mailbox.arrive(entries);
        self.tell_if_idle();
    }

    /// Messages removed from the store; the client hears of them as `EXPUNGE`.
    pub fn handle_removed(&mut self, ids: Vec<MessageId>) {
        self.mailbox.remove(ids);
        self.tell_if_idle();
    }

    /// The ids of the messages the session knows of (told or not yet told
    /// to the client), in the order they arrived: a host compares them with
    /// the store to find what left it.
    pub fn known_ids(&self) -> impl Iterator<Item = MessageId> + '_ {
        self.mailbox.known_ids()
    }

    /// Whether a login opened a mailbox (new mail concerns the session).
    pub fn logged_in(&self) -> bool {
        matches!(self.state, State::Authenticated | State::Selected { .. })
    }

    /// Another reader changed a message's seen flag; the client hears of it
    /// as `* N FETCH (FLAGS (...))` when IMAP allows (at once while IDLE).
    pub fn handle_seen(&mut self, id: MessageId, seen: bool) {
        self.mailbox.set_seen(id, seen);
        self.tell_if_idle();
    }

    /// The TLS handshake of STARTTLS finished: the session goes on under TLS.
    pub fn tls_started(&mut self) {
        if self.awaiting == Awaiting::Tls {
            self.awaiting = Awaiting::Nothing;
            self.tls = true;
            self.run();
        }
    }

    /// When [`Session::handle_timeout`] is due, in the host's milliseconds.
    pub fn poll_timeout(&self) -> Option<u64> {
        (self.state != State::Logout).then(|| self.input.idle_until())
    }

    /// Time has passed: past the idle timeout the session ends.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        if self.poll_timeout().is_some_and(|due| now_ms >= due) {
            self.bye("autologout: idle for too long");
            self.close();
        }
    }

    /// Moves the next bytes to write into `out` (about [`CHUNK`], or one
    /// message's FETCH response); false when there is nothing to write.
    pub fn poll_transmit(&mut self, out: &mut Vec<u8>) -> bool {
        let before = out.len();
        out.append(&mut self.transmit);
        // An idle session keeps no large buffer (a FETCH response grew it).
        if self.transmit.capacity() > FEED {
            self.transmit = Vec::new();
        }
        while out.len() - before < CHUNK && self.awaiting == Awaiting::Nothing {
            let Some(mut job) = self.job.take() else {
                break;
            };
            if job.step(self) {
                self.job = Some(job);
            } else {
                self.run();
            }
            out.append(&mut self.transmit);
        }
        out.len() > before
    }

    /// The next request for the host, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Reads complete client messages while nothing is awaited or in progress.
    pub(crate) fn run(&mut self) {
        while self.awaiting == Awaiting::Nothing
            && self.job.is_none()
            && self.state != State::Logout
        {
            let Some(fragment) = self.fragmentizer.progress() else {
                let bound = self.config.max_command_bytes as usize + FEED;
                match self.input.chunk(FEED, bound) {
                    None => return,
                    Some(Ok(chunk)) => self.fragmentizer.enqueue_bytes(&chunk),
                    Some(Err(TooLong)) => {
                        self.bye("line too long");
                        self.close();
                    }
                }
                continue;
            };
            self.input.framed();
            if let FragmentInfo::Line {
                announcement: Some(announcement),
                ..
            } = fragment
            {
                self.literal(announcement);
                continue;
            }
            if self.fragmentizer.is_message_complete() {
                self.message();
            }
        }
    }

    /// A literal is announced: a synchronising one is accepted with `+` or
    /// refused with `BAD` (and skipped) when it would make the command too big.
    fn literal(&mut self, announcement: LiteralAnnouncement) {
        let size = self.fragmentizer.message_bytes().len() as u64 + u64::from(announcement.length);
        let fits = size <= u64::from(self.config.max_command_bytes);
        match (announcement.mode, fits) {
            (LiteralMode::Sync, true) => self.continuation(),
            (LiteralMode::Sync, false) => match self.fragmentizer.decode_tag() {
                Some(tag) => {
                    let tag = tag.into_static();
                    self.fragmentizer.skip_message();
                    let text = "literal too big (more than the command limit)";
                    self.tagged(StatusKind::Bad, tag, Some(Code::TooBig), text);
                    self.failed();
                }
                None => self.fragmentizer.poison_message(),
            },
            // Sent anyway: read to its end and refused (the fragmentizer drops its bytes).
            (LiteralMode::NonSync, _) => {}
        }
    }

    /// A complete message from the client, read as what is expected now.
    fn message(&mut self) {
        match self.reading.clone() {
            Reading::Command => match self.fragmentizer.decode_message(&CommandCodec::default()) {
                Ok(command) => {
                    let command = command.into_static();
                    self.command(command);
                }
                Err(error) => {
                    let too_long = matches!(
                        error,
                        imap_codec::fragmentizer::DecodeMessageError::MessageTooLong { .. }
                    );
                    let tag = self.fragmentizer.decode_tag().map(|t| t.into_static());
                    let text = match too_long {
                        true => "command too big",
                        false => "unknown command or malformed arguments",
                    };
                    self.bad(tag, text);
                }
            },
            Reading::AuthenticateData(tag) => {
                self.reading = Reading::Command;
                let data = self
                    .fragmentizer
                    .decode_message(&AuthenticateDataCodec::default())
                    .map(|d| d.into_static());
                match data {
                    Ok(AuthenticateData::Continue(response)) => {
                        self.auth_plain(tag, response.declassify())
                    }
                    Ok(AuthenticateData::Cancel) => self.no(tag, "authentication cancelled"),
                    Err(_) => self.bad(Some(tag), "malformed AUTHENTICATE response"),
                }
            }
            Reading::IdleDone(tag) => {
                if self
                    .fragmentizer
                    .decode_message(&IdleDoneCodec::default())
                    .is_ok()
                {
                    self.reading = Reading::Command;
                    self.ok(tag, "IDLE terminated");
                } else {
                    self.bad(None, "expected DONE");
                }
            }
        }
    }

    /// While IDLE, changes are told at once.
    fn tell_if_idle(&mut self) {
        if matches!(self.reading, Reading::IdleDone(_)) {
            self.tell_changes(true);
        }
    }

    /// Tells the client what changed in the store (`EXPUNGE` only where allowed).
    pub(crate) fn tell_changes(&mut self, expunges: bool) {
        if !matches!(self.state, State::Selected { .. }) || !self.mailbox.has_changes() {
            return;
        }
        let changes = self.mailbox.apply(expunges);
        for seq in changes.expunged {
            if let Some(seq) = std::num::NonZeroU32::new(seq) {
                self.data(Data::Expunge(seq));
            }
        }
        if let Some(exists) = changes.exists {
            self.data(Data::Exists(exists));
        }
        let flags = [imap_codec::imap_types::fetch::MessageDataItemName::Flags];
        for (seq, message) in changes.flags {
            if let Some(seq) = std::num::NonZeroU32::new(seq) {
                let bytes = super::fetch::render(seq, &message, None, &flags);
                self.transmit.extend_from_slice(&bytes);
            }
        }
    }

    /// STARTTLS was answered: commands pipelined after it are dropped (RFC 3501 6.2.1).
    pub(crate) fn start_tls(&mut self) {
        self.input.clear();
        self.fragmentizer = Fragmentizer::new(self.config.max_command_bytes);
        self.awaiting = Awaiting::Tls;
        self.outputs.push_back(Output::StartTls);
    }

    /// Writes a response.
    pub(crate) fn respond(&mut self, response: &Response<'_>) {
        let bytes = ResponseCodec::default().encode(response).dump();
        self.transmit.extend_from_slice(&bytes);
    }

    /// Writes untagged data.
    pub(crate) fn data(&mut self, data: Data<'_>) {
        self.respond(&Response::Data(data));
    }

    /// Writes a tagged status; an OK clears the run of errors.
    pub(crate) fn tagged(
        &mut self,
        kind: StatusKind,
        tag: Tag<'_>,
        code: Option<Code<'_>>,
        text: &str,
    ) {
        if kind == StatusKind::Ok {
            self.errors = 0;
        }
        let text = Text::try_from(text).unwrap_or_else(|_| Text::unvalidated("."));
        let body = StatusBody { kind, code, text };
        self.respond(&Response::Status(Status::Tagged(Tagged { tag, body })));
    }

    /// A tagged OK.
    pub(crate) fn ok(&mut self, tag: Tag<'_>, text: &str) {
        self.tagged(StatusKind::Ok, tag, None, text);
    }

    /// A tagged NO.
    pub(crate) fn no(&mut self, tag: Tag<'_>, text: &str) {
        self.tagged(StatusKind::No, tag, None, text);
        self.failed();
    }

    /// A BAD, tagged when the tag could be read.
    pub(crate) fn bad(&mut self, tag: Option<Tag<'_>>, text: &str) {
        let text_ = Text::try_from(text).unwrap_or_else(|_| Text::unvalidated("."));
        let body = StatusBody {
            kind: StatusKind::Bad,
            code: None,
            text: text_,
        };
        let status = match tag {
            Some(tag) => Status::Tagged(Tagged { tag, body }),
            None => Status::Untagged(body),
        };
        self.respond(&Response::Status(status));
        self.failed();
    }

    /// An untagged BYE.
    pub(crate) fn bye(&mut self, text: &str) {
        if let Ok(status) = Status::bye(None, text) {
            self.respond(&Response::Status(status));
        }
    }

    /// The `+` that lets the client go on (a literal, AUTHENTICATE).
    pub(crate) fn continuation(&mut self) {
        let request = CommandContinuationRequest::Base64(std::borrow::Cow::Borrowed(&[]));
        self.respond(&Response::CommandContinuationRequest(request));
    }

    fn failed(&mut self) {
        self.errors += 1;
        if self.errors >= MAX_ERRORS {
            self.bye("too many errors");
            self.close();
        }
    }

    /// Ends the session once its responses are written.
    pub(crate) fn close(&mut self) {
        self.state = State::Logout;
        self.job = None;
        self.input.clear();
        self.outputs.push_back(Output::Close);
    }
}
