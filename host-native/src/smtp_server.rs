//! The SMTP listener: one core [`Session`] per TCP connection.
//!
//! Each connection runs the session's calling contract (see
//! [`mailjar_core::smtp`]): it feeds what it reads with
//! [`Session::handle_input`], drains the outputs (writing replies, storing
//! messages and reporting the outcome with [`Session::handle_stored`],
//! carrying out faults), and sleeps until the session's own deadline
//! ([`Session::poll_timeout`]) when no bytes come. Time is milliseconds since
//! the connection opened.
//!
//! Memory: see [`crate::smtp_load`] for the budget every session asks.
//!
//! Deadlines: the idle timer counts from the last read; one command line must
//! end within `--smtp-command-timeout` of its first byte and one message's text
//! within `--smtp-data-timeout` of its 354 (or first BDAT), whatever the pace
//! of the bytes; then 421 4.4.2 and the connection is closed.

use std::sync::Arc;
use std::time::Duration;

use mailjar_core::smtp::{Config, Incoming, Output, Reply, Session};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use crate::accept::{self, Accepted};
use crate::faults::ApiFaults;
use crate::proxy_protocol::ProxyProtocol;
use crate::smtp_load::{ConnectionBudget, OpenConnection, READ_BUFFER_BYTES, SmtpLoad};
use crate::state::Shared;
use crate::tls::{SmtpStream, Tls};

/// What every SMTP connection needs.
#[derive(Clone)]
pub struct SmtpContext {
    /// The session limits and timeouts.
    pub config: Config,
    /// The bytes in flight over every connection, and their budget.
    pub load: Arc<SmtpLoad>,
    /// Where messages go, and the fault rules sessions ask.
    pub shared: Arc<Shared>,
    /// Becomes true when the server shuts down.
    pub shutdown: watch::Receiver<bool>,
    /// TLS, when configured: STARTTLS, and the handshake of an implicit-TLS listener.
    pub tls: Option<Tls>,
    /// This listener is implicit TLS (`--smtps-port`): the handshake comes before the greeting.
    pub implicit_tls: bool,
    /// `--unrouted reject`: RCPT of an address no inbox takes is 550 5.1.1.
    pub reject_unrouted: bool,
    /// `--proxy-protocol`: who must send a PROXY header first.
    pub proxy: Option<Arc<ProxyProtocol>>,
}

impl SmtpContext {
    /// What a session asks: the fault rules and the inboxes.
    fn checks(&self) -> ApiFaults<'_> {
        ApiFaults {
            shared: &self.shared,
            reject_unrouted: self.reject_unrouted,
        }
    }
}

/// Accepts connections until shutdown; each holds a permit of `slots` while open.
pub async fn serve(listener: TcpListener, slots: Arc<Semaphore>, context: SmtpContext) {
    let mut shutdown = context.shutdown.clone();
    while let Some(accepted) = accept::next(&listener, &slots, &mut shutdown, "SMTP").await {
        match accepted {
            Accepted::Open(stream, peer, permit) => {
                let context = context.clone();
                let counted = OpenConnection::new(context.load.clone());
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, context).await {
                        tracing::debug!(%peer, "SMTP connection ended: {e}");
                    }
                    drop(counted);
                    drop(permit);
                });
            }
            Accepted::Refused(stream, _) => {
                let refusal = Reply::too_many_connections();
                context.shared.metrics.smtp_reply(refusal.code);
                accept::refuse(stream, refusal.to_bytes());
            }
        }
    }
}

/// Drives one session until the client quits, goes idle, or the server shuts down.
async fn connection(tcp: TcpStream, context: SmtpContext) -> std::io::Result<()> {
    let mut connection = Connection::open(tcp, context).await?;
    let result = connection.run().await;
    let _ = connection.stream.shutdown().await;
    result
}

/// What the host does after draining the session's outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Read on.
    Read,
    /// Close the connection.
    Close,
    /// Run the TLS handshake, then read on.
    StartTls,
}

/// One open SMTP connection: its session, stream and buffers.
struct Connection {
    session: Session,
    stream: SmtpStream,
    context: SmtpContext,
    budget: ConnectionBudget,
    /// Time zero of the session's milliseconds.
    opened: Instant,
    /// The replies gathered for the next write.
    out: Vec<u8>,
    /// What the client sent during a delay fault: read before the socket.
    early: Vec<u8>,
    /// A delay fault was waited: the session hears that the host reads again.
    delayed: bool,
    /// Not zeroed, and small: thousands of short connections come and go, and
    /// the session copies what it keeps, so a read buffer is scratch space.
    buffer: Vec<u8>,
}

impl Connection {
    /// Shakes hands first on an implicit-TLS listener (a `connect` fault acts
    /// on the TLS stream), then opens the session: its greeting is queued.
    /// Behind `--proxy-protocol`, the PROXY header comes before both and
    /// names the client.
    async fn open(mut tcp: TcpStream, context: SmtpContext) -> std::io::Result<Connection> {
        let mut session = Session::new(context.config.clone());
        let mut peer = tcp.peer_addr().ok();
        if let Some(proxy) = &context.proxy {
            let from = peer.ok_or_else(|| std::io::Error::other("no peer address"))?;
            peer = Some(proxy.accept(&mut tcp, from).await?);
        }
        if let Some(peer) = peer {
            // "127.0.0.1:50123", "[::1]:50123".
            session.set_remote_addr(peer.to_string());
        }
        session.set_entropy(getrandom::u64().unwrap_or(0));
        let stream = match (&context.tls, context.implicit_tls) {
            (Some(tls), true) => {
                let (stream, info) = tls.accept(tcp).await?;
                session.tls_started(info);
                stream
            }
            _ => SmtpStream::Plain(tcp),
        };
        session.open(0, &mut context.checks());
        Ok(Connection {
            session,
            stream,
            budget: ConnectionBudget::new(context.load.clone()),
            context,
            opened: Instant::now(),
            out: Vec::new(),
            early: Vec::new(),
            delayed: false,
            buffer: Vec::with_capacity(READ_BUFFER_BYTES),
        })
    }

    /// Milliseconds since the connection opened: the session's time.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How long writing replies may take: a client that does not read them is idle too.
    fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.context.config.idle_timeout_ms)
    }

    /// Drains, then reads, until the session closes or the client leaves.
    async fn run(&mut self) -> std::io::Result<()> {
        loop {
            match self.drain().await? {
                Next::Close => return Ok(()),
                Next::StartTls => self.start_tls().await?,
                Next::Read => {}
            }
            if *self.context.shutdown.borrow() && !self.session.is_receiving_message() {
                self.session.handle_shutdown();
                continue;
            }
            if !self.read().await? {
                return Ok(());
            }
        }
    }

    /// Carries out every queued output, then writes the replies gathered.
    async fn drain(&mut self) -> std::io::Result<Next> {
        let mut next = Next::Read;
        while let Some(output) = self.session.poll_output() {
            match output {
                Output::Reply(reply) => {
                    self.context.shared.metrics.smtp_reply(reply.code);
                    reply.write_to(&mut self.out);
                }
                Output::Message(message) => {
                    let outcome = self.store(message).await;
                    if outcome.is_err() && self.context.shared.storage_shared() {
                        self.session.handle_unavailable();
                    } else {
                        self.session.handle_stored(outcome);
                    }
                }
                Output::Close => next = Next::Close,
                Output::StartTls => next = Next::StartTls,
                Output::Fault(fired) => {
                    let timeout = self.write_timeout();
                    let (stream, out, early) = (&mut self.stream, &mut self.out, &mut self.early);
                    self.delayed |=
                        crate::faults::fired(stream, out, &fired, timeout, early).await?;
                }
            }
        }
        // The messages are stored: their room goes back to the budget.
        self.session.settle(&mut self.budget);
        let timeout = self.write_timeout();
        let (stream, out) = (&mut self.stream, &self.out);
        tokio::time::timeout(timeout, async {
            stream.write_all(out).await?;
            stream.flush().await
        })
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "replies not read"))??;
        self.out.clear();
        Ok(next)
    }

    /// Stores a message (on disk too, with --data-dir) before its reply is written.
    async fn store(&self, message: Incoming) -> Result<(), String> {
        let (from, to, size) = (
            message.envelope.from.clone(),
            message.envelope.to.len(),
            message.raw.len(),
        );
        match self.context.shared.deliver_durable(message).await {
            Ok(id) => {
                tracing::info!(%id, %from, recipients = to, size, "message stored");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(%from, size, "message not stored: {e}");
                Err(e.to_string())
            }
        }
    }

    /// Feeds the session what comes next: bytes kept during a delay, bytes
    /// read, or the passing of its deadline. False when the client left or
    /// the server is gone.
    async fn read(&mut self) -> std::io::Result<bool> {
        if std::mem::take(&mut self.delayed) || !self.early.is_empty() {
            // Read as if it came now; none restarts the idle timer after the wait.
            let early = std::mem::take(&mut self.early);
            self.feed(&early);
            return Ok(true);
        }
        let deadline = self
            .session
            .poll_timeout()
            .map(|ms| self.opened + Duration::from_millis(ms));
        let shut = *self.context.shutdown.borrow();
        self.buffer.clear();
        tokio::select! {
            read = self.stream.read_buf(&mut self.buffer) => {
                if read? == 0 {
                    return Ok(false);
                }
                let buffer = std::mem::take(&mut self.buffer);
                self.feed(&buffer);
                self.buffer = buffer;
            }
            () = sleep_until(deadline) => self.session.handle_timeout(self.now_ms()),
            changed = self.context.shutdown.changed(), if !shut => {
                // Err: the server is gone.
                return Ok(changed.is_ok());
            }
        }
        Ok(true)
    }

    fn feed(&mut self, input: &[u8]) {
        let now = self.now_ms();
        let mut faults = self.context.checks();
        self.session
            .handle_input(input, now, &mut self.budget, &mut faults);
    }

    /// STARTTLS was answered 220: the handshake, then the session goes on under TLS.
    async fn start_tls(&mut self) -> std::io::Result<()> {
        let Some(tls) = &self.context.tls else {
            return Err(std::io::Error::other("STARTTLS without TLS configured"));
        };
        let plain = std::mem::replace(&mut self.stream, SmtpStream::Gone);
        let (stream, info) = tls.upgrade(plain).await?;
        self.stream = stream;
        self.session.tls_started(info);
        Ok(())
    }
}

/// Sleeps until `deadline`; forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
