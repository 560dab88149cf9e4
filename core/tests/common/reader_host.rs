//! A host for a mail reader's sans-IO session (IMAP's and POP3's): a store of
//! messages behind a password that answers every request as the native host
//! does and keeps what it was asked. Included by path from the core's lib
//! for its unit tests of both sessions, where `super::mj` is `crate`, and
//! from the fuzz targets, where it is `mailjar_core`.

#![allow(dead_code)]

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;

use super::mj::id::{IdGenerator, MessageId};
use super::mj::smtp::Incoming;
use super::mj::store::{Email, Prepared};
use super::mj::{imap, pop3};

/// What a session asks of its host, in the words IMAP and POP3 share.
pub enum Request {
    /// Check these credentials and answer with the maildrop.
    Login { user: String, password: String },
    /// Hand over this stored message.
    Message(MessageId),
    /// Set or clear these messages' seen flag.
    Seen(Vec<MessageId>, bool),
    /// Delete these messages from the store.
    Delete(Vec<MessageId>),
    /// Run the TLS handshake.
    StartTls,
    /// Close the connection.
    Close,
}

/// The calls a host makes on a mail reader's session.
pub trait Reader: Sized {
    /// The session's settings.
    type Config: Clone;
    /// One message of the maildrop a login opens.
    type Entry;
    /// A request of the session to its host.
    type Output: Debug;
    /// A session started at time 0.
    fn start(config: Self::Config) -> Self;
    /// Bytes from the client.
    fn input(&mut self, bytes: &[u8], now_ms: u64);
    /// Appends what is to be written; whether there was anything.
    fn transmit(&mut self, wire: &mut Vec<u8>) -> bool;
    /// The next request to the host.
    fn output(&mut self) -> Option<Self::Output>;
    /// The answer to a login: the maildrop, or `None` for refused.
    fn login(&mut self, maildrop: Option<Vec<Self::Entry>>);
    /// The answer to a message request: `None` when it is gone.
    fn message(&mut self, email: Option<Arc<Email>>);
    /// The answer to a delete.
    fn deleted(&mut self, ok: bool);
    /// The TLS handshake is done.
    fn tls_done(&mut self);
    /// The maildrop entry of `email` at UID (1-based position) `uid`.
    fn entry(email: &Email, uid: u32) -> Self::Entry;
    /// What `output` asks.
    fn request(output: Self::Output) -> Request;
}

/// The types of protocol module `$protocol`, and the calls both sessions
/// spell alike, forwarded to the session's own.
macro_rules! forward {
    ($protocol:ident) => {
        type Config = $protocol::Config;
        type Entry = $protocol::Entry;
        type Output = $protocol::Output;
        fn start(config: Self::Config) -> Self {
            Self::new(config, 0)
        }
        fn input(&mut self, bytes: &[u8], now_ms: u64) {
            self.handle_input(bytes, now_ms);
        }
        fn transmit(&mut self, wire: &mut Vec<u8>) -> bool {
            self.poll_transmit(wire)
        }
        fn output(&mut self) -> Option<Self::Output> {
            self.poll_output()
        }
        fn login(&mut self, maildrop: Option<Vec<Self::Entry>>) {
            self.handle_login(maildrop);
        }
        fn message(&mut self, email: Option<Arc<Email>>) {
            self.handle_message(email);
        }
        fn deleted(&mut self, ok: bool) {
            self.handle_deleted(ok);
        }
        fn tls_done(&mut self) {
            self.tls_started();
        }
    };
}

impl Reader for imap::Session {
    forward!(imap);

    fn entry(email: &Email, uid: u32) -> imap::Entry {
        imap::Entry {
            id: email.id,
            uid,
            size: email.raw().len() as u64,
            received_ms: 1_700_000_000_000,
            seen: false,
        }
    }

    fn request(output: imap::Output) -> Request {
        match output {
            imap::Output::Login { user, password } => Request::Login { user, password },
            imap::Output::Message(id) => Request::Message(id),
            imap::Output::Seen { ids, seen } => Request::Seen(ids, seen),
            imap::Output::Delete(ids) => Request::Delete(ids),
            imap::Output::StartTls => Request::StartTls,
            imap::Output::Close => Request::Close,
        }
    }
}

impl Reader for pop3::Session {
    forward!(pop3);

    fn entry(email: &Email, _uid: u32) -> pop3::Entry {
        pop3::Entry {
            id: email.id,
            size: email.raw().len() as u64,
        }
    }

    fn request(output: pop3::Output) -> Request {
        match output {
            pop3::Output::Login { user, password } => Request::Login { user, password },
            pop3::Output::Fetch(id) => Request::Message(id),
            pop3::Output::Seen(id) => Request::Seen(vec![id], true),
            pop3::Output::Delete(ids) => Request::Delete(ids),
            pop3::Output::StartTls => Request::StartTls,
            pop3::Output::Close => Request::Close,
        }
    }
}

/// A message from `s@x.test` to `a@x.test`, stored under the next id of `ids`
/// and received at 1 ms.
pub fn email(ids: &mut IdGenerator, raw: &[u8]) -> Arc<Email> {
    let mut incoming = Incoming {
        raw: raw.to_vec(),
        ..Incoming::default()
    };
    incoming.envelope.from = "s@x.test".into();
    incoming.envelope.to = vec!["a@x.test".into()];
    Arc::new(Email::new(ids.next(1, [0; 10]), 1, Prepared::new(incoming)))
}

/// A store of messages and a password, answering a session's requests as a host would.
pub struct Host {
    /// Where the ids of more messages come from.
    pub ids: IdGenerator,
    /// The maildrop, oldest first; a login opens all of it.
    pub emails: Vec<Arc<Email>>,
    /// Messages deleted elsewhere: asked for, they are not found.
    pub gone: HashSet<MessageId>,
    /// What the session deleted, in order.
    pub deleted: Vec<MessageId>,
    /// Every seen flag the session set or cleared, in order.
    pub seen: Vec<(MessageId, bool)>,
    /// Whether the session asked to close.
    pub closed: bool,
    /// Whether the session asked for a TLS handshake.
    pub tls: bool,
    /// The first request after the close, if any came.
    pub after_close: Option<String>,
    /// Which user name and password open the maildrop (`u` and `p w` unless changed).
    pub accepts: fn(&str, &str) -> bool,
}

impl Host {
    /// A host with these messages, opened by user `u` with password `p w`.
    pub fn new(raws: &[&[u8]]) -> Host {
        let mut ids = IdGenerator::new();
        Host {
            emails: raws.iter().map(|raw| email(&mut ids, raw)).collect(),
            ids,
            gone: HashSet::new(),
            deleted: Vec::new(),
            seen: Vec::new(),
            closed: false,
            tls: false,
            after_close: None,
            accepts: |user, password| user == "u" && password == "p w",
        }
    }

    /// The maildrop a login opens: every message, UIDs from 1.
    pub fn entries<S: Reader>(&self) -> Vec<S::Entry> {
        (1..)
            .zip(&self.emails)
            .map(|(uid, e)| S::entry(e, uid))
            .collect()
    }

    /// Writes everything out and answers every request, until the session waits for input.
    pub fn drive<S: Reader>(&mut self, session: &mut S) -> Vec<u8> {
        let mut wire = Vec::new();
        loop {
            while session.transmit(&mut wire) {}
            let Some(output) = session.output() else {
                return wire;
            };
            if self.closed && self.after_close.is_none() {
                self.after_close = Some(format!("{output:?}"));
            }
            self.answer(session, S::request(output));
        }
    }

    fn answer<S: Reader>(&mut self, session: &mut S, request: Request) {
        match request {
            Request::Login { user, password } => {
                let ok = (self.accepts)(&user, &password);
                session.login(ok.then(|| self.entries::<S>()));
            }
            Request::Message(id) => {
                let found = self.emails.iter().find(|e| e.id == id);
                session.message(found.filter(|_| !self.gone.contains(&id)).cloned());
            }
            Request::Seen(ids, seen) => self.seen.extend(ids.iter().map(|&id| (id, seen))),
            Request::Delete(ids) => {
                self.deleted.extend(ids);
                session.deleted(true);
            }
            Request::StartTls => {
                self.tls = true;
                session.tls_done();
            }
            Request::Close => self.closed = true,
        }
    }

    /// Starts a session, then feeds it `input` split at `splits` (each
    /// clamped to what is left) at 1 ms, answering as this host does;
    /// everything written, the greeting first.
    pub fn run<S: Reader>(&mut self, input: &[u8], splits: &[usize], config: S::Config) -> Vec<u8> {
        let mut session = S::start(config);
        let mut wire = self.drive(&mut session);
        let mut at = 0;
        for &split in splits.iter().chain(std::iter::once(&input.len())) {
            let split = split.clamp(at, input.len());
            session.input(&input[at..split], 1);
            wire.extend(self.drive(&mut session));
            at = split;
        }
        wire
    }
}

/// Asserts that `input` split at any one byte, and a byte at a time, writes
/// what it writes whole, to a host with these messages.
pub fn assert_any_split_writes_the_same<S: Reader>(
    raws: &[&[u8]],
    input: &[u8],
    config: S::Config,
) {
    let text = |splits: &[usize]| {
        let wire = Host::new(raws).run::<S>(input, splits, config.clone());
        String::from_utf8_lossy(&wire).into_owned()
    };
    let whole = text(&[]);
    for split in 0..input.len() {
        assert_eq!(text(&[split]), whole, "split at {split}");
    }
    let bytes: Vec<usize> = (0..input.len()).collect();
    assert_eq!(text(&bytes), whole, "a byte at a time");
}
