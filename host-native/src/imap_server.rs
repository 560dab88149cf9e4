//! The IMAP listeners (`--imap-port`, and `--imaps-port` for implicit TLS):
//! one core [`imap::Session`] per TCP connection, sharing the SMTP
//! listener's connection slots, TLS configuration and shutdown, like the
//! POP3 listeners.
//!
//! The connection writes what the session transmits (a FETCH message by
//! message, each written before the next is rendered, so a client that does
//! not read holds one), answers its requests through the API (a login's
//! mailbox is an O(1) snapshot taken under the lock and listed outside it; a
//! message is looked up by id in the live store; EXPUNGE's and CLOSE's
//! deletions are `DELETE /api/emails/:id` requests in the login's scope, so
//! events, storage and inboxes see them as they see any other delete). After
//! a login it watches the store's size and newest id (a watch channel the
//! state moves as the event log's head is moved for event streams): when they
//! move, a new snapshot is compared with what the session knows, in one
//! walk (both are in receive order), and the session hears of new mail and
//! of messages gone.

use std::sync::Arc;
use std::time::Duration;

use mailjar_core::api::Scope;
use mailjar_core::id::MessageId;
use mailjar_core::imap::{self, Entry, Output, Session};
use mailjar_core::store::{Email, Snapshot};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Semaphore, broadcast, watch};
use tokio::time::Instant;

pub use crate::readers::Listeners;
use crate::readers::{self, ReaderContext};
use crate::tls::SmtpStream;

/// The most bytes read at once (an IDLE connection's buffer).
const READ_BYTES: usize = 4096;

/// What every IMAP connection needs.
pub type ImapContext = ReaderContext<imap::Config>;

/// Accepts connections until shutdown; each holds a permit of `slots` (the SMTP listener's) while open.
pub async fn serve(listener: TcpListener, slots: Arc<Semaphore>, context: ImapContext) {
    let busy: &[u8] = b"* BYE too many connections\r\n";
    readers::serve(listener, slots, context, ("IMAP", busy), Connection::run).await;
}

/// One open IMAP connection.
struct Connection {
    session: Session,
    stream: SmtpStream,
    context: ImapContext,
    /// Time zero of the session's milliseconds.
    opened: Instant,
    /// Whose mailbox the login opened.
    scope: Scope,
    /// Moves when the store changed (new mail, deletions).
    head: watch::Receiver<(usize, Option<MessageId>)>,
    /// Seen flags changed by any reader (this session's own changes come
    /// back too and change nothing).
    seen: broadcast::Receiver<(MessageId, bool)>,
    out: Vec<u8>,
    buffer: Vec<u8>,
}

impl Connection {
    async fn run(tcp: TcpStream, context: ImapContext) -> std::io::Result<()> {
        let config = imap::Config {
            uid_validity: context.shared.call(|api| api.uid_validity()),
            ..context.config.clone()
        };
        let mut session = Session::new(config, 0);
        let (stream, tls) = readers::open(tcp, &context).await?;
        if tls {
            session.set_tls();
        }
        let head = context.shared.store_changes();
        let seen = context.shared.seen_changes();
        let mut connection = Connection {
            session,
            stream,
            context,
            opened: Instant::now(),
            scope: Scope::All,
            head,
            seen,
            out: Vec::new(),
            buffer: Vec::with_capacity(READ_BYTES),
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
            let watching = self.session.logged_in();
            self.buffer.clear();
            tokio::select! {
                read = self.stream.read_buf(&mut self.buffer) => {
                    if read? == 0 {
                        return Ok(());
                    }
                    let now = self.now_ms();
                    self.session.handle_input(&self.buffer, now);
                }
                changed = self.head.changed(), if watching => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    self.refresh();
                }
                change = self.seen.recv(), if watching => match change {
                    Ok((id, seen)) => self.session.handle_seen(id, seen),
                    Err(RecvError::Lagged(_)) => self.rescan_seen(),
                    Err(RecvError::Closed) => return Ok(()),
                },
                () = readers::sleep_until(deadline) => self.session.handle_timeout(self.now_ms()),
                _ = self.context.shutdown.changed() => return Ok(()),
            }
        }
    }

    /// Writes what the session transmits and answers its requests; false once it closed.
    async fn drain(&mut self) -> std::io::Result<bool> {
        loop {
            self.flush().await?;
            let Some(output) = self.session.poll_output() else {
                return Ok(true);
            };
            match output {
                Output::Login { user, password } => {
                    let mailbox = self.login(&user, &password);
                    self.session.handle_login(mailbox);
                }
                Output::Message(id) => {
                    let scope = self.scope;
                    let email = self
                        .context
                        .shared
                        .call(|api| api.inboxes().mailbox_email(scope, id));
                    self.session.handle_message(email);
                }
                // One short call a message: a STORE over the whole mailbox
                // does not hold the lock for all of it.
                Output::Seen { ids, seen } => {
                    let scope = self.scope;
                    for id in ids {
                        self.context
                            .shared
                            .call(|api| api.set_seen(scope, id, seen));
                    }
                }
                Output::Delete(ids) => {
                    let ok = self.delete(&ids).await;
                    self.session.handle_deleted(ok);
                }
                Output::StartTls => {
                    self.flush().await?;
                    let Some(tls) = &self.context.tls else {
                        return Err(std::io::Error::other("STARTTLS without TLS configured"));
                    };
                    let plain = std::mem::replace(&mut self.stream, SmtpStream::Gone);
                    self.stream = tls.upgrade(plain).await?.0;
                    self.session.tls_started();
                }
                Output::Close => {
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
                // An idle connection keeps no large buffer (a FETCH response grew it).
                if self.out.capacity() > READ_BYTES {
                    self.out = Vec::new();
                }
                return Ok(());
            }
            self.stream.write_all(&self.out).await?;
        }
    }

    /// The mailbox these credentials open, or None.
    fn login(&mut self, user: &str, password: &str) -> Option<Vec<Entry>> {
        let scope = readers::login_scope(&self.context, user, password)?;
        let shared = &self.context.shared;
        self.head.mark_unchanged();
        let snapshot = shared.call(|api| api.inboxes().mailbox(scope));
        self.scope = scope;
        // Listed outside the lock.
        Some(
            snapshot
                .iter()
                .map(|email| entry(email, &snapshot))
                .collect(),
        )
    }

    /// The store moved: the session compares a new snapshot (taken in O(1)
    /// under the lock) with what it knows, outside the lock.
    fn refresh(&mut self) {
        self.head.mark_unchanged();
        let scope = self.scope;
        let snapshot = self.context.shared.call(|api| api.inboxes().mailbox(scope));
        self.session.refresh(&snapshot);
    }

    /// More seen flags changed than the ring holds while this session was
    /// busy: each message it knows takes its flag from a new snapshot
    /// (taken in O(1) under the lock, read outside it).
    fn rescan_seen(&mut self) {
        let scope = self.scope;
        let snapshot = self.context.shared.call(|api| api.inboxes().mailbox(scope));
        let flags: Vec<(MessageId, bool)> = self
            .session
            .known_ids()
            .map(|id| (id, snapshot.is_seen(id)))
            .collect();
        for (id, seen) in flags {
            self.session.handle_seen(id, seen);
        }
    }

    /// Deletes these in the login's scope (see [`readers::delete`]).
    async fn delete(&self, ids: &[MessageId]) -> bool {
        readers::delete(&self.context.shared, self.scope, ids).await
    }
}

/// A message as the session lists it: the store's UID, its size, date and
/// seen flag (as `snapshot` has it).
fn entry(email: &Email, snapshot: &Snapshot) -> Entry {
    Entry {
        id: email.id,
        uid: email.uid(),
        size: email.raw().len() as u64,
        received_ms: email.received_at_ms,
        seen: snapshot.is_seen(email.id),
    }
}

/// The bound IMAP listeners (`--imap-port`, `--imaps-port`).
pub fn listeners(plain: Option<TcpListener>, implicit_tls: Option<TcpListener>) -> Listeners {
    Listeners::new(["imap", "imaps"], plain, implicit_tls)
}
