//! The POP3 listeners (`--pop3-port`, and `--pop3s-port` for implicit TLS):
//! one core [`pop3::Session`] per TCP connection, sharing the SMTP
//! listener's connection slots, TLS configuration and shutdown, and the
//! connection loop ([`Connection`]), with the IMAP listeners.
//!
//! The connection writes what the session transmits (a retrieval in chunks,
//! each written before the next is made, so a client that does not read
//! holds one chunk), answers its requests through the API (a login's
//! mailbox is an O(1) snapshot taken under the lock and listed outside it; a
//! message is looked up by id in the live store; QUIT's deletions are
//! `DELETE /api/emails/:id` requests in the login's scope, so events,
//! storage and inboxes see them as they see any other delete), and sleeps
//! until the session's idle deadline when no bytes come.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use mailjar_core::api::Scope;
use mailjar_core::pop3::{self, Entry, Output, Session};
use mailjar_core::store::{Email, Snapshot};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use crate::readers::Listeners;
use crate::readers::connection::{Connection, Protocol, Request, reader_session};
use crate::readers::{self, ReaderContext};
use crate::state::Shared;

/// What every POP3 connection needs.
pub type Pop3Context = ReaderContext<pop3::Config>;

/// Accepts connections until shutdown; each holds a permit of `slots` (the SMTP listener's) while open.
pub async fn serve(listener: TcpListener, slots: Arc<Semaphore>, context: Pop3Context) {
    let busy: &[u8] = b"-ERR [SYS/TEMP] too many connections\r\n";
    let run = Connection::<Pop3>::run;
    readers::serve(listener, slots, context, ("POP3", busy), run).await;
}

reader_session!(Session, Entry, request);

/// A POP3 request in the connection loop's terms.
fn request(output: Output) -> Request {
    match output {
        Output::Login { user, password } => Request::Login { user, password },
        Output::Fetch(id) => Request::Message(id),
        // RETR marks what it sends seen for every reader.
        Output::Seen(id) => Request::Seen {
            ids: vec![id],
            seen: true,
        },
        Output::Delete(ids) => Request::Delete(ids),
        Output::StartTls => Request::StartTls,
        Output::Close => Request::Close,
    }
}

/// A POP3 connection follows nothing besides its client: its maildrop is
/// the one its login opened.
struct Pop3;

impl Protocol for Pop3 {
    type Session = Session;
    type Config = pop3::Config;
    type Event = Infallible;
    const READ_BYTES: usize = 16 * 1024;
    const OUT_BYTES: usize = pop3::CHUNK;
    // The chunk buffer stays for the connection's life.
    const OUT_KEPT: usize = usize::MAX;
    const STARTTLS: &'static str = "STLS";

    fn start(context: &Pop3Context, tls: bool) -> (Session, Pop3) {
        let mut session = Session::new(context.config.clone(), 0);
        if tls {
            session.set_tls();
        }
        (session, Pop3)
    }

    fn entry(email: &Email, _: &Snapshot) -> Entry {
        Entry {
            id: email.id,
            size: email.raw().len() as u64,
        }
    }

    fn following(_: &Session) -> bool {
        false
    }

    fn next_event(&mut self) -> impl Future<Output = Infallible> + Send + '_ {
        std::future::pending()
    }

    fn handle_event(
        &mut self,
        event: Infallible,
        _: &mut Session,
        _: &Arc<Shared>,
        _: Scope,
    ) -> bool {
        match event {}
    }
}

/// The bound POP3 listeners (`--pop3-port`, `--pop3s-port`).
pub fn listeners(plain: Option<TcpListener>, implicit_tls: Option<TcpListener>) -> Listeners {
    Listeners::new(["pop3", "pop3s"], plain, implicit_tls)
}
