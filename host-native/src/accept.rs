//! Accepting connections for the mail listeners (SMTP, SMTPS, POP3, POP3S):
//! each connection takes a slot of the shared `--max-connections` or is
//! refused with its protocol's own line, and a failing accept (out of file
//! descriptors) backs off instead of spinning.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// A connection just accepted.
pub enum Accepted {
    /// With its slot, held while it is open.
    Open(TcpStream, SocketAddr, OwnedSemaphorePermit),
    /// Over the cap: to be refused.
    Refused(TcpStream, SocketAddr),
}

/// The next connection on `listener`, or None once the server shuts down.
/// `name` names the listener in the log.
pub async fn next(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
    shutdown: &mut watch::Receiver<bool>,
    name: &str,
) -> Option<Accepted> {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return None,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!("{name} accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        return Some(match slots.clone().try_acquire_owned() {
            Ok(permit) => Accepted::Open(stream, peer, permit),
            Err(_) => {
                tracing::warn!(%peer, "too many connections: {name} refused");
                Accepted::Refused(stream, peer)
            }
        });
    }
}

/// Writes `line` to a refused connection and closes it, in a task of its own.
pub fn refuse(mut stream: TcpStream, line: Vec<u8>) {
    tokio::spawn(async move {
        let _ = stream.write_all(&line).await;
        let _ = stream.shutdown().await;
    });
}
