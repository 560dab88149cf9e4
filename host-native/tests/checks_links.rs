//! `GET /api/emails/:id/checks/links` on the real binary against a local HTTP
//! server: nothing is fetched on arrival; without `--link-check-allow-private`
//! not one request reaches a loopback server (by address, or by a name a DNS
//! server answers with a loopback address); with it, 200, 404, redirect
//! chains, too many redirects and a hanging path give their statuses.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::Server;
use serde_json::Value;

/// A small HTTP server: `/ok` 200, `/missing` 404, `/r/N` redirects to `/r/N-1` (`/r/0` to `/ok`),
/// `/loop` to itself, `/head-refused` 405 to HEAD, `/hang` never answers. Counts requests.
fn web_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let hits = counted.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    return;
                }
                hits.fetch_add(1, Ordering::SeqCst);
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) <= 2 {
                        break;
                    }
                }
                let mut parts = line.split_whitespace();
                let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let path = target.split('?').next().unwrap_or("");
                let answer = match path {
                    "/ok" => "200 OK\r\n".to_owned(),
                    "/loop" => "302 Found\r\nLocation: /loop\r\n".to_owned(),
                    "/head-refused" if method == "HEAD" => "405 Method Not Allowed\r\n".to_owned(),
                    "/head-refused" => "200 OK\r\n".to_owned(),
                    "/hang" => {
                        std::thread::sleep(Duration::from_secs(30));
                        return;
                    }
                    p if p.starts_with("/r/") => match p[3..].parse::<u32>() {
                        Ok(0) => "301 Moved\r\nLocation: /ok\r\n".to_owned(),
                        Ok(n) => format!("302 Found\r\nLocation: /r/{}\r\n", n - 1),
                        Err(_) => "404 Not Found\r\n".to_owned(),
                    },
                    _ => "404 Not Found\r\n".to_owned(),
                };
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 {answer}Content-Length: 0\r\nConnection: close\r\n\r\n"
                );
            });
        }
    });
    (addr, hits)
}

/// A DNS server on loopback answering every A query with 127.0.0.1 (a rebinding attacker's).
fn loopback_dns() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            if n < 12 {
                continue;
            }
            // Header: same id, QR + RD + RA, one question, one answer when the query is A (type 1).
            let question_end = 12 + buf[12..n].iter().position(|b| *b == 0).unwrap_or(0) + 5;
            let qtype = u16::from_be_bytes([buf[question_end - 4], buf[question_end - 3]]);
            let mut reply = buf[..question_end].to_vec();
            reply[2] = 0x81;
            reply[3] = 0x80;
            reply[6..8].copy_from_slice(&[0, u8::from(qtype == 1)]);
            reply[8..12].copy_from_slice(&[0, 0, 0, 0]);
            if qtype == 1 {
                reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
            }
            let _ = socket.send_to(&reply, peer);
        }
    });
    addr
}

fn html_with_links(links: &[String]) -> Vec<u8> {
    let anchors: String = links
        .iter()
        .map(|l| format!("<a href=\"{l}\">x</a>\r\n"))
        .collect();
    format!(
        "From: a@example.com\r\nTo: b@example.com\r\nSubject: links\r\nContent-Type: text/html\r\n\r\n<html><body>{anchors}</body></html>\r\n"
    )
    .into_bytes()
}

/// Sends a message with these links; its id.
fn send_links(server: &Server, links: &[String]) -> String {
    assert_eq!(
        server
            .send("a@example.com", &["b@example.com"], &html_with_links(links))
            .code,
        250
    );
    server.latest()["id"].as_str().unwrap().to_owned()
}

/// The link check of a stored message.
fn report(server: &Server, id: &str) -> Value {
    server.get_ok(&format!("/api/emails/{id}/checks/links"))
}

/// Sends a message with these links and checks them.
fn check(server: &Server, links: &[String]) -> Vec<Value> {
    let id = send_links(server, links);
    report(server, &id)["links"].as_array().unwrap().clone()
}

#[test]
fn without_the_flag_no_request_reaches_an_internal_server_and_nothing_is_fetched_on_arrival() {
    let (web, hits) = web_server();
    let dns = loopback_dns();
    let server = Server::start_with(&["--dns", &dns.to_string()]);
    let links = vec![
        format!("http://{web}/ok"),
        format!("http://localhost:{}/ok", web.port()),
        format!("http://rebind.example:{}/ok", web.port()),
        format!("http://[::ffff:127.0.0.1]:{}/ok", web.port()),
        format!("http://{}/ok", server.http),
    ];
    let id = send_links(&server, &links);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a link was fetched on arrival"
    );
    let results = report(&server, &id)["links"].as_array().unwrap().clone();
    assert_eq!(results.len(), links.len());
    for result in &results {
        assert_eq!(result["error"], "address not allowed", "{result}");
        assert!(result["status"].is_null());
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a request reached the internal server"
    );
}

#[test]
fn with_the_flag_statuses_redirects_and_timeouts_are_reported() {
    let (web, hits) = web_server();
    let server = Server::start_with(&["--link-check-allow-private", "--link-check-timeout", "2s"]);
    let url = |path: &str| format!("http://{web}{path}");
    let links = vec![
        url("/ok"),
        url("/missing"),
        url("/r/2"),
        url("/loop"),
        url("/head-refused"),
        url("/hang"),
    ];
    let started = Instant::now();
    let results = check(&server, &links);
    let elapsed = started.elapsed();
    let by_url = |u: &str| {
        results
            .iter()
            .find(|r| r["url"] == u)
            .unwrap_or_else(|| panic!("{u} missing"))
    };
    assert_eq!(by_url(&url("/ok"))["status"], 200);
    assert_eq!(by_url(&url("/missing"))["status"], 404);
    let chain = by_url(&url("/r/2"));
    assert_eq!(chain["status"], 200, "{chain}");
    assert_eq!(
        chain["redirects"],
        serde_json::json!([url("/r/1"), url("/r/0"), url("/ok")])
    );
    assert!(
        by_url(&url("/loop"))["error"]
            .as_str()
            .unwrap()
            .contains("redirects")
    );
    assert_eq!(by_url(&url("/head-refused"))["status"], 200);
    let hang = by_url(&url("/hang"));
    assert!(
        hang["status"].is_null() && hang["error"].as_str().unwrap().contains("timed out"),
        "{hang}"
    );
    assert!(elapsed < Duration::from_secs(8), "{elapsed:?}");
    for result in &results {
        assert!(result["ms"].is_u64());
    }
    assert!(hits.load(Ordering::SeqCst) >= links.len());
}

#[test]
fn the_number_of_links_checked_is_bounded() {
    let (web, hits) = web_server();
    let server = Server::start_with(&["--link-check-allow-private", "--link-check-max-links", "3"]);
    let links: Vec<String> = (0..10).map(|i| format!("http://{web}/ok?{i}")).collect();
    let id = send_links(&server, &links);
    let report = report(&server, &id);
    assert_eq!(report["links"].as_array().unwrap().len(), 3);
    assert_eq!(report["skipped"], 7);
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

#[test]
fn the_links_of_a_100_kb_newsletter_are_checked_within_the_bounds() {
    let (web, hits) = web_server();
    let server = Server::start_with(&["--link-check-allow-private"]);
    let mut links = Vec::new();
    let mut html = String::from("<html><body><table>");
    while html.len() < 100 * 1024 {
        let link = format!("http://{web}/ok?story={}", links.len());
        html.push_str(&format!(
            "<tr><td style=\"padding:12px\"><h2>Story</h2><p>Lorem ipsum dolor sit amet.</p><a href=\"{link}\">Read</a></td></tr>"
        ));
        links.push(link);
    }
    html.push_str("</table></body></html>");
    let raw = format!(
        "From: a@example.com\r\nTo: b@example.com\r\nSubject: news\r\nContent-Type: text/html\r\n\r\n{html}\r\n"
    );
    assert_eq!(
        server
            .send("a@example.com", &["b@example.com"], raw.as_bytes())
            .code,
        250
    );
    let id = server.latest()["id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let report = server.get_ok(&format!("/api/emails/{id}/checks/links"));
    let ms = started.elapsed().as_millis();
    eprintln!(
        "FIGURE links check of a 100 KB newsletter ({} links, 50 checked): {ms} ms",
        links.len()
    );
    assert_eq!(report["links"].as_array().unwrap().len(), 50);
    assert_eq!(
        report["skipped"].as_u64().unwrap() as usize,
        links.len() - 50
    );
    assert!(
        report["links"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["status"] == 200)
    );
    assert_eq!(hits.load(Ordering::SeqCst), 50);
}
