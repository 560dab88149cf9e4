//! Downloads over real HTTP against the binary: raw messages byte for byte
//! (the whole shared corpus, sent over SMTP with dot-stuffing), attachments
//! checked against an independent decoder (Python's `email` package), the
//! security headers of every download, and paging with `beforeId`.

mod common;

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::corpus::{corpus_files, skip, smtp_text};
use common::{Server, read_body_with, read_head};
use serde_json::Value;

/// One response with its body as bytes.
struct Download {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Download {
    /// Every value of the header with this (lower-case) name.
    fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The only value of this header (a second one is a failure).
    fn one(&self, name: &str) -> &str {
        match self.all(name).as_slice() {
            [value] => value,
            other => panic!("expected one {name} header, got {other:?}"),
        }
    }

    fn json(&self) -> Value {
        assert_eq!(self.one("content-type"), "application/json");
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

fn fetch(addr: SocketAddr, target: &str) -> Download {
    let mut stream = TcpStream::connect(addr).expect("connect to the HTTP port");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let request = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("write");
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader).expect("a response head");
    let mut body = Vec::new();
    read_body_with(&mut reader, &headers, |b| body.extend_from_slice(b)).expect("a body");
    Download {
        status,
        headers,
        body,
    }
}

fn crlf_to_lf(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for (i, &b) in bytes.iter().enumerate() {
        if !(b == b'\r' && bytes.get(i + 1) == Some(&b'\n')) {
            out.push(b);
        }
    }
    out
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// Python's reading of each file: for every non-multipart part in walk
/// order, its content type and `get_payload(decode=True)` (None for a
/// message/* container), and whether Python found the message malformed
/// (any defect: bad base64, missing boundaries, ...).
const PY_DECODE: &str = r#"
import email, json, sys
from email import policy
out = {}
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        msg = email.message_from_binary_file(f, policy=policy.compat32)
    leaves = []
    defects = []
    for part in msg.walk():
        if not part.is_multipart():
            payload = part.get_payload(decode=True)
            leaves.append({"type": part.get_content_type(), "hex": payload.hex() if isinstance(payload, bytes) else None})
        defects += [type(d).__name__ for d in part.defects]
    out[path] = {"leaves": leaves, "defects": defects}
json.dump(out, sys.stdout)
"#;

#[test]
fn every_corpus_message_downloads_byte_exact_and_attachments_match_python() {
    let Some(all) = corpus_files("corpus download test") else {
        return;
    };
    let server = Server::start();
    let mut smtp = server.smtp();
    smtp.expect("EHLO corpus.downloads.test", 250);
    let mut sent = Vec::new();
    for (i, path) in all.iter().enumerate() {
        let (text, _) = smtp_text(&std::fs::read(path).unwrap());
        let to = format!("dl{i}@example.test");
        let reply = smtp.transaction("corpus@example.test", &[&to], &text);
        assert_eq!(reply.code, 250, "{}: {}", path.display(), reply.wire);
        sent.push((path, text));
    }
    smtp.expect("QUIT", 221);
    let list = fetch(server.http, "/api/emails?view=summary").json();
    let summaries = list["emails"].as_array().expect("emails").clone();
    assert_eq!(summaries.len(), sent.len());

    // Raw: every message, byte for byte, with its headers.
    let mut not_utf8 = 0;
    for (summary, (path, text)) in summaries.iter().zip(&sent) {
        let id = summary["id"].as_str().unwrap();
        let raw = fetch(server.http, &format!("/api/emails/{id}/raw"));
        assert_eq!(raw.status, 200, "{}", path.display());
        assert_eq!(raw.one("content-type"), "message/rfc822");
        assert_eq!(raw.one("x-content-type-options"), "nosniff");
        assert_eq!(
            raw.one("content-disposition"),
            format!("attachment; filename=\"{id}.eml\"")
        );
        assert!(raw.body == *text, "{}: raw differs", path.display());
        assert_eq!(summary["size"], text.len());
        not_utf8 += usize::from(std::str::from_utf8(text).is_err());
    }

    // Attachments: the stored bytes go to Python, whose decoded parts must
    // contain each attachment's bytes, in order.
    let work = std::env::temp_dir().join(format!("mailjar-dl-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let mut with_attachments = Vec::new();
    for (i, summary) in summaries.iter().enumerate() {
        if summary["attachmentCount"].as_u64().unwrap_or(0) > 0 {
            let file = work.join(format!("{i}.eml"));
            std::fs::write(&file, &sent[i].1).unwrap();
            with_attachments.push((i, file));
        }
    }
    let python = Command::new("python3")
        .arg("-c")
        .arg(PY_DECODE)
        .args(with_attachments.iter().map(|(_, f)| f))
        .output();
    let Ok(python) = python else {
        skip("the attachment comparison", "python3 is not there");
        return;
    };
    assert!(
        python.status.success(),
        "python3: {}",
        String::from_utf8_lossy(&python.stderr)
    );
    let decoded: Value = serde_json::from_slice(&python.stdout).expect("Python's JSON");
    let (mut compared, mut nested, mut messages, mut malformed) = (0, 0, 0, 0);
    let mut mismatches = Vec::new();
    let mut malformed_mismatches = 0;
    for (i, file) in &with_attachments {
        let id = summaries[*i]["id"].as_str().unwrap();
        let email = fetch(server.http, &format!("/api/emails/{id}")).json();
        let python = &decoded[file.to_str().unwrap()];
        let leaves = python["leaves"].as_array().unwrap();
        let defects = python["defects"].as_array().unwrap();
        malformed += usize::from(!defects.is_empty());
        let mut cursor = 0;
        messages += 1;
        for (index, attachment) in email["email"]["attachments"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            let url = attachment["url"].as_str().unwrap();
            assert_eq!(url, format!("/api/emails/{id}/attachments/{index}"));
            let got = fetch(server.http, url);
            assert_eq!(got.status, 200, "{}: {url}", sent[*i].0.display());
            assert_eq!(got.one("x-content-type-options"), "nosniff");
            assert_eq!(got.one("content-security-policy"), "sandbox");
            assert!(
                got.one("content-disposition")
                    .starts_with("attachment; filename=\"")
            );
            let content_type = attachment["contentType"].as_str().unwrap();
            // Python parses every message/* part as a container: nothing to compare.
            if content_type.starts_with("message/") {
                nested += 1;
                continue;
            }
            if !content_type.starts_with("text/") {
                assert_eq!(attachment["size"], got.body.len(), "{url}");
            }
            // Python gives text with LF where the message has CRLF: compare with LF on both sides.
            let ours = crlf_to_lf(&got.body);
            let found = leaves[cursor..].iter().position(|leaf| {
                leaf["hex"]
                    .as_str()
                    .is_some_and(|h| crlf_to_lf(&hex(h)) == ours)
            });
            match found {
                Some(p) => {
                    cursor += p + 1;
                    compared += 1;
                }
                // Parsers may read a malformed message differently: only a
                // message Python finds well-formed must agree.
                None if !defects.is_empty() => malformed_mismatches += 1,
                None => mismatches.push(format!(
                    "{} attachment {index} ({content_type}, {} bytes)",
                    sent[*i].0.display(),
                    got.body.len()
                )),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    println!(
        "{} corpus messages downloaded byte-exact ({not_utf8} not UTF-8); {messages} with attachments: \
         {compared} attachments equal Python's decoding, {nested} message/* parts not compared, \
         {malformed_mismatches} differ in the {malformed} messages Python finds malformed, {} differ in the others",
        sent.len(),
        mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "attachments that differ from Python's decoding:\n{}",
        mismatches.join("\n")
    );
    assert!(compared > 0, "no attachment was compared");
}

#[test]
fn downloads_have_their_security_headers() {
    let server = Server::start();
    let raw = "From: App <app@app.test>\r\nTo: u@local.test\r\nSubject: files\r\n\
               Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\
               Content-Type: multipart/related; boundary=r\r\n\r\n--r\r\n\
               Content-Type: text/html; charset=utf-8\r\n\r\n<p>Hi <img src=\"cid:logo@app\"></p><script>steal()</script>\r\n--r\r\n\
               Content-Type: image/png\r\nContent-ID: <logo@app>\r\nContent-Transfer-Encoding: base64\r\n\r\niVBORw0KGgo=\r\n--r--\r\n--b\r\n\
               Content-Type: text/html; name=\"page.html\"\r\nContent-Disposition: attachment; filename=\"page.html\"\r\n\r\n\
               <script>fetch('/api/emails').then(r => r.text()).then(alert)</script>\r\n--b--\r\n";
    let reply = server.send("a@app.test", &["u@local.test"], raw.as_bytes());
    assert_eq!(reply.code, 250);
    let email = fetch(server.http, "/api/emails/latest").json();
    let id = email["email"]["id"].as_str().unwrap().to_owned();
    let attachments = email["email"]["attachments"].as_array().unwrap();
    let html_index = attachments
        .iter()
        .position(|a| a["filename"] == "page.html")
        .expect("the HTML attachment");
    let logo_index = attachments
        .iter()
        .position(|a| a["contentId"] == "logo@app")
        .expect("the inline image");

    let raw_download = fetch(server.http, &format!("/api/emails/{id}/raw"));
    assert_eq!(raw_download.status, 200);
    assert_eq!(raw_download.one("content-type"), "message/rfc822");
    assert_eq!(raw_download.one("x-content-type-options"), "nosniff");
    assert!(
        raw_download
            .one("content-disposition")
            .starts_with("attachment;")
    );
    assert_eq!(raw_download.body, raw.as_bytes());

    // An HTML attachment comes as an attachment, never as a page of this origin.
    let page = fetch(
        server.http,
        &format!("/api/emails/{id}/attachments/{html_index}"),
    );
    assert_eq!(page.status, 200);
    assert_eq!(page.one("content-type"), "text/html");
    assert_eq!(page.one("x-content-type-options"), "nosniff");
    assert_eq!(page.one("content-security-policy"), "sandbox");
    assert_eq!(
        page.one("content-disposition"),
        "attachment; filename=\"page.html\"; filename*=UTF-8''page.html"
    );
    assert!(page.body.starts_with(b"<script>fetch("));

    let view = fetch(server.http, &format!("/api/emails/{id}/html"));
    assert_eq!(view.status, 200);
    assert_eq!(view.one("content-type"), "text/html; charset=utf-8");
    assert_eq!(view.one("x-content-type-options"), "nosniff");
    let csp = view.one("content-security-policy");
    assert_eq!(
        csp,
        "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:"
    );
    let body = String::from_utf8(view.body.clone()).unwrap();
    let logo_url = format!("/api/emails/{id}/attachments/{logo_index}");
    assert!(body.contains(&format!("src=\"{logo_url}\"")), "{body}");
    let logo = fetch(server.http, &logo_url);
    assert_eq!(logo.one("content-type"), "image/png");
    assert_eq!(logo.body, b"\x89PNG\r\n\x1a\n");
    let remote = fetch(
        server.http,
        &format!("/api/emails/{id}/html?remoteImages=true"),
    );
    assert_eq!(
        remote.one("content-security-policy"),
        format!("{csp} http: https:")
    );

    for target in [
        format!("/api/emails/{id}/attachments/{}", attachments.len()),
        format!("/api/emails/{id}/attachments/x"),
        "/api/emails/01890000-0000-7000-8000-000000000000/raw".to_owned(),
    ] {
        let missing = fetch(server.http, &target);
        assert_eq!(missing.status, 404, "{target}");
        assert!(missing.json()["error"].is_string());
    }
    let bad = fetch(
        server.http,
        &format!("/api/emails/{id}/html?remoteImages=1"),
    );
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].is_string());
}

#[test]
fn paging_with_before_id_sees_every_message_once_in_order() {
    let server = Server::start();
    const N: usize = 233;
    const PAGE: usize = 10;
    let mut smtp = server.smtp();
    smtp.expect("EHLO paging.test", 250);
    for i in 0..N {
        let raw = format!("Subject: page {i}\r\n\r\nmessage {i}\r\n");
        assert_eq!(
            smtp.transaction("a@app.test", &["u@local.test"], raw.as_bytes())
                .code,
            250
        );
    }
    smtp.expect("QUIT", 221);
    let all = fetch(server.http, "/api/emails?view=summary").json();
    let all: Vec<String> = all["emails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(all.len(), N);

    let mut seen: Vec<(String, String)> = Vec::new();
    let mut target = format!("/api/emails?view=summary&limit={PAGE}");
    let mut pages = 0;
    loop {
        let page = fetch(server.http, &target).json();
        let page = page["emails"].as_array().unwrap().clone();
        if page.is_empty() {
            break;
        }
        pages += 1;
        assert!(page.len() <= PAGE);
        for email in page.iter().rev() {
            seen.push((
                email["id"].as_str().unwrap().to_owned(),
                email["subject"].as_str().unwrap().to_owned(),
            ));
        }
        let oldest = page[0]["id"].as_str().unwrap();
        target = format!("/api/emails?view=summary&limit={PAGE}&beforeId={oldest}");
    }
    assert_eq!(pages, N.div_ceil(PAGE));
    seen.reverse();
    let ids: Vec<String> = seen.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids, all, "every id exactly once, oldest to newest");
    for (i, (_, subject)) in seen.iter().enumerate() {
        assert_eq!(subject, &format!("page {i}"));
    }
    // The full view pages the same way.
    let last = fetch(
        server.http,
        &format!("/api/emails?limit=3&beforeId={}", all[3]),
    )
    .json();
    let got: Vec<&str> = last["emails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, all[..3]);
}
