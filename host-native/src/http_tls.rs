//! HTTPS (`--http-tls`): the HTTP API and the web UI over TLS, with the
//! certificate and rustls configuration of the SMTP listeners ([`crate::tls`]).
//!
//! A connection takes its slot of `--max-http-connections` first; its
//! handshake then runs in its own task within `--tls-handshake-timeout`. A
//! handshake that stalls, fails or is abandoned ends the task, which frees
//! the slot: a client that never finishes holds one slot, its socket and
//! rustls's state, for at most that long.
//!
//! A client that speaks plain HTTP to the port cannot read a TLS alert: it
//! is answered in plain HTTP, 400 `{"error"}` saying to use `https://` (as
//! nginx does), and the connection closes. Over the connection cap, the
//! handshake is made for the 503 too, so that an HTTPS client reads why;
//! those refusals are bounded like plain ones (at most 64 answered at once).

use std::io;

use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tokio_rustls::server::TlsStream;

use crate::http1::{self, HttpConnections, Refusal};
use crate::tls::Tls;

/// The first byte of a TLS record that carries a handshake message.
const HANDSHAKE_RECORD: u8 = 0x16;

/// What the first bytes of a connection made of it.
enum Opened {
    /// The handshake finished.
    Tls(Box<TlsStream<TcpStream>>),
    /// The client speaks plain HTTP (or anything but TLS).
    Plain(TcpStream),
    /// It closed, failed, or did not finish within the deadline.
    Gone,
}

/// The answer to plain HTTP on the HTTPS port.
fn plain_refusal() -> Refusal {
    Refusal {
        status: 400,
        error: "this port speaks HTTPS (--http-tls): use an https:// URL".to_owned(),
    }
}

/// The TLS stream of a new connection that holds its slot, or None when it
/// is over (a plain-HTTP client is answered first).
pub async fn open(
    tls: &Tls,
    stream: TcpStream,
    connections: &HttpConnections,
) -> Option<TlsStream<TcpStream>> {
    match handshake(tls, stream).await {
        Opened::Tls(stream) => Some(*stream),
        Opened::Plain(stream) => {
            http1::refuse_connection(stream, connections, &plain_refusal()).await;
            None
        }
        Opened::Gone => None,
    }
}

/// Answers a connection over the cap with `refusal`, over TLS when the
/// client speaks it. Nothing is done when too many are being refused.
pub async fn refuse(
    tls: &Tls,
    stream: TcpStream,
    connections: &HttpConnections,
    refusal: &Refusal,
) {
    // Taken before the handshake: the handshakes of refused connections are bounded too.
    let Some(_answering) = connections.try_refuse() else {
        return;
    };
    match handshake(tls, stream).await {
        Opened::Tls(stream) => http1::answer_refused(stream, refusal).await,
        Opened::Plain(stream) => http1::answer_refused(stream, &plain_refusal()).await,
        Opened::Gone => {}
    }
}

/// Reads the first byte (without taking it) and makes the handshake when
/// it starts one, all within the handshake timeout.
async fn handshake(tls: &Tls, stream: TcpStream) -> Opened {
    let deadline = Instant::now() + tls.handshake_timeout;
    let mut first = [0u8; 1];
    match timeout_at(deadline, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == HANDSHAKE_RECORD => {}
        Ok(Ok(1)) => return Opened::Plain(stream),
        Ok(Ok(_)) => return Opened::Gone,
        Ok(Err(e)) => return gone(&e),
        Err(_) => return gone(&timed_out()),
    }
    match timeout_at(deadline, tls.handshake(stream)).await {
        Ok(Ok(stream)) => Opened::Tls(Box::new(stream)),
        Ok(Err(e)) => gone(&e),
        Err(_) => gone(&timed_out()),
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")
}

fn gone(why: &io::Error) -> Opened {
    tracing::debug!("HTTPS connection closed before its handshake finished: {why}");
    Opened::Gone
}
