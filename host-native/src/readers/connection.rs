//! The connection loop both mail readers (POP3 and IMAP) run: read the
//! client's bytes into a bounded buffer and hand them to the core session,
//! write what it transmits, answer its requests through the API, wake it at
//! its idle deadline, upgrade to TLS when it asks; generic over what differs
//! (the core session, its buffers, and what the connection follows besides
//! its client).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use mailjar_core::api::Scope;
use mailjar_core::store::{Email, Snapshot};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::readers::{self, ReaderContext};
use crate::state::Shared;
use crate::tls::SmtpStream;

/// What a session asks of its connection: IMAP's requests, which hold
/// POP3's (its RETR's seen flag is a one-message [`Request::Seen`]).
pub use mailjar_core::imap::Output as Request;

/// A mail reader's core session, as its connection drives it (the methods
/// both core sessions have; the `reader_session!` macro implements it).
pub trait ReaderSession: Send + 'static {
    /// A message as the session lists it.
    type Entry;
    /// Bytes the client sent, at `now_ms` since the connection opened.
    fn handle_input(&mut self, bytes: &[u8], now_ms: u64);
    /// When the session wants [`ReaderSession::handle_timeout`] (ms since the connection opened).
    fn poll_timeout(&self) -> Option<u64>;
    /// The deadline of [`ReaderSession::poll_timeout`] may have passed.
    fn handle_timeout(&mut self, now_ms: u64);
    /// Moves the next bytes to write into `out`; false when there is nothing to write.
    fn poll_transmit(&mut self, out: &mut Vec<u8>) -> bool;
    /// The next request for the connection, in order.
    fn poll_request(&mut self) -> Option<Request>;
    /// The answer to [`Request::Login`]: the mailbox, or None for a wrong login.
    fn handle_login(&mut self, mailbox: Option<Vec<Self::Entry>>);
    /// The answer to [`Request::Message`]: the message, or None when it has gone.
    fn handle_message(&mut self, email: Option<Arc<Email>>);
    /// The answer to [`Request::Delete`]: whether the store removed them all.
    fn handle_deleted(&mut self, ok: bool);
    /// The TLS handshake asked for by [`Request::StartTls`] is done.
    fn tls_started(&mut self);
}

/// Implements [`ReaderSession`] for a core session type `$session` whose
/// methods bear the trait's names, listing `$entry`s (`poll_request` is its
/// `poll_output`, each turned into a [`Request`] by `$request`).
macro_rules! reader_session {
    ($session:ty, $entry:ty, $request:path) => {
        impl $crate::readers::connection::ReaderSession for $session {
            type Entry = $entry;
            fn handle_input(&mut self, bytes: &[u8], now_ms: u64) {
                <$session>::handle_input(self, bytes, now_ms)
            }
            fn poll_timeout(&self) -> Option<u64> {
                <$session>::poll_timeout(self)
            }
            fn handle_timeout(&mut self, now_ms: u64) {
                <$session>::handle_timeout(self, now_ms)
            }
            fn poll_transmit(&mut self, out: &mut Vec<u8>) -> bool {
                <$session>::poll_transmit(self, out)
            }
            fn poll_request(&mut self) -> Option<$crate::readers::connection::Request> {
                self.poll_output().map($request)
            }
            fn handle_login(&mut self, mailbox: Option<Vec<$entry>>) {
                <$session>::handle_login(self, mailbox)
            }
            fn handle_message(
                &mut self,
                email: Option<std::sync::Arc<mailjar_core::store::Email>>,
            ) {
                <$session>::handle_message(self, email)
            }
            fn handle_deleted(&mut self, ok: bool) {
                <$session>::handle_deleted(self, ok)
            }
            fn tls_started(&mut self) {
                <$session>::tls_started(self)
            }
        }
    };
}
pub(crate) use reader_session;

/// What differs between the mail readers' connections besides the core
/// session: its configuration, its buffers, and what the connection
/// follows besides its client (IMAP: the store and the seen flags after a
/// login; POP3: nothing). A value of it lives beside the session.
pub trait Protocol: Send + Sized + 'static {
    /// The core session.
    type Session: ReaderSession;
    /// The protocol's session configuration.
    type Config: Clone + Send + Sync + 'static;
    /// What the connection heard besides its client.
    type Event: Send;
    /// The read buffer's size: the most bytes read at once.
    const READ_BYTES: usize;
    /// The write buffer's capacity when the connection opens.
    const OUT_BYTES: usize;
    /// A write buffer grown past this is dropped once everything is written.
    const OUT_KEPT: usize;
    /// The command that upgrades to TLS (it names the error without TLS).
    const STARTTLS: &'static str;

    /// A new connection's session and what it follows (`tls`: the stream
    /// is TLS from its first byte).
    fn start(context: &ReaderContext<Self::Config>, tls: bool) -> (Self::Session, Self);

    /// A message of a login's mailbox as the session lists it (`snapshot`
    /// is the mailbox).
    fn entry(email: &Email, snapshot: &Snapshot) -> <Self::Session as ReaderSession>::Entry;

    /// A login's mailbox is about to be taken: what moves from now on is news.
    fn logging_in(&mut self) {}

    /// Whether the connection listens to [`Protocol::next_event`] now.
    fn following(session: &Self::Session) -> bool;

    /// The next thing heard besides the client (cancel-safe: dropped when
    /// the client speaks first).
    fn next_event(&mut self) -> impl Future<Output = Self::Event> + Send + '_;

    /// Tells the session what was heard, in `scope`; false once the
    /// connection is to end.
    fn handle_event(
        &mut self,
        event: Self::Event,
        session: &mut Self::Session,
        shared: &Arc<Shared>,
        scope: Scope,
    ) -> bool;
}

/// One open connection of a mail reader.
pub struct Connection<P: Protocol> {
    session: P::Session,
    protocol: P,
    stream: SmtpStream,
    context: ReaderContext<P::Config>,
    /// Time zero of the session's milliseconds.
    opened: Instant,
    /// Whose mailbox the login opened.
    scope: Scope,
    out: Vec<u8>,
    buffer: Vec<u8>,
}

impl<P: Protocol> Connection<P> {
    /// Serves one TCP connection until the session closes, the client goes
    /// or the server shuts down.
    pub async fn run(tcp: TcpStream, context: ReaderContext<P::Config>) -> std::io::Result<()> {
        let (stream, tls) = readers::open(tcp, &context).await?;
        let (session, protocol) = P::start(&context, tls);
        let mut connection = Connection {
            session,
            protocol,
            stream,
            context,
            opened: Instant::now(),
            scope: Scope::All,
            out: Vec::with_capacity(P::OUT_BYTES),
            buffer: Vec::with_capacity(P::READ_BYTES),
        };
        let result = connection.serve().await;
        let _ = connection.stream.shutdown().await;
        result
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Writes, answers and reads until the session closes or the server shuts down.
    async fn serve(&mut self) -> std::io::Result<()> {
        loop {
            if !self.drain().await? {
                return Ok(());
            }
            let deadline = self
                .session
                .poll_timeout()
                .map(|ms| self.opened + Duration::from_millis(ms));
            let following = P::following(&self.session);
            self.buffer.clear();
            tokio::select! {
                read = self.stream.read_buf(&mut self.buffer) => {
                    if read? == 0 {
                        return Ok(());
                    }
                    let now = self.now_ms();
                    self.session.handle_input(&self.buffer, now);
                }
                event = self.protocol.next_event(), if following => {
                    let shared = &self.context.shared;
                    if !self.protocol.handle_event(event, &mut self.session, shared, self.scope) {
                        return Ok(());
                    }
                }
                () = readers::sleep_until(deadline) => self.session.handle_timeout(self.now_ms()),
                _ = self.context.shutdown.changed() => return Ok(()),
            }
        }
    }

    /// Writes what the session transmits and answers its requests; false once it closed.
    async fn drain(&mut self) -> std::io::Result<bool> {
        loop {
            self.flush().await?;
            let Some(request) = self.session.poll_request() else {
                return Ok(true);
            };
            let shared = &self.context.shared;
            let scope = self.scope;
            match request {
                Request::Login { user, password } => {
                    let mailbox = self.login(&user, &password);
                    self.session.handle_login(mailbox);
                }
                Request::Message(id) => {
                    let email = shared.call(|api| api.inboxes().mailbox_email(scope, id));
                    self.session.handle_message(email);
                }
                // One short call a message: a STORE over the whole mailbox
                // does not hold the lock for all of it.
                Request::Seen { ids, seen } => {
                    for id in ids {
                        shared.call(|api| api.set_seen(scope, id, seen));
                    }
                }
                Request::Delete(ids) => {
                    let ok = readers::delete(shared, scope, &ids).await;
                    self.session.handle_deleted(ok);
                }
                Request::StartTls => self.start_tls().await?,
                Request::Close => {
                    self.flush().await?;
                    return Ok(false);
                }
            }
        }
    }

    /// Writes everything transmitted, a piece at a time.
    async fn flush(&mut self) -> std::io::Result<()> {
        loop {
            self.out.clear();
            if !self.session.poll_transmit(&mut self.out) {
                // An idle connection keeps no large buffer (a long response grew it).
                if self.out.capacity() > P::OUT_KEPT {
                    self.out = Vec::new();
                }
                return Ok(());
            }
            self.stream.write_all(&self.out).await?;
        }
    }

    /// Shakes hands on the plain stream (the session's go-ahead written first).
    async fn start_tls(&mut self) -> std::io::Result<()> {
        self.flush().await?;
        let Some(tls) = &self.context.tls else {
            let what = P::STARTTLS;
            return Err(std::io::Error::other(format!(
                "{what} without TLS configured"
            )));
        };
        let plain = std::mem::replace(&mut self.stream, SmtpStream::Gone);
        self.stream = tls.upgrade(plain).await?.0;
        self.session.tls_started();
        Ok(())
    }

    /// The mailbox these credentials open, or None.
    fn login(
        &mut self,
        user: &str,
        password: &str,
    ) -> Option<Vec<<P::Session as ReaderSession>::Entry>> {
        let scope = readers::login_scope(&self.context, user, password)?;
        self.protocol.logging_in();
        let snapshot = self.context.shared.call(|api| api.inboxes().mailbox(scope));
        self.scope = scope;
        // Listed outside the lock.
        Some(
            snapshot
                .iter()
                .map(|email| P::entry(email, &snapshot))
                .collect(),
        )
    }
}
