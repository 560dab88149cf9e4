//! Carrying out fault rules on a connection: each one that fires is logged,
//! and a delay is waited here, after the replies before it are written.

use std::time::Duration;

use mailjar_core::faults::{Action, Fired};
use mailjar_core::smtp::Output;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Logs a fired rule; for a delay, writes the replies gathered in `out` so
/// far (the client sees them on time; a client that reads nothing for
/// `write_timeout` ends the connection) and then waits.
pub async fn fired<S: AsyncWrite + Unpin>(
    stream: &mut S,
    out: &mut Vec<u8>,
    fired: &Fired,
    write_timeout: Duration,
) -> std::io::Result<()> {
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
            tokio::time::sleep(Duration::from_millis(*ms)).await;
        }
    }
    Ok(())
}

/// Carries out what the session said when the connection opened (the greeting,
/// or what a `connect` rule says instead) and writes it; true when the
/// connection is to close.
pub async fn carry_out<S: AsyncWrite + Unpin>(
    stream: &mut S,
    out: &mut Vec<u8>,
    outputs: Vec<Output>,
    write_timeout: Duration,
) -> std::io::Result<bool> {
    let mut close = false;
    for output in outputs {
        match output {
            Output::Reply(reply) => reply.write_to(out),
            Output::Fault(f) => fired(stream, out, &f, write_timeout).await?,
            Output::Close => close = true,
            // Nothing is received before the greeting.
            Output::Message(_) | Output::StartTls => {}
        }
    }
    tokio::time::timeout(write_timeout, stream.write_all(out))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "greeting not read"))??;
    out.clear();
    Ok(close)
}
