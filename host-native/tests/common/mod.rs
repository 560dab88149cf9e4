//! Shared helpers of the end-to-end tests: start the real `mailjar` binary,
//! talk HTTP/1.1 and SMTP to it over plain sockets, and drive real clients
//! (Python's smtplib, curl, swaks).
//!
//! Every test file uses a different subset of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The shared MIME corpus: its files and the text an SMTP client sends of one.
#[path = "../../../core/tests/common/corpus.rs"]
pub mod corpus;

/// How long any single socket read may block before a test fails instead of hanging.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `mailjar` process, killed on drop.
pub struct Server {
    child: Child,
    /// The bound SMTP address, as logged at startup.
    pub smtp: SocketAddr,
    /// The bound HTTP address, as logged at startup.
    pub http: SocketAddr,
    /// The implicit-TLS SMTP address (`--smtps-port`), as logged at startup.
    pub smtps: Option<SocketAddr>,
}

impl Server {
    /// Starts the binary on free ports with the default settings.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts the binary on free ports with extra flags, and waits until it has logged its ports.
    pub fn start_with(flags: &[&str]) -> Server {
        Server::start_with_env(flags, &[])
    }

    /// [`Server::start_with`] with extra environment variables.
    pub fn start_with_env(flags: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Server {
        let mut child = Command::new(binary())
            .args(["--smtp-port", "0", "--http-port", "0"])
            .args(flags)
            .envs(env.iter().copied())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the mailjar binary");
        // Both streams are drained for the life of the process, so that logging never blocks it.
        let (lines_tx, lines_rx) = mpsc::channel::<String>();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        for stream in [Box::new(stdout) as Box<dyn Read + Send>, Box::new(stderr)] {
            let tx = lines_tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if std::env::var_os("MAILJAR_E2E_LOG").is_some() {
                        eprintln!("[mailjar] {line}");
                    }
                    let _ = tx.send(strip_ansi(&line));
                }
            });
        }
        drop(lines_tx);
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut seen = Vec::new();
        let mut smtps = None;
        let (smtp, http) = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines_rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(ports) = parse_startup_line(&line) {
                        break ports;
                    }
                    if let Some((_, addr)) = line.split_once("SMTPS (implicit TLS) on ") {
                        smtps = addr.trim().parse().ok();
                    }
                    seen.push(line);
                }
                Err(e) => {
                    let _ = child.kill();
                    let status = child.wait();
                    panic!(
                        "mailjar did not log its ports ({e:?}); exit: {status:?}; output so far:\n{}",
                        seen.join("\n")
                    );
                }
            }
        };
        Server {
            child,
            smtp,
            http,
            smtps,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM to the process.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed: {status}");
    }

    /// Waits for the process to exit, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `METHOD target` with a loopback `Host`; checks the JSON contract of every response.
    pub fn request(&self, method: &str, target: &str) -> Http {
        let request = format!(
            "{method} {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            self.http
        );
        let response = http_exchange(self.http, request.as_bytes());
        response.assert_json_contract(&format!("{method} {target}"));
        response
    }

    /// `POST target` with this JSON body sent as it is, checked like [`Server::request`].
    pub fn post_json(&self, target: &str, body: &str) -> Http {
        let request = format!(
            "POST {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.http,
            body.len()
        );
        let response = http_exchange(self.http, request.as_bytes());
        response.assert_json_contract(&format!("POST {target}"));
        response
    }

    /// `GET target`, checked like [`Server::request`].
    pub fn get(&self, target: &str) -> Http {
        self.request("GET", target)
    }

    /// `GET target`, which must answer 200; its JSON body.
    pub fn get_ok(&self, target: &str) -> Value {
        let response = self.get(target);
        assert_eq!(response.status, 200, "GET {target}: {}", response.body);
        response.json()
    }

    /// `GET /health`.
    pub fn health(&self) -> Value {
        self.get_ok("/health")
    }

    /// The `emails` of `GET /api/emails?query`.
    pub fn emails(&self, query: &str) -> Vec<Value> {
        let target = if query.is_empty() {
            "/api/emails".to_owned()
        } else {
            format!("/api/emails?{query}")
        };
        let body = self.get_ok(&target);
        body["emails"]
            .as_array()
            .unwrap_or_else(|| panic!("GET {target}: no emails array in {body}"))
            .clone()
    }

    /// The `email` of `GET /api/emails/latest`, which must answer 200.
    pub fn latest(&self) -> Value {
        self.get_ok("/api/emails/latest")["email"].clone()
    }

    /// `DELETE /api/emails` (everything): the `deleted` count.
    pub fn delete_all(&self) -> u64 {
        let response = self.request("DELETE", "/api/emails");
        assert_eq!(response.status, 200, "{}", response.body);
        response.json()["deleted"].as_u64().expect("deleted count")
    }

    /// Polls `/health` until `field` equals `want`, or panics at the deadline.
    pub fn poll_health(&self, field: &str, want: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let health = self.health();
            if health[field].as_u64() == Some(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "/health {field} is still {} after {timeout:?}, want {want}",
                health[field]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An SMTP connection whose greeting has been read (and checked to be a 220).
    pub fn smtp(&self) -> Smtp {
        let (smtp, greeting) = Smtp::connect(self.smtp);
        assert_eq!(greeting.code, 220, "greeting: {}", greeting.wire);
        smtp
    }

    /// Delivers one message over a fresh connection, with proper dot-stuffing; returns the 250 reply.
    pub fn send(&self, from: &str, to: &[&str], raw: &[u8]) -> Reply {
        let mut smtp = self.smtp();
        smtp.expect("EHLO e2e.test", 250);
        let reply = smtp.transaction(from, to, raw);
        assert_eq!(reply.code, 250, "end of DATA: {}", reply.wire);
        smtp.expect("QUIT", 221);
        reply
    }

    /// Checks that the newest stored message is exactly what was sent.
    pub fn assert_latest(&self, from: &str, to: &[&str], raw: &[u8]) -> Value {
        let email = self.latest();
        assert_stored(&email, from, to, raw);
        email
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary the tests start: `MAILJAR_E2E_BIN` when it is set (to measure another build, e.g.
/// a release binary from another checkout), else the one cargo built for this test run.
pub fn binary() -> std::ffi::OsString {
    std::env::var_os("MAILJAR_E2E_BIN")
        .unwrap_or_else(|| std::ffi::OsString::from(env!("CARGO_BIN_EXE_mailjar")))
}

/// Removes ANSI colour escapes (tracing colours its output even into a pipe).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `... SMTP on 127.0.0.1:PORT, HTTP API on http://127.0.0.1:PORT` to the two addresses.
fn parse_startup_line(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let rest = &line[line.find("SMTP on ")? + "SMTP on ".len()..];
    let (smtp, rest) = rest.split_once(", HTTP API on http://")?;
    let http = rest.split_whitespace().next()?;
    Some((smtp.parse().ok()?, http.parse().ok()?))
}

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Http {
    /// The status code.
    pub status: u16,
    /// The headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: String,
}

impl Http {
    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }

    /// The `error` text of an error response.
    pub fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error string in {}", self.body))
            .to_owned()
    }

    /// Every response is JSON with `Content-Type: application/json`; errors are `{"error": string}`.
    pub fn assert_json_contract(&self, what: &str) {
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{what}: Content-Type of a {} response",
            self.status
        );
        let json: Value = serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("{what}: body is not JSON ({e}): {:?}", self.body));
        if self.status >= 400 {
            let object = json.as_object().unwrap_or_else(|| panic!("{what}: {json}"));
            assert!(
                object.len() == 1 && object.get("error").is_some_and(Value::is_string),
                "{what}: a {} must have the body {{\"error\": string}}, got {json}",
                self.status
            );
        }
    }
}

/// Writes one raw request on a new connection and reads the whole response (the server closes).
pub fn http_exchange(addr: SocketAddr, request: &[u8]) -> Http {
    let mut stream = TcpStream::connect(addr).expect("connect to the HTTP port");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.write_all(request).expect("write the request");
    read_http_response(&mut stream)
}

/// Reads one HTTP/1.1 response from `stream`, to its Content-Length, its last chunk, or EOF.
pub fn read_http_response(stream: &mut TcpStream) -> Http {
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader
        .read_line(&mut status_line)
        .expect("read the status line");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("read a header");
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("header line with a colon");
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v): &(String, String)| v.clone())
    };
    let mut body = Vec::new();
    if let Some(length) = find("content-length") {
        body.resize(length.parse().expect("numeric Content-Length"), 0);
        reader.read_exact(&mut body).expect("read the body");
    } else if find("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).expect("chunk size");
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap(), 16)
                .expect("hex chunk size");
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).expect("chunk");
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        reader.read_to_end(&mut body).expect("read the body");
    }
    Http {
        status,
        headers,
        body: String::from_utf8(body).expect("UTF-8 body"),
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn enc(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One SMTP reply as read from the wire.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The code of the last line.
    pub code: u16,
    /// The text of each line, after `NNN-` / `NNN `.
    pub lines: Vec<String>,
    /// Exactly what was read, CRLFs included.
    pub wire: String,
}

/// A raw SMTP client connection.
pub struct Smtp {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Smtp {
    /// Connects and reads the first reply (the greeting, or a refusal).
    pub fn connect(addr: SocketAddr) -> (Smtp, Reply) {
        let stream = TcpStream::connect(addr).expect("connect to the SMTP port");
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        let writer = stream.try_clone().unwrap();
        let mut smtp = Smtp {
            reader: BufReader::new(stream),
            writer,
        };
        let greeting = smtp.reply();
        (smtp, greeting)
    }

    /// Writes bytes as they are.
    pub fn write(&mut self, bytes: &[u8]) {
        self.writer
            .write_all(bytes)
            .expect("write to the SMTP server");
    }

    /// Reads one (possibly multi-line) reply; panics on EOF.
    pub fn reply(&mut self) -> Reply {
        self.try_reply()
            .expect("the server closed the connection instead of replying")
    }

    /// Reads one reply, or None at EOF.
    pub fn try_reply(&mut self) -> Option<Reply> {
        let mut wire = String::new();
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) if wire.is_empty() => return None,
                Ok(0) => panic!("EOF inside a reply: {wire:?}"),
                Ok(_) => {}
                Err(e) if wire.is_empty() && e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return None;
                }
                Err(e) => panic!("reading a reply: {e} (so far {wire:?})"),
            }
            wire.push_str(&line);
            assert!(line.ends_with("\r\n"), "reply line without CRLF: {line:?}");
            assert!(line.len() >= 5, "short reply line: {line:?}");
            let code: u16 = line[..3]
                .parse()
                .unwrap_or_else(|_| panic!("bad reply line {line:?}"));
            lines.push(line[4..line.len() - 2].to_owned());
            match line.as_bytes()[3] {
                b' ' => return Some(Reply { code, lines, wire }),
                b'-' => {}
                _ => panic!("bad reply separator in {line:?}"),
            }
        }
    }

    /// Whether the server has closed the connection (EOF or reset) with nothing more to read.
    pub fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.reader.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
        }
    }

    /// Sends `line` + CRLF and reads the reply.
    pub fn cmd(&mut self, line: &str) -> Reply {
        self.write(format!("{line}\r\n").as_bytes());
        self.reply()
    }

    /// Sends `line` + CRLF; the reply must have this code.
    pub fn expect(&mut self, line: &str, code: u16) -> Reply {
        let reply = self.cmd(line);
        assert_eq!(reply.code, code, "{line:?} got {:?}", reply.wire);
        reply
    }

    /// MAIL, RCPT..., DATA, the dot-stuffed text and its end; returns the reply to the end of DATA.
    pub fn transaction(&mut self, from: &str, to: &[&str], raw: &[u8]) -> Reply {
        self.expect(&format!("MAIL FROM:<{from}>"), 250);
        for rcpt in to {
            self.expect(&format!("RCPT TO:<{rcpt}>"), 250);
        }
        self.expect("DATA", 354);
        let mut data = dot_stuff(raw);
        data.extend_from_slice(b".\r\n");
        self.write(&data);
        self.reply()
    }

    /// Sends every write at once instead of coalescing small ones (Nagle off).
    pub fn set_nodelay(&self) {
        self.writer.set_nodelay(true).expect("set TCP_NODELAY");
    }

    /// Sets how long one read may block (the default is [`IO_TIMEOUT`]).
    pub fn set_read_timeout(&self, timeout: Duration) {
        self.writer
            .set_read_timeout(Some(timeout))
            .expect("set the read timeout");
    }

    /// The socket itself, e.g. for a TLS handshake after STARTTLS's 220 (nothing may be buffered).
    pub fn into_stream(self) -> TcpStream {
        assert!(
            self.reader.buffer().is_empty(),
            "bytes after the last reply: {:?}",
            String::from_utf8_lossy(self.reader.buffer())
        );
        self.writer
    }

    /// Half-closes the writing side.
    pub fn shutdown_write(&mut self) {
        let _ = self.writer.shutdown(Shutdown::Write);
    }
}

/// Dot-stuffs a message that ends with CRLF: a dot at the start of a line (after CRLF) is doubled.
pub fn dot_stuff(raw: &[u8]) -> Vec<u8> {
    assert!(
        raw.is_empty() || raw.ends_with(b"\r\n"),
        "a message sent with DATA must end with CRLF"
    );
    let mut out = Vec::with_capacity(raw.len() + 64);
    for (i, &b) in raw.iter().enumerate() {
        if b == b'.' && (i == 0 || raw[..i].ends_with(b"\r\n")) {
            out.push(b'.');
        }
        out.push(b);
    }
    out
}

/// Undoes dot-stuffing: a dot at the start of a line (after CRLF) is dropped.
pub fn dot_unstuff(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    for (i, &b) in data.iter().enumerate() {
        if b == b'.' && (i == 0 || data[..i].ends_with(b"\r\n")) {
            continue;
        }
        out.push(b);
    }
    out
}

/// Checks a stored CapturedEmail against what was sent: envelope, size and raw, byte for byte.
pub fn assert_stored(email: &Value, from: &str, to: &[&str], raw: &[u8]) {
    assert_eq!(email["envelope"]["from"], from, "envelope.from");
    let stored_to: Vec<&str> = email["envelope"]["to"]
        .as_array()
        .expect("envelope.to")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(stored_to, to, "envelope.to");
    assert_eq!(email["size"].as_u64(), Some(raw.len() as u64), "size");
    let stored = email["raw"].as_str().expect("raw");
    // The API returns raw as a JSON string: byte for byte when the message is UTF-8.
    let sent = String::from_utf8_lossy(raw);
    if stored != sent {
        let at = stored
            .bytes()
            .zip(sent.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(stored.len().min(sent.len()));
        let show = |s: &str| {
            let start = at.saturating_sub(40);
            String::from_utf8_lossy(&s.as_bytes()[start..(at + 40).min(s.len())]).into_owned()
        };
        panic!(
            "raw differs from what was sent at byte {at} (stored {} bytes, sent {}):\n stored: {:?}\n   sent: {:?}",
            stored.len(),
            sent.len(),
            show(stored),
            show(&sent)
        );
    }
}

/// A message with CRLF line endings.
pub fn message(from: &str, to: &str, subject: &str, body: &str) -> Vec<u8> {
    let mut raw = format!("From: {from}\r\nTo: {to}\r\nSubject: {subject}\r\n\r\n");
    for line in body.lines() {
        raw.push_str(line);
        raw.push_str("\r\n");
    }
    raw.into_bytes()
}

/// A TCP port on loopback that was free a moment ago (for a server the test starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a free loopback port")
}

/// A value that differs between runs and tests, for unique addresses and codes.
pub fn nonce() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ COUNTER.fetch_add(0x9E37_79B9, Ordering::Relaxed)
}

/// What one SMTP transaction carried, reconstructed from the bytes a client wrote.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The MAIL FROM path.
    pub from: String,
    /// The RCPT TO paths.
    pub to: Vec<String>,
    /// The message text, dot-unstuffed, without the final `.` line.
    pub data: Vec<u8>,
    /// The command lines, in order (message text excluded).
    pub commands: Vec<String>,
}

/// Splits a client's byte stream (commands and DATA text) into its transactions.
pub fn parse_client_stream(wire: &[u8]) -> Vec<Sent> {
    let mut sent = Vec::new();
    let mut current = Sent {
        from: String::new(),
        to: Vec::new(),
        data: Vec::new(),
        commands: Vec::new(),
    };
    let mut rest = wire;
    while !rest.is_empty() {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("command line ends with CRLF");
        let line = String::from_utf8(rest[..end].to_vec()).expect("UTF-8 command");
        rest = &rest[end + 2..];
        let upper = line.to_ascii_uppercase();
        let path = |line: &str| {
            let start = line.find('<').expect("<path>") + 1;
            let stop = line.find('>').expect("<path>");
            line[start..stop].to_owned()
        };
        if upper.starts_with("MAIL FROM:") {
            current.from = path(&line);
        } else if upper.starts_with("RCPT TO:") {
            current.to.push(path(&line));
        }
        current.commands.push(line);
        if upper == "DATA" {
            // The text runs to the first line that is a lone dot.
            let stop = if rest.starts_with(b".\r\n") {
                0
            } else {
                rest.windows(5)
                    .position(|w| w == b"\r\n.\r\n")
                    .expect("end of DATA")
                    + 2
            };
            current.data = dot_unstuff(&rest[..stop]);
            rest = &rest[stop + 3..];
            let done = std::mem::replace(
                &mut current,
                Sent {
                    from: String::new(),
                    to: Vec::new(),
                    data: Vec::new(),
                    commands: Vec::new(),
                },
            );
            sent.push(done);
        }
    }
    if !current.commands.is_empty() {
        if let Some(last) = sent.last_mut() {
            last.commands.extend(current.commands);
        } else {
            sent.push(current);
        }
    }
    sent
}

/// Python code that records every byte smtplib writes; the script appends to it and
/// calls `done(client)` to save the byte stream to `$WIRE_OUT`.
pub const PY_RECORDER: &str = r#"
import os, smtplib, sys
class Recorder(smtplib.SMTP):
    def __init__(self, *args, **kwargs):
        self.wire = bytearray()
        kwargs.setdefault("timeout", 30)  # fail instead of hanging on a missing reply
        super().__init__(*args, **kwargs)
    def send(self, s):
        if isinstance(s, str):
            s = s.encode(self.command_encoding)
        self.wire += s
        super().send(s)
def done(client):
    with open(os.environ["WIRE_OUT"], "wb") as f:
        f.write(bytes(client.wire))
HOST, PORT = "127.0.0.1", int(os.environ["SMTP_PORT"])
"#;

/// Runs a Python script (after [`PY_RECORDER`]) against `server`; returns its stdout and the bytes smtplib wrote.
pub fn run_smtplib(
    server: &Server,
    script: &str,
    args: &[&str],
    stdin: &[u8],
) -> (String, Vec<u8>) {
    let wire_path = std::env::temp_dir().join(format!("mailjar-e2e-wire-{}", nonce()));
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(format!("{PY_RECORDER}\n{script}"))
        .args(args)
        .env("SMTP_PORT", server.smtp.port().to_string())
        .env("WIRE_OUT", &wire_path)
        .env("PYTHONIOENCODING", "utf-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 must be installed for the smtplib tests");
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let output = child.wait_with_output().expect("run python3");
    writer.join().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "python3 failed ({}):\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let wire = std::fs::read(&wire_path).unwrap_or_default();
    let _ = std::fs::remove_file(&wire_path);
    (stdout, wire)
}

/// Runs a command to completion; panics with its output unless it succeeds.
pub fn run_ok(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Connects until the server greets with 220 (a freed slot), or panics at the deadline.
pub fn connect_when_free(addr: SocketAddr, timeout: Duration) -> Smtp {
    let deadline = Instant::now() + timeout;
    loop {
        let (mut smtp, reply) = Smtp::connect(addr);
        if reply.code == 220 {
            return smtp;
        }
        assert_eq!(reply.code, 421, "refusal: {}", reply.wire);
        assert!(smtp.closed(), "a refused connection is closed");
        assert!(
            Instant::now() < deadline,
            "no SMTP slot was freed within {timeout:?}: {}",
            reply.wire
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`, ...) in KiB, if readable (a process
/// that has exited, even one not yet reaped, has none).
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// The resident set size of a process in KiB (`VmRSS` of `/proc/PID/status`), if readable.
pub fn rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmRSS")
}

/// The peak resident set size of a process in KiB (`VmHWM` of `/proc/PID/status`), if readable.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmHWM")
}

/// Samples the RSS of a process every `every` on a thread until dropped; keeps the peak.
pub struct RssSampler {
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32, every: Duration) -> RssSampler {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let peak = std::sync::Arc::new(AtomicU64::new(rss_kib(pid).unwrap_or(0)));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let thread = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(kib) = rss_kib(pid) {
                        peak.fetch_max(kib, Ordering::Relaxed);
                    }
                    std::thread::sleep(every);
                }
            })
        };
        RssSampler {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    /// The highest RSS seen so far, in KiB.
    pub fn peak_kib(&self) -> u64 {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An HTTP/1.1 client that keeps its connection alive between requests (reconnecting when the
/// server closes it), so that thousands of requests do not use up loopback ports.
pub struct KeepAlive {
    addr: SocketAddr,
    stream: Option<TcpStream>,
}

impl KeepAlive {
    /// A client for the server at `addr`; connects on first use.
    pub fn new(addr: SocketAddr) -> KeepAlive {
        KeepAlive { addr, stream: None }
    }

    /// `METHOD target` with a loopback `Host`; the JSON contract is checked like [`Server::request`].
    pub fn request(&mut self, method: &str, target: &str) -> Http {
        let request = format!(
            "{method} {target} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\n\r\n",
            self.addr
        );
        // A kept connection the server has closed in the meantime fails at once: retry once, fresh.
        for attempt in 0..2 {
            let fresh = self.stream.is_none();
            let stream = self.stream.get_or_insert_with(|| {
                let s = TcpStream::connect(self.addr).expect("connect to the HTTP port");
                s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                let _ = s.set_nodelay(true);
                s
            });
            if stream.write_all(request.as_bytes()).is_ok()
                && let Some(response) = try_read_http_response(stream)
            {
                if response
                    .header("connection")
                    .is_some_and(|c| c.eq_ignore_ascii_case("close"))
                {
                    self.stream = None;
                }
                response.assert_json_contract(&format!("{method} {target}"));
                return response;
            }
            self.stream = None;
            assert!(
                !fresh || attempt == 0,
                "{method} {target}: no response on a fresh connection"
            );
        }
        panic!("{method} {target}: no response after a reconnect");
    }

    /// `GET target`.
    pub fn get(&mut self, target: &str) -> Http {
        self.request("GET", target)
    }
}

/// Like [`read_http_response`], but None when the connection is closed before a status line.
pub fn try_read_http_response(stream: &mut TcpStream) -> Option<Http> {
    let mut first = [0u8; 1];
    match stream.peek(&mut first) {
        Ok(0) | Err(_) => return None,
        Ok(_) => {}
    }
    Some(read_http_response(stream))
}

/// Watches a process's memory on a thread and kills it (SIGKILL) as soon as its RSS passes a
/// ceiling, so that an attack on a server without the fix cannot take the machine down with it.
/// It keeps the highest `VmHWM` it read: the process's peak RSS even after the kill.
///
/// Drop it before the process is reaped (declare it after the [`Server`]), so that it never
/// reads or kills a process that has reused the id.
pub struct RssGuard {
    pid: u32,
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    killed_at: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssGuard {
    /// The ceiling of the attack tests: 3 GiB, in KiB.
    pub const CEILING_KIB: u64 = 3 << 20;

    /// Starts watching `pid` every 5 ms; kills it when its RSS passes `ceiling_kib`.
    pub fn start(pid: u32, ceiling_kib: u64) -> RssGuard {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let peak = std::sync::Arc::new(AtomicU64::new(peak_rss_kib(pid).unwrap_or(0)));
        let killed_at = std::sync::Arc::new(AtomicU64::new(0));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let thread = {
            let (peak, killed_at, stop) = (peak.clone(), killed_at.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) && killed_at.load(Ordering::Relaxed) == 0 {
                    if let Some(hwm) = peak_rss_kib(pid) {
                        peak.fetch_max(hwm, Ordering::Relaxed);
                    }
                    if let Some(rss) = rss_kib(pid)
                        && rss > ceiling_kib
                    {
                        let _ = Command::new("kill")
                            .args(["-KILL", &pid.to_string()])
                            .status();
                        killed_at.store(rss, Ordering::Relaxed);
                        eprintln!(
                            "RssGuard: killed process {pid} at {} MiB RSS (ceiling {} MiB)",
                            rss >> 10,
                            ceiling_kib >> 10
                        );
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        RssGuard {
            pid,
            peak,
            killed_at,
            stop,
            thread: Some(thread),
        }
    }

    /// The peak RSS (`VmHWM`) of the process so far, in KiB (read now when the process lives).
    pub fn peak_kib(&self) -> u64 {
        let now = if self.killed().is_none() {
            peak_rss_kib(self.pid).unwrap_or(0)
        } else {
            0
        };
        self.peak
            .fetch_max(now, std::sync::atomic::Ordering::Relaxed)
            .max(now)
    }

    /// The RSS in KiB at which the guard killed the process, if it did.
    pub fn killed(&self) -> Option<u64> {
        match self.killed_at.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            kib => Some(kib),
        }
    }
}

impl Drop for RssGuard {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The worst `/health` latencies a [`HealthProber`] saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProbeReport {
    /// The slowest `/health` on the one kept-alive connection (a request still unanswered counts
    /// for the time it has waited so far).
    pub kept_alive_worst: Duration,
    /// The slowest `/health` on a new connection, connect included.
    pub fresh_worst: Duration,
    /// Probes answered 200, on both kinds of connection.
    pub probes: u64,
    /// Probes that failed (no connection, an error, a timeout or a status other than 200).
    pub failures: u64,
}

impl ProbeReport {
    /// The worse of the two latencies.
    pub fn worst(&self) -> Duration {
        self.kept_alive_worst.max(self.fresh_worst)
    }
}

/// What one probing thread has seen.
#[derive(Default)]
struct ProbeState {
    worst: std::sync::Mutex<Duration>,
    in_flight_since: std::sync::Mutex<Option<Instant>>,
    probes: std::sync::atomic::AtomicU64,
    failures: std::sync::atomic::AtomicU64,
}

impl ProbeState {
    fn worst(&self) -> Duration {
        let worst = *self.worst.lock().unwrap_or_else(|e| e.into_inner());
        let waiting = self
            .in_flight_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map_or(Duration::ZERO, |since| since.elapsed());
        worst.max(waiting)
    }

    /// Runs one probe, timing it while it is in flight; counts whether it succeeded.
    fn probe(&self, run: impl FnOnce() -> bool) -> bool {
        use std::sync::atomic::Ordering;
        let start = Instant::now();
        *self
            .in_flight_since
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(start);
        let ok = run();
        let took = start.elapsed();
        *self
            .in_flight_since
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        {
            let mut worst = self.worst.lock().unwrap_or_else(|e| e.into_inner());
            *worst = (*worst).max(took);
        }
        let counter = if ok { &self.probes } else { &self.failures };
        counter.fetch_add(1, Ordering::Relaxed);
        ok
    }
}

/// How long one `/health` probe or SMTP greeting may wait for its answer before it counts as
/// failed.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// Sends `GET /health` over and over on two threads, one over a kept-alive connection and one
/// over a new connection each time, and records the worst latency of each until stopped.
pub struct HealthProber {
    kept: std::sync::Arc<ProbeState>,
    fresh: std::sync::Arc<ProbeState>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl HealthProber {
    /// Starts probing the HTTP server at `addr`, pausing `every` between two probes of a thread.
    pub fn start(addr: SocketAddr, every: Duration) -> HealthProber {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let kept = Arc::new(ProbeState::default());
        let fresh = Arc::new(ProbeState::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for keep_alive in [true, false] {
            let state = if keep_alive { &kept } else { &fresh }.clone();
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                let mut stream: Option<TcpStream> = None;
                while !stop.load(Ordering::Relaxed) {
                    if !keep_alive {
                        stream = None;
                    }
                    let ok = state.probe(|| {
                        probe_health(addr, &mut stream, keep_alive).is_ok_and(|s| s == 200)
                    });
                    if !ok {
                        stream = None;
                    }
                    std::thread::sleep(every);
                }
            }));
        }
        HealthProber {
            kept,
            fresh,
            stop,
            threads,
        }
    }

    /// The worst latencies so far.
    pub fn report(&self) -> ProbeReport {
        use std::sync::atomic::Ordering;
        ProbeReport {
            kept_alive_worst: self.kept.worst(),
            fresh_worst: self.fresh.worst(),
            probes: self.kept.probes.load(Ordering::Relaxed)
                + self.fresh.probes.load(Ordering::Relaxed),
            failures: self.kept.failures.load(Ordering::Relaxed)
                + self.fresh.failures.load(Ordering::Relaxed),
        }
    }

    /// Stops probing (waiting for a probe in flight, at most [`PROBE_TIMEOUT`]) and reports.
    pub fn stop(mut self) -> ProbeReport {
        self.stop_threads();
        self.report()
    }

    fn stop_threads(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for HealthProber {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// Connects to an SMTP server over and over on a thread and records the worst time from the
/// connect to the greeting's line, until stopped.
pub struct GreetingProber {
    state: std::sync::Arc<ProbeState>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GreetingProber {
    /// Starts probing the SMTP server at `addr`, pausing `every` between two greetings.
    pub fn start(addr: SocketAddr, every: Duration) -> GreetingProber {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let state = Arc::new(ProbeState::default());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    state.probe(|| greeting(addr).is_ok_and(|line| line.starts_with("220 ")));
                    std::thread::sleep(every);
                }
            })
        };
        GreetingProber {
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// The worst greeting latency so far (a greeting still awaited counts for its wait so far).
    pub fn worst(&self) -> Duration {
        self.state.worst()
    }

    /// Greetings that failed (no connection, an error, a timeout or a line other than `220 `).
    pub fn failures(&self) -> u64 {
        self.state
            .failures
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops probing (waiting for a greeting in flight, at most [`PROBE_TIMEOUT`]); the worst
    /// latency (one awaited when stopped counts for its wait so far) and the failures.
    pub fn stop(mut self) -> (Duration, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let waiting = self.worst();
        self.stop_thread();
        (self.worst().max(waiting), self.failures())
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for GreetingProber {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// The first line a new SMTP connection to `addr` sends (which then says QUIT). Never panics.
pub fn greeting(addr: SocketAddr) -> std::io::Result<String> {
    let stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let _ = (&stream).write_all(b"QUIT\r\n");
    Ok(line)
}

/// One `GET /health` over `stream` (connecting first when it is None); the status. Never panics.
fn probe_health(
    addr: SocketAddr,
    stream: &mut Option<TcpStream>,
    keep_alive: bool,
) -> std::io::Result<u16> {
    if stream.is_none() {
        let s = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
        s.set_read_timeout(Some(PROBE_TIMEOUT))?;
        s.set_write_timeout(Some(PROBE_TIMEOUT))?;
        s.set_nodelay(true)?;
        *stream = Some(s);
    }
    let Some(s) = stream.as_mut() else {
        unreachable!("connected above")
    };
    let connection = if keep_alive { "keep-alive" } else { "close" };
    s.write_all(
        format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: {connection}\r\n\r\n")
            .as_bytes(),
    )?;
    let mut reader = BufReader::new(&*s);
    let (status, headers) = read_head(&mut reader)?;
    read_body_with(&mut reader, &headers, |_| {})?;
    if !reader.buffer().is_empty() {
        return Err(std::io::Error::other("bytes after the /health response"));
    }
    if headers
        .iter()
        .any(|(n, v)| n == "connection" && v.eq_ignore_ascii_case("close"))
    {
        *stream = None;
    }
    Ok(status)
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

/// Reads the head of one HTTP/1.1 response: the status and the headers (names lower-cased).
pub fn read_head(reader: &mut impl BufRead) -> std::io::Result<(u16, Vec<(String, String)>)> {
    let mut status_line = String::new();
    if reader.read_line(&mut status_line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("bad status line"))?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            return Ok((status, headers));
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid("header line without a colon"))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
}

/// Reads a response body after [`read_head`] (to its Content-Length, its last chunk, or EOF),
/// handing it to `sink` piece by piece without keeping it; returns its length.
pub fn read_body_with(
    reader: &mut impl BufRead,
    headers: &[(String, String)],
    mut sink: impl FnMut(&[u8]),
) -> std::io::Result<u64> {
    /// Copies exactly `n` bytes to the sink.
    fn pass(
        reader: &mut impl BufRead,
        mut n: u64,
        sink: &mut impl FnMut(&[u8]),
        total: &mut u64,
    ) -> std::io::Result<()> {
        while n > 0 {
            let buf = reader.fill_buf()?;
            if buf.is_empty() {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let take = buf.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            sink(&buf[..take]);
            reader.consume(take);
            n -= take as u64;
            *total += take as u64;
        }
        Ok(())
    }
    let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let mut total = 0u64;
    if let Some(length) = find("content-length") {
        let length = length
            .parse()
            .map_err(|_| invalid("non-numeric Content-Length"))?;
        pass(reader, length, &mut sink, &mut total)?;
    } else if find("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = size.trim().split(';').next().unwrap_or("");
            let size = u64::from_str_radix(size, 16).map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                // No trailers: the last chunk is followed by one empty line.
                let mut end = String::new();
                reader.read_line(&mut end)?;
                break;
            }
            pass(reader, size, &mut sink, &mut total)?;
            let mut crlf = [0u8; 2];
            reader.read_exact(&mut crlf)?;
            if &crlf != b"\r\n" {
                return Err(invalid("chunk not followed by CRLF"));
            }
        }
    } else {
        pass(reader, u64::MAX, &mut sink, &mut total).or_else(|e| {
            // To EOF: the end of the stream is the end of the body.
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Ok(())
            } else {
                Err(e)
            }
        })?;
    }
    Ok(total)
}

/// swaks (which must be installed) pointed at the server's SMTP port, saying
/// `EHLO e2e.test`; the caller adds the rest and runs it.
pub fn swaks(server: &Server) -> Command {
    let installed = Command::new("swaks")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        installed,
        "swaks is not installed: install it with `apt-get install -y swaks`"
    );
    let mut swaks = Command::new("swaks");
    swaks.args(["--server", "127.0.0.1", "--port"]);
    swaks.arg(server.smtp.port().to_string());
    swaks.args(["--helo", "e2e.test"]);
    swaks
}

/// The message text as swaks' transcript shows it going out (` -> `, or
/// ` ~> ` over TLS, lines after the 354), unstuffed.
pub fn swaks_data(transcript: &str) -> Vec<u8> {
    let mut data = Vec::new();
    let mut in_data = false;
    for line in transcript.lines() {
        if !in_data {
            in_data = line.starts_with("<~  354") || line.starts_with("<-  354");
            continue;
        }
        let Some(sent) = line
            .strip_prefix(" ~> ")
            .or_else(|| line.strip_prefix(" -> "))
        else {
            continue;
        };
        if sent == "." {
            return dot_unstuff(&data);
        }
        data.extend_from_slice(sent.as_bytes());
        data.extend_from_slice(b"\r\n");
    }
    panic!("no DATA in the swaks transcript:\n{transcript}");
}

impl Smtp {
    /// An SMTP client on a connection already open, with nothing read from it yet (its first
    /// reply is the greeting): for a client that writes before it is greeted.
    pub fn from_stream(stream: TcpStream) -> Smtp {
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        let writer = stream.try_clone().unwrap();
        Smtp {
            reader: BufReader::new(stream),
            writer,
        }
    }
}

/// Helpers of the mail reader tests (IMAP, POP3, the seen flag).
pub mod readers;

/// curl's output read line by line as it comes (event streams).
pub mod curl;
