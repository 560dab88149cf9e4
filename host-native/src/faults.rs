//! Carrying out fault rules on a connection: each one that fires is logged,
//! and a delay is waited here, after the replies before it are written.
//!
//! A delay watches the socket while it waits: a client that leaves ends it
//! at once (its connection then ends at its next read, and its slot is
//! free), and what a client sends meanwhile is kept, up to a bound, for the
//! session to read after the delay.

use std::sync::Arc;
use std::time::Duration;

use mailjar_core::smtp::{Action, FaultCheck, FaultEvent, Fired, InboxCheck, InboxLogin};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::state::Shared;

/// The most a client's bytes sent during a delay that are kept; past it the
/// socket is not read (nor watched) until the delay ends. One read buffer.
const MAX_EARLY_BYTES: usize = crate::smtp_load::FREE_BYTES_PER_CONNECTION;

/// A session asks the API's fault rules, under the API lock only while a rule
/// is held (see [`Shared::fire_fault`]), and its inboxes (see [`crate::inbox_checks`]).
pub struct ApiFaults<'a> {
    /// The API.
    pub shared: &'a Arc<Shared>,
    /// `--unrouted reject`: recipients no inbox takes are refused.
    pub reject_unrouted: bool,
}

impl FaultCheck for ApiFaults<'_> {
    fn fire(&mut self, event: &FaultEvent<'_>) -> Option<Fired> {
        self.shared.fire_fault(event)
    }

    fn inboxes(&mut self) -> Option<&mut dyn InboxCheck> {
        Some(self)
    }
}

impl InboxCheck for ApiFaults<'_> {
    fn login(&mut self, user: &str, password: &str) -> InboxLogin {
        self.shared.smtp_login(user, password)
    }

    fn takes(&mut self, recipient: &str, login: Option<&str>) -> bool {
        !self.reject_unrouted || self.shared.takes_recipient(recipient, login)
    }
}

/// Logs a fired rule; for a delay, writes the replies gathered in `out` so
/// far (the client sees them on time; a client that reads nothing for
/// `write_timeout` ends the connection) and then waits, until the client
/// leaves at the latest; what it sends meanwhile goes to `early`. True when
/// it waited a delay.
pub async fn fired<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    out: &mut Vec<u8>,
    fired: &Fired,
    write_timeout: Duration,
    early: &mut Vec<u8>,
) -> std::io::Result<bool> {
    let stage = fired.stage.name();
    match &fired.action {
        Action::Reply { code, text } => {
            tracing::info!(rule = %fired.id, stage, code, text = %text, "fault injected: reply");
        }
        Action::Disconnect => {
            tracing::info!(rule = %fired.id, stage, "fault injected: disconnect");
        }
        Action::Delay { ms } => {
            tracing::info!(rule = %fired.id, stage, delay_ms = ms, "fault injected: delay");
            if !out.is_empty() {
                tokio::time::timeout(write_timeout, stream.write_all(out))
                    .await
                    .map_err(|_| {
                        std::io::Error::new(std::io::ErrorKind::TimedOut, "replies not read")
                    })??;
                out.clear();
            }
            // Boxed: a connection's task carries the watch's buffer only while it waits.
            Box::pin(delay(stream, Duration::from_millis(*ms), early)).await;
            return Ok(true);
        }
    }
    Ok(false)
}

/// Waits `length`, or until the client closes or fails; keeps what it sends meanwhile.
async fn delay<S: AsyncRead + Unpin>(stream: &mut S, length: Duration, early: &mut Vec<u8>) {
    let sleep = tokio::time::sleep(length);
    tokio::pin!(sleep);
    let mut scratch = [0u8; 1024];
    while early.len() < MAX_EARLY_BYTES {
        let room = (MAX_EARLY_BYTES - early.len()).min(scratch.len());
        tokio::select! {
            _ = &mut sleep => return,
            read = stream.read(&mut scratch[..room]) => match read {
                Ok(0) | Err(_) => {
                    tracing::debug!("the client left during a delay");
                    return;
                }
                Ok(n) => early.extend_from_slice(&scratch[..n]),
            },
        }
    }
    sleep.await;
}
