//! TLS end to end: STARTTLS and implicit TLS (`--smtps-port`) with real
//! clients (Python's smtplib, swaks, openssl s_client, curl, and a rustls
//! client for the protocol edges), the written self-signed certificate as
//! the only trusted CA. Each stored message is compared byte for byte through
//! `GET /api/emails/:id/raw`, with the `smtp` facts its session saw.

mod common;
#[path = "common/tls_client.rs"]
mod tls_client;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{IO_TIMEOUT, Server, Smtp, message, nonce, run_ok};
use serde_json::Value;
use tls_client::client_config;

/// A server with a self-signed certificate written to a fresh file, an
/// implicit-TLS listener, and `extra` flags.
struct TlsServer {
    server: Server,
    cert: PathBuf,
}

impl TlsServer {
    fn start(extra: &[&str]) -> TlsServer {
        let cert = std::env::temp_dir().join(format!("mailjar-tls-e2e-{}.pem", nonce()));
        let cert_arg = cert.to_string_lossy().into_owned();
        let mut flags = vec![
            "--tls-self-signed",
            "--tls-cert-out",
            &cert_arg,
            "--smtps-port",
            "0",
        ];
        flags.extend_from_slice(extra);
        let server = Server::start_with(&flags);
        assert!(
            cert.exists(),
            "--tls-cert-out is written before the listeners accept"
        );
        TlsServer { server, cert }
    }

    fn smtps(&self) -> SocketAddr {
        self.server.smtps.expect("the SMTPS address is logged")
    }

    /// The newest message, and checks its raw download is exactly `raw`.
    fn assert_latest_raw(&self, raw: &[u8]) -> Value {
        let email = self.server.latest();
        let id = email["id"].as_str().expect("id");
        let request = format!(
            "GET /api/emails/{id}/raw HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.server.http
        );
        let download = common::http_exchange(self.server.http, request.as_bytes());
        assert_eq!(download.header("content-type"), Some("message/rfc822"));
        assert_eq!(download.status, 200);
        assert_eq!(
            download.body.as_bytes(),
            raw,
            "the raw download is the message as sent"
        );
        assert_eq!(email["size"].as_u64(), Some(raw.len() as u64));
        email
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.cert);
    }
}

/// `smtp.tls` is a real negotiation: a TLS 1.2 or 1.3 version and an IANA suite name.
fn assert_tls(email: &Value) {
    let tls = &email["smtp"]["tls"];
    let version = tls["version"].as_str().unwrap_or_default();
    assert!(
        version == "TLSv1.3" || version == "TLSv1.2",
        "smtp.tls: {tls}"
    );
    let cipher = tls["cipher"].as_str().unwrap_or_default();
    assert!(cipher.starts_with("TLS_"), "smtp.tls: {tls}");
}

/// `smtp.remoteAddr` is a loopback address with a port.
fn assert_remote(email: &Value) {
    let addr: SocketAddr = email["smtp"]["remoteAddr"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("smtp.remoteAddr: {}", email["smtp"]));
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// SMTP over a rustls client stream.
struct TlsSmtp {
    stream: BufReader<TlsStream>,
}

impl TlsSmtp {
    /// The handshake over `tcp` (for STARTTLS after its 220, or straight away for SMTPS).
    fn handshake(tcp: TcpStream, cert: &Path) -> std::io::Result<TlsSmtp> {
        let name = "localhost".try_into().expect("a DNS name");
        let connection =
            rustls::ClientConnection::new(client_config(cert), name).expect("a client");
        let mut stream = rustls::StreamOwned::new(connection, tcp);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(TlsSmtp {
            stream: BufReader::new(stream),
        })
    }

    fn write(&mut self, bytes: &[u8]) {
        let s = self.stream.get_mut();
        s.write_all(bytes).expect("write over TLS");
        s.flush().expect("flush");
    }

    /// One reply: (code, text of the lines).
    fn reply(&mut self) -> (u16, String) {
        let mut text = String::new();
        loop {
            let mut line = String::new();
            let n = self.stream.read_line(&mut line).expect("read over TLS");
            assert!(n > 0, "EOF instead of a reply (so far {text:?})");
            text.push_str(&line);
            if line.as_bytes().get(3) == Some(&b' ') {
                return (line[..3].parse().expect("a code"), text);
            }
        }
    }

    fn cmd(&mut self, line: &str) -> (u16, String) {
        self.write(format!("{line}\r\n").as_bytes());
        self.reply()
    }
}

/// Connects, reads the greeting, EHLOs, sends STARTTLS and does the handshake.
fn starttls(server: &TlsServer) -> TlsSmtp {
    let (mut smtp, greeting) = Smtp::connect(server.server.smtp);
    assert_eq!(greeting.code, 220);
    let ehlo = smtp.expect("EHLO rust.test", 250);
    assert!(ehlo.lines.iter().any(|l| l == "STARTTLS"), "{}", ehlo.wire);
    smtp.expect("STARTTLS", 220);
    TlsSmtp::handshake(raw_socket(smtp), &server.cert).expect("handshake")
}

/// The socket under a [`Smtp`] (nothing is buffered in it after a reply).
fn raw_socket(smtp: Smtp) -> TcpStream {
    smtp.into_stream()
}

fn sendmail(t: &mut TlsSmtp, from: &str, to: &str, raw: &[u8]) -> (u16, String) {
    assert_eq!(t.cmd(&format!("MAIL FROM:<{from}>")).0, 250);
    assert_eq!(t.cmd(&format!("RCPT TO:<{to}>")).0, 250);
    assert_eq!(t.cmd("DATA").0, 354);
    let mut data = common::dot_stuff(raw);
    data.extend_from_slice(b".\r\n");
    t.write(&data);
    t.reply()
}

const SMTPLIB: &str = r#"
import smtplib, ssl, sys
cafile, mode, port, user, password = sys.argv[1:6]
raw = sys.stdin.buffer.read()
ctx = ssl.create_default_context(cafile=cafile)
if mode == "ssl":
    client = smtplib.SMTP_SSL("localhost", int(port), context=ctx)
else:
    client = smtplib.SMTP("localhost", int(port))
    client.ehlo("before.test")
    client.starttls(context=ctx)
client.ehlo("python.test")
if user:
    try:
        client.login(user, password)
    except smtplib.SMTPAuthenticationError as e:
        print(e.smtp_code, e.smtp_error.decode())
        sys.exit(0)
client.sendmail("py@example.test", ["rcpt@example.test"], raw)
client.quit()
print("sent")
"#;

fn smtplib(
    server: &TlsServer,
    mode: &str,
    port: u16,
    user: &str,
    password: &str,
    raw: &[u8],
) -> String {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(SMTPLIB)
        .arg(&server.cert)
        .args([mode, &port.to_string(), user, password])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 must be installed");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(raw)
        .expect("write stdin");
    let output = child.wait_with_output().expect("python3 ran");
    assert!(
        output.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn smtplib_starttls_and_smtp_ssl_trusting_the_written_certificate() {
    let server = TlsServer::start(&["--auth", "app:pa:ss"]);
    let n = nonce();
    let raw = message(
        "py@example.test",
        "rcpt@example.test",
        &format!("starttls {n}"),
        "Über TLS.\n.dot\nend",
    );
    let port = server.server.smtp.port();
    assert_eq!(
        smtplib(&server, "starttls", port, "app", "pa:ss", &raw),
        "sent"
    );
    let email = server.assert_latest_raw(&raw);
    assert_tls(&email);
    assert_remote(&email);
    // EHLO given before STARTTLS is forgotten: the one under TLS is reported.
    assert_eq!(email["smtp"]["helo"], "python.test");
    assert_eq!(email["smtp"]["auth"]["username"], "app");
    assert!(email["smtp"]["auth"]["mechanism"].is_string());

    let raw = message(
        "py@example.test",
        "rcpt@example.test",
        &format!("smtps {n}"),
        "implicit",
    );
    let smtps = server.smtps().port();
    assert_eq!(smtplib(&server, "ssl", smtps, "", "", &raw), "sent");
    let email = server.assert_latest_raw(&raw);
    assert_tls(&email);
    assert_eq!(email["smtp"]["auth"], Value::Null);

    // Wrong credentials: 535 5.7.8, and nothing more is stored.
    let out = smtplib(&server, "starttls", port, "app", "wrong", b"x\r\n");
    assert!(out.starts_with("535 5.7.8"), "{out}");
    assert_eq!(server.server.health()["messages"], 2);
}

#[test]
fn plain_smtp_reports_no_tls_and_the_session_facts() {
    let server = Server::start();
    let raw = message("a@example.test", "b@example.test", "plain", "body");
    let mut smtp = server.smtp();
    let ehlo = smtp.expect("EHLO plain.test", 250);
    assert!(
        !ehlo.lines.iter().any(|l| l == "STARTTLS"),
        "STARTTLS is not advertised without TLS configured"
    );
    smtp.expect("STARTTLS", 454);
    smtp.transaction("a@example.test", &["b@example.test"], &raw);
    let email = server.latest();
    assert_eq!(email["smtp"]["tls"], Value::Null);
    assert_eq!(email["smtp"]["helo"], "plain.test");
    assert_remote(&email);
}

/// Runs swaks over TLS (verifying against the written certificate); returns the transcript.
fn swaks_tls(server: &TlsServer, port: u16, mode: &str, subject: &str, body: &str) -> String {
    let cert = server.cert.to_string_lossy().into_owned();
    let port = port.to_string();
    let subject = format!("Subject: {subject}");
    run_ok(Command::new("swaks").args([
        "--server",
        "localhost",
        "--port",
        &port,
        "--helo",
        "swaks.test",
        mode,
        "--tls-verify",
        "--tls-ca-path",
        &cert,
        "--from",
        "swaks@example.test",
        "--to",
        "rcpt@example.test",
        "--header",
        &subject,
        "--body",
        body,
    ]))
}

#[test]
fn swaks_starttls_and_implicit_tls() {
    let server = TlsServer::start(&[]);
    let n = nonce();
    for (mode, port) in [
        ("--tls", server.server.smtp.port()),
        ("--tlsc", server.smtps().port()),
    ] {
        let subject = format!("swaks {mode} {n}");
        let transcript = swaks_tls(&server, port, mode, &subject, "line one\n.dotted\nlast");
        assert!(transcript.contains("TLS started"), "{transcript}");
        let data = common::swaks_data(&transcript);
        let email = server.assert_latest_raw(&data);
        assert_eq!(email["subject"], subject.as_str());
        assert_tls(&email);
        assert_eq!(email["smtp"]["helo"], "swaks.test");
    }
}

#[test]
fn openssl_s_client_starttls_smtp() {
    let server = TlsServer::start(&[]);
    let n = nonce();
    let raw = message(
        "ossl@example.test",
        "rcpt@example.test",
        &format!("openssl {n}"),
        "over s_client",
    );
    let mut input = b"EHLO openssl.test\r\nMAIL FROM:<ossl@example.test>\r\nRCPT TO:<rcpt@example.test>\r\nDATA\r\n".to_vec();
    input.extend_from_slice(&common::dot_stuff(&raw));
    input.extend_from_slice(b".\r\nQUIT\r\n");
    let connect = server.server.smtp.to_string();
    let mut child = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &connect,
            "-starttls",
            "smtp",
            "-servername",
            "localhost",
            "-verify_return_error",
            "-verify_hostname",
            "localhost",
            "-quiet",
            "-nocommands",
            "-CAfile",
        ])
        .arg(&server.cert)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl must be installed");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&input)
        .expect("write");
    let output = child.wait_with_output().expect("openssl ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("250 2.0.0 Message accepted"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let email = server.assert_latest_raw(&raw);
    assert_tls(&email);
    assert_eq!(email["smtp"]["helo"], "openssl.test");
}

#[test]
fn curl_smtps_and_starttls_required() {
    let server = TlsServer::start(&["--require-tls"]);
    let n = nonce();
    for (scheme, port, extra) in [
        ("smtps", server.smtps().port(), None),
        ("smtp", server.server.smtp.port(), Some("--ssl-reqd")),
    ] {
        let raw = message(
            "curl@example.test",
            "rcpt@example.test",
            &format!("curl {scheme} {n}"),
            "via curl",
        );
        let path = std::env::temp_dir().join(format!("mailjar-tls-curl-{n}-{scheme}.eml"));
        std::fs::write(&path, &raw).expect("write");
        let url = format!("{scheme}://localhost:{port}/curl.test");
        let mut curl = Command::new("curl");
        curl.args(["-sS", "--max-time", "20", "--url", &url, "--cacert"])
            .arg(&server.cert)
            .args([
                "--mail-from",
                "curl@example.test",
                "--mail-rcpt",
                "rcpt@example.test",
                "-T",
            ])
            .arg(&path);
        if let Some(flag) = extra {
            curl.arg(flag);
        }
        run_ok(&mut curl);
        let _ = std::fs::remove_file(&path);
        let email = server.assert_latest_raw(&raw);
        assert_tls(&email);
        assert_eq!(email["smtp"]["helo"], "curl.test");
    }
}

#[test]
fn require_tls_refuses_mail_before_starttls() {
    let server = TlsServer::start(&["--require-tls"]);
    let mut smtp = server.server.smtp();
    smtp.expect("EHLO c.test", 250);
    let reply = smtp.expect("MAIL FROM:<a@example.test>", 530);
    assert!(reply.lines[0].starts_with("5.7.0"), "{}", reply.wire);
    drop(smtp);
    let mut t = starttls(&server);
    t.cmd("EHLO c.test");
    let raw = message("a@example.test", "b@example.test", "after starttls", "ok");
    assert_eq!(
        sendmail(&mut t, "a@example.test", "b@example.test", &raw).0,
        250
    );
    assert_tls(&server.assert_latest_raw(&raw));
}

#[test]
fn require_tls_without_tls_configured_is_a_startup_error() {
    let output = Command::new(common::binary())
        .args(["--smtp-port", "0", "--http-port", "0", "--require-tls"])
        .output()
        .expect("run mailjar");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--require-tls"), "{stderr}");
}

#[test]
fn starttls_twice_or_inside_a_transaction_is_503() {
    let server = TlsServer::start(&[]);
    let mut smtp = server.server.smtp();
    smtp.expect("EHLO c.test", 250);
    smtp.expect("MAIL FROM:<a@example.test>", 250);
    let reply = smtp.expect("STARTTLS", 503);
    assert!(reply.lines[0].starts_with("5.5.1"), "{}", reply.wire);
    smtp.expect("RSET", 250);
    drop(smtp);

    let mut t = starttls(&server);
    let (code, ehlo) = t.cmd("EHLO c.test");
    assert_eq!(code, 250);
    assert!(
        !ehlo.contains("STARTTLS"),
        "not advertised under TLS: {ehlo}"
    );
    let (code, text) = t.cmd("STARTTLS");
    assert_eq!(code, 503, "{text}");
    assert!(text.contains("5.5.1"), "{text}");
    // Implicit TLS counts as TLS too.
    let tcp = TcpStream::connect(server.smtps()).expect("connect");
    let mut t = TlsSmtp::handshake(tcp, &server.cert).expect("handshake");
    assert_eq!(t.reply().0, 220);
    t.cmd("EHLO c.test");
    assert_eq!(t.cmd("STARTTLS").0, 503);
}

#[test]
fn plaintext_pipelined_after_starttls_is_never_run() {
    let server = TlsServer::start(&[]);
    let (mut smtp, _) = Smtp::connect(server.server.smtp);
    smtp.set_nodelay();
    smtp.expect("EHLO c.test", 250);
    // One write: the injected commands must not run, before or after the handshake.
    smtp.write(b"STARTTLS\r\nMAIL FROM:<evil@example.test>\r\nRCPT TO:<v@example.test>\r\nDATA\r\nSubject: injected\r\n\r\n.\r\n");
    let reply = smtp.reply();
    assert_eq!(reply.code, 220, "{}", reply.wire);
    let tcp = raw_socket(smtp);
    // The handshake succeeds only if the injected bytes were dropped with the
    // read that held STARTTLS; either way they are never run as commands.
    if let Ok(mut t) = TlsSmtp::handshake(tcp, &server.cert) {
        // The first reply under TLS answers this EHLO: nothing was queued.
        let (code, text) = t.cmd("EHLO c.test");
        assert_eq!(code, 250);
        assert!(text.contains("greets c.test"), "{text}");
        // MAIL is accepted: no transaction was left open by the injection.
        assert_eq!(t.cmd("MAIL FROM:<a@example.test>").0, 250);
    }
    assert_eq!(server.server.health()["messages"], 0, "nothing was stored");
}

#[test]
fn a_stalled_handshake_times_out_and_frees_its_slot() {
    let server = TlsServer::start(&["--tls-handshake-timeout", "300ms", "--max-connections", "1"]);
    // Connects to the implicit-TLS port and sends nothing.
    let mut stalled = TcpStream::connect(server.smtps()).expect("connect");
    stalled.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    server
        .server
        .poll_health("smtpConnections", 1, Duration::from_secs(10));
    // The only slot is taken: a second client is refused.
    let (_, refused) = Smtp::connect(server.server.smtp);
    assert_eq!(refused.code, 421, "{}", refused.wire);
    // The handshake times out: the server closes without a byte.
    let mut byte = [0u8; 1];
    let read = stalled.read(&mut byte);
    assert!(matches!(read, Ok(0)) || read.is_err(), "{read:?}");
    server
        .server
        .poll_health("smtpConnections", 0, Duration::from_secs(10));
    // The slot is free again: a STARTTLS session gets through.
    let mut t = starttls(&server);
    assert_eq!(t.cmd("EHLO c.test").0, 250);
}

#[test]
fn garbage_instead_of_a_client_hello_closes_and_frees_the_slot() {
    let server = TlsServer::start(&["--max-connections", "1"]);
    for target in ["smtps", "starttls"] {
        let mut tcp = match target {
            "smtps" => TcpStream::connect(server.smtps()).expect("connect"),
            _ => {
                let (mut smtp, _) = Smtp::connect(server.server.smtp);
                smtp.expect("EHLO c.test", 250);
                smtp.expect("STARTTLS", 220);
                raw_socket(smtp)
            }
        };
        tcp.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        tcp.write_all(b"EHLO plaintext.test\r\nMAIL FROM:<a@example.test>\r\n\r\n\r\n")
            .expect("write");
        // rustls answers a TLS alert at most, never an SMTP reply; then the connection ends.
        let mut answer = Vec::new();
        let _ = tcp.read_to_end(&mut answer);
        assert!(
            !String::from_utf8_lossy(&answer).contains("250"),
            "{target}: {answer:?}"
        );
        server
            .server
            .poll_health("smtpConnections", 0, Duration::from_secs(10));
    }
    let (_, greeting) = Smtp::connect(server.server.smtp);
    assert_eq!(greeting.code, 220, "the slot is free again");
}

#[test]
fn auth_credentials_are_checked_and_reported() {
    let server = TlsServer::start(&["--auth", "alice:secret", "--require-auth"]);
    let mut t = starttls(&server);
    t.cmd("EHLO c.test");
    let (code, text) = t.cmd("MAIL FROM:<a@example.test>");
    assert_eq!(code, 530, "{text}");
    assert!(text.contains("5.7.0"), "{text}");
    // PLAIN: \0alice\0wrong, then \0alice\0secret.
    let (code, text) = t.cmd("AUTH PLAIN AGFsaWNlAHdyb25n");
    assert_eq!(code, 535, "{text}");
    assert!(text.contains("5.7.8"), "{text}");
    assert_eq!(t.cmd("AUTH PLAIN AGFsaWNlAHNlY3JldA==").0, 235);
    let raw = message("a@example.test", "b@example.test", "authenticated", "hi");
    assert_eq!(
        sendmail(&mut t, "a@example.test", "b@example.test", &raw).0,
        250
    );
    let email = server.assert_latest_raw(&raw);
    assert_eq!(email["smtp"]["auth"]["mechanism"], "PLAIN");
    assert_eq!(email["smtp"]["auth"]["username"], "alice");
    assert_tls(&email);
}
