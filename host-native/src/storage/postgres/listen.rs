//! The `LISTEN mailjar` connection: a thread that hears every other node's
//! commit (each write transaction sends `NOTIFY mailjar, '<node>'`) and
//! queues a catch-up for the writer. No polling: besides notifications, it
//! asks for one catch-up after each (re)connect, and a slow safety one
//! every [`SAFETY`] in case a notification was lost with a connection.

use std::sync::mpsc::Sender;
use std::time::Duration;

use postgres::NoTls;
use postgres::fallible_iterator::FallibleIterator;

use crate::storage::writer::Job;

/// How long the listener waits for a notification before it asks for a catch-up anyway.
const SAFETY: Duration = Duration::from_secs(30);

/// The first pause before a reconnect; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// What a payload asks of this node's writer: nothing for its own commit;
/// a catch-up unless it holds the id named, or a whole catch-up.
fn job_for(payload: &str, node: &str) -> Option<Job> {
    let (from, last) = match payload.split_once(':') {
        Some((from, last)) => (from, super::hex_id(last)),
        None => (payload, None),
    };
    if from == node {
        return None;
    }
    Some(last.map_or(Job::CatchUp, Job::Heard))
}

/// Starts the listener thread; it ends once the writer is gone.
pub(super) fn spawn(
    config: postgres::Config,
    node: String,
    url: String,
    jobs: Sender<Job>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("mailjar-listen".into())
        .spawn(move || run(&config, &node, &url, &jobs))
        .map(drop)
}

fn run(config: &postgres::Config, node: &str, url: &str, jobs: &Sender<Job>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        match config.connect(NoTls) {
            Ok(mut client) => {
                backoff = FIRST_BACKOFF;
                if let Err(e) = client.batch_execute("LISTEN mailjar") {
                    tracing::warn!("{url}: LISTEN failed: {e}");
                } else if !listen(&mut client, node, url, jobs) {
                    return;
                }
            }
            Err(e) => tracing::debug!("{url}: the listener cannot connect: {e}"),
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Queues a catch-up for each other node's commit until the connection
/// breaks (true: reconnect) or the writer is gone (false).
fn listen(client: &mut postgres::Client, node: &str, url: &str, jobs: &Sender<Job>) -> bool {
    // What was committed while this connection was not listening.
    if jobs.send(Job::CatchUp).is_err() {
        return false;
    }
    loop {
        {
            let mut notifications = client.notifications();
            let mut heard = notifications.timeout_iter(SAFETY);
            loop {
                match heard.next() {
                    Ok(Some(n)) => {
                        let job = job_for(n.payload(), node);
                        if job.is_some_and(|job| jobs.send(job).is_err()) {
                            return false;
                        }
                    }
                    // Quiet for a while: one safety catch-up.
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!("{url}: the listening connection broke ({e}); reconnecting");
                        return true;
                    }
                }
            }
        }
        if client.is_closed() {
            return true;
        }
        if jobs.send(Job::CatchUp).is_err() {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mailjar_core::id::MessageId;

    /// The payload of a commit's `NOTIFY mailjar` (as `mailjar_write` sends
    /// it): the node's id, and after a colon the last id it committed when it
    /// committed messages and nothing else.
    fn payload(node: &str, last: Option<MessageId>) -> String {
        match last {
            Some(id) => format!("{node}:{:032x}", id.as_u128()),
            None => node.to_owned(),
        }
    }

    #[test]
    fn a_payload_names_the_node_and_the_last_id_of_messages_alone() {
        let id = MessageId::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert!(job_for(&payload("a1", Some(id)), "a1").is_none());
        assert!(job_for(&payload("a1", None), "a1").is_none());
        assert!(matches!(job_for(&payload("a1", Some(id)), "b2"), Some(Job::Heard(h)) if h == id));
        assert!(matches!(
            job_for(&payload("a1", None), "b2"),
            Some(Job::CatchUp)
        ));
    }
}
