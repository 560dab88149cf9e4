//! The POP3 listeners (`--pop3-port`, and `--pop3s-port` for implicit TLS):
//! one core [`pop3::Session`] per TCP connection, sharing the SMTP
//! listener's connection slots, TLS configuration and shutdown.
//!
//! The connection writes what the session transmits (a retrieval in chunks,
//! each written before the next is made, so a client that does not read
//! holds one chunk), answers its requests through the API (a login's
//! mailbox is an O(1) snapshot taken under the lock and listed outside it; a
//! message is looked up by id in the live store; QUIT's deletions are
//! `DELETE /api/emails/:id` requests in the login's scope, so events,
//! storage and inboxes see them as they see any other delete), and sleeps
//! until the session's idle deadline when no bytes come.

use std::sync::Arc;
use std::time::Duration;

use mailjar_core::api::Scope;
use mailjar_core::id::MessageId;
use mailjar_core::pop3::{self, Entry, Output, Session};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;

pub use crate::readers::Listeners;
use crate::readers::{self, ReaderContext};
use crate::tls::SmtpStream;

/// What every POP3 connection needs.
pub type Pop3Context = ReaderContext<pop3::Config>;

/// Accepts connections until shutdown; each holds a permit of `slots` (the SMTP listener's) while open.
pub async fn serve(listener: TcpListener, slots: Arc<Semaphore>, context: Pop3Context) {
    let busy: &[u8] = b"-ERR [SYS/TEMP] too many connections\r\n";
    readers::serve(listener, slots, context, ("POP3", busy), Connection::run).await;
}

/// One open POP3 connection.
struct Connection {
    session: Session,
    stream: SmtpStream,
    context: Pop3Context,
    /// Time zero of the session's milliseconds.
    opened: Instant,
    /// Whose mailbox the login opened.
    scope: Scope,
    out: Vec<u8>,
    buffer: Vec<u8>,
}

impl Connection {
    async fn run(tcp: TcpStream, context: Pop3Context) -> std::io::Result<()> {
        let mut session = Session::new(context.config.clone(), 0);
        let (stream, tls) = readers::open(tcp, &context).await?;
        if tls {
            session.set_tls();
        }
        let mut connection = Connection {
            session,
            stream,
            context,
            opened: Instant::now(),
            scope: Scope::All,
            out: Vec::with_capacity(pop3::CHUNK),
            buffer: Vec::with_capacity(16 * 1024),
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
            self.buffer.clear();
            tokio::select! {
                read = self.stream.read_buf(&mut self.buffer) => {
                    if read? == 0 {
                        return Ok(());
                    }
                    let now = self.now_ms();
                    self.session.handle_input(&self.buffer, now);
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
            let Some(output) = self.session.poll_output() else {
                return Ok(true);
            };
            match output {
                Output::Login { user, password } => {
                    let maildrop = self.login(&user, &password);
                    self.session.handle_login(maildrop);
                }
                Output::Seen(id) => {
                    let scope = self.scope;
                    self.context
                        .shared
                        .call(|api| api.set_seen(scope, id, true));
                }
                Output::Fetch(id) => {
                    let scope = self.scope;
                    let email = self
                        .context
                        .shared
                        .call(|api| api.inboxes().mailbox_email(scope, id));
                    self.session.handle_message(email);
                }
                Output::Delete(ids) => {
                    let ok = self.delete(&ids).await;
                    self.session.handle_deleted(ok);
                }
                Output::StartTls => {
                    self.flush().await?;
                    let Some(tls) = &self.context.tls else {
                        return Err(std::io::Error::other("STLS without TLS configured"));
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

    /// Writes everything transmitted, a chunk at a time.
    async fn flush(&mut self) -> std::io::Result<()> {
        loop {
            self.out.clear();
            if !self.session.poll_transmit(&mut self.out) {
                return Ok(());
            }
            self.stream.write_all(&self.out).await?;
        }
    }

    /// The maildrop these credentials open, or None.
    fn login(&mut self, user: &str, password: &str) -> Option<Vec<Entry>> {
        let scope = readers::login_scope(&self.context, user, password)?;
        let shared = &self.context.shared;
        let snapshot = shared.call(|api| api.inboxes().mailbox(scope));
        self.scope = scope;
        // Listed outside the lock.
        Some(
            snapshot
                .iter()
                .map(|email| Entry {
                    id: email.id,
                    size: email.raw().len() as u64,
                })
                .collect(),
        )
    }

    /// Deletes these in the login's scope (see [`readers::delete`]).
    async fn delete(&self, ids: &[MessageId]) -> bool {
        readers::delete(&self.context.shared, self.scope, ids).await
    }
}

/// The bound POP3 listeners (`--pop3-port`, `--pop3s-port`).
pub fn listeners(plain: Option<TcpListener>, implicit_tls: Option<TcpListener>) -> Listeners {
    Listeners::new(["pop3", "pop3s"], plain, implicit_tls)
}
