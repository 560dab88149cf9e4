//! `mailjar health`: asks a running mailjar's `GET /health` and exits 0 on a
//! 200, 1 otherwise with one line on stderr saying why. The container image's
//! `HEALTHCHECK` runs it: a `scratch` image has no curl or wget.
//!
//! It reads the server's own `--http-host`, `--http-port` and `--http-tls`
//! (and their `MAILJAR_*` variables), so in a container whose environment
//! configures the server it needs no arguments. Plain blocking sockets: one
//! request does not need a runtime.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{CommandFactory, FromArgMatches, Parser};

/// Exit 0 when the /health of the mailjar at --http-host/--http-port answers 200, 1 otherwise.
#[derive(Debug, Parser)]
#[command(name = "mailjar health")]
struct HealthArgs {
    /// Address the HTTP API listens on; 0.0.0.0 and :: are asked on loopback.
    #[arg(long, env = "MAILJAR_HTTP_HOST", default_value = "127.0.0.1")]
    http_host: IpAddr,
    /// Port of the HTTP API.
    #[arg(long, env = "MAILJAR_HTTP_PORT", default_value_t = 8025)]
    http_port: u16,
    /// The API is served over TLS (its certificate is not checked: this asks the local server).
    #[arg(long, env = "MAILJAR_HTTP_TLS")]
    http_tls: bool,
    /// How long the whole check may take.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// Runs the subcommand; `args` starts with its name (`health`).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    // An empty MAILJAR_* variable counts as unset, as for the server.
    let empty = |name: &std::ffi::OsStr| std::env::var_os(name).is_some_and(|v| v.is_empty());
    let command = HealthArgs::command()
        .bin_name("mailjar health")
        .mut_args(|arg| {
            if arg.get_env().is_some_and(empty) {
                arg.env(None)
            } else {
                arg
            }
        });
    let matches = command.get_matches_from(args);
    let args = HealthArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match check(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("mailjar health: {why}");
            ExitCode::FAILURE
        }
    }
}

/// Where to ask: an unspecified bind address is reached on loopback.
fn target(host: IpAddr, port: u16) -> SocketAddr {
    let ip = match host {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, port)
}

/// One `GET /health`; Ok on a 200, else what went wrong.
fn check(args: &HealthArgs) -> Result<(), String> {
    let addr = target(args.http_host, args.http_port);
    let scheme = if args.http_tls { "https" } else { "http" };
    let url = format!("{scheme}://{addr}/health");
    let deadline = Instant::now() + args.timeout;
    let stream = TcpStream::connect_timeout(&addr, args.timeout)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    stream
        .set_read_timeout(Some(left))
        .and_then(|()| stream.set_write_timeout(Some(left)))
        .map_err(|e| format!("{url}: {e}"))?;
    let head = if args.http_tls {
        exchange(tls_stream(stream, addr.ip())?, addr)
    } else {
        exchange(stream, addr)
    }
    .map_err(|e| format!("{url}: {e}"))?;
    match status_of(&head) {
        Some(200) => Ok(()),
        Some(status) => Err(format!("{url} answered {status}")),
        None => Err(format!("{url} did not answer HTTP")),
    }
}

/// Sends the request and reads until the end of the status line (or the connection).
fn exchange(mut stream: impl Read + Write, addr: SocketAddr) -> std::io::Result<Vec<u8>> {
    let request = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    stream.flush()?;
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    while !head.contains(&b'\n') && head.len() < 4096 {
        match stream.read(&mut buf)? {
            0 => break,
            n => head.extend_from_slice(&buf[..n]),
        }
    }
    Ok(head)
}

/// The status code of `HTTP/1.x NNN ...`.
fn status_of(head: &[u8]) -> Option<u16> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    words.next().filter(|v| v.starts_with("HTTP/1."))?;
    words.next()?.parse().ok()
}

/// A TLS client on `stream` that accepts the server's certificate, whatever it is.
fn tls_stream(
    stream: TcpStream,
    ip: IpAddr,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::IpAddress(ip.into());
    let connection =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| format!("TLS: {e}"))?;
    Ok(rustls::StreamOwned::new(connection, stream))
}

/// Trusts any certificate but still checks the handshake's signatures: the
/// check talks to the server on its own host, often with a self-signed
/// certificate made at start, and asks it nothing secret.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_bind_address_is_asked_on_loopback() {
        let any4: IpAddr = "0.0.0.0".parse().unwrap();
        let any6: IpAddr = "::".parse().unwrap();
        assert_eq!(target(any4, 8025).to_string(), "127.0.0.1:8025");
        assert_eq!(target(any6, 8025).to_string(), "[::1]:8025");
        let lan: IpAddr = "10.0.0.5".parse().unwrap();
        assert_eq!(target(lan, 1).to_string(), "10.0.0.5:1");
    }

    #[test]
    fn the_status_line_is_read() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            status_of(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_of(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(status_of(b""), None);
    }
}
