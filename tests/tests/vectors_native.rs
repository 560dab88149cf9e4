//! The conformance vectors against the native host over real sockets.
//!
//! Each vector gets a fresh server on ephemeral loopback ports. SMTP
//! transcripts are written chunk by chunk to a TCP socket, with a short pause
//! between chunks; a transcript that leaves the connection open is ended with
//! QUIT, whose 221 must be the only extra reply. Stored messages are read back
//! with `GET /api/emails`. API cases deliver over SMTP (BDAT, so the bytes
//! arrive exactly), ask over HTTP/1.1, and let real time pass for `advance`.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::Parser;
use mailjar::{Server, Settings};
use mailjar_tests::matcher::{Vars, substitute};
use mailjar_tests::vectors::{
    self, ApiVector, DOMAIN, SentEvent, SmtpVector, Step, check_events, check_listed,
    check_replies, check_response,
};
use serde_json::Value;

/// A native server running on its own thread until dropped.
struct Native {
    smtp: SocketAddr,
    http: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Native {
    fn start(extra: &[String]) -> Result<Native, String> {
        let mut args: Vec<String> = [
            "mailjar",
            "--smtp-port",
            "0",
            "--http-port",
            "0",
            "--domain",
            DOMAIN,
        ]
        .map(str::to_owned)
        .to_vec();
        args.extend_from_slice(extra);
        let settings = Settings::try_parse_from(&args).map_err(|e| e.to_string())?;
        settings.validate()?;
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    let _ = addr_tx.send(Err(e.to_string()));
                    return;
                }
            };
            runtime.block_on(async move {
                let server = match Server::bind(settings).await {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let addrs = server
                    .smtp_addr()
                    .and_then(|s| server.http_addr().map(|h| (s, h)));
                let _ = addr_tx.send(addrs.map_err(|e| e.to_string()));
                server
                    .run(async {
                        let _ = stop_rx.await;
                    })
                    .await;
            });
        });
        let (smtp, http) = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|e| format!("the server did not start: {e}"))??;
        Ok(Native {
            smtp,
            http,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn limit_flags(l: &vectors::SmtpLimits) -> Vec<String> {
    let mut flags = Vec::new();
    for (flag, value) in [
        ("--max-message-bytes", l.max_message_bytes),
        ("--max-recipients", l.max_recipients),
        ("--max-line-bytes", l.max_line_bytes),
        ("--max-errors", l.max_errors),
    ] {
        if let Some(v) = value {
            flags.push(flag.to_owned());
            flags.push(v.to_string());
        }
    }
    for pair in &l.auth {
        flags.push("--auth".to_owned());
        flags.push(pair.clone());
    }
    if l.require_auth {
        flags.push("--require-auth".to_owned());
    }
    flags
}

/// Reads until the peer closes (a reset counts as closed: what arrived before it is kept).
fn read_to_close(stream: &mut TcpStream, deadline: Duration) -> Result<Vec<u8>, String> {
    stream
        .set_read_timeout(Some(deadline))
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(out),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(format!(
                    "reading: {e}; got so far: {:?}",
                    String::from_utf8_lossy(&out)
                ));
            }
        }
    }
}

/// Splits what the server wrote into replies (code and text lines).
fn parse_replies(bytes: &[u8]) -> Result<Vec<(u16, Vec<String>)>, String> {
    let text = String::from_utf8(bytes.to_vec()).map_err(|_| "replies are not UTF-8")?;
    let mut replies = Vec::new();
    let mut lines = Vec::new();
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let end = rest
            .find("\r\n")
            .ok_or_else(|| format!("a reply line without CRLF: {rest:?}"))?;
        let line = &rest[..end];
        rest = &rest[end + 2..];
        let code: u16 = line
            .get(..3)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("a reply line without a code: {line:?}"))?;
        let sep = line.get(3..4).unwrap_or(" ");
        lines.push(line.get(4..).unwrap_or("").to_owned());
        match sep {
            "-" => {}
            " " => replies.push((code, std::mem::take(&mut lines))),
            _ => return Err(format!("bad reply line {line:?}")),
        }
    }
    if !lines.is_empty() {
        return Err("a multi-line reply was cut off".to_owned());
    }
    Ok(replies)
}

/// A minimal HTTP/1.1 exchange: status, headers (lower-case names), body.
struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn http(addr: SocketAddr, method: &str, target: &str) -> Result<HttpResponse, String> {
    http_with(addr, method, target, None, &[])
}

/// A request with a body (and a `Content-Type` when given).
fn http_with(
    addr: SocketAddr,
    method: &str,
    target: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<HttpResponse, String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    let content_type = content_type.map_or(String::new(), |t| format!("Content-Type: {t}\r\n"));
    let mut request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{content_type}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    stream
        .write_all(&request)
        .map_err(|e| format!("write: {e}"))?;
    let raw = read_to_close(&mut stream, Duration::from_secs(70))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line in {head:?}"))?;
    let mut headers = Vec::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    if headers
        .iter()
        .any(|(n, t)| n == "transfer-encoding" && t.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body)?;
    }
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("bad chunk")?;
        let size = std::str::from_utf8(&data[..end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok())
            .ok_or("bad chunk size")?;
        data = &data[end + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(data.get(..size).ok_or("short chunk")?);
        data = data.get(size + 2..).ok_or("short chunk")?;
    }
}

fn get_json(addr: SocketAddr, target: &str) -> Result<Value, String> {
    let r = http(addr, "GET", target)?;
    if r.status != 200 {
        return Err(format!(
            "GET {target}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        ));
    }
    serde_json::from_slice(&r.body).map_err(|e| e.to_string())
}

fn run_smtp(v: &SmtpVector) -> Result<(), String> {
    let mut flags = limit_flags(&v.limits);
    if v.idle_timeout {
        flags.extend(["--idle-timeout".to_owned(), "300ms".to_owned()]);
    }
    let server = Native::start(&flags)?;
    for rule in &v.faults {
        let body = rule.to_string();
        let r = http_with(
            server.http,
            "POST",
            "/api/faults",
            Some("application/json"),
            body.as_bytes(),
        )?;
        if r.status != 200 {
            return Err(format!("the fault rule {body} got {}", r.status));
        }
    }
    let mut stream = TcpStream::connect(server.smtp).map_err(|e| format!("connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    for chunk in &v.input {
        std::thread::sleep(Duration::from_millis(3));
        if let Err(e) = stream.write_all(chunk) {
            // The server may close mid-input (it said 421 or 221): what it wrote is still read.
            if !v.closed {
                return Err(format!("write: {e}"));
            }
            break;
        }
    }
    let replies = if v.closed {
        parse_replies(&read_to_close(&mut stream, Duration::from_secs(5))?)?
    } else {
        stream
            .write_all(b"QUIT\r\n")
            .map_err(|e| format!("write QUIT: {e}"))?;
        let _ = stream.shutdown(Shutdown::Write);
        let mut replies = parse_replies(&read_to_close(&mut stream, Duration::from_secs(5))?)?;
        match replies.pop() {
            Some((221, _)) => replies,
            other => {
                return Err(format!(
                    "the runner's closing QUIT got {other:?}; replies before it: {replies:?}"
                ));
            }
        }
    };
    check_replies(&replies, &v.replies)?;
    check_listed(&get_json(server.http, "/api/emails")?, &v.messages)
}

#[test]
fn smtp_vectors_against_the_native_host() {
    vectors::run_smtp_vectors("native SMTP", run_smtp);
}

/// Sends one message over SMTP with BDAT, so the stored bytes are exactly `raw`.
fn smtp_deliver(addr: SocketAddr, from: &str, to: &[String], raw: &[u8]) -> Result<(), String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    let mut out = format!("EHLO vectors\r\nMAIL FROM:<{from}> SMTPUTF8\r\n").into_bytes();
    for rcpt in to {
        out.extend_from_slice(format!("RCPT TO:<{rcpt}>\r\n").as_bytes());
    }
    out.extend_from_slice(format!("BDAT {} LAST\r\n", raw.len()).as_bytes());
    out.extend_from_slice(raw);
    out.extend_from_slice(b"QUIT\r\n");
    stream.write_all(&out).map_err(|e| format!("write: {e}"))?;
    let _ = stream.shutdown(Shutdown::Write);
    let replies = parse_replies(&read_to_close(&mut stream, Duration::from_secs(5))?)?;
    let codes: Vec<u16> = replies.iter().map(|r| r.0).collect();
    let mut want = vec![220, 250, 250];
    want.extend(to.iter().map(|_| 250));
    want.extend([250, 221]);
    if codes != want {
        return Err(format!("delivery over SMTP got {replies:?}"));
    }
    Ok(())
}

struct NativeRun {
    server: Native,
    vars: Vars,
    waits: HashMap<String, JoinHandle<Result<HttpResponse, String>>>,
    streams: HashMap<String, EventStream>,
}

/// An open `GET /api/events` connection: what has been read and not yet checked.
struct EventStream {
    stream: TcpStream,
    /// Bytes read after the response head, still chunked.
    wire: Vec<u8>,
    /// The de-chunked text not yet split into events.
    text: String,
}

impl EventStream {
    fn open(
        addr: SocketAddr,
        target: &str,
        last_event_id: Option<&str>,
    ) -> Result<EventStream, String> {
        let mut stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
        let extra = last_event_id.map_or(String::new(), |id| format!("Last-Event-ID: {id}\r\n"));
        write!(
            stream,
            "GET {target} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n"
        )
        .map_err(|e| format!("write: {e}"))?;
        let mut wire = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        let head_end = loop {
            if let Some(at) = wire.windows(4).position(|w| w == b"\r\n\r\n") {
                break at;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no response head: {:?}",
                    String::from_utf8_lossy(&wire)
                ));
            }
            read_some(&mut stream, &mut wire)?;
        };
        let head = String::from_utf8_lossy(&wire[..head_end]).into_owned();
        if !head.starts_with("HTTP/1.1 200") || !head.contains("content-type: text/event-stream") {
            return Err(format!("GET {target} did not open a stream: {head}"));
        }
        let wire = wire[head_end + 4..].to_vec();
        Ok(EventStream {
            stream,
            wire,
            text: String::new(),
        })
    }

    /// Moves complete chunks from `wire` to `text`.
    fn dechunk(&mut self) -> Result<(), String> {
        loop {
            let Some(end) = self.wire.windows(2).position(|w| w == b"\r\n") else {
                return Ok(());
            };
            let size = usize::from_str_radix(&String::from_utf8_lossy(&self.wire[..end]), 16)
                .map_err(|e| format!("bad chunk size: {e}"))?;
            if self.wire.len() < end + 2 + size + 2 {
                return Ok(());
            }
            let chunk = String::from_utf8(self.wire[end + 2..end + 2 + size].to_vec())
                .map_err(|e| format!("events are not UTF-8: {e}"))?;
            self.text.push_str(&chunk);
            self.wire.drain(..end + 4 + size);
        }
    }

    /// Complete events in `text` (keep-alive comments dropped), leaving a partial one.
    fn complete_events(&self) -> Vec<SentEvent> {
        let Some(end) = self.text.rfind("\n\n") else {
            return Vec::new();
        };
        self.text[..end]
            .split("\n\n")
            .filter_map(|block| {
                let mut event = None;
                let mut id = None;
                let mut data = None;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        event = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data = serde_json::from_str(v).ok();
                    }
                }
                Some((event?, id, data.unwrap_or(Value::Null)))
            })
            .collect()
    }

    /// The next `n` events; fails when fewer come within a few seconds or more
    /// come within a short grace after them.
    fn next(&mut self, n: usize) -> Result<Vec<SentEvent>, String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.complete_events().len() < n && Instant::now() < deadline {
            read_some(&mut self.stream, &mut self.wire)?;
            self.dechunk()?;
        }
        let grace = Instant::now() + Duration::from_millis(150);
        while Instant::now() < grace {
            read_some(&mut self.stream, &mut self.wire)?;
            self.dechunk()?;
        }
        let events = self.complete_events();
        if let Some(end) = self.text.rfind("\n\n") {
            self.text.drain(..end + 2);
        }
        Ok(events)
    }
}

/// Reads what arrives within 50 ms (nothing is fine).
fn read_some(stream: &mut TcpStream, into: &mut Vec<u8>) -> Result<(), String> {
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 16384];
    match stream.read(&mut buf) {
        Ok(n) => {
            into.extend_from_slice(&buf[..n]);
            Ok(())
        }
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(()),
        Err(e) => Err(format!("reading events: {e}")),
    }
}

impl NativeRun {
    fn parked(&self) -> Result<u64, String> {
        let health = get_json(self.server.http, "/health")?;
        health["waits"]
            .as_u64()
            .ok_or("health has no waits".to_owned())
    }

    fn check(&self, r: &HttpResponse, expect: &vectors::Expect) -> Result<(), String> {
        check_response(r.status, &r.headers, &r.body, expect, &self.vars)
    }

    fn step(&mut self, step: &Step) -> Result<(), String> {
        let http_addr = self.server.http;
        match step {
            Step::Deliver {
                from,
                to,
                raw,
                bind,
            } => {
                smtp_deliver(self.server.smtp, from, to, raw)?;
                if let Some(name) = bind {
                    let latest = get_json(http_addr, "/api/emails/latest")?;
                    let id = latest["email"]["id"].as_str().ok_or("latest has no id")?;
                    self.vars.insert(name.clone(), id.to_owned());
                }
            }
            Step::Request {
                method,
                target,
                body,
                content_type,
                expect,
            } => {
                let target = substitute(target, &self.vars)?;
                let body = body.as_deref().unwrap_or_default();
                let r = http_with(http_addr, method, &target, content_type.as_deref(), body)?;
                self.check(&r, expect)
                    .map_err(|e| format!("{method} {target}: {e}"))?;
            }
            Step::Wait {
                method,
                target,
                name,
            } => {
                let target = substitute(target, &self.vars)?;
                let before = self.parked()?;
                let method = method.clone();
                let request_target = target.clone();
                let handle = std::thread::spawn(move || http(http_addr, &method, &request_target));
                let deadline = Instant::now() + Duration::from_secs(5);
                while self.parked()? <= before {
                    if handle.is_finished() {
                        let r = handle.join().map_err(|_| "the request panicked")??;
                        return Err(format!(
                            "{target} did not park: {} {}",
                            r.status,
                            String::from_utf8_lossy(&r.body)
                        ));
                    }
                    if Instant::now() > deadline {
                        return Err(format!("{target} did not park within 5 s"));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                self.waits.insert(name.clone(), handle);
            }
            Step::Advance(ms) => std::thread::sleep(Duration::from_millis(*ms)),
            Step::Resolve { name, expect } => {
                let handle = self
                    .waits
                    .remove(name)
                    .ok_or(format!("no wait named {name}"))?;
                let r = handle.join().map_err(|_| "the request panicked")??;
                self.check(&r, expect)
                    .map_err(|e| format!("wait {name}: {e}"))?;
            }
            Step::Subscribe {
                target,
                last_event_id,
                name,
            } => {
                let target = substitute(target, &self.vars)?;
                let last = last_event_id
                    .as_deref()
                    .map(|id| substitute(id, &self.vars))
                    .transpose()?;
                let stream = EventStream::open(http_addr, &target, last.as_deref())?;
                self.streams.insert(name.clone(), stream);
            }
            Step::Events { name, expect } => {
                let stream = self
                    .streams
                    .get_mut(name)
                    .ok_or(format!("no stream named {name}"))?;
                let got = stream.next(expect.len())?;
                check_events(&got, expect, &self.vars)
                    .map_err(|e| format!("stream {name}: {e}"))?;
            }
            Step::Pending(name) => {
                let handle = self
                    .waits
                    .get(name)
                    .ok_or(format!("no wait named {name}"))?;
                // A response on its way would land within this pause.
                std::thread::sleep(Duration::from_millis(30));
                if handle.is_finished() {
                    return Err(format!("wait {name} was answered"));
                }
            }
        }
        Ok(())
    }
}

fn run_api(v: &ApiVector) -> Result<(), String> {
    let mut flags = Vec::new();
    if let Some(n) = v.limits.max_messages {
        flags.extend(["--max-messages".to_owned(), n.to_string()]);
    }
    let mut run = NativeRun {
        server: Native::start(&flags)?,
        vars: Vars::new(),
        waits: HashMap::new(),
        streams: HashMap::new(),
    };
    vectors::run_steps(&v.steps, |step| run.step(step))
}

#[test]
fn api_vectors_against_the_native_host() {
    vectors::run_api_vectors("native API", run_api);
}
