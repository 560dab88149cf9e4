//! The SMTP listener: one core [`Session`] per TCP connection.

use std::sync::Arc;
use std::time::Duration;

use mailjar_core::smtp::{Config, Output, Reply, Session};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::state::Shared;

/// What every SMTP connection needs.
#[derive(Clone)]
pub struct SmtpContext {
    /// The session limits.
    pub config: Config,
    /// Idle time before a 421.
    pub idle_timeout: Duration,
    /// Where messages go.
    pub shared: Arc<Shared>,
    /// Becomes true when the server shuts down.
    pub shutdown: watch::Receiver<bool>,
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
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, context).await {
                        tracing::debug!(%peer, "SMTP connection ended: {e}");
                    }
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

/// Reads what is there into `buffer` (emptied first); 0 at end of stream.
async fn read_some(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> std::io::Result<usize> {
    buffer.clear();
    stream.read_buf(buffer).await
}

/// Drives one session until the client quits, goes idle, or the server shuts down.
async fn connection(mut stream: TcpStream, mut context: SmtpContext) -> std::io::Result<()> {
    let mut session = Session::new(context.config.clone());
    let mut out = session.greeting().to_bytes();
    stream.write_all(&out).await?;
    // Not zeroed, and small: thousands of short connections come and go, and
    // the session copies what it keeps, so a read buffer is scratch space.
    let mut buffer: Vec<u8> = Vec::with_capacity(READ_BUFFER_BYTES);
    loop {
        if *context.shutdown.borrow() && !session.is_receiving_message() {
            stream.write_all(&session.shutdown().to_bytes()).await?;
            break;
        }
        let read = tokio::select! {
            read = tokio::time::timeout(context.idle_timeout, read_some(&mut stream, &mut buffer)) => read,
            changed = context.shutdown.changed(), if !*context.shutdown.borrow() => {
                if changed.is_err() {
                    break; // The server is gone.
                }
                continue;
            }
        };
        let n = match read {
            Err(_idle) => {
                stream.write_all(&session.timeout().to_bytes()).await?;
                break;
            }
            Ok(Ok(0)) => break,
            Ok(result) => result?,
        };
        out.clear();
        let mut close = false;
        for output in session.receive(&buffer[..n]) {
            match output {
                Output::Reply(reply) => reply.write_to(&mut out),
                Output::Message(message) => {
                    let (from, to, size) = (
                        message.envelope.from.clone(),
                        message.envelope.to.len(),
                        message.raw.len(),
                    );
                    // Stored before the 250 that follows is written.
                    let id = context.shared.deliver(message);
                    tracing::info!(%id, %from, recipients = to, size, "message stored");
                }
                Output::Close => close = true,
            }
        }
        stream.write_all(&out).await?;
        if close {
            break;
        }
    }
    let _ = stream.shutdown().await;
    Ok(())
}
