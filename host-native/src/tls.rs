//! TLS for the SMTP listeners: STARTTLS on the SMTP port and implicit TLS on
//! `--smtps-port`, with rustls (ring provider) driven by tokio-rustls. The
//! same configuration serves HTTPS with `--http-tls` ([`crate::http_tls`]).
//!
//! TLS is off unless `--tls-cert`/`--tls-key` or `--tls-self-signed` is
//! given: advertising STARTTLS with a certificate clients do not trust breaks
//! clients that upgrade opportunistically. The self-signed certificate is made
//! with rcgen for `localhost`, `127.0.0.1`, `::1` and `--domain`, and written
//! to `--tls-cert-out` before the listeners accept, so tests can trust it.
//!
//! A handshake runs in the connection's own task after it took its slot of
//! `--max-connections`, within `--tls-handshake-timeout`; one that fails,
//! stalls or is abandoned ends the task and so frees the slot.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::path::PathBuf;

use mailjar_core::smtp::TlsInfo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// What the TLS flags say (see `Settings::tls_options`).
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// `--tls-self-signed`.
    pub self_signed: bool,
    /// `--tls-cert`.
    pub cert: Option<PathBuf>,
    /// `--tls-key`.
    pub key: Option<PathBuf>,
    /// `--tls-cert-out`.
    pub cert_out: Option<PathBuf>,
    /// `--domain`: a self-signed certificate names it.
    pub domain: String,
    /// `--tls-handshake-timeout`.
    pub handshake_timeout: Duration,
}

impl TlsOptions {
    /// Whether these options turn TLS on.
    pub fn enabled(&self) -> bool {
        self.self_signed || self.cert.is_some()
    }
}

/// The server side of TLS, shared by every connection.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    /// `--tls-handshake-timeout`.
    pub handshake_timeout: Duration,
}

/// Builds the TLS configuration from the options (None when TLS is off) and
/// writes `--tls-cert-out`.
pub fn load(options: &TlsOptions) -> Result<Option<Tls>, String> {
    if !options.enabled() {
        return Ok(None);
    }
    let (chain, key, pem) = if options.self_signed {
        self_signed(&options.domain)?
    } else {
        let (Some(cert_path), Some(key_path)) = (&options.cert, &options.key) else {
            return Err("--tls-cert needs --tls-key".to_owned());
        };
        let pem = std::fs::read(cert_path)
            .map_err(|e| format!("cannot read --tls-cert {}: {e}", cert_path.display()))?;
        let chain = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                format!(
                    "--tls-cert {}: not a PEM certificate: {e}",
                    cert_path.display()
                )
            })?;
        if chain.is_empty() {
            return Err(format!(
                "--tls-cert {}: no certificate in it",
                cert_path.display()
            ));
        }
        let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| {
            format!(
                "--tls-key {}: not a PEM private key: {e}",
                key_path.display()
            )
        })?;
        (chain, key, pem)
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("TLS: the certificate and key do not work together: {e}"))?;
    if let Some(out) = &options.cert_out {
        std::fs::write(out, &pem)
            .map_err(|e| format!("cannot write --tls-cert-out {}: {e}", out.display()))?;
    }
    Ok(Some(Tls {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        handshake_timeout: options.handshake_timeout,
    }))
}

/// The names a self-signed certificate is made for.
fn self_signed_names(domain: &str) -> Vec<String> {
    let mut names: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let domain = domain.trim().trim_end_matches('.').to_ascii_lowercase();
    if !domain.is_empty() && !names.contains(&domain) {
        names.push(domain);
    }
    names
}

type Certified = (
    Vec<CertificateDer<'static>>,
    PrivateKeyDer<'static>,
    Vec<u8>,
);

/// A fresh self-signed certificate (rcgen) and its PEM.
fn self_signed(domain: &str) -> Result<Certified, String> {
    let names = self_signed_names(domain);
    let certified = rcgen::generate_simple_self_signed(names)
        .map_err(|e| format!("cannot make a self-signed certificate: {e}"))?;
    let pem = certified.cert.pem().into_bytes();
    let key = PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .map_err(|e| format!("self-signed key: {e}"))?;
    Ok((vec![certified.cert.der().clone()], key, pem))
}

/// One SMTP connection's byte stream: plain TCP, or TLS over it.
pub enum SmtpStream {
    /// Plain TCP (before STARTTLS).
    Plain(TcpStream),
    /// TLS over TCP (after STARTTLS, or on the implicit-TLS listener).
    Tls(Box<TlsStream<TcpStream>>),
    /// Taken for a handshake that did not give it back: reads end, writes fail.
    Gone,
}

/// The TLS version and cipher suite a handshake agreed on.
fn info_of(stream: &TlsStream<TcpStream>) -> TlsInfo {
    let (_, connection) = stream.get_ref();
    let version = match connection.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3".to_owned(),
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2".to_owned(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    };
    let cipher = connection
        .negotiated_cipher_suite()
        .map(|suite| iana_name(suite.suite()))
        .unwrap_or_default();
    TlsInfo { version, cipher }
}

/// The IANA name of a cipher suite (rustls spells TLS 1.3 suites `TLS13_...`).
fn iana_name(suite: rustls::CipherSuite) -> String {
    let name = suite
        .as_str()
        .map_or_else(|| format!("{suite:?}"), str::to_owned);
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

impl Tls {
    /// Runs the server side of a handshake within the timeout.
    pub async fn accept(&self, tcp: TcpStream) -> io::Result<(SmtpStream, TlsInfo)> {
        let stream = tokio::time::timeout(self.handshake_timeout, self.handshake(tcp))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
        let info = info_of(&stream);
        Ok((SmtpStream::Tls(Box::new(stream)), info))
    }

    /// The server side of a handshake, with no deadline of its own (the
    /// caller's covers it): the SMTP listeners and `--http-tls` share it.
    pub async fn handshake(&self, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        self.acceptor.accept(tcp).await
    }

    /// STARTTLS: the handshake on a plain stream (an error on one already under TLS).
    pub async fn upgrade(&self, stream: SmtpStream) -> io::Result<(SmtpStream, TlsInfo)> {
        match stream {
            SmtpStream::Plain(tcp) => self.accept(tcp).await,
            SmtpStream::Tls(_) => Err(io::Error::other("STARTTLS on a TLS connection")),
            SmtpStream::Gone => Err(gone()),
        }
    }
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the stream was taken for a handshake",
    )
}

impl AsyncRead for SmtpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SmtpStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            SmtpStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            SmtpStream::Gone => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncWrite for SmtpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            SmtpStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            SmtpStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            SmtpStream::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SmtpStream::Plain(s) => Pin::new(s).poll_flush(cx),
            SmtpStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            SmtpStream::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SmtpStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            SmtpStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            SmtpStream::Gone => Poll::Ready(Ok(())),
        }
    }
}

/// A TLS client configuration for the network checks and webhooks: the
/// webpki roots, ring's provider, no client certificate.
pub fn client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(tls))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use clap::Parser;

    fn settings(args: &[&str]) -> Settings {
        let mut all = vec!["mailjar"];
        all.extend_from_slice(args);
        Settings::parse_from(all)
    }

    #[test]
    fn tls_flags_are_checked_together() {
        assert_eq!(settings(&[]).validate(), Ok(()));
        assert!(!settings(&[]).security().starttls);
        for (args, named) in [
            (&["--require-tls"][..], "--require-tls"),
            (&["--smtps-port", "0"][..], "--smtps-port"),
            (&["--tls-cert", "c.pem"][..], "--tls-key"),
            (&["--http-tls"][..], "--tls-self-signed"),
            (
                &["--tls-self-signed", "--tls-cert", "c", "--tls-key", "k"][..],
                "--tls-self-signed",
            ),
            (&["--auth", "nocolon"][..], "--auth"),
            (
                &["--tls-self-signed", "--tls-handshake-timeout", "0s"][..],
                "--tls-handshake-timeout",
            ),
        ] {
            let why = settings(args).validate().expect_err("refused");
            assert!(why.contains(named), "{args:?}: {why}");
        }
        let s = settings(&[
            "--tls-self-signed",
            "--require-tls",
            "--auth",
            "u:p:q",
            "--require-auth",
        ]);
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.tls_handshake_timeout, Duration::from_secs(10));
        let policy = s.security();
        assert!(policy.starttls && policy.require_tls && policy.require_auth);
        assert!(policy.credentials.check(b"u", b"p:q"));
    }

    #[test]
    fn the_self_signed_certificate_names_loopback_and_the_domain() {
        assert_eq!(
            self_signed_names("Local.Test."),
            ["localhost", "127.0.0.1", "::1", "local.test"]
        );
        assert_eq!(
            self_signed_names("localhost"),
            ["localhost", "127.0.0.1", "::1"]
        );
    }

    #[test]
    fn tls13_suites_get_their_iana_names() {
        assert_eq!(
            iana_name(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256),
            "TLS_AES_128_GCM_SHA256"
        );
        assert_eq!(
            iana_name(rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
        );
    }

    #[test]
    fn a_self_signed_setup_writes_its_certificate() {
        let dir = std::env::temp_dir().join(format!("mailjar-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let out = dir.join("cert.pem");
        let out_arg = out.to_string_lossy().into_owned();
        let s = settings(&["--tls-self-signed", "--tls-cert-out", &out_arg]);
        assert!(load(&s.tls_options()).expect("loads").is_some());
        let pem = std::fs::read(&out).expect("written");
        assert_eq!(CertificateDer::pem_slice_iter(&pem).count(), 1);
        // A certificate and key from PEM files work as --tls-cert/--tls-key.
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("made");
        let (cert_file, key_file) = (dir.join("c.pem"), dir.join("k.pem"));
        std::fs::write(&cert_file, made.cert.pem()).expect("write");
        std::fs::write(&key_file, made.signing_key.serialize_pem()).expect("write");
        let (c, k) = (cert_file.to_string_lossy(), key_file.to_string_lossy());
        let s = settings(&["--tls-cert", &c, "--tls-key", &k]);
        assert!(load(&s.tls_options()).expect("loads").is_some());
        // A file that is not PEM is refused with its name.
        let s = settings(&["--tls-cert", &k, "--tls-key", &k]);
        let why = load(&s.tls_options()).err().expect("refused");
        assert!(why.contains("--tls-cert"), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
