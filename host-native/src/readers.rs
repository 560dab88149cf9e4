//! What the mail readers' listeners (POP3 and IMAP) share: the context of a
//! connection, the accept loop over the SMTP listener's connection slots,
//! implicit TLS, whose mailbox a login opens, deletes in a login's scope,
//! and the pair of bound listeners (plain and implicit TLS) of a protocol;
//! the connection loop they run is in [`connection`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use mailjar_core::api::{Request, Scope};
use mailjar_core::id::MessageId;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::accept::{self, Accepted};
use crate::access::Access;
use crate::sessions::Holder;
use crate::state::{Answer, Shared};
use crate::tls::{SmtpStream, Tls};

pub mod connection;

/// What every connection of a mail reader's listener needs.
#[derive(Clone)]
pub struct ReaderContext<C> {
    /// The protocol's session configuration.
    pub config: C,
    /// The store, through the API.
    pub shared: Arc<Shared>,
    /// `--admin-token`: logins are inboxes' SMTP credentials, or the admin
    /// token as the password; without it any login opens every message.
    pub access: Option<Arc<Access>>,
    /// TLS, when configured.
    pub tls: Option<Tls>,
    /// This listener is implicit TLS (`--pop3s-port`, `--imaps-port`).
    pub implicit_tls: bool,
    /// Becomes true when the server shuts down.
    pub shutdown: watch::Receiver<bool>,
}

/// Accepts connections until shutdown and runs `run` on each in a task of its
/// own, holding a permit of `slots` (the SMTP listener's) while it is open;
/// one over the cap gets `busy` (the protocol's own refusal) and is closed.
pub async fn serve<C, F, Fut>(
    listener: TcpListener,
    slots: Arc<Semaphore>,
    context: ReaderContext<C>,
    (name, busy): (&'static str, &'static [u8]),
    run: F,
) where
    C: Clone + Send + Sync + 'static,
    F: Fn(TcpStream, ReaderContext<C>) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = std::io::Result<()>> + Send + 'static,
{
    let mut shutdown = context.shutdown.clone();
    while let Some(accepted) = accept::next(&listener, &slots, &mut shutdown, name).await {
        match accepted {
            Accepted::Open(stream, peer, permit) => {
                let context = context.clone();
                tokio::spawn(async move {
                    if let Err(e) = run(stream, context).await {
                        tracing::debug!(%peer, "{name} connection ended: {e}");
                    }
                    drop(permit);
                });
            }
            Accepted::Refused(stream, _) => accept::refuse(stream, busy.to_vec()),
        }
    }
}

/// The connection's stream: TLS at once on an implicit-TLS listener (true
/// then), else the plain TCP stream.
pub async fn open<C>(
    tcp: TcpStream,
    context: &ReaderContext<C>,
) -> std::io::Result<(SmtpStream, bool)> {
    match (&context.tls, context.implicit_tls) {
        (Some(tls), true) => Ok((tls.accept(tcp).await?.0, true)),
        _ => Ok((SmtpStream::Plain(tcp), false)),
    }
}

/// Whose mail these credentials open: everything without `--admin-token`
/// or with the admin token as the password, else the inbox whose SMTP
/// credentials they are; None for a wrong login.
pub fn login_scope<C>(context: &ReaderContext<C>, user: &str, password: &str) -> Option<Scope> {
    let shared = &context.shared;
    match &context.access {
        None => Some(Scope::All),
        Some(access) => match access.holder_of(shared, password) {
            Some(Holder::Admin) => Some(Scope::All),
            _ => shared.call(|api| api.inboxes().mailbox_of_login(user, password)),
        },
    }
}

/// Deletes these in `scope`, as `DELETE /api/emails/:id` does (so events,
/// storage and inboxes see it); true when each is gone (already gone counts).
pub async fn delete(shared: &Arc<Shared>, scope: Scope, ids: &[MessageId]) -> bool {
    let mut all = true;
    for id in ids {
        let mut request = Request::new("DELETE", &format!("/api/emails/{id}"));
        request.scope = scope;
        let status = match shared.handle(&request).await {
            Answer::Response(response) => response.status,
            Answer::Subscribe(_) => 500,
        };
        all &= status == 200 || status == 404;
    }
    all
}

/// Sleeps until `deadline`; forever without one.
pub async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A protocol's bound listeners (plain, and implicit TLS), before they serve.
#[derive(Default)]
pub struct Listeners {
    /// The keys `/health` and `--ready-json` name them by (`pop3`, `pop3s`).
    keys: [&'static str; 2],
    /// The plain listener (STLS / STARTTLS when TLS is configured).
    plain: Option<TcpListener>,
    /// The implicit-TLS listener.
    implicit_tls: Option<TcpListener>,
}

impl Listeners {
    /// The listeners named `keys` (plain, then implicit TLS).
    pub fn new(
        keys: [&'static str; 2],
        plain: Option<TcpListener>,
        implicit_tls: Option<TcpListener>,
    ) -> Listeners {
        Listeners {
            keys,
            plain,
            implicit_tls,
        }
    }

    /// The bound addresses by the key `/health` and `--ready-json` name them.
    pub fn addresses(&self) -> Vec<(&'static str, SocketAddr)> {
        [
            (self.keys[0], &self.plain),
            (self.keys[1], &self.implicit_tls),
        ]
        .into_iter()
        .filter_map(|(key, l)| Some((key, l.as_ref()?.local_addr().ok()?)))
        .collect()
    }

    /// Serves both with `serve` until shutdown; the tasks to await.
    pub fn spawn<C, F, Fut>(
        self,
        slots: &Arc<Semaphore>,
        context: &ReaderContext<C>,
        serve: F,
    ) -> Vec<JoinHandle<()>>
    where
        C: Clone,
        F: Fn(TcpListener, Arc<Semaphore>, ReaderContext<C>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        [(self.plain, false), (self.implicit_tls, true)]
            .into_iter()
            .filter_map(|(listener, implicit_tls)| {
                let context = ReaderContext {
                    implicit_tls,
                    ..context.clone()
                };
                Some(tokio::spawn(serve(listener?, slots.clone(), context)))
            })
            .collect()
    }
}
