//! Hostile input and exposure over real sockets against the real binary: SMTP smuggling, HTTP
//! size limits, regular expressions built to be expensive, DNS rebinding, CORS, and HTML bodies
//! that must stay data.

mod common;

use std::time::{Duration, Instant};

use common::{Http, Server, assert_stored, dot_unstuff, enc, http_exchange, message};

/// The longest an API request with a hostile pattern may take. One match that runs into the
/// backtracking limit costs about 60 ms in a release build and 0.75 s in a debug build (2 s when
/// the machine is busy), so debug builds get more room.
const BOUNDED: Duration = if cfg!(debug_assertions) {
    Duration::from_secs(5)
} else {
    Duration::from_secs(2)
};

/// How quickly an ordinary request must complete.
const QUICK: Duration = Duration::from_secs(1);

/// A request with a `Host` header of our choosing (None: no Host header at all).
fn request_with(server: &Server, version: &str, host: Option<&str>, extra: &str) -> Http {
    let host = host.map_or(String::new(), |h| format!("Host: {h}\r\n"));
    let request = format!("GET /health HTTP/{version}\r\n{host}{extra}Connection: close\r\n\r\n");
    http_exchange(server.http, request.as_bytes())
}

/// The smuggling variants of the SMTP smuggling research (SEC Consult, 2023, and the smtpsmug
/// tool): end-of-data sequences that some servers accept but that are not CRLF.CRLF.
const SMUGGLING: [(&str, &[u8]); 15] = [
    ("LF.LF", b"\n.\n"),
    ("LF.CRLF", b"\n.\r\n"),
    ("CRLF.LF", b"\r\n.\n"),
    ("CR.CR", b"\r.\r"),
    ("CR.CRLF", b"\r.\r\n"),
    ("CRLF.CR", b"\r\n.\r"),
    ("LF.CR", b"\n.\r"),
    ("CR.LF", b"\r.\n"),
    ("CRLF.CR CRLF", b"\r\n.\r\r\n"),
    ("LFCR.LFCR", b"\n\r.\n\r"),
    ("CRLF NUL.CRLF", b"\r\n\x00.\r\n"),
    ("CRLF.NUL CRLF", b"\r\n.\x00\r\n"),
    ("CR NUL LF.CR NUL LF", b"\r\x00\n.\r\x00\n"),
    ("CRLF SP.CRLF", b"\r\n .\r\n"),
    ("CRLF..CRLF (stuffed)", b"\r\n..\r\n"),
];

/// Every variant, sent in one write and then in 3-byte writes, hides a whole second transaction
/// (with pipelined commands after the smuggled dot) inside the first message, and is followed by
/// a real pipelined second transaction. The server must see exactly two messages: the first with
/// the smuggled text inside it, and the real second one.
#[test]
fn smuggling_variants_never_split_a_message_even_with_pipelined_commands() {
    let server = Server::start();
    for (name, end) in SMUGGLING {
        for chunked in [false, true] {
            let what = format!(
                "{name} ({})",
                if chunked {
                    "3-byte writes"
                } else {
                    "one write"
                }
            );
            let mut data = b"From: a@example.test\r\nSubject: smuggling\r\n\r\nbefore".to_vec();
            data.extend_from_slice(end);
            data.extend_from_slice(
                b"RSET\r\nMAIL FROM:<evil@example.test>\r\nRCPT TO:<victim@example.test>\r\nDATA\r\n\
                  From: evil@example.test\r\nSubject: smuggled\r\n\r\nevil",
            );
            data.extend_from_slice(end);
            data.extend_from_slice(b"NOOP\r\nQUIT\r\nafter\r\n");
            // Nothing before the real end may be CRLF.CRLF, or the case tests nothing.
            assert!(
                !data.windows(5).any(|w| w == b"\r\n.\r\n"),
                "{what}: bad case"
            );
            let first = dot_unstuff(&data);
            let second = message("c@example.test", "d@example.test", "second", "legit");
            let mut wire = b"EHLO e2e.test\r\nMAIL FROM:<a@example.test>\r\nRCPT TO:<b@example.test>\r\nDATA\r\n".to_vec();
            wire.extend_from_slice(&data);
            wire.extend_from_slice(
                b".\r\nMAIL FROM:<c@example.test>\r\nRCPT TO:<d@example.test>\r\nDATA\r\n",
            );
            wire.extend(common::dot_stuff(&second));
            wire.extend_from_slice(b".\r\nQUIT\r\n");

            let mut smtp = server.smtp();
            if chunked {
                smtp.set_nodelay();
                for piece in wire.chunks(3) {
                    smtp.write(piece);
                    std::thread::sleep(Duration::from_micros(300));
                }
            } else {
                smtp.write(&wire);
            }
            let replies: Vec<common::Reply> = std::iter::from_fn(|| smtp.try_reply()).collect();
            let codes: Vec<u16> = replies.iter().map(|r| r.code).collect();
            assert_eq!(
                codes,
                [250, 250, 250, 354, 250, 250, 250, 354, 250, 221],
                "{what}: {replies:?}"
            );
            let emails = server.emails("");
            assert_eq!(emails.len(), 2, "{what}: exactly two messages");
            assert_stored(&emails[0], "a@example.test", &["b@example.test"], &first);
            assert_eq!(emails[0]["subject"], "smuggling", "{what}");
            assert_stored(&emails[1], "c@example.test", &["d@example.test"], &second);
            assert!(
                server.emails("to=victim@example.test").is_empty(),
                "{what}: a smuggled message was stored"
            );
            assert_eq!(server.delete_all(), 2);
        }
    }
}

#[test]
fn url_and_header_size_limits_are_json_errors() {
    let server = Server::start();
    // The URL limit is 8 KiB of path and query (the `?` between them not counted): exactly 8192
    // bytes is served, one more is a 414.
    let target = |len: usize| {
        let prefix = "/api/emails?subject=";
        format!("{prefix}{}", "a".repeat(len + 1 - prefix.len()))
    };
    assert_eq!(server.get(&target(8192)).status, 200);
    let too_long = server.get(&target(8193));
    assert_eq!(too_long.status, 414, "{}", too_long.body);
    assert!(too_long.error().contains("8192"), "{}", too_long.body);
    assert_eq!(server.get(&target(20_000)).status, 414);

    // The header limit is 16 KiB; a 15 KiB header is fine.
    let with_header = |len: usize| {
        let request = format!(
            "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
            "b".repeat(len)
        );
        let response = http_exchange(server.http, request.as_bytes());
        response.assert_json_contract(&format!("{len}-byte header"));
        response
    };
    assert_eq!(with_header(15 * 1024).status, 200);
    for len in [17 * 1024, 40 * 1024] {
        let response = with_header(len);
        assert_eq!(response.status, 431, "{len}: {}", response.body);
        assert!(response.error().contains("16384"), "{}", response.body);
    }
    // Headers count together (90 of them: hyper itself refuses more than 100, see below).
    let many: String = (0..90)
        .map(|i| format!("X-H{i}: {}\r\n", "c".repeat(200)))
        .collect();
    let response = http_exchange(
        server.http,
        format!("GET /health HTTP/1.1\r\nHost: localhost\r\n{many}Connection: close\r\n\r\n")
            .as_bytes(),
    );
    response.assert_json_contract("400 headers");
    assert_eq!(response.status, 431, "{}", response.body);
}

/// Requests the HTTP driver refuses before the API sees them (a head over 64 KiB, more than 100
/// header lines, a target with a character a URI may not hold such as `<`, a request line that is
/// not HTTP, an unparsable Content-Length) are JSON errors too.
#[test]
fn requests_refused_before_the_api_are_json_too() {
    let server = Server::start();
    let many: String = (0..101).map(|i| format!("X-H{i}: c\r\n")).collect();
    let many =
        format!("GET /health HTTP/1.1\r\nHost: localhost\r\n{many}Connection: close\r\n\r\n");
    let huge = format!(
        "GET /api/emails?subject={} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        "a".repeat(70_000)
    );
    for request in [
        huge.as_str(),
        many.as_str(),
        "GET /<script> HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        "NOT HTTP AT ALL\r\n\r\n",
        "GET /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: abc\r\n\r\n",
    ] {
        let response = http_exchange(server.http, request.as_bytes());
        assert!(response.status >= 400, "{}", response.status);
        response.assert_json_contract(request.get(..20).unwrap_or(request));
    }
}

#[test]
fn subject_patterns_too_long_too_large_or_too_slow_are_400_and_bounded() {
    let server = Server::start();
    // A subject that makes backtracking explode, and an ordinary one.
    let evil_subject = format!("{}!", "a".repeat(40));
    server.send(
        "a@example.test",
        &["b@example.test"],
        &message("a@example.test", "b@example.test", &evil_subject, "x"),
    );
    server.send(
        "a@example.test",
        &["b@example.test"],
        &message("a@example.test", "b@example.test", "hello world", "x"),
    );
    let query = |endpoint: &str, pattern: &str, flags: &str| {
        let target = format!(
            "/api/emails{endpoint}?subjectPattern={}&subjectFlags={flags}",
            enc(pattern)
        );
        let start = Instant::now();
        let response = server.get(&target);
        let took = start.elapsed();
        assert!(
            response.status < 500,
            "{pattern:?}/{flags}: {} {}",
            response.status,
            response.body
        );
        assert!(
            took < BOUNDED,
            "{pattern:?}/{flags} on {endpoint:?} took {took:?}"
        );
        (response, took)
    };
    // Too long: over 1000 characters of pattern; exactly 1000 is fine.
    let (response, _) = query("", &"é".repeat(1001), "");
    assert_eq!(response.status, 400);
    assert!(response.error().contains("1000"), "{}", response.body);
    assert_eq!(query("", &"é".repeat(1000), "").0.status, 200);

    // Too large to compile: a 400 naming the problem, found quickly.
    let too_large = [
        (r"(?:a{1000}){1000}", ""),
        (r"\p{L}{10000}", "u"),
        (r"(?:\p{L}{100}){100}", "iu"),
        (r"(?=a)(?:a{1000}){1000}", ""),
        (r"(a)\1(?:[\w\s]{1000}){100}", ""),
    ];
    for (pattern, flags) in too_large {
        for endpoint in ["", "/latest", "/wait"] {
            let (response, took) = query(endpoint, pattern, flags);
            assert_eq!(
                response.status, 400,
                "{pattern:?} on {endpoint:?}: {}",
                response.body
            );
            assert!(
                response.error().contains("subjectPattern"),
                "{}",
                response.body
            );
            println!("{pattern:?}/{flags} on {endpoint:?}: 400 in {took:?}");
        }
    }
    // Large but within the limits: either answer is fine, as long as it is quick.
    for (pattern, flags) in [(r"\w{5000}", "u"), (r"\w{5000}", "iu"), (r"[^]{3000}", "s")] {
        let (response, took) = query("", pattern, flags);
        println!("{pattern:?}/{flags}: {} in {took:?}", response.status);
        assert!(matches!(response.status, 200 | 400), "{}", response.body);
    }

    // Too slow at match time (backreferences and lookaround need the backtracking engine):
    // a 400 when the pattern gives up on a stored subject.
    for pattern in [r"^(a+)+\1b$", r"^(?=(a+)+\1b)", r"^(a|aa)+\1$(?<!!)"] {
        for endpoint in ["", "/latest", "/wait"] {
            let (response, took) = query(endpoint, pattern, "");
            println!(
                "{pattern:?} on {endpoint:?}: {} in {took:?}",
                response.status
            );
            assert_eq!(
                response.status, 400,
                "{pattern:?} on {endpoint:?}: {}",
                response.body
            );
            assert!(
                response.error().contains("backtracking"),
                "{}",
                response.body
            );
        }
    }
    // Catastrophic for a backtracking engine without a backreference: either engine answers quickly.
    for pattern in [r"^(\w+\s?)*$(?=x)", r"^(\w+\s?)*$", r"(?<=(a+)+)!"] {
        let (response, took) = query("", pattern, "");
        println!("{pattern:?}: {} in {took:?}", response.status);
    }
}

/// A parked wait whose pattern gives up (backtracking limit) on a delivered message's subject is
/// answered with the same 400 as a list would give, at once, instead of staying parked: a
/// parked wait costs a full backtracking budget on every delivery, under the store lock, so a
/// few of them would slow down every message and every request for as long as they wait.
#[test]
fn a_parked_wait_whose_pattern_gives_up_on_a_delivery_is_answered_400_and_costs_once() {
    const WAITS: usize = 4;
    let server = Server::start();
    let pattern = enc(r"^(a+)+\1b$");
    let evil = message("a@example.test", "b@example.test", &"a".repeat(40), "x");
    std::thread::scope(|scope| {
        let waits: Vec<_> = (0..WAITS)
            .map(|_| {
                let server = &server;
                let pattern = &pattern;
                scope.spawn(move || {
                    let start = Instant::now();
                    let response = server.get(&format!(
                        "/api/emails/wait?subjectPattern={pattern}&timeoutMs=10000"
                    ));
                    (response, start.elapsed())
                })
            })
            .collect();
        server.poll_health("waits", WAITS as u64, Duration::from_secs(5));
        // An ordinary subject is quick to reject: the waits stay parked.
        server.send(
            "a@example.test",
            &["b@example.test"],
            &message("a@example.test", "b@example.test", "hello", "x"),
        );
        assert_eq!(server.health()["waits"], WAITS as u64);
        // The first subject the pattern gives up on answers every such wait with a 400.
        let start = Instant::now();
        server.send("a@example.test", &["b@example.test"], &evil);
        let first = start.elapsed();
        for wait in waits {
            let (response, took) = wait.join().unwrap();
            assert_eq!(response.status, 400, "{}", response.body);
            assert!(
                response.error().contains("backtracking"),
                "{}",
                response.body
            );
            assert!(took < Duration::from_secs(10), "{took:?}");
        }
        assert_eq!(server.health()["waits"], 0);
        // So the next such message costs nothing extra.
        let start = Instant::now();
        server.send("a@example.test", &["b@example.test"], &evil);
        let second = start.elapsed();
        let (_, health) = {
            let start = Instant::now();
            (server.health(), start.elapsed())
        };
        println!(
            "delivery past {WAITS} giving-up waits: {first:?}; the next one: {second:?}; /health: {health:?}"
        );
        assert!(first < BOUNDED * WAITS as u32, "{first:?}");
        assert!(second < QUICK, "{second:?}");
        assert!(health < QUICK, "{health:?}");
    });
}

#[test]
fn dns_rebinding_hosts_are_refused_and_loopback_and_allowed_names_served() {
    let server = Server::start();
    let port = server.http.port();
    for (version, host) in [
        ("1.1", Some("evil.test".to_owned())),
        ("1.1", Some(format!("evil.test:{port}"))),
        ("1.1", Some("127.0.0.1.evil.test".to_owned())),
        ("1.1", Some(format!("127.0.0.1.evil.test:{port}"))),
        ("1.1", Some("localhost.evil.test".to_owned())),
        ("1.1", Some("mailjar".to_owned())),
        ("1.1", Some(String::new())),
        ("1.0", None),
        ("1.1", None),
    ] {
        let response = request_with(&server, version, host.as_deref(), "");
        response.assert_json_contract(&format!("{host:?}"));
        assert_eq!(
            response.status, 403,
            "HTTP/{version} Host {host:?}: {}",
            response.body
        );
        assert!(response.error().contains("Host"), "{}", response.body);
    }
    for host in [
        "localhost".to_owned(),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        let response = request_with(&server, "1.1", Some(&host), "");
        assert_eq!(response.status, 200, "Host {host}: {}", response.body);
    }
    // HTTP/1.0 with a loopback Host is fine too.
    assert_eq!(
        request_with(&server, "1.0", Some("localhost"), "").status,
        200
    );

    let server = Server::start_with(&["--allowed-host", "mailjar"]);
    let port = server.http.port();
    for host in [
        format!("mailjar:{port}"),
        "mailjar".into(),
        "MAILJAR".into(),
        format!("127.0.0.1:{port}"),
    ] {
        let response = request_with(&server, "1.1", Some(&host), "");
        assert_eq!(response.status, 200, "Host {host}: {}", response.body);
    }
    for host in ["mailjar.evil.test", "evil.test", "mailjar2"] {
        let response = request_with(&server, "1.1", Some(host), "");
        assert_eq!(response.status, 403, "Host {host}: {}", response.body);
    }
}

/// A raw request with extra header lines; the JSON contract is checked unless the status is 204.
fn cors_request(server: &Server, method: &str, target: &str, headers: &str) -> Http {
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n"
    );
    let response = http_exchange(server.http, request.as_bytes());
    if response.status != 204 {
        response.assert_json_contract(&format!("{method} {target} {headers:?}"));
    }
    response
}

#[test]
fn cors_is_off_by_default_and_on_only_for_the_named_origin() {
    let preflight = "Origin: http://app.test\r\nAccess-Control-Request-Method: DELETE\r\n";
    let server = Server::start();
    let response = cors_request(&server, "GET", "/api/emails", "Origin: http://app.test\r\n");
    assert_eq!(response.status, 200);
    assert_eq!(response.header("access-control-allow-origin"), None);
    let response = cors_request(&server, "OPTIONS", "/api/emails", preflight);
    assert_eq!(response.status, 405, "{}", response.body);
    assert_eq!(response.header("access-control-allow-origin"), None);
    assert_eq!(response.header("access-control-allow-methods"), None);
    response.error();

    let server = Server::start_with(&["--cors-origin", "http://app.test"]);
    let response = cors_request(&server, "OPTIONS", "/api/emails", preflight);
    assert_eq!(response.status, 204, "{}", response.body);
    assert_eq!(
        response.header("access-control-allow-origin"),
        Some("http://app.test")
    );
    let methods = response
        .header("access-control-allow-methods")
        .unwrap_or("");
    assert!(
        methods.contains("GET") && methods.contains("DELETE"),
        "{methods}"
    );
    assert_eq!(response.header("vary"), Some("Origin"));
    for target in ["/api/emails", "/health", "/api/emails/latest"] {
        let response = cors_request(&server, "GET", target, "Origin: http://app.test\r\n");
        assert!(matches!(response.status, 200 | 404), "{}", response.body);
        assert_eq!(
            response.header("access-control-allow-origin"),
            Some("http://app.test"),
            "{target}"
        );
        assert_eq!(response.header("vary"), Some("Origin"), "{target}");
    }
    // Another origin: no CORS headers, and its preflight is the plain 405.
    let other = "Origin: http://other.test\r\n";
    let response = cors_request(&server, "GET", "/api/emails", other);
    assert_eq!(response.status, 200);
    assert_eq!(response.header("access-control-allow-origin"), None);
    let response = cors_request(
        &server,
        "OPTIONS",
        "/api/emails",
        "Origin: http://other.test\r\nAccess-Control-Request-Method: DELETE\r\n",
    );
    assert_eq!(response.status, 405, "{}", response.body);
    assert_eq!(response.header("access-control-allow-origin"), None);
    // Without an Origin, nothing either.
    let response = cors_request(&server, "GET", "/api/emails", "");
    assert_eq!(response.header("access-control-allow-origin"), None);
}

/// HTML bodies are data: a message with a `<script>` comes back only inside JSON, with
/// `nosniff`, and with `--no-ui` nothing the API answers is ever `text/html`, whatever the
/// client accepts (the web UI's own page, under its CSP, is tested in `ui.rs`).
#[test]
fn html_bodies_are_data_and_nothing_is_served_as_html() {
    let server = Server::start_with(&["--no-ui"]);
    let raw = b"From: a@example.test\r\nTo: html@example.test\r\nSubject: <script>alert(1)</script>\r\n\
        MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n\
        <html><body><script>alert(document.cookie)</script><img src=x onerror=alert(2)></body></html>\r\n";
    server.send("a@example.test", &["html@example.test"], raw);
    let id = server.latest()["id"].as_str().unwrap().to_owned();
    let accept = "Accept: text/html,application/xhtml+xml\r\n";
    let check = |method: &str, target: &str, extra: &str| {
        let request = format!(
            "{method} {target} HTTP/1.1\r\nHost: localhost\r\n{accept}{extra}Connection: close\r\n\r\n"
        );
        let response = http_exchange(server.http, request.as_bytes());
        response.assert_json_contract(&format!("{method} {target}"));
        assert_eq!(
            response.header("x-content-type-options"),
            Some("nosniff"),
            "{method} {target}"
        );
        response
    };
    for target in [
        "/api/emails".to_owned(),
        "/api/emails/latest".to_owned(),
        "/api/emails/wait?to=html@example.test&timeoutMs=1000".to_owned(),
        format!("/api/emails/{id}"),
        "/api/emails?subject=script".to_owned(),
    ] {
        let response = check("GET", &target, "");
        assert_eq!(response.status, 200, "{target}: {}", response.body);
        assert!(
            response
                .body
                .contains("<script>alert(document.cookie)</script>"),
            "{target}"
        );
    }
    // Errors, other paths and methods, and refused requests.
    for (method, target, extra) in [
        ("GET", "/", ""),
        ("GET", "/index.html", ""),
        ("GET", "/api/emails/%3Cscript%3E", ""),
        ("GET", "/api/emails?subject=%3Cscript%3E&bogus=1", ""),
        ("POST", "/api/emails", ""),
        ("OPTIONS", "/api/emails", "Origin: http://evil.test\r\n"),
        ("GET", "/api/openapi.json", ""),
        ("GET", "/health", ""),
    ] {
        let response = check(method, target, extra);
        assert_ne!(
            response.header("content-type"),
            Some("text/html"),
            "{method} {target}"
        );
    }
    let refused = http_exchange(
        server.http,
        format!("GET /api/emails HTTP/1.1\r\nHost: evil.test\r\n{accept}Connection: close\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(refused.status, 403);
    refused.assert_json_contract("refused");
    assert_eq!(refused.header("x-content-type-options"), Some("nosniff"));
}
