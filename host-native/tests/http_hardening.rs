//! The HTTP driver against hostile clients, over real sockets against the real binary (issue 9,
//! findings 8, 9, 10 and 12): a body that never arrives, more connections than the cap, request
//! targets that are not paths, ambiguous Content-Length, `Expect` from HTTP/1.0, HEAD, and Host
//! values that only look like loopback.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Http, IO_TIMEOUT, KeepAlive, Server, Smtp, http_exchange};

/// How quickly an ordinary request must complete while an attack runs (generous: a loaded
/// 2-core machine, debug build).
const QUICK: Duration = Duration::from_secs(5);

fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.http).expect("connect to the HTTP port");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let _ = stream.set_nodelay(true);
    stream
}

/// Reads to EOF and splits the bytes into responses; `heads[i]` says the i-th answers a HEAD
/// (no body whatever its headers say).
fn read_responses(stream: &mut TcpStream, heads: &[bool]) -> Vec<Http> {
    let mut wire = Vec::new();
    stream.read_to_end(&mut wire).expect("read to EOF");
    let mut rest = wire.as_slice();
    let mut out = Vec::new();
    for &head in heads {
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut fields);
        let Ok(httparse::Status::Complete(n)) = response.parse(rest) else {
            panic!(
                "response {} of {}: not a complete head in {:?}",
                out.len() + 1,
                heads.len(),
                String::from_utf8_lossy(rest)
            );
        };
        let status = response.code.expect("a status");
        let headers: Vec<(String, String)> = response
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        rest = &rest[n..];
        let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        let mut body = Vec::new();
        if head || status == 100 {
        } else if let Some(length) = find("content-length") {
            let length: usize = length.parse().expect("a numeric length");
            body = rest[..length].to_vec();
            rest = &rest[length..];
        } else if find("transfer-encoding").is_some_and(|t| t == "chunked") {
            loop {
                let end = rest.windows(2).position(|w| w == b"\r\n").expect("a size");
                let size = usize::from_str_radix(std::str::from_utf8(&rest[..end]).unwrap(), 16)
                    .expect("a hex size");
                body.extend_from_slice(&rest[end + 2..end + 2 + size]);
                rest = &rest[end + 4 + size..];
                if size == 0 {
                    break;
                }
            }
        } else {
            body = std::mem::take(&mut rest).to_vec();
        }
        out.push(Http {
            status,
            headers,
            body: String::from_utf8(body).expect("a UTF-8 body"),
        });
    }
    assert!(
        rest.is_empty(),
        "bytes after the last response: {:?}",
        String::from_utf8_lossy(rest)
    );
    out
}

/// The worst `/health` latency over `n` requests on fresh connections.
fn health_latency(server: &Server, n: usize) -> Duration {
    (0..n)
        .map(|_| {
            let start = Instant::now();
            assert_eq!(server.get("/health").status, 200);
            start.elapsed()
        })
        .max()
        .unwrap_or_default()
}

#[test]
fn a_body_that_does_not_arrive_is_408_within_the_body_timeout_and_holds_nobody_else() {
    let server = Server::start_with(&["--http-body-timeout", "2s"]);
    let start = Instant::now();
    let mut slow: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut stream = connect(&server);
            stream
                .write_all(b"DELETE /api/emails HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\nabc")
                .unwrap();
            stream
        })
        .collect();
    // While they wait, everyone else is served.
    let worst = health_latency(&server, 10);
    assert!(worst < QUICK, "/health took {worst:?} beside slow bodies");
    for stream in &mut slow {
        let responses = read_responses(stream, &[false]);
        let response = &responses[0];
        response.assert_json_contract("slow body");
        assert_eq!(response.status, 408, "{}", response.body);
        assert!(response.error().contains("body"), "{}", response.body);
        assert_eq!(response.header("connection"), Some("close"));
    }
    let took = start.elapsed();
    // The deadline is 2 s: not much sooner (it is a deadline, not a guess), and well before the
    // head timeout (10 s) or the idle timeout (2 min).
    assert!(took >= Duration::from_millis(1900), "408 after {took:?}");
    assert!(took < Duration::from_secs(9), "408 after {took:?}");
    // A body that does arrive, slowly but in time, is fine.
    let mut stream = connect(&server);
    stream
        .write_all(b"DELETE /api/emails HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\nConnection: close\r\n\r\na")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stream.write_all(b"bc").unwrap();
    let response = &read_responses(&mut stream, &[false])[0];
    assert_eq!(response.status, 200, "{}", response.body);
}

/// Parks a wait for mail to `to` on a new connection; the connection is busy until it is answered.
fn parked_wait(server: &Server, to: &str) -> TcpStream {
    let mut stream = connect(server);
    stream
        .write_all(
            format!("GET /api/emails/wait?to={to}&timeoutMs=60000 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    stream
}

/// Waits until `/health` counts `waits` parked waits and `open` HTTP
/// connections besides the one asking (which must fit under the cap).
fn until_health(server: &Server, waits: u64, open: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let health = server.health();
        if health["waits"].as_u64() == Some(waits)
            && health["httpConnections"].as_u64() == Some(open + 1)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never {waits} waits and {open} connections: {health}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Parks a wait to `to` on the connection that fills the cap of `cap` HTTP
/// connections, once `waits` waits are parked. The connection first asks
/// `/health` (kept alive) until it counts itself as the last slot, then
/// parks its wait: a connection the client closed gives its slot back a
/// moment after the client sees the end of it, so a new connection opened
/// right after another `/health` probe could find the cap still full and be
/// refused.
fn parked_wait_filling_the_cap(server: &Server, waits: u64, cap: u64, to: &str) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut stream = connect(server);
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let health = common::read_http_response(&mut stream);
        if health.status == 200
            && health.json()["waits"].as_u64() == Some(waits)
            && health.json()["httpConnections"].as_u64() == Some(cap)
        {
            stream
                .write_all(
                    format!("GET /api/emails/wait?to={to}&timeoutMs=60000 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .unwrap();
            return stream;
        }
        assert!(
            Instant::now() < deadline,
            "never {waits} waits and {cap} connections: {}",
            health.body
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn past_max_http_connections_new_ones_get_503_while_busy_ones_and_smtp_still_answer() {
    let server = Server::start_with(&["--max-http-connections", "8"]);
    let waits: Vec<TcpStream> = (0..7)
        .map(|i| parked_wait(&server, &format!("cap{i}@local.test")))
        .collect();
    // The eighth fills the cap: every open connection is busy with a request
    // (or has not been answered yet: only a kept-alive connection gives way).
    let eighth = parked_wait_filling_the_cap(&server, 7, 8, "cap7@local.test");
    for _ in 0..30 {
        let response = http_exchange(
            server.http,
            b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        );
        response.assert_json_contract("over the cap");
        assert_eq!(response.status, 503, "{}", response.body);
        assert!(
            response.error().contains("--max-http-connections"),
            "{}",
            response.body
        );
    }
    // SMTP is not affected, and the busy connections are answered.
    let (_smtp, greeting) = Smtp::connect(server.smtp);
    assert_eq!(greeting.code, 220);
    let raw = b"Subject: to the first wait\r\n\r\nhi\r\n";
    assert_eq!(
        server.send("a@local.test", &["cap0@local.test"], raw).code,
        250
    );
    let mut first = waits.into_iter().next().unwrap();
    let answer = &read_responses(&mut first, &[false])[0];
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["email"]["subject"], "to the first wait");
    // Its connection closed: a slot is free again.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = http_exchange(
            server.http,
            b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        );
        if response.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no slot came free");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(eighth);
}

/// Clients keep idle connections for reuse (`fetch`'s pool): at the cap, a
/// new connection takes the slot of the kept-alive one that has been idle
/// longest instead of being refused, and the others are untouched.
#[test]
fn at_max_http_connections_the_longest_idle_connection_makes_room() {
    let server = Server::start_with(&["--max-http-connections", "4"]);
    let busy = parked_wait(&server, "busy@local.test");
    // Connected before every other and never answered: not idle in this sense, it keeps its slot.
    let mut fresh = connect(&server);
    until_health(&server, 1, 2);
    let mut oldest = connect(&server);
    oldest
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    assert_eq!(common::read_http_response(&mut oldest).status, 200);
    std::thread::sleep(Duration::from_millis(300));
    let mut newer = KeepAlive::new(server.http);
    assert_eq!(newer.get("/health").status, 200);
    // Both idle for longer than the grace a connection that was just answered gets.
    std::thread::sleep(Duration::from_millis(300));

    // Four open: the busy one, the fresh one, then two idle. A new one takes the oldest idle's slot.
    let response = http_exchange(
        server.http,
        b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(response.status, 200, "{}", response.body);
    assert_eq!(response.json()["httpConnections"], 4, "{}", response.body);
    // The oldest idle connection was closed, with nothing written to it.
    let mut rest = Vec::new();
    assert_eq!(oldest.read_to_end(&mut rest).expect("EOF"), 0, "{rest:?}");
    // The newer idle one is still open and served on its socket; the wait is still parked.
    let health = newer.get("/health").json();
    assert_eq!(health["waits"], 1, "{health}");
    fresh
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(common::read_http_response(&mut fresh).status, 200);
    drop(busy);
}

#[test]
fn connect_authority_and_asterisk_targets_are_400_and_pipelined_requests_behind_are_answered() {
    let server = Server::start();
    for bad in [
        "CONNECT localhost:25 HTTP/1.1\r\nHost: localhost:25\r\n\r\n",
        "GET evil.com HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET localhost:8025 HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET https://localhost/health HTTP/1.1\r\nHost: localhost\r\n\r\n",
    ] {
        let mut stream = connect(&server);
        stream
            .write_all(
                format!(
                    "{bad}GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            )
            .unwrap();
        let responses = read_responses(&mut stream, &[false, false]);
        let what = bad.lines().next().unwrap_or(bad);
        responses[0].assert_json_contract(what);
        assert_eq!(responses[0].status, 400, "{what}: {}", responses[0].body);
        assert_eq!(responses[1].status, 200, "{what}: {}", responses[1].body);
        assert!(
            responses[1].json()["limits"].is_object(),
            "{what}: {}",
            responses[1].body
        );
    }
}

#[test]
fn absolute_form_is_served_and_its_authority_is_the_host_checked() {
    let server = Server::start();
    let port = server.http.port();
    let response = http_exchange(
        server.http,
        format!("GET http://localhost:{port}/health HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(response.status, 200, "{}", response.body);
    let response = http_exchange(
        server.http,
        b"GET http://evil.test/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    response.assert_json_contract("absolute-form to evil.test");
    assert_eq!(response.status, 403, "{}", response.body);
}

#[test]
fn conflicting_or_signed_content_lengths_are_400() {
    let server = Server::start();
    for request in [
        "DELETE /api/emails HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "DELETE /api/emails HTTP/1.1\r\nHost: localhost\r\nContent-Length: +3\r\n\r\nabc",
        "DELETE /api/emails HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3, 3\r\n\r\nabc",
        "DELETE /api/emails HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0x3\r\n\r\nabc",
    ] {
        let response = http_exchange(server.http, request.as_bytes());
        let what = request.lines().nth(2).unwrap_or(request);
        response.assert_json_contract(what);
        assert_eq!(response.status, 400, "{what}: {}", response.body);
        assert!(
            response.error().contains("Content-Length"),
            "{}",
            response.body
        );
    }
    // Equal duplicates are one length.
    let response = http_exchange(
        server.http,
        b"DELETE /api/emails HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    );
    assert_eq!(response.status, 200, "{}", response.body);
}

#[test]
fn continue_is_sent_to_http_1_1_clients_only() {
    let server = Server::start();
    for (version, continues) in [("1.0", false), ("1.1", true)] {
        let mut stream = connect(&server);
        stream
            .write_all(
                format!("DELETE /api/emails HTTP/{version}\r\nHost: localhost\r\nContent-Length: 2\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .unwrap();
        // A 100 would be sent at once; give it time to arrive before the body goes.
        std::thread::sleep(Duration::from_millis(300));
        stream.write_all(b"ok").unwrap();
        let heads: &[bool] = if continues { &[false, false] } else { &[false] };
        let responses = read_responses(&mut stream, heads);
        if continues {
            assert_eq!(responses[0].status, 100);
        }
        let last = responses.last().unwrap();
        assert_eq!(last.status, 200, "HTTP/{version}: {}", last.body);
    }
}

#[test]
fn head_answers_with_the_status_and_headers_of_get_and_no_body() {
    let server = Server::start();
    for target in ["/api/emails/latest", "/api/emails", "/health", "/nowhere"] {
        let mut stream = connect(&server);
        stream
            .write_all(
                format!(
                    "GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n\
                     HEAD {target} HTTP/1.1\r\nHost: localhost\r\n\r\n\
                     GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            )
            .unwrap();
        // The third response parses only if HEAD sent no body.
        let responses = read_responses(&mut stream, &[false, true, false]);
        let (get, head) = (&responses[0], &responses[1]);
        assert_eq!(head.status, get.status, "{target}");
        assert_ne!(head.status, 405, "{target}");
        assert!(head.body.is_empty());
        // /health's body (uptime and counts) may change length between the two.
        let without_length = |h: &Http| {
            h.headers
                .iter()
                .filter(|(n, _)| n != "content-length")
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(without_length(head), without_length(get), "{target}");
        assert_eq!(
            head.header("content-length").is_some(),
            get.header("content-length").is_some(),
            "{target}"
        );
        if target != "/health" {
            assert_eq!(head.headers, get.headers, "{target}");
        }
    }
}

#[test]
fn host_values_that_are_not_host_and_port_are_refused() {
    let server = Server::start();
    let port = server.http.port();
    for host in [
        "localhost:80@evil.com".to_owned(),
        "user@localhost".to_owned(),
        "localhost:evil".to_owned(),
        "127.0.0.1:99999999".to_owned(),
        "127.0.0.1:65536".to_owned(),
        "localhost:".to_owned(),
        "[::1]:".to_owned(),
        format!("localhost:{port}/health"),
        "localhost:80:80".to_owned(),
        "[::1".to_owned(),
        "local%68ost".to_owned(),
    ] {
        let response = http_exchange(
            server.http,
            format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        response.assert_json_contract(&host);
        assert_eq!(response.status, 403, "Host {host}: {}", response.body);
    }
    for host in [format!("localhost:{port}"), "[::1]:65535".to_owned()] {
        let response = http_exchange(
            server.http,
            format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(response.status, 200, "Host {host}: {}", response.body);
    }
    // Two Host fields are a 400 (RFC 9112 3.2), whatever they say.
    let response = http_exchange(
        server.http,
        b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil.test\r\nConnection: close\r\n\r\n",
    );
    response.assert_json_contract("two Hosts");
    assert_eq!(response.status, 400, "{}", response.body);
}
