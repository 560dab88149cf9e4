//! `--proxy-protocol`: HAProxy (Debian's `haproxy`) in front of the SMTP
//! listener with `send-proxy` (v1) and `send-proxy-v2`, smtplib behind it,
//! and the client's own address as `smtp.remoteAddr`; over implicit TLS the
//! header comes before the handshake. Headers that are malformed, late,
//! trickled past the deadline or sent from an address that is not listed
//! close the connection without a greeting, and the server stays responsive.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{HealthProber, Server, run_ok};

/// smtplib through a socket that first writes `HEADER` (an argument; empty:
/// none) and, with `TLS=1`, then shakes hands (implicit TLS); prints the
/// client's local port, then sends one message.
const PROXIED_SMTPLIB: &str = r#"
import smtplib, socket, ssl, sys
port, header, tls, subject = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3] == "1", sys.argv[4]
local = []
def connect(host, port, timeout):
    sock = socket.create_connection((host, port), timeout)
    local.append(sock.getsockname()[1])
    sock.sendall(header)
    return sock
class Plain(smtplib.SMTP):
    def _get_socket(self, host, port, timeout):
        return connect(host, port, timeout)
class Implicit(smtplib.SMTP_SSL):
    def _get_socket(self, host, port, timeout):
        return self.context.wrap_socket(connect(host, port, timeout), server_hostname=host)
if tls:
    client = Implicit("127.0.0.1", port, context=ssl._create_unverified_context(), timeout=10)
else:
    client = Plain("127.0.0.1", port, timeout=10)
client.sendmail("app@example.test", ["user@example.test"], f"Subject: {subject}\r\n\r\nbody\r\n")
client.quit()
print(local[0])
"#;

/// Runs [`PROXIED_SMTPLIB`] against `port`; the client's local port.
fn send_proxied(port: u16, header: &str, tls: bool, subject: &str) -> u16 {
    let out = run_ok(Command::new("python3").args([
        "-c",
        PROXIED_SMTPLIB,
        &port.to_string(),
        header,
        if tls { "1" } else { "0" },
        subject,
    ]));
    out.trim()
        .parse()
        .expect("the script prints its local port")
}

/// HAProxy in TCP mode on a free port, sending `send_proxy` (`send-proxy` or
/// `send-proxy-v2`) to `backend`; stopped on drop.
struct Haproxy {
    child: Child,
    port: u16,
    config: std::path::PathBuf,
}

impl Haproxy {
    fn start(backend: SocketAddr, send_proxy: &str) -> Haproxy {
        let binary = "/usr/sbin/haproxy";
        assert!(
            std::path::Path::new(binary).exists(),
            "haproxy is not installed: apt-get install haproxy (scripts/test.sh does)"
        );
        let port = common::free_port();
        let config = format!(
            "global\n  maxconn 64\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend smtp\n  bind 127.0.0.1:{port}\n  default_backend mailjar\n\
             backend mailjar\n  server m {backend} {send_proxy}\n"
        );
        let path = std::env::temp_dir().join(format!("mailjar-haproxy-{}.cfg", common::nonce()));
        std::fs::write(&path, config).unwrap();
        let child = Command::new(binary)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start haproxy");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "haproxy did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Haproxy {
            child,
            port,
            config: path,
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}

/// The `smtp.remoteAddr` of the message with this subject.
fn remote_addr(server: &Server, subject: &str) -> String {
    let found = server.emails(&format!("subject={subject}"));
    assert_eq!(found.len(), 1, "{found:?}");
    found[0]["smtp"]["remoteAddr"]
        .as_str()
        .expect("a remote address")
        .to_owned()
}

/// Connects, writes `bytes`, and reads until the server closes or 5 s pass:
/// what the server sent, and how long it took to close.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, Duration) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    stream.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    (got, started.elapsed())
}

#[test]
fn haproxy_v1_and_v2_name_the_client() {
    let server = Server::start_with(&["--proxy-protocol", "127.0.0.0/8"]);
    for send_proxy in ["send-proxy", "send-proxy-v2"] {
        let haproxy = Haproxy::start(server.smtp, send_proxy);
        let local = send_proxied(haproxy.port, "", false, send_proxy);
        assert_eq!(
            remote_addr(&server, send_proxy),
            format!("127.0.0.1:{local}"),
            "{send_proxy}: the address is HAProxy's, not the client's"
        );
    }
    // Straight to the listener, without a header: no greeting, nothing stored.
    let (got, _) = exchange(server.smtp, b"EHLO direct.test\r\n");
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    assert_eq!(server.emails("").len(), 2);
}

#[test]
fn a_header_comes_before_the_implicit_tls_handshake() {
    let server = Server::start_with(&[
        "--proxy-protocol",
        "127.0.0.1",
        "--tls-self-signed",
        "--smtps-port",
        "0",
    ]);
    let smtps = server.smtps.expect("the SMTPS address");
    let v1 = "PROXY TCP4 198.51.100.20 10.0.0.1 41000 465\r\n";
    send_proxied(smtps.port(), v1, true, "over-tls");
    assert_eq!(remote_addr(&server, "over-tls"), "198.51.100.20:41000");
    let v6 = "PROXY TCP6 2001:db8::5 2001:db8::1 42000 25\r\n";
    send_proxied(server.smtp.port(), v6, false, "over-v6");
    assert_eq!(remote_addr(&server, "over-v6"), "[2001:db8::5]:42000");
    // A v1 UNKNOWN header (a balancer's own check) keeps the peer's address.
    let local = send_proxied(server.smtp.port(), "PROXY UNKNOWN\r\n", false, "unknown");
    assert_eq!(
        remote_addr(&server, "unknown"),
        format!("127.0.0.1:{local}")
    );
}

#[test]
fn bad_late_and_untrusted_headers_get_no_greeting() {
    let server = Server::start_with(&[
        "--proxy-protocol",
        "127.0.0.1",
        "--smtp-command-timeout",
        "1s",
    ]);
    let prober = HealthProber::start(server.http, Duration::from_millis(20));
    let mut oversized = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\xff\xff".to_vec();
    oversized.extend_from_slice(&[0; 64]);
    let mut endless = b"PROXY TCP4 192.0.2.1 10.0.0.1 1 ".to_vec();
    endless.extend_from_slice(&[b'9'; 200]);
    let cases: [(&str, &[u8]); 6] = [
        ("a bad address", b"PROXY TCP4 999.1.1.1 10.0.0.1 1 25\r\n"),
        ("a bad port", b"PROXY TCP4 192.0.2.1 10.0.0.1 70000 25\r\n"),
        (
            "an unknown protocol",
            b"PROXY UDP4 192.0.2.1 10.0.0.1 1 25\r\n",
        ),
        ("SMTP first", b"EHLO client.example\r\n"),
        ("v1 without its end", &endless),
        ("an oversized v2 header", &oversized),
    ];
    for (what, bytes) in cases {
        let (got, took) = exchange(server.smtp, bytes);
        assert!(got.is_empty(), "{what}: {}", String::from_utf8_lossy(&got));
        assert!(
            took < Duration::from_secs(3),
            "{what}: closed after {took:?}"
        );
    }
    // Nothing, then a trickle: closed at the 1 s deadline, without a greeting.
    let (got, took) = exchange(server.smtp, b"");
    assert!(got.is_empty() && took >= Duration::from_millis(900) && took < Duration::from_secs(4));
    let mut trickle = TcpStream::connect(server.smtp).unwrap();
    trickle
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    for byte in b"PROXY TCP4 192.0.2.1 10.0.0.1 1 25\r\n" {
        if trickle.write_all(&[*byte]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut got = Vec::new();
    let _ = trickle.read_to_end(&mut got);
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    assert!(started.elapsed() < Duration::from_secs(5));
    let report = prober.stop();
    assert!(
        report.worst() < Duration::from_millis(100),
        "/health took {:?}",
        report.worst()
    );
    assert!(server.emails("").is_empty());

    // From an address that is not listed, even a good header is refused.
    let untrusted = Server::start_with(&["--proxy-protocol", "10.0.0.0/8"]);
    let (got, _) = exchange(untrusted.smtp, b"PROXY TCP4 192.0.2.1 10.0.0.1 1 25\r\n");
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
}

#[test]
fn a_bad_cidr_is_refused_at_start() {
    let out = Command::new(common::binary())
        .args([
            "--proxy-protocol",
            "10.0.0.0/40",
            "--smtp-port",
            "0",
            "--http-port",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--proxy-protocol 10.0.0.0/40"), "{stderr}");
}
