//! The SMTP listener: one core [`Session`] per TCP connection.
//!
//! Memory: every session asks the [`SmtpLoad`] shared by all connections for
//! room before it holds more message text or envelope (`--max-inflight-bytes`).
//! Each connection may hold up to [`FREE_BYTES_PER_CONNECTION`] (one read
//! buffer) without asking, so a small message still gets through while big
//! ones fill the budget; beyond that the bytes are charged to the budget, and
//! a session refused room reads its message to the end without keeping it and
//! answers 452 4.3.1. So the bytes in flight stay under the budget plus one
//! read buffer per open connection. A message's charge is released once it is
//! stored, and a connection's on RSET (at its next read) and when it ends.
//!
//! Deadlines: the idle timer counts from the last read; one command line must
//! end within `--smtp-command-timeout` of its first byte and one message's text
//! within `--smtp-data-timeout` of its 354 (or first BDAT), whatever the pace
//! of the bytes; then 421 4.4.2 and the connection is closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mailjar_core::smtp::{Budget, Config, Deadline, Output, Reply, Session};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use crate::state::Shared;

/// What every SMTP connection needs.
#[derive(Clone)]
pub struct SmtpContext {
    /// The session limits.
    pub config: Config,
    /// Idle time before a 421.
    pub idle_timeout: Duration,
    /// The most time one command line may take, from its first byte.
    pub command_timeout: Duration,
    /// The most time one message's text may take, from the 354 or first BDAT.
    pub data_timeout: Duration,
    /// The bytes in flight over every connection, and their budget.
    pub load: Arc<SmtpLoad>,
    /// The fault rules every session asks.
    pub faults: mailjar_core::faults::FaultRules,
    /// Where messages go.
    pub shared: Arc<Shared>,
    /// Becomes true when the server shuts down.
    pub shutdown: watch::Receiver<bool>,
    /// TLS, when configured: STARTTLS, and the handshake of an implicit-TLS listener.
    pub tls: Option<crate::tls::Tls>,
    /// This listener is implicit TLS (`--smtps-port`): the handshake comes before the greeting.
    pub implicit_tls: bool,
}

/// Accepts connections until shutdown; each holds a permit of `slots` while open.
pub async fn serve(listener: TcpListener, slots: Arc<Semaphore>, mut context: SmtpContext) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = context.shutdown.changed() => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!("SMTP accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
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
            Err(_) => {
                tracing::warn!(%peer, "too many SMTP connections: refused");
                tokio::spawn(async move {
                    let mut stream = stream;
                    let _ = stream
                        .write_all(&Reply::too_many_connections().to_bytes())
                        .await;
                    let _ = stream.shutdown().await;
                });
            }
        }
    }
}

/// How much one read takes at most.
const READ_BUFFER_BYTES: usize = 16 * 1024;

/// What one connection may hold without charging the shared budget: one read buffer.
pub const FREE_BYTES_PER_CONNECTION: usize = READ_BUFFER_BYTES;

/// The bytes SMTP sessions hold (message text and envelopes) over every
/// connection, the budget they are charged against, and the open connections.
#[derive(Debug)]
pub struct SmtpLoad {
    /// `--max-inflight-bytes`.
    limit: usize,
    /// Bytes charged against `limit`: what each session holds beyond its free allowance.
    charged: AtomicUsize,
    /// Bytes every session holds, free allowances included.
    held: AtomicUsize,
    /// Open SMTP connections.
    connections: AtomicUsize,
}

impl SmtpLoad {
    /// No bytes in flight yet, under this budget.
    pub fn new(limit: usize) -> SmtpLoad {
        SmtpLoad {
            limit,
            charged: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
        }
    }

    /// The bytes SMTP sessions hold now (for `/health`'s `inflightBytes`).
    pub fn inflight_bytes(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The SMTP connections open now (for `/health`'s `smtpConnections`).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// The budget, `--max-inflight-bytes`.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// Counts one open connection in [`SmtpLoad`] while it lives.
struct OpenConnection(Arc<SmtpLoad>);

impl OpenConnection {
    fn new(load: Arc<SmtpLoad>) -> OpenConnection {
        load.connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection(load)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection's share of [`SmtpLoad`]; gives it all back when dropped.
struct ConnectionBudget {
    load: Arc<SmtpLoad>,
    /// What the session last said it holds.
    held: usize,
}

impl Budget for ConnectionBudget {
    fn hold(&mut self, total: usize) -> bool {
        let before = self.held.saturating_sub(FREE_BYTES_PER_CONNECTION);
        let after = total.saturating_sub(FREE_BYTES_PER_CONNECTION);
        if after > before {
            let extra = after - before;
            let limit = self.load.limit;
            let charged =
                self.load
                    .charged
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                        c.checked_add(extra).filter(|&n| n <= limit)
                    });
            if charged.is_err() {
                return false;
            }
        } else if before > after {
            self.load
                .charged
                .fetch_sub(before - after, Ordering::AcqRel);
        }
        if total > self.held {
            self.load
                .held
                .fetch_add(total - self.held, Ordering::Relaxed);
        } else {
            self.load
                .held
                .fetch_sub(self.held - total, Ordering::Relaxed);
        }
        self.held = total;
        true
    }
}

impl Drop for ConnectionBudget {
    fn drop(&mut self) {
        self.hold(0);
    }
}

/// A deadline of the host that runs for one line or one message, named by the session.
type Running = Option<(u64, Instant)>;

/// Keeps a deadline for the line or message the session names, starting a new
/// one at `now` when it names another, and none when it names none.
fn follow(running: Running, current: Option<u64>, now: Instant, limit: Duration) -> Running {
    match (running, current) {
        (_, None) => None,
        (Some((seq, at)), Some(current)) if seq == current => Some((seq, at)),
        (_, Some(current)) => Some((current, now + limit)),
    }
}

/// Reads what is there into `buffer` (emptied first); 0 at end of stream.
async fn read_some(
    stream: &mut (impl AsyncReadExt + Unpin),
    buffer: &mut Vec<u8>,
) -> std::io::Result<usize> {
    buffer.clear();
    stream.read_buf(buffer).await
}

/// Moves what the client sent during a delay fault into `buffer`, to be read
/// as if it came now; false when there is nothing.
fn take_early(early: &mut Vec<u8>, buffer: &mut Vec<u8>) -> bool {
    if early.is_empty() {
        return false;
    }
    buffer.clear();
    buffer.extend_from_slice(&std::mem::take(early));
    true
}

/// Drives one session until the client quits, goes idle, or the server shuts down.
async fn connection(tcp: TcpStream, mut context: SmtpContext) -> std::io::Result<()> {
    let mut session = Session::new(context.config.clone());
    // Implicit TLS shakes hands first: a `connect` fault acts on the TLS stream.
    let mut stream = crate::tls::open(tcp, &context, &mut session).await?;
    session.set_faults(context.faults.clone());
    let mut out = Vec::new();
    // What the client sent during a delay fault: read before the socket.
    let mut early = Vec::new();
    let opened = session.open();
    if crate::faults::carry_out(
        &mut stream,
        &mut out,
        opened,
        context.idle_timeout,
        &mut early,
    )
    .await?
    {
        let _ = stream.shutdown().await;
        return Ok(());
    }
    // Not zeroed, and small: thousands of short connections come and go, and
    // the session copies what it keeps, so a read buffer is scratch space.
    let mut buffer: Vec<u8> = Vec::with_capacity(READ_BUFFER_BYTES);
    let mut budget = ConnectionBudget {
        load: context.load.clone(),
        held: 0,
    };
    let (mut line_deadline, mut data_deadline): (Running, Running) = (None, None);
    loop {
        if *context.shutdown.borrow() && !session.is_receiving_message() {
            stream.write_all(&session.shutdown().to_bytes()).await?;
            break;
        }
        // The first of the idle timer and the deadlines of the line and the message under way.
        let mut deadline = (Instant::now() + context.idle_timeout, Deadline::Idle);
        for (running, which) in [
            (line_deadline, Deadline::Command),
            (data_deadline, Deadline::Data),
        ] {
            if let Some((_, at)) = running
                && at <= deadline.0
            {
                deadline = (at, which);
            }
        }
        let read = if take_early(&mut early, &mut buffer) {
            Ok(Ok(buffer.len()))
        } else {
            tokio::select! {
            read = tokio::time::timeout_at(deadline.0, read_some(&mut stream, &mut buffer)) => read,
            changed = context.shutdown.changed(), if !*context.shutdown.borrow() => {
                if changed.is_err() {
                    break; // The server is gone.
                }
                continue;
            }
            }
        };
        let n = match read {
            Err(_elapsed) => {
                stream
                    .write_all(&session.expire(deadline.1).to_bytes())
                    .await?;
                break;
            }
            Ok(Ok(0)) => break,
            Ok(result) => result?,
        };
        out.clear();
        let mut close = false;
        let mut start_tls = false;
        let now = Instant::now();
        // A message that could not be written: its 250 becomes 452 4.3.1.
        let mut not_stored = false;
        for output in session.receive_within(&buffer[..n], &mut budget) {
            match output {
                Output::Reply(reply) if std::mem::take(&mut not_stored) && reply.code == 250 => {
                    Reply::new(452, "4.3.1 Insufficient system storage: the message could not be written to disk").write_to(&mut out)
                }
                Output::Reply(reply) => reply.write_to(&mut out),
                Output::Message(message) => {
                    let (from, to, size) = (
                        message.envelope.from.clone(),
                        message.envelope.to.len(),
                        message.raw.len(),
                    );
                    // Stored (and on disk, with --data-dir) before the 250 that follows is written.
                    match context.shared.deliver_durable(message).await {
                        Ok(id) => {
                            tracing::info!(%id, %from, recipients = to, size, "message stored")
                        }
                        Err(e) => {
                            tracing::warn!(%from, size, "message not stored: {e}");
                            not_stored = true;
                        }
                    }
                }
                Output::Close => close = true,
                Output::Fault(fired) => {
                    crate::faults::fired(
                        &mut stream,
                        &mut out,
                        &fired,
                        context.idle_timeout,
                        &mut early,
                    )
                    .await?
                }
                Output::StartTls => start_tls = true,
            }
        }
        // The messages are stored: their room goes back to the budget.
        session.settle(&mut budget);
        line_deadline = follow(
            line_deadline,
            session.line_in_progress(),
            now,
            context.command_timeout,
        );
        data_deadline = follow(
            data_deadline,
            session.message_in_progress(),
            now,
            context.data_timeout,
        );
        // A client that does not read its replies is idle too.
        tokio::time::timeout(context.idle_timeout, async {
            stream.write_all(&out).await?;
            stream.flush().await
        })
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "replies not read"))??;
        if close {
            break;
        }
        if start_tls {
            stream = crate::tls::starttls(stream, &context, &mut session).await?;
        }
    }
    let _ = stream.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(load: &Arc<SmtpLoad>) -> ConnectionBudget {
        ConnectionBudget {
            load: load.clone(),
            held: 0,
        }
    }

    #[test]
    fn each_connection_holds_one_read_buffer_free_and_the_rest_is_charged() {
        let load = Arc::new(SmtpLoad::new(100_000));
        let (mut a, mut b) = (budget(&load), budget(&load));
        assert!(a.hold(FREE_BYTES_PER_CONNECTION));
        assert_eq!(load.charged.load(Ordering::Relaxed), 0);
        assert!(a.hold(FREE_BYTES_PER_CONNECTION + 60_000));
        assert_eq!(load.charged.load(Ordering::Relaxed), 60_000);
        // b may still use its free allowance, and the 40,000 left, but no more.
        assert!(b.hold(FREE_BYTES_PER_CONNECTION + 40_000));
        assert!(!b.hold(FREE_BYTES_PER_CONNECTION + 40_001));
        assert_eq!(load.charged.load(Ordering::Relaxed), 100_000);
        assert_eq!(
            load.inflight_bytes(),
            2 * FREE_BYTES_PER_CONNECTION + 100_000
        );
        // In flight never passes the budget plus one read buffer per connection.
        assert!(load.inflight_bytes() <= load.limit() + 2 * FREE_BYTES_PER_CONNECTION);
        // Shrinking releases; a connection that ends gives everything back.
        assert!(a.hold(10));
        assert_eq!(load.charged.load(Ordering::Relaxed), 40_000);
        drop(b);
        drop(a);
        assert_eq!(load.charged.load(Ordering::Relaxed), 0);
        assert_eq!(load.inflight_bytes(), 0);
    }

    #[test]
    fn a_refused_growth_changes_nothing() {
        let load = Arc::new(SmtpLoad::new(1000));
        let mut a = budget(&load);
        assert!(a.hold(FREE_BYTES_PER_CONNECTION + 500));
        assert!(!a.hold(FREE_BYTES_PER_CONNECTION + 1001));
        assert_eq!(a.held, FREE_BYTES_PER_CONNECTION + 500);
        assert_eq!(load.charged.load(Ordering::Relaxed), 500);
        assert_eq!(load.inflight_bytes(), FREE_BYTES_PER_CONNECTION + 500);
    }

    #[test]
    fn open_connections_are_counted_while_they_live() {
        let load = Arc::new(SmtpLoad::new(1));
        let first = OpenConnection::new(load.clone());
        let second = OpenConnection::new(load.clone());
        assert_eq!(load.connections(), 2);
        drop(first);
        assert_eq!(load.connections(), 1);
        drop(second);
        assert_eq!(load.connections(), 0);
    }

    #[test]
    fn a_deadline_follows_the_line_or_message_the_session_names() {
        let now = Instant::now();
        let limit = Duration::from_secs(2);
        let started = follow(None, Some(1), now, limit);
        assert_eq!(started, Some((1, now + limit)));
        // The same line later keeps its first deadline.
        let later = now + Duration::from_secs(1);
        assert_eq!(follow(started, Some(1), later, limit), started);
        // The next line starts a deadline of its own; none when nothing is under way.
        assert_eq!(
            follow(started, Some(2), later, limit),
            Some((2, later + limit))
        );
        assert_eq!(follow(started, None, later, limit), None);
    }
}
