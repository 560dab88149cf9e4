//! The IMAP listeners (`--imap-port`, and `--imaps-port` for implicit TLS):
//! one core [`imap::Session`] per TCP connection, sharing the SMTP
//! listener's connection slots, TLS configuration and shutdown, and the
//! connection loop ([`Connection`]), with the POP3 listeners.
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

use mailjar_core::api::Scope;
use mailjar_core::id::MessageId;
use mailjar_core::imap::{self, Entry, Session};
use mailjar_core::store::{Email, Snapshot};
use tokio::net::TcpListener;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Semaphore, broadcast, watch};

pub use crate::readers::Listeners;
use crate::readers::connection::{Connection, Protocol, reader_session};
use crate::readers::{self, ReaderContext};
use crate::state::Shared;

/// The most bytes read at once (an IDLE connection's buffer).
const READ_BYTES: usize = 4096;

/// What every IMAP connection needs.
pub type ImapContext = ReaderContext<imap::Config>;

/// Accepts connections until shutdown; each holds a permit of `slots` (the SMTP listener's) while open.
pub async fn serve(listener: TcpListener, slots: Arc<Semaphore>, context: ImapContext) {
    let busy: &[u8] = b"* BYE too many connections\r\n";
    let run = Connection::<Imap>::run;
    readers::serve(listener, slots, context, ("IMAP", busy), run).await;
}

// The connection loop speaks IMAP's requests.
reader_session!(Session, Entry, std::convert::identity);

/// What an IMAP connection follows besides its client, once logged in.
struct Imap {
    /// Moves when the store changed (new mail, deletions).
    head: watch::Receiver<(usize, Option<MessageId>)>,
    /// Seen flags changed by any reader (this session's own changes come
    /// back too and change nothing).
    seen: broadcast::Receiver<(MessageId, bool)>,
}

/// What an IMAP connection heard besides its client.
enum Event {
    /// The store moved.
    Moved,
    /// A message's seen flag changed.
    Seen(MessageId, bool),
    /// More seen flags changed than the ring holds.
    Lagged,
    /// The server is going away.
    Closed,
}

impl Protocol for Imap {
    type Session = Session;
    type Config = imap::Config;
    type Event = Event;
    const READ_BYTES: usize = READ_BYTES;
    const OUT_BYTES: usize = 0;
    // An idle connection keeps no large buffer (a FETCH response grew it).
    const OUT_KEPT: usize = READ_BYTES;
    const STARTTLS: &'static str = "STARTTLS";

    fn start(context: &ImapContext, tls: bool) -> (Session, Imap) {
        let config = imap::Config {
            uid_validity: context.shared.call(|api| api.uid_validity()),
            ..context.config.clone()
        };
        let mut session = Session::new(config, 0);
        if tls {
            session.set_tls();
        }
        let head = context.shared.store_changes();
        let seen = context.shared.seen_changes();
        (session, Imap { head, seen })
    }

    fn entry(email: &Email, snapshot: &Snapshot) -> Entry {
        Entry::of(email, snapshot.is_seen(email.id))
    }

    fn logging_in(&mut self) {
        self.head.mark_unchanged();
    }

    fn following(session: &Session) -> bool {
        session.logged_in()
    }

    async fn next_event(&mut self) -> Event {
        tokio::select! {
            changed = self.head.changed() => match changed {
                Ok(()) => Event::Moved,
                Err(_) => Event::Closed,
            },
            change = self.seen.recv() => match change {
                Ok((id, seen)) => Event::Seen(id, seen),
                Err(RecvError::Lagged(_)) => Event::Lagged,
                Err(RecvError::Closed) => Event::Closed,
            },
        }
    }

    fn handle_event(
        &mut self,
        event: Event,
        session: &mut Session,
        shared: &Arc<Shared>,
        scope: Scope,
    ) -> bool {
        match event {
            Event::Moved => self.refresh(session, shared, scope),
            Event::Seen(id, seen) => session.handle_seen(id, seen),
            Event::Lagged => rescan_seen(session, shared, scope),
            Event::Closed => return false,
        }
        true
    }
}

impl Imap {
    /// The store moved: the session compares a new snapshot (taken in O(1)
    /// under the lock) with what it knows, outside the lock.
    fn refresh(&mut self, session: &mut Session, shared: &Arc<Shared>, scope: Scope) {
        self.head.mark_unchanged();
        let snapshot = shared.call(|api| api.inboxes().mailbox(scope));
        session.refresh(&snapshot);
    }
}

/// More seen flags changed than the ring holds while this session was
/// busy: each message it knows takes its flag from a new snapshot (taken
/// in O(1) under the lock, read outside it).
fn rescan_seen(session: &mut Session, shared: &Arc<Shared>, scope: Scope) {
    let snapshot = shared.call(|api| api.inboxes().mailbox(scope));
    let flags: Vec<(MessageId, bool)> = session
        .known_ids()
        .map(|id| (id, snapshot.is_seen(id)))
        .collect();
    for (id, seen) in flags {
        session.handle_seen(id, seen);
    }
}

/// The bound IMAP listeners (`--imap-port`, `--imaps-port`).
pub fn listeners(plain: Option<TcpListener>, implicit_tls: Option<TcpListener>) -> Listeners {
    Listeners::new(["imap", "imaps"], plain, implicit_tls)
}
