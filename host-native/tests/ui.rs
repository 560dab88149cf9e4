//! The web UI over real HTTP against the binary: its page and assets with
//! their security and cache headers, the Host guard in front of them, and
//! `--no-ui`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{Http, IO_TIMEOUT, Server, http_exchange};

/// The policy the page must carry (README, "Web UI").
const CSP: &str = "default-src 'self'; frame-src 'self'; img-src 'self' data:; style-src 'self'; \
script-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn fetch(server: &Server, method: &str, target: &str, extra: &str) -> Http {
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{extra}\r\n",
        server.http
    );
    http_exchange(server.http, request.as_bytes())
}

/// The `src`/`href` of every `/ui/` file the page names.
fn assets_named_by(html: &str) -> Vec<String> {
    html.split('"')
        .filter(|part| part.starts_with("/ui/"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_page_and_its_assets_carry_their_headers() {
    let server = Server::start();
    let page = fetch(&server, "GET", "/", "");
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(page.header("content-security-policy"), Some(CSP));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    assert!(page.body.contains(r#"<input type="search""#));
    let assets = assets_named_by(&page.body);
    for wanted in ["/ui/app.js", "/ui/style.css"] {
        assert!(assets.iter().any(|a| a == wanted), "{wanted} in {assets:?}");
    }
    for asset in &assets {
        let file = fetch(&server, "GET", asset, "");
        assert_eq!(file.status, 200, "{asset}");
        assert!(!file.body.is_empty(), "{asset}");
        assert_eq!(file.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(file.header("cache-control"), Some("no-cache"));
        let kind = file.header("content-type").unwrap_or_default();
        let expected = match asset.rsplit('.').next() {
            Some("js") => "text/javascript",
            Some("css") => "text/css",
            Some("svg") => "image/svg+xml",
            other => panic!("an asset of an unexpected kind: {other:?}"),
        };
        assert!(kind.starts_with(expected), "{asset}: {kind}");
        // Revalidation: the ETag answers 304 without a body.
        let tag = file.header("etag").expect("an ETag").to_owned();
        let again = fetch(&server, "GET", asset, &format!("If-None-Match: {tag}\r\n"));
        assert_eq!(again.status, 304, "{asset}");
        assert!(again.body.is_empty());
    }
    // HEAD answers like GET, without the body (read to the close: no body follows the head).
    let mut stream = TcpStream::connect(server.http).expect("connect");
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let request = format!(
        "HEAD / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.http
    );
    stream.write_all(request.as_bytes()).expect("write");
    let mut wire = String::new();
    stream.read_to_string(&mut wire).expect("read to the close");
    let (head, body) = wire.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let csp = format!("content-security-policy: {CSP}");
    assert!(head.lines().any(|l| l.eq_ignore_ascii_case(&csp)), "{head}");
    assert_eq!(body, "");
    // Other methods on a page are 405 {"error"}; unknown /ui/ paths are the API's 404.
    let post = fetch(&server, "POST", "/", "Content-Length: 0\r\n");
    post.assert_json_contract("POST /");
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    let missing = server.get("/ui/nothing.js");
    assert_eq!(missing.status, 404);
    // The API is untouched.
    assert_eq!(server.get_ok("/health")["messages"], 0);
}

#[test]
fn the_host_guard_covers_the_page() {
    let server = Server::start();
    let request = "GET / HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n";
    let refused = http_exchange(server.http, request.as_bytes());
    refused.assert_json_contract("GET / with a foreign Host");
    assert_eq!(refused.status, 403);
    assert_eq!(refused.header("content-security-policy"), None);
    assert!(!refused.body.contains("<html"));
}

#[test]
fn no_ui_turns_the_page_off() {
    let server = Server::start_with(&["--no-ui"]);
    for path in ["/", "/ui/app.js", "/ui/style.css", "/ui/index.html"] {
        let response = server.get(path);
        assert_eq!(response.status, 404, "{path}");
    }
    assert_eq!(server.get_ok("/health")["messages"], 0);
    // And with the UI on, the same paths are served: the flag is what changed.
    let with_ui = Server::start();
    for path in ["/", "/ui/app.js", "/ui/style.css", "/ui/index.html"] {
        assert_eq!(fetch(&with_ui, "GET", path, "").status, 200, "{path}");
    }
}
