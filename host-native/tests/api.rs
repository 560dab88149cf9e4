//! The HTTP API of the real binary: every endpoint, filter and status.

mod common;

use std::time::{Duration, Instant};

use common::{Http, Server, Smtp, enc, http_exchange, message};
use serde_json::Value;

/// Sends the five messages the filter tests use; returns their stored ids in send order.
fn send_five(server: &Server) -> Vec<String> {
    let messages: [(&[&str], &str); 5] = [
        (&["alice@example.test"], "Welcome Alice"),
        (&["bob@example.test"], "Your code is 123456"),
        (&["alice@example.test"], "Password reset for alice"),
        (&["Carol@Example.TEST"], "Invoice #42 paid"),
        (
            &["alice@example.test", "bob@example.test"],
            "Team update 2024-05",
        ),
    ];
    let mut ids = Vec::new();
    for (to, subject) in messages {
        let raw = message("app@example.test", &to.join(", "), subject, "body");
        server.send("app@example.test", to, &raw);
        let email = server.assert_latest("app@example.test", to, &raw);
        assert_eq!(email["subject"], subject);
        ids.push(email["id"].as_str().unwrap().to_owned());
    }
    ids
}

/// The subjects of `GET /api/emails?query`, in the order returned.
fn subjects(server: &Server, query: &str) -> Vec<String> {
    server
        .emails(query)
        .iter()
        .map(|e| e["subject"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn health_reports_the_bound_ports_domain_and_count() {
    let server = Server::start_with(&["--domain", "mail.e2e.test"]);
    let health = server.health();
    assert_eq!(health["ok"], true);
    assert_eq!(health["domain"], "mail.e2e.test");
    assert_eq!(
        health["api"]["port"].as_u64(),
        Some(u64::from(server.http.port()))
    );
    assert_eq!(
        health["smtp"]["port"].as_u64(),
        Some(u64::from(server.smtp.port()))
    );
    assert_eq!(health["api"]["host"], "127.0.0.1");
    assert_eq!(health["smtp"]["host"], "127.0.0.1");
    assert_eq!(health["messages"], 0);
    assert_eq!(health["waits"], 0);
    // The SMTP port it reports is the one that answers, under the reported domain.
    let port = health["smtp"]["port"].as_u64().unwrap() as u16;
    let (_smtp, greeting) = Smtp::connect(([127, 0, 0, 1], port).into());
    assert_eq!(greeting.wire, "220 mail.e2e.test ESMTP mailjar ready\r\n");
    for i in 0..3 {
        server.send(
            "a@example.test",
            &["b@example.test"],
            &message("a@x", "b@x", &format!("n{i}"), "x"),
        );
    }
    assert_eq!(server.health()["messages"], 3);
}

#[test]
fn list_filters_and_their_combinations() {
    let server = Server::start();
    let ids = send_five(&server);
    let all = [
        "Welcome Alice",
        "Your code is 123456",
        "Password reset for alice",
        "Invoice #42 paid",
        "Team update 2024-05",
    ];
    let pick = |indexes: &[usize]| {
        indexes
            .iter()
            .map(|&i| all[i].to_owned())
            .collect::<Vec<_>>()
    };
    let cases: Vec<(String, Vec<usize>)> = vec![
        (String::new(), vec![0, 1, 2, 3, 4]),
        // to: any recipient, case-insensitive.
        ("to=alice@example.test".into(), vec![0, 2, 4]),
        ("to=ALICE%40EXAMPLE.TEST".into(), vec![0, 2, 4]),
        ("to=carol@example.test".into(), vec![3]),
        ("to=nobody@example.test".into(), vec![]),
        // subject: case-insensitive substring.
        ("subject=code".into(), vec![1]),
        ("subject=WELCOME".into(), vec![0]),
        (format!("subject={}", enc("#42")), vec![3]),
        // subjectPattern and subjectFlags: JavaScript regular expressions.
        (
            format!("subjectPattern={}", enc("^(Welcome|Password)")),
            vec![0, 2],
        ),
        (format!("subjectPattern={}", enc("^welcome")), vec![]),
        (
            format!("subjectPattern={}&subjectFlags=i", enc("^welcome")),
            vec![0],
        ),
        (format!("subjectPattern={}", enc(r"\b\d{6}$")), vec![1]),
        // Lookahead and negative lookahead.
        (
            format!("subjectPattern={}", enc("^(?=.*alice)Password")),
            vec![2],
        ),
        (
            format!(
                "subjectPattern={}&subjectFlags=i",
                enc("^(?!welcome).*alice")
            ),
            vec![2],
        ),
        // A named group, and a backreference to it.
        (
            format!("subjectPattern={}", enc(r"(?<year>\d{4})-(?<month>\d{2})")),
            vec![4],
        ),
        (
            format!("subjectPattern={}&subjectFlags=i", enc(r"(?<l>[a-z])\k<l>")),
            vec![2],
        ),
        // afterId.
        (format!("afterId={}", ids[1]), vec![2, 3, 4]),
        (format!("afterId={}", ids[4]), vec![]),
        // Combinations: every filter must match.
        ("to=alice@example.test&subject=reset".into(), vec![2]),
        (
            format!("to=alice@example.test&subjectPattern={}", enc("update")),
            vec![4],
        ),
        (
            format!("to=alice@example.test&afterId={}", ids[0]),
            vec![2, 4],
        ),
        ("to=bob@example.test&subject=welcome".into(), vec![]),
        (
            format!(
                "to=bob@example.test&subject=update&subjectPattern={}&afterId={}",
                enc(r"\d{4}-"),
                ids[1]
            ),
            vec![4],
        ),
        // An empty value is no filter.
        ("to=&subject=".into(), vec![0, 1, 2, 3, 4]),
        // limit: the newest N matches, in receive order.
        ("limit=2".into(), vec![3, 4]),
        ("limit=1".into(), vec![4]),
        ("limit=100".into(), vec![0, 1, 2, 3, 4]),
        ("to=alice@example.test&limit=2".into(), vec![2, 4]),
        (format!("limit=2&afterId={}", ids[0]), vec![3, 4]),
    ];
    for (query, want) in cases {
        assert_eq!(
            subjects(&server, &query),
            pick(&want),
            "GET /api/emails?{query}"
        );
    }
    // Receive order with strictly increasing ids.
    let listed: Vec<String> = server
        .emails("")
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, ids);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

#[test]
fn latest_and_by_id() {
    let server = Server::start();
    let missing = server.get("/api/emails/latest");
    assert_eq!(missing.status, 404);
    missing.error();
    let ids = send_five(&server);
    let latest = |query: &str| {
        server.get_ok(&format!("/api/emails/latest?{query}"))["email"]["subject"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(latest(""), "Team update 2024-05");
    assert_eq!(latest("to=carol@example.test"), "Invoice #42 paid");
    assert_eq!(latest("subject=code"), "Your code is 123456");
    assert_eq!(
        latest(&format!(
            "to=alice@example.test&subjectPattern={}",
            enc("^P")
        )),
        "Password reset for alice"
    );
    assert_eq!(
        server
            .get("/api/emails/latest?to=nobody@example.test")
            .status,
        404
    );
    assert_eq!(
        server
            .get(&format!("/api/emails/latest?afterId={}", ids[4]))
            .status,
        404
    );

    for (i, id) in ids.iter().enumerate() {
        let email = server.get_ok(&format!("/api/emails/{id}"))["email"].clone();
        assert_eq!(email["id"], id.as_str());
        assert_eq!(
            email,
            server.emails("")[i],
            "by id and in the list: the same CapturedEmail"
        );
    }
    // A well-formed id that is not stored, and one that is not an id at all.
    let mut unknown = ids[0].clone();
    unknown.replace_range(
        unknown.len() - 4..,
        if unknown.ends_with("0000") {
            "ffff"
        } else {
            "0000"
        },
    );
    for id in [unknown.as_str(), "not-an-id"] {
        let response = server.get(&format!("/api/emails/{id}"));
        assert_eq!(response.status, 404, "{id}: {}", response.body);
    }
}

/// A wait request sent on its own connection; the response is read by `finish`.
struct PendingWait {
    stream: std::net::TcpStream,
    started: Instant,
}

impl PendingWait {
    fn start(server: &Server, query: &str) -> PendingWait {
        let mut stream = std::net::TcpStream::connect(server.http).unwrap();
        stream.set_read_timeout(Some(common::IO_TIMEOUT)).unwrap();
        let request = format!(
            "GET /api/emails/wait?{query} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        );
        std::io::Write::write_all(&mut stream, request.as_bytes()).unwrap();
        PendingWait {
            stream,
            started: Instant::now(),
        }
    }

    fn finish(mut self) -> (Http, Duration) {
        let response = common::read_http_response(&mut self.stream);
        response.assert_json_contract("wait");
        (response, self.started.elapsed())
    }
}

#[test]
fn wait_returns_a_stored_match_at_once_then_a_later_arrival_then_408() {
    let server = Server::start();
    send_five(&server);
    // Already stored: the oldest match, at once.
    let start = Instant::now();
    let found = server.get_ok("/api/emails/wait?to=alice@example.test&timeoutMs=5000");
    assert_eq!(found["email"]["subject"], "Welcome Alice");
    assert!(start.elapsed() < Duration::from_secs(2));

    // Not there yet: held until a message arrives over SMTP.
    let pending = PendingWait::start(
        &server,
        "to=late@example.test&subject=arrived&timeoutMs=20000",
    );
    server.poll_health("waits", 1, Duration::from_secs(5));
    // A message that does not match leaves it waiting.
    server.send(
        "a@example.test",
        &["late@example.test"],
        &message("a@x", "late@x", "other", "x"),
    );
    assert_eq!(server.health()["waits"], 1);
    let raw = message("a@example.test", "late@example.test", "it arrived", "x");
    server.send("a@example.test", &["late@example.test"], &raw);
    let (response, _) = pending.finish();
    assert_eq!(response.status, 200, "{}", response.body);
    common::assert_stored(
        &response.json()["email"],
        "a@example.test",
        &["late@example.test"],
        &raw,
    );
    assert_eq!(server.health()["waits"], 0);

    // Nothing arrives: 408 at timeoutMs.
    let pending = PendingWait::start(&server, "to=never@example.test&timeoutMs=300");
    let (response, waited) = pending.finish();
    assert_eq!(response.status, 408, "{}", response.body);
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert_eq!(server.health()["waits"], 0);
}

#[test]
fn delete_all_and_by_recipient() {
    let server = Server::start();
    let ids = send_five(&server);
    let empty_to = server.request("DELETE", "/api/emails?to=");
    assert_eq!(empty_to.status, 400, "an empty to must not wipe everything");
    empty_to.error();
    let response = server.request("DELETE", "/api/emails?to=BOB@example.test");
    assert_eq!(response.status, 200);
    assert_eq!(response.json(), serde_json::json!({"deleted": 2}));
    assert_eq!(
        subjects(&server, ""),
        [
            "Welcome Alice",
            "Password reset for alice",
            "Invoice #42 paid"
        ]
    );
    assert_eq!(
        server
            .request("DELETE", "/api/emails?to=nobody@example.test")
            .json()["deleted"],
        0
    );
    // One message by its id (README, "HTTP API": `DELETE /api/emails/:id`).
    let one = server.request("DELETE", &format!("/api/emails/{}", ids[3]));
    assert_eq!(
        (one.status, one.json()),
        (200, serde_json::json!({"deleted": 1}))
    );
    assert_eq!(
        server
            .request("DELETE", &format!("/api/emails/{}", ids[3]))
            .status,
        404
    );
    assert_eq!(server.get(&format!("/api/emails/{}", ids[3])).status, 404);
    // afterId still works when the message it names is gone.
    assert_eq!(
        subjects(&server, &format!("afterId={}", ids[1])),
        ["Password reset for alice"]
    );
    assert_eq!(server.delete_all(), 2);
    assert_eq!(server.emails(""), Vec::<Value>::new());
    assert_eq!(server.health()["messages"], 0);
    assert_eq!(server.delete_all(), 0);
    server.send(
        "a@example.test",
        &["z@example.test"],
        &message("a@x", "z@x", "after the purge", "x"),
    );
    assert_eq!(
        subjects(&server, &format!("afterId={}", ids[4])),
        ["after the purge"]
    );
    assert_eq!(server.get(&format!("/api/emails/{}", ids[0])).status, 404);
}

#[test]
fn bad_parameters_are_400_with_an_error() {
    let server = Server::start();
    send_five(&server);
    let mut bad: Vec<String> = Vec::new();
    for value in [
        "",
        "-1",
        "1.5",
        "abc",
        "0",
        "101",
        "1e2",
        "+5",
        "%201",
        "99999999999999999999999",
    ] {
        bad.push(format!("/api/emails?limit={value}"));
    }
    for value in ["", "-1", "1.5", "abc", "0", "60001", "1e3", "0x10"] {
        bad.push(format!("/api/emails/wait?timeoutMs={value}"));
    }
    bad.extend([
        format!("/api/emails?subjectPattern={}", enc("(unclosed")),
        format!("/api/emails/latest?subjectPattern={}", enc("a{2,1}")),
        format!("/api/emails/wait?subjectPattern={}", enc("[z-a]")),
        "/api/emails?subjectPattern=a&subjectFlags=q".into(),
        "/api/emails?subjectPattern=a&subjectFlags=ii".into(),
        "/api/emails?afterId=not-an-id".into(),
        "/api/emails/latest?afterId=1234".into(),
        "/api/emails/wait?afterId=zz&timeoutMs=100".into(),
        "/api/emails?to=%zz".into(),
        "/api/emails?subject=%E2%82".into(),
        "/api/emails?subject=100%".into(),
        "/api/emails?limit=5&limit=6".into(),
        "/api/emails?colour=blue".into(),
        "/api/emails/latest?limit=1".into(),
        "/health?verbose=1".into(),
    ]);
    for target in &bad {
        let response = server.get(target);
        assert_eq!(response.status, 400, "GET {target}: {}", response.body);
        assert!(!response.error().is_empty());
    }
    // The error says what to fix.
    assert!(
        server.get("/api/emails?limit=0").error().contains("limit"),
        "names the parameter"
    );
    assert!(
        server
            .get("/api/emails/wait?timeoutMs=0")
            .error()
            .contains("timeoutMs")
    );
    // The bounds themselves are fine.
    assert_eq!(server.emails("limit=1").len(), 1);
    assert_eq!(
        server
            .get("/api/emails/wait?timeoutMs=60000&to=alice@example.test")
            .status,
        200
    );
    assert_eq!(
        server
            .get("/api/emails/wait?timeoutMs=1&to=nobody@example.test")
            .status,
        408
    );
}

#[test]
fn unknown_paths_404_and_wrong_methods_405_with_allow() {
    let server = Server::start();
    for target in [
        // `/` is the web UI (tests/ui.rs); `/ui/` and unknown assets are not.
        "/ui/",
        "/ui/nope.js",
        "/api",
        "/api/nope/deeper/path",
        "/nope",
        "/api/emails/latest/extra",
        "/healthz",
    ] {
        let response = server.get(target);
        assert_eq!(response.status, 404, "GET {target}: {}", response.body);
    }
    let cases = [
        ("POST", "/api/emails", "GET, DELETE"),
        ("PUT", "/api/emails", "GET, DELETE"),
        ("PATCH", "/health", "GET"),
        ("DELETE", "/health", "GET"),
        ("POST", "/api/emails/latest", "GET"),
        ("DELETE", "/api/emails/wait", "GET"),
    ];
    for (method, target, allow) in cases {
        let response = server.request(method, target);
        assert_eq!(response.status, 405, "{method} {target}: {}", response.body);
        assert_eq!(response.header("allow"), Some(allow), "{method} {target}");
        response.error();
    }
    // Every success is JSON too (checked inside `request`).
    for target in ["/health", "/api/emails"] {
        assert_eq!(server.get(target).status, 200);
    }
}

#[test]
fn dns_rebinding_is_refused_with_403() {
    let server = Server::start();
    let with_host = |host: &str| {
        let request = format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let response = http_exchange(server.http, request.as_bytes());
        response.assert_json_contract(host);
        response
    };
    for host in [
        "evil.test",
        &format!("evil.test:{}", server.http.port()),
        "localhost.evil.test",
        "10.0.0.1",
    ] {
        let response = with_host(host);
        assert_eq!(response.status, 403, "Host: {host}: {}", response.body);
        response.error();
    }
    let port = server.http.port();
    for host in [
        format!("localhost:{port}"),
        "localhost".into(),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        let response = with_host(&host);
        assert_eq!(response.status, 200, "Host: {host}: {}", response.body);
        assert_eq!(response.json()["ok"], true);
    }
}

#[test]
fn to_matches_envelope_recipients_and_to_and_cc_headers() {
    let server = Server::start();
    // Bcc-style: the envelope names a recipient the headers do not, and the other way round.
    let raw = b"From: a@example.test\r\nTo: Header To <header.to@example.test>\r\nCc: one@example.test, Two <TWO@example.test>\r\nSubject: cc\r\n\r\nx\r\n";
    server.send("a@example.test", &["hidden@example.test"], raw);
    server.send(
        "a@example.test",
        &["other@example.test"],
        &message("a@x", "other@x", "other", "x"),
    );
    for to in [
        "hidden@example.test",
        "header.to@example.test",
        "one@example.test",
        "two@example.test",
        " TWO@Example.Test ",
    ] {
        let found = server.emails(&format!("to={}", enc(to)));
        assert_eq!(found.len(), 1, "to={to:?}");
        assert_eq!(found[0]["subject"], "cc", "to={to:?}");
    }
    let email = server.latest();
    assert_eq!(email["subject"], "other");
    let cc = server.get_ok("/api/emails/latest?to=one@example.test")["email"]["cc"].clone();
    assert_eq!(
        cc,
        serde_json::json!(["one@example.test", "TWO@example.test"])
    );
    assert_eq!(
        server
            .request("DELETE", "/api/emails?to=header.to@example.test")
            .json()["deleted"],
        1
    );
    assert_eq!(server.emails("").len(), 1);
}
