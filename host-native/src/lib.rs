//! The native host of mailjar: tokio sockets for SMTP, warp routes over a
//! small HTTP/1.1 driver of our own for the HTTP API, both driving the
//! sans-IO core in `mailjar-core`.

pub mod accept;
pub mod access;
pub mod checks;
pub mod config;
pub mod events;
pub mod faults;
pub mod http1;
pub mod http_server;
pub mod http_tls;
pub mod imap_server;
pub mod inbox_checks;
pub mod metrics;
pub mod pop3_server;
pub mod proxy_protocol;
pub mod readers;
pub mod relay_auto;
pub mod release;
pub mod send;
pub mod sessions;
pub mod smtp_load;
pub mod smtp_server;
pub mod state;
pub mod storage;
pub mod testing;
pub mod tls;
pub mod ui;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;

use mailjar_core::api::{Address, Api, ApiConfig};
use mailjar_core::smtp;
use mailjar_core::store::StoreLimits;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

pub use config::Settings;

/// A server whose sockets are bound, ready to run.
pub struct Server {
    settings: Settings,
    smtp: TcpListener,
    http: TcpListener,
    /// The implicit-TLS listener (`--smtps-port`).
    smtps: Option<TcpListener>,
    /// `--pop3-port`, `--pop3s-port`.
    pop3: pop3_server::Listeners,
    /// `--imap-port`, `--imaps-port`.
    imap: imap_server::Listeners,
    /// TLS, when configured.
    tls: Option<tls::Tls>,
    shared: Arc<Shared>,
    /// Access control, with `--admin-token`.
    access: Option<Arc<access::Access>>,
    smtp_load: Arc<smtp_load::SmtpLoad>,
    http_connections: http1::HttpConnections,
    /// With `--relay`: where releases go.
    relay: Option<Arc<release::Relay>>,
}

use state::Shared;

/// File descriptors kept for what is not a connection: listeners, the
/// runtime, logs, and connections being refused over a cap.
const FD_SLACK: u64 = 128;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and warns when the
/// connection caps cannot fit in it.
///
/// Uses the `rlimit` crate: it wraps getrlimit/setrlimit (and macOS's
/// `OPEN_MAX` quirk) so this crate needs no unsafe code of its own, and does
/// nothing on platforms without the limit.
fn raise_fd_limit(settings: &Settings) {
    let needed = fds_needed(settings);
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(soft) => {
            if let Some(warning) = fd_warning(soft, needed) {
                tracing::warn!("{warning}");
            } else {
                tracing::debug!(soft, needed, "file descriptor limit");
            }
        }
        Err(e) => tracing::warn!("could not raise the file descriptor limit (RLIMIT_NOFILE): {e}"),
    }
}

/// The descriptors the caps may use at once: every SMTP and HTTP connection plus [`FD_SLACK`].
fn fds_needed(settings: &Settings) -> u64 {
    let connections = settings
        .max_connections
        .saturating_add(settings.max_http_connections);
    u64::try_from(connections)
        .unwrap_or(u64::MAX)
        .saturating_add(FD_SLACK)
}

/// The warning to give when `needed` descriptors do not fit in the `soft` limit.
fn fd_warning(soft: u64, needed: u64) -> Option<String> {
    (soft < needed).then(|| {
        format!(
            "the file descriptor limit ({soft}) is below what --max-connections and \
             --max-http-connections may use ({needed} with {FD_SLACK} to spare): past it, \
             new connections fail to be accepted; lower the caps or raise the hard limit (ulimit -Hn)"
        )
    })
}

/// How many connections may wait to be accepted: tests open hundreds at once.
const ACCEPT_BACKLOG: u32 = 4096;

/// Binds a listener with a deep accept queue, reusing the address of a server
/// just stopped. A failure names the listener and its address:
/// `SMTP 127.0.0.1:1025: address in use`.
/// [`listen`] on `host:port` when a port is given.
fn listen_on(
    name: &str,
    host: std::net::IpAddr,
    port: Option<u16>,
) -> std::io::Result<Option<TcpListener>> {
    port.map(|port| listen(name, SocketAddr::new(host, port)))
        .transpose()
}

fn listen(name: &str, addr: SocketAddr) -> std::io::Result<TcpListener> {
    let bound = (|| {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(ACCEPT_BACKLOG)
    })();
    bound.map_err(|e| {
        let reason = match e.kind() {
            std::io::ErrorKind::AddrInUse => "address in use".to_owned(),
            std::io::ErrorKind::AddrNotAvailable => "not an address of this machine".to_owned(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
            _ => e.to_string(),
        };
        std::io::Error::new(e.kind(), format!("{name} {addr}: {reason}"))
    })
}

/// The limits the host enforces, as `/health` reports them under `limits`.
fn host_limits(settings: &Settings) -> Vec<(&'static str, u64)> {
    let mut limits = vec![
        ("maxInflightBytes", settings.max_inflight_bytes as u64),
        ("maxConnections", settings.max_connections as u64),
        ("maxLineBytes", settings.max_line_bytes as u64),
        ("idleTimeoutMs", ms(settings.idle_timeout)),
        ("smtpCommandTimeoutMs", ms(settings.smtp_command_timeout)),
        ("smtpDataTimeoutMs", ms(settings.smtp_data_timeout)),
        ("httpHeadTimeoutMs", ms(settings.http_head_timeout)),
        ("httpBodyTimeoutMs", ms(settings.http_body_timeout)),
        ("maxHttpConnections", settings.max_http_connections as u64),
        (
            "reservedHttpConnections",
            settings.reserved_http_connections() as u64,
        ),
        ("tlsHandshakeTimeoutMs", ms(settings.tls_handshake_timeout)),
        (
            "maxCompiledPatternBytes",
            mailjar_core::jsregex::MAX_COMPILED_BYTES as u64,
        ),
        (
            "backtrackLimit",
            mailjar_core::jsregex::BACKTRACK_LIMIT as u64,
        ),
    ];
    if settings.admin_token.is_some() {
        limits.push(("maxSessions", settings.max_sessions as u64));
    }
    if !settings.webhooks.webhook.is_empty() {
        limits.push(("webhookQueue", settings.webhooks.webhook_queue as u64));
    }
    if !settings.relay.relay_auto.is_empty() {
        limits.push(("relayQueue", settings.relay.relay_queue as u64));
    }
    limits
}

/// Access control with `--admin-token`; a warning when the API is open to the network without it.
fn access_control(settings: &Settings) -> Option<Arc<access::Access>> {
    if settings.open_to_the_network() {
        tracing::warn!(
            "the HTTP API listens on {} without --admin-token: anyone who reaches it reads and deletes every message",
            settings.http_host
        );
    }
    settings
        .admin_token
        .clone()
        .map(|token| Arc::new(access::Access::new(token, settings.max_sessions)))
}

/// The host's live counts in `/health`.
fn live_counts(
    smtp_load: &Arc<smtp_load::SmtpLoad>,
    http_connections: &http1::HttpConnections,
    access: &Option<Arc<access::Access>>,
) -> mailjar_core::api::LiveCounts {
    let (load, open_http, sessions) = (smtp_load.clone(), http_connections.clone(), access.clone());
    Box::new(move || {
        let mut counts = vec![
            ("inflightBytes", load.inflight_bytes() as u64),
            ("smtpConnections", load.connections() as u64),
            ("httpConnections", open_http.open() as u64),
        ];
        if let Some(access) = &sessions {
            counts.push(("sessions", access.sessions().len() as u64));
        }
        counts
    })
}

impl Server {
    /// Binds both listeners; fails when an address is taken or not local.
    pub async fn bind(settings: Settings) -> std::io::Result<Server> {
        // A library caller may not have validated: a bad --auth must not mean "anyone".
        settings
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        raise_fd_limit(&settings);
        // Writes --tls-cert-out before any listener is bound: once a port
        // answers, the certificate to trust is there.
        let tls = tls::load(&settings.tls_options()).map_err(std::io::Error::other)?;
        let smtp = listen(
            "SMTP",
            SocketAddr::new(settings.smtp_host, settings.smtp_port),
        )?;
        let http = listen(
            "HTTP",
            SocketAddr::new(settings.http_host, settings.http_port),
        )?;
        let smtps = match settings.smtps_port {
            Some(port) => Some(listen("SMTPS", SocketAddr::new(settings.smtp_host, port))?),
            None => None,
        };
        let pop3 = pop3_server::listeners(
            listen_on("POP3", settings.smtp_host, settings.pop3_port)?,
            listen_on("POP3S", settings.smtp_host, settings.pop3s_port)?,
        );
        let imap = imap_server::listeners(
            listen_on("IMAP", settings.smtp_host, settings.imap_port)?,
            listen_on("IMAPS", settings.smtp_host, settings.imaps_port)?,
        );
        let address = |a: SocketAddr| Address {
            host: a.ip().to_string(),
            port: a.port(),
        };
        let listeners = smtps
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| ("smtps", a))
            .into_iter()
            .chain(pop3.addresses())
            .chain(imap.addresses())
            .map(|(key, a)| (key.to_owned(), address(a)))
            .collect();
        let smtp_load = Arc::new(smtp_load::SmtpLoad::new(settings.max_inflight_bytes));
        let mut api = Api::new(ApiConfig {
            api: address(http.local_addr()?),
            smtp: address(smtp.local_addr()?),
            listeners,
            domain: settings.domain.clone(),
            store: StoreLimits {
                max_messages: settings.max_messages,
                max_bytes: settings.max_store_bytes,
            },
            max_message_bytes: settings.max_message_bytes,
            max_recipients: settings.max_recipients,
            max_waits: settings.max_waits,
            max_subscribers: settings.stream_slots(),
            event_buffer: settings.event_buffer,
            pattern_budget_ms: u64::try_from(settings.pattern_budget.as_millis())
                .unwrap_or(u64::MAX),
            host_limits: host_limits(&settings),
            max_faults: settings.max_faults,
            durable: settings.data_dir.is_some() || settings.database.is_some(),
            // Inboxes come with `--admin-token` (the host's access control).
            access_control: settings.admin_token.is_some(),
            open: settings.open_to_the_network(),
            reject_unrouted: settings.unrouted == config::Unrouted::Reject,
            fault_seed: state::seed(),
        });
        // Memory-only, the store is new at each start, and so is its
        // UIDVALIDITY; storage below puts back the one kept with the messages.
        api.set_uid_validity(state::seed() as u32);
        let access = access_control(&settings);
        let http_connections = http1::HttpConnections::new(settings.max_http_connections);
        api.set_live_counts(live_counts(&smtp_load, &http_connections, &access));
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        api.set_max_age(
            settings
                .max_age
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        );
        let storage = match &settings.data_dir {
            None if settings.database.is_some() => {
                let url = settings.database.as_deref().unwrap_or_default();
                Some(
                    storage::postgres::open(url, &mut api, state::now_ms())
                        .map_err(std::io::Error::other)?,
                )
            }
            Some(dir) => {
                let options = storage::Options {
                    dir: dir.clone(),
                    fsync: settings.fsync,
                };
                Some(
                    storage::open(&options, &mut api, state::now_ms())
                        .map_err(std::io::Error::other)?,
                )
            }
            None => None,
        };
        let shared = Arc::new(Shared::new(api, workers));
        shared.metrics.set_smtp_load(smtp_load.clone());
        if let Some(webhooks) =
            webhooks::Webhooks::start(&settings.webhooks).map_err(std::io::Error::other)?
        {
            let _ = shared.webhooks.set(webhooks);
        }
        let relay =
            release::Relay::from_settings(&settings.relay).map_err(std::io::Error::other)?;
        let relay_auto = relay_auto::AutoRelay::start(
            &settings.relay.relay_auto,
            settings.relay.relay_queue,
            relay.clone(),
            shared.clone(),
        )
        .map_err(std::io::Error::other)?;
        if let Some(relay_auto) = relay_auto {
            let _ = shared.relay_auto.set(relay_auto);
        }
        if let Some(storage) = storage {
            shared.start_writer(storage)?;
        }
        Ok(Server {
            relay,
            access,
            shared,
            smtp_load,
            http_connections,
            settings,
            smtp,
            http,
            smtps,
            pop3,
            imap,
            tls,
        })
    }

    /// The bound SMTP address.
    pub fn smtp_addr(&self) -> std::io::Result<SocketAddr> {
        self.smtp.local_addr()
    }

    /// The bound implicit-TLS SMTP address, when `--smtps-port` is given.
    pub fn smtps_addr(&self) -> Option<std::io::Result<SocketAddr>> {
        self.smtps.as_ref().map(TcpListener::local_addr)
    }

    /// The bound POP3 and IMAP listeners' addresses, by their `--ready-json` keys.
    pub fn mail_reader_addrs(&self) -> Vec<(&'static str, SocketAddr)> {
        let mut addresses = self.pop3.addresses();
        addresses.extend(self.imap.addresses());
        addresses
    }

    /// The bound HTTP address.
    pub fn http_addr(&self) -> std::io::Result<SocketAddr> {
        self.http.local_addr()
    }

    /// The HTTP API's URL scheme: `https` with `--http-tls`, else `http`.
    pub fn http_scheme(&self) -> &'static str {
        if self.settings.http_tls {
            "https"
        } else {
            "http"
        }
    }

    /// The SMTP bytes in flight and open connections (`inflightBytes`, `smtpConnections`).
    pub fn smtp_load(&self) -> Arc<smtp_load::SmtpLoad> {
        self.smtp_load.clone()
    }

    /// The HTTP connection cap and the live count of open HTTP connections
    /// (`open()`), for `/health`'s `httpConnections`.
    pub fn http_connections(&self) -> http1::HttpConnections {
        self.http_connections.clone()
    }

    /// What every POP3 connection needs.
    fn pop3_context(&self, shutdown: watch::Receiver<bool>) -> pop3_server::Pop3Context {
        pop3_server::Pop3Context {
            config: mailjar_core::pop3::Config {
                stls: self.tls.is_some(),
                max_line_bytes: self.settings.max_line_bytes,
                idle_timeout_ms: ms(self.settings.idle_timeout),
            },
            shared: self.shared.clone(),
            access: self.access.clone(),
            tls: self.tls.clone(),
            implicit_tls: false,
            shutdown,
        }
    }

    /// What every IMAP connection needs.
    fn imap_context(&self, shutdown: watch::Receiver<bool>) -> imap_server::ImapContext {
        imap_server::ImapContext {
            config: mailjar_core::imap::Config {
                starttls: self.tls.is_some(),
                max_command_bytes: u32::try_from(self.settings.imap_max_command_bytes)
                    .unwrap_or(u32::MAX),
                idle_timeout_ms: ms(self.settings.imap_idle_timeout),
                // Each connection reads the store's own when it opens.
                uid_validity: 1,
            },
            shared: self.shared.clone(),
            access: self.access.clone(),
            tls: self.tls.clone(),
            implicit_tls: false,
            shutdown,
        }
    }

    /// What every SMTP connection of the plain listener needs.
    fn smtp_context(&self, shutdown: watch::Receiver<bool>) -> smtp_server::SmtpContext {
        smtp_server::SmtpContext {
            config: smtp::Config {
                hostname: self.settings.domain.clone(),
                max_message_bytes: self.settings.max_message_bytes,
                max_recipients: self.settings.max_recipients,
                max_line_bytes: self.settings.max_line_bytes,
                max_errors: self.settings.max_errors,
                security: self.settings.security(),
                idle_timeout_ms: ms(self.settings.idle_timeout),
                command_timeout_ms: ms(self.settings.smtp_command_timeout),
                data_timeout_ms: ms(self.settings.smtp_data_timeout),
            },
            load: self.smtp_load.clone(),
            shared: self.shared.clone(),
            shutdown,
            tls: self.tls.clone(),
            implicit_tls: false,
            reject_unrouted: self.settings.unrouted == config::Unrouted::Reject,
            // Checked by `Settings::validate` at start.
            proxy: self.settings.proxy_protocol().ok().flatten().map(Arc::new),
        }
    }

    /// What every HTTP connection needs.
    fn http_context(
        &self,
        shutdown: watch::Receiver<bool>,
        listening: &[SocketAddr],
    ) -> http_server::HttpContext {
        http_server::HttpContext {
            shared: self.shared.clone(),
            loopback_only: self.settings.http_host.is_loopback(),
            head_timeout: self.settings.http_head_timeout,
            allowed_hosts: self
                .settings
                .allowed_hosts
                .iter()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .collect(),
            cors_origins: self
                .settings
                .cors_origins
                .iter()
                .map(|o| o.trim().to_owned())
                .collect(),
            shutdown,
            ui: !self.settings.no_ui,
            access: self.access.clone(),
            https: self.settings.http_tls,
            relay: self.relay.clone(),
            send: send::SendOptions {
                max_message_bytes: self.settings.max_message_bytes,
                reject_unrouted: self.settings.unrouted == config::Unrouted::Reject,
            },
            checks: Arc::new(checks::Checks::new(
                &self.settings.checks,
                &self.settings.domain,
                listening,
            )),
        }
    }

    /// Serves until `stop` resolves, then stops accepting, lets messages in
    /// flight finish within the grace period, answers parked waits with 503,
    /// and returns.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()>) {
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let slots = Arc::new(Semaphore::new(self.settings.max_connections));
        let listening: Vec<SocketAddr> = [self.smtp.local_addr(), self.http.local_addr()]
            .into_iter()
            .chain(self.smtps.as_ref().map(TcpListener::local_addr))
            .filter_map(Result::ok)
            .chain(self.mail_reader_addrs().into_iter().map(|(_, a)| a))
            .collect();
        let smtp_context = self.smtp_context(shutdown_rx.clone());
        let http_context = self.http_context(shutdown_rx, &listening);
        // The SMTP listener's slots: POP3 connections count against --max-connections.
        let pop3_context = self.pop3_context(smtp_context.shutdown.clone());
        let mut reader_tasks =
            std::mem::take(&mut self.pop3).spawn(&slots, &pop3_context, pop3_server::serve);
        let imap_context = self.imap_context(smtp_context.shutdown.clone());
        reader_tasks.extend(std::mem::take(&mut self.imap).spawn(
            &slots,
            &imap_context,
            imap_server::serve,
        ));
        let smtps_task = self.smtps.map(|listener| {
            let context = smtp_server::SmtpContext {
                implicit_tls: true,
                ..smtp_context.clone()
            };
            // The same slots: implicit-TLS connections count against --max-connections.
            tokio::spawn(smtp_server::serve(listener, slots.clone(), context))
        });
        let timers = tokio::spawn(self.shared.clone().run_timers());
        let pump = tokio::spawn(self.shared.clone().pump_events());
        let smtp_task = tokio::spawn(smtp_server::serve(self.smtp, slots.clone(), smtp_context));
        let http_options = http1::HttpOptions {
            body_timeout: self.settings.http_body_timeout,
            connections: self.http_connections.clone(),
            large_body: Some(http1::LargeBody {
                route: http1::LargeBodyRoute {
                    path: send::PATH,
                    limit: send::body_limit(self.settings.max_message_bytes),
                },
                load: self.smtp_load.clone(),
            }),
        };
        // --http-tls serves HTTPS with the SMTP listeners' certificate.
        let http_tls = self.tls.clone().filter(|_| self.settings.http_tls);
        let http_task = tokio::spawn(http_server::serve(
            self.http,
            http_context,
            http_options,
            http_tls,
        ));
        stop.await;
        tracing::info!("shutting down");
        let _ = shutdown_tx.send(true);
        let _ = smtp_task.await;
        if let Some(task) = smtps_task {
            let _ = task.await;
        }
        for task in reader_tasks {
            let _ = task.await;
        }
        let _ = http_task.await;
        // Every open SMTP connection holds a permit: when all are back, no message is in flight.
        let all = u32::try_from(self.settings.max_connections).unwrap_or(u32::MAX);
        if tokio::time::timeout(self.settings.shutdown_grace, slots.acquire_many(all))
            .await
            .is_err()
        {
            tracing::warn!(
                "messages still in flight at the end of the grace period were not acknowledged"
            );
        }
        // Parked waits see the shutdown and answer 503; give them a moment to be written.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        self.shared.stop_writer(self.settings.shutdown_grace).await;
        timers.abort();
        pump.abort();
    }
}

/// A duration in whole milliseconds (the core's unit).
fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn the_caps_are_checked_against_the_descriptor_limit() {
        let settings = Settings::parse_from([
            "mailjar",
            "--max-connections",
            "100",
            "--max-http-connections",
            "200",
        ]);
        assert_eq!(fds_needed(&settings), 300 + FD_SLACK);
        assert_eq!(fd_warning(300 + FD_SLACK, fds_needed(&settings)), None);
        let warning = fd_warning(256, fds_needed(&settings)).expect("a warning");
        assert!(warning.contains("256") && warning.contains("--max-http-connections"));
    }

    #[tokio::test]
    async fn bind_refuses_settings_that_do_not_validate() {
        let flags = ["mailjar", "--smtp-port", "0", "--http-port", "0"];
        let bad_auth = flags.iter().chain(&["--auth", "nocolon", "--require-auth"]);
        let error = Server::bind(Settings::parse_from(bad_auth)).await.err();
        let error = error.expect("a bad --auth is refused, not read as any credentials");
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
        assert!(Server::bind(Settings::parse_from(flags)).await.is_ok());
    }
}
