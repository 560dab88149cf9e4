//! The TLS benchmark (`ONLY=tls-ingest benches/run.sh`, or
//! `cargo bench -p mailjar --bench tls`): what TLS costs against plain SMTP
//! in the same run, because these machines are shared and noisy.
//!
//! - ingest over STARTTLS with `SESSIONS` (default 10) reused sessions, as a
//!   ratio to plain ingest with the same client (target >= 0.7);
//! - handshakes per second with a new connection each (implicit TLS: connect,
//!   handshake, greeting, QUIT), beside plain connections per second;
//! - RSS per idle TLS connection (implicit TLS, handshake done), beside a
//!   plain one.
//!
//! The load generator is a small rustls client (ring provider, trusting the
//! certificate the server writes with `--tls-cert-out`), one thread per session.
//! Environment: `ROUNDS` (3), `MESSAGES` (5000), `SESSIONS` (10),
//! `HANDSHAKES` (2000), `IDLE_CONNECTIONS` (500).

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{env_usize, free_port, mailjar, median, read_reply, rss, show, wait_for_port};

#[path = "../tests/common/tls_client.rs"]
mod tls_client;
use tls_client::client_config;

/// mailjar with a self-signed certificate and an implicit-TLS listener, killed on drop.
struct Mailjar {
    child: Child,
    smtp: u16,
    smtps: u16,
    http: u16,
    cert: PathBuf,
}

impl Mailjar {
    fn start() -> Mailjar {
        let (smtp, smtps, http) = (free_port(), free_port(), free_port());
        let cert =
            std::env::temp_dir().join(format!("mailjar-bench-tls-{}.pem", std::process::id()));
        let child = Command::new(mailjar())
            .args([
                "--smtp-port",
                &smtp.to_string(),
                "--http-port",
                &http.to_string(),
            ])
            .args([
                "--smtps-port",
                &smtps.to_string(),
                "--tls-self-signed",
                "--tls-cert-out",
            ])
            .arg(&cert)
            .args(["--log", "warn", "--max-connections", "5000"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start mailjar");
        wait_for_port(smtp);
        wait_for_port(smtps);
        wait_for_port(http);
        Mailjar {
            child,
            smtp,
            smtps,
            http,
            cert,
        }
    }

    fn messages(&self) -> u64 {
        let mut stream = TcpStream::connect(("127.0.0.1", self.http)).expect("HTTP");
        write!(
            stream,
            "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        // The body may be chunked: find the JSON object in it.
        let start = body.find('{').unwrap_or(0);
        let end = body.rfind('}').map_or(body.len(), |e| e + 1);
        let health: serde_json::Value =
            serde_json::from_str(&body[start..end]).expect("health JSON");
        health["messages"].as_u64().unwrap_or(0)
    }

    fn rss(&self) -> u64 {
        rss(self.child.id())
    }
}

impl Drop for Mailjar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.cert);
    }
}

/// Any byte stream an SMTP client can talk over.
trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

fn command(reader: &mut BufReader<Box<dyn Stream>>, line: &[u8]) -> String {
    let s = reader.get_mut();
    s.write_all(line).expect("SMTP write");
    s.flush().expect("flush");
    read_reply(reader)
}

fn handshake(tcp: TcpStream, config: &Arc<rustls::ClientConfig>) -> Box<dyn Stream> {
    let name = "localhost".try_into().expect("name");
    let connection = rustls::ClientConnection::new(config.clone(), name).expect("client");
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .expect("handshake");
    }
    Box::new(stream)
}

/// One session: connect, (STARTTLS,) then `count` messages of about 2 KiB.
fn session(port: u16, tls: Option<Arc<rustls::ClientConfig>>, count: usize) {
    let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    tcp.set_nodelay(true).ok();
    let mut smtp = BufReader::new(Box::new(tcp.try_clone().expect("clone")) as Box<dyn Stream>);
    read_reply(&mut smtp);
    command(&mut smtp, b"EHLO bench\r\n");
    if let Some(config) = tls {
        assert!(command(&mut smtp, b"STARTTLS\r\n").starts_with("220"));
        drop(smtp);
        smtp = BufReader::new(handshake(tcp, &config));
        command(&mut smtp, b"EHLO bench\r\n");
    }
    let body = format!(
        "From: App <sender@app.test>\r\nTo: user@local.test\r\nSubject: bench\r\n\r\n{}\r\n.\r\n",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod.\r\n".repeat(27)
    );
    for _ in 0..count {
        command(&mut smtp, b"MAIL FROM:<sender@app.test>\r\n");
        command(&mut smtp, b"RCPT TO:<user@local.test>\r\n");
        command(&mut smtp, b"DATA\r\n");
        let done = command(&mut smtp, body.as_bytes());
        assert!(done.starts_with("250"), "{done}");
    }
    command(&mut smtp, b"QUIT\r\n");
}

/// Messages per second over `sessions` reused sessions.
fn ingest(
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
    sessions: usize,
    messages: usize,
) -> f64 {
    let per = messages / sessions;
    let start = Instant::now();
    let threads: Vec<_> = (0..sessions)
        .map(|_| {
            let tls = tls.clone();
            std::thread::spawn(move || session(port, tls, per))
        })
        .collect();
    for t in threads {
        t.join().expect("a session");
    }
    (per * sessions) as f64 / start.elapsed().as_secs_f64()
}

/// New connections per second from 4 threads: greeting and QUIT, over implicit TLS or plain.
fn connections(port: u16, tls: Option<Arc<rustls::ClientConfig>>, count: usize) -> f64 {
    let threads = 4;
    let per = count / threads;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let tls = tls.clone();
            std::thread::spawn(move || {
                for _ in 0..per {
                    let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                    tcp.set_nodelay(true).ok();
                    let stream = match &tls {
                        Some(config) => handshake(tcp, config),
                        None => Box::new(tcp) as Box<dyn Stream>,
                    };
                    let mut smtp = BufReader::new(stream);
                    assert!(read_reply(&mut smtp).starts_with("220"));
                    command(&mut smtp, b"QUIT\r\n");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a thread");
    }
    (per * threads) as f64 / start.elapsed().as_secs_f64()
}

/// RSS growth per idle connection that has read its greeting.
fn idle_rss(m: &Mailjar, port: u16, tls: Option<Arc<rustls::ClientConfig>>, count: usize) -> f64 {
    std::thread::sleep(Duration::from_millis(300));
    let before = m.rss();
    let mut open = Vec::with_capacity(count);
    for _ in 0..count {
        let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let stream = match &tls {
            Some(config) => handshake(tcp, config),
            None => Box::new(tcp) as Box<dyn Stream>,
        };
        let mut smtp = BufReader::new(stream);
        read_reply(&mut smtp);
        open.push(smtp);
    }
    std::thread::sleep(Duration::from_millis(300));
    let after = m.rss();
    drop(open);
    (after.saturating_sub(before)) as f64 / count as f64
}

fn main() {
    let rounds = env_usize("ROUNDS", 3);
    let messages = env_usize("MESSAGES", 5000);
    let sessions = env_usize("SESSIONS", 10);
    let handshakes = env_usize("HANDSHAKES", 2000);
    let idle = env_usize("IDLE_CONNECTIONS", 500);
    println!("# TLS benchmark: {rounds} rounds, {messages} messages over {sessions} sessions");
    let (mut ratios, mut tls_rates, mut plain_rates) = (vec![], vec![], vec![]);
    let (mut hs, mut plain_conns) = (vec![], vec![]);
    let (mut tls_idle, mut plain_idle) = (vec![], vec![]);
    for round in 1..=rounds {
        let m = Mailjar::start();
        let config = client_config(&m.cert);
        // Alternate which goes first: the second one finds a fuller store.
        let (plain, tls) = if round % 2 == 1 {
            let plain = ingest(m.smtp, None, sessions, messages);
            (
                plain,
                ingest(m.smtp, Some(config.clone()), sessions, messages),
            )
        } else {
            let tls = ingest(m.smtp, Some(config.clone()), sessions, messages);
            (ingest(m.smtp, None, sessions, messages), tls)
        };
        let stored = m.messages();
        let sent = 2 * (messages / sessions * sessions) as u64;
        assert_eq!(stored.min(sent), sent, "LOSS: sent {sent}, stored {stored}");
        let h = connections(m.smtps, Some(config.clone()), handshakes);
        let p = connections(m.smtp, None, handshakes);
        let ti = idle_rss(&m, m.smtps, Some(config.clone()), idle);
        let pi = idle_rss(&m, m.smtp, None, idle);
        println!(
            "round {round}: ingest plain {plain:.0}/s, STARTTLS {tls:.0}/s, ratio {:.2}; \
             new connections: TLS handshakes {h:.0}/s, plain {p:.0}/s; \
             RSS per idle connection: TLS {:.1} KiB, plain {:.1} KiB",
            tls / plain,
            ti / 1024.0,
            pi / 1024.0
        );
        ratios.push(tls / plain);
        tls_rates.push(tls);
        plain_rates.push(plain);
        hs.push(h);
        plain_conns.push(p);
        tls_idle.push(ti / 1024.0);
        plain_idle.push(pi / 1024.0);
    }
    println!(
        "STARTTLS ingest / plain ingest ({sessions} reused sessions): per round {}; median {:.2} (target >= 0.7)",
        show(&ratios, 2),
        median(&mut ratios)
    );
    println!(
        "ingest medians: plain {:.0}/s, STARTTLS {:.0}/s",
        median(&mut plain_rates),
        median(&mut tls_rates)
    );
    println!(
        "TLS handshakes (new connection each, 4 threads): median {:.0}/s; plain connections {:.0}/s",
        median(&mut hs),
        median(&mut plain_conns)
    );
    println!(
        "RSS per idle connection ({idle} open): TLS median {:.1} KiB, plain {:.1} KiB",
        median(&mut tls_idle),
        median(&mut plain_idle)
    );
}
