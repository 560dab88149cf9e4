//! The checks a tester runs on a stored message that need the network, on
//! request only (never on arrival): `GET /api/emails/:id/checks/{links,spam,auth}`.
//! They are answered here, before a request reaches the core's API; the
//! HTML check is the core's (`/checks/html`, a job of its API).

pub mod auth;
pub mod guard;
pub mod links;
pub mod spam;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use mail_auth::MessageAuthenticator;
use mail_auth::hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use mail_auth::hickory_resolver::net::runtime::TokioRuntimeProvider;
use mail_auth::hickory_resolver::{TokioResolver, system_conf};
use mailjar_core::api::{Request, Response};

use crate::config::CheckSettings;
use crate::state::Shared;

/// Checks running at once, all kinds together: each may hold a copy of a
/// message's HTML or a spamd answer, so their memory is bounded by this
/// many, not by the number of clients asking (README, "Resource model").
pub const MAX_RUNNING: usize = 4;

/// What the checks need: the flags at start, the resolvers and clients at
/// the first check that uses them (built at start, they were a third of an
/// idle server's heap).
pub struct Checks {
    /// One permit per running check.
    running: tokio::sync::Semaphore,
    spamd: Option<String>,
    settings: CheckSettings,
    /// The server's listening addresses, which the link check refuses.
    listening: Vec<SocketAddr>,
    domain: String,
    clients: tokio::sync::OnceCell<Clients>,
}

/// The resolvers and clients of the checks that need the network.
struct Clients {
    /// `Err` when the HTTP client could not be built: the check answers 503
    /// rather than fall back to a client without the guard.
    links: Result<Arc<links::LinkChecker>, String>,
    authenticator: Result<MessageAuthenticator, String>,
}

impl Checks {
    /// The checks as the flags set them; `own` are the server's listening addresses.
    pub fn new(settings: &CheckSettings, domain: &str, own: &[SocketAddr]) -> Checks {
        Checks {
            running: tokio::sync::Semaphore::new(MAX_RUNNING),
            spamd: settings.spamassassin.clone(),
            settings: settings.clone(),
            listening: own.to_vec(),
            domain: domain.to_owned(),
            clients: tokio::sync::OnceCell::new(),
        }
    }

    /// The resolvers and clients, built by the first check that asks.
    async fn clients(&self) -> &Clients {
        self.clients
            .get_or_init(|| async { Clients::new(&self.settings, &self.listening) })
            .await
    }
}

impl Clients {
    fn new(settings: &CheckSettings, own: &[SocketAddr]) -> Clients {
        let (config, options) = resolver_config(settings.dns);
        let resolver = config.clone().and_then(|config| {
            TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
                .with_options(options.clone())
                .build()
                .map_err(|e| format!("no DNS resolver: {e}"))
        });
        let guard = guard::Guard {
            allow_private: settings.link_check_allow_private,
            own: own_addresses(own),
        };
        let resolver = guard::GuardedResolver {
            resolver: Arc::new(resolver),
            guard: guard.clone(),
        };
        let links = crate::tls::client_config().map(|tls| {
            Arc::new(links::LinkChecker {
                tls,
                resolver,
                guard,
                timeout: settings.link_check_timeout,
                max_links: settings.link_check_max_links,
            })
        });
        let authenticator = config.and_then(|config| {
            MessageAuthenticator::new(config, options).map_err(|e| e.to_string())
        });
        Clients {
            links,
            authenticator,
        }
    }
}

/// `--dns HOST:PORT` (UDP, TCP for long answers), else the system's configuration.
fn resolver_config(dns: Option<SocketAddr>) -> (Result<ResolverConfig, String>, ResolverOpts) {
    let mut options = ResolverOpts::default();
    options.timeout = Duration::from_secs(3);
    options.attempts = 1;
    let Some(dns) = dns else {
        return match system_conf::read_system_conf() {
            Ok((config, mut system)) => {
                system.timeout = options.timeout;
                (Ok(config), system)
            }
            Err(e) => (Err(format!("no DNS resolver: {e} (see --dns)")), options),
        };
    };
    let mut server = NameServerConfig::udp_and_tcp(dns.ip());
    for connection in &mut server.connections {
        connection.port = dns.port();
    }
    (Ok(ResolverConfig::from_name_servers(vec![server])), options)
}

/// The listeners' addresses, and every interface's when one listens on all of them.
fn own_addresses(listeners: &[SocketAddr]) -> Vec<IpAddr> {
    let mut own: Vec<IpAddr> = listeners.iter().map(|a| a.ip().to_canonical()).collect();
    if let Ok(interfaces) = if_addrs::get_if_addrs() {
        own.extend(interfaces.iter().map(|i| i.ip().to_canonical()));
    }
    own.retain(|ip| !ip.is_unspecified());
    own.sort();
    own.dedup();
    own
}

/// Answers a check request, or `None` when the request is not one. The
/// message is looked up as the core's routes do, in the request's scope.
pub async fn route(checks: &Checks, shared: &Shared, request: &Request) -> Option<Response> {
    let (id, kind) = request
        .path
        .strip_prefix("/api/emails/")?
        .split_once("/checks/")?;
    if !matches!(kind, "links" | "spam" | "auth") {
        return None;
    }
    // Not even HEAD: a check does work (and the links check fetches) on every call.
    if request.method != "GET" {
        let mut response = Response::error(405, "the checks answer GET only");
        response.headers.push(("allow", "GET".into()));
        return Some(response);
    }
    let email = match shared.email(request, id) {
        Ok(email) => email,
        Err(e) => return Some(e.response()),
    };
    // Closed only at shutdown; then there is nothing to run.
    let Ok(_permit) = checks.running.acquire().await else {
        return Some(Response::error(503, "shutting down"));
    };
    Some(match kind {
        "links" => match &checks.clients().await.links {
            Ok(checker) => {
                let links = email.links().iter().map(|l| l.to_string()).collect();
                Response::json(200, &checker.check(links).await)
            }
            Err(e) => Response::error(503, &format!("the link check is unavailable: {e}")),
        },
        "spam" => match &checks.spamd {
            None => Response::error(404, "no spam checker configured"),
            Some(address) => match spam::check(address, email.raw()).await {
                Ok(report) => Response::json(200, &report),
                Err(e) => Response::error(503, &e),
            },
        },
        _ => auth(checks, &email).await,
    })
}

async fn auth(checks: &Checks, email: &mailjar_core::store::Email) -> Response {
    let authenticator = match &checks.clients().await.authenticator {
        Ok(a) => a,
        Err(e) => return Response::error(503, e),
    };
    let smtp = email.smtp();
    let session = auth::Session {
        mail_from: &email.envelope.from,
        helo: smtp.helo.as_deref(),
        remote_addr: smtp.remote_addr.as_deref(),
        host_domain: &checks.domain,
    };
    match auth::check(authenticator, email.raw(), &session).await {
        Ok(report) => Response::json(200, &report),
        Err(e) => Response::error(422, &e),
    }
}
