//! An error answered before a request's body was read (issue 29, finding 8): the client that is
//! still writing its body reads the answer, not a reset. The server reads and drops what the
//! client sends for a while after the answer (a lingering close, as nginx does), within a bound
//! of bytes and time.
//!
//! `MAILJAR_E2E_BIN=...` measures another build (the test then fails where it did not linger).

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Server, read_body_with, read_head};
use serde_json::Value;

/// A JSON body of `len` bytes: larger than the 64 KiB a request body may have.
fn big_rule(len: usize) -> Vec<u8> {
    let head = br#"{"stage": "connect", "action": {"delayMs": 1}, "note": ""#;
    let mut body = head.to_vec();
    body.resize(len - 2, b'a');
    body.extend_from_slice(b"\"}");
    body
}

#[test]
fn python_http_client_reads_the_413_of_a_body_too_large() {
    // 8 MiB: more than the socket buffers take, so the client is still writing when it is answered.
    let server = Server::start();
    let script = r#"
import http.client, json, sys
port = int(sys.argv[1])
body = b'{"stage": "connect", "action": {"delayMs": 1}, "note": "' + b"a" * (8 << 20) + b'"}'
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
try:
    conn.request("POST", "/api/faults", body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    print(json.dumps({"status": response.status, "body": response.read().decode()}))
except Exception as e:
    print(json.dumps({"exception": type(e).__name__, "text": str(e)}))
"#;
    for attempt in 0..5 {
        let output = Command::new("python3")
            .args(["-c", script, &server.http.port().to_string()])
            .output()
            .expect("run python3");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let result: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "python printed no JSON ({e}): {stdout} {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        assert_eq!(result["status"], 413, "attempt {attempt}: {result}");
        let body: Value =
            serde_json::from_str(result["body"].as_str().expect("a body")).expect("a JSON error");
        let error = body["error"].as_str().expect("an error string");
        assert!(error.contains("65536"), "{error}");
    }
    assert_eq!(server.health()["faults"], 0, "no rule was added");
}

#[test]
fn a_client_that_keeps_writing_reads_the_answer_then_the_close() {
    let server = Server::start();
    let addr = server.http;
    let body = big_rule(4 << 20);
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let head = format!(
        "POST /api/faults HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("write the head");
    // The body goes on in the background, as a client that writes before it reads.
    let mut writer = stream.try_clone().expect("clone the socket");
    let sending = std::thread::spawn(move || writer.write_all(&body).map(|()| body.len()));
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader).expect("the answer's head, not a reset");
    let mut answer = Vec::new();
    read_body_with(&mut reader, &headers, |b| answer.extend_from_slice(b))
        .expect("the answer's body");
    assert_eq!(status, 413);
    let json: Value = serde_json::from_slice(&answer).expect("JSON");
    assert!(json["error"].is_string(), "{json}");
    assert!(
        headers
            .iter()
            .any(|(n, v)| n == "connection" && v == "close")
    );
    let sent = sending
        .join()
        .expect("the writer thread")
        .expect("the whole body was taken, not reset");
    assert!(sent > 1 << 20);
    // Then the server closes its side.
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).expect("end of stream");
    assert!(rest.is_empty());
}

#[test]
fn lingering_is_bounded_in_bytes_and_time() {
    let server = Server::start();
    let addr = server.http;
    let baseline = server.health()["httpConnections"].as_u64().expect("count");
    let mut stream = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST /api/faults HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: 99999999999\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("write the head");
    stream
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    // A client that never stops writing: the server reads a bounded amount for a bounded
    // time, then closes, and the writes fail.
    let started = Instant::now();
    let piece = vec![b'a'; 64 * 1024];
    let mut written = 0u64;
    let failed = loop {
        match stream.write_all(&piece) {
            Ok(()) => written += piece.len() as u64,
            Err(e) => break e,
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "still writing after {written} bytes"
        );
    };
    let took = started.elapsed();
    eprintln!(
        "the server closed after {} ms and {} MiB: {failed}",
        took.as_millis(),
        written >> 20
    );
    assert!(took < Duration::from_secs(6), "{took:?}");
    // What was written fits the bound and the socket buffers of both ends.
    assert!(written < 64 << 20, "{written} bytes");
    server.poll_health("httpConnections", baseline, Duration::from_secs(5));
}
