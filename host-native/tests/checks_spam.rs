//! `GET /api/emails/:id/checks/spam` against a real spamd (Debian's
//! `spamassassin`, installed by scripts/test.sh and started here on a free
//! loopback port, as `nobody` when the tests run as root): GTUBE is spam with
//! its rule and description, a clean message is not; no `--spamassassin` is a
//! 404 and a spamd that is down a 503.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Server;

const GTUBE: &str = "XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X";
const SPAMD: &str = "/usr/sbin/spamd";

struct Spamd {
    child: Child,
    addr: String,
}

impl Drop for Spamd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Starts spamd and waits until it accepts connections.
fn spamd() -> Spamd {
    assert!(
        std::path::Path::new(SPAMD).exists(),
        "{SPAMD} is missing: install Debian's spamassassin and spamd packages (scripts/test.sh does: apt-get install spamassassin spamd)"
    );
    let port = common::free_port();
    let mut command = Command::new(SPAMD);
    command.args([
        &format!("--listen=127.0.0.1:{port}"),
        "--local",
        "--max-children=1",
        "--min-children=1",
        "--nouser-config",
        "--syslog=stderr",
    ]);
    if running_as_root() {
        command.args(["--username=nobody"]);
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start spamd");
    let spamd = Spamd {
        child,
        addr: format!("127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(&spamd.addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "spamd did not listen on {} within 60 s",
            spamd.addr
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    spamd
}

fn mail(subject: &str, body: &str) -> Vec<u8> {
    format!(
        "From: Alice <alice@example.com>\r\nTo: bob@example.com\r\nSubject: {subject}\r\nDate: Thu, 26 Nov 2026 10:00:00 +0000\r\n\
         Message-ID: <{}@example.com>\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n",
        common::nonce()
    )
    .into_bytes()
}

fn spam_check(server: &Server, raw: &[u8]) -> common::Http {
    assert_eq!(
        server
            .send("alice@example.com", &["bob@example.com"], raw)
            .code,
        250
    );
    let id = server.latest()["id"].as_str().unwrap().to_owned();
    server.get(&format!("/api/emails/{id}/checks/spam"))
}

#[test]
fn gtube_is_spam_and_a_clean_message_is_not() {
    let spamd = spamd();
    let server = Server::start_with(&["--spamassassin", &spamd.addr]);
    let response = spam_check(
        &server,
        &mail("test", &format!("This is the GTUBE:\r\n{GTUBE}")),
    );
    assert_eq!(response.status, 200, "{}", response.body);
    let report = response.json();
    assert_eq!(report["spam"], true, "{report}");
    assert_eq!(report["threshold"], 5.0);
    assert!(report["score"].as_f64().unwrap() >= 1000.0);
    let gtube = report["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "GTUBE")
        .expect("GTUBE rule");
    assert_eq!(
        gtube["description"],
        "BODY: Generic Test for Unsolicited Bulk Email"
    );

    let clean = spam_check(
        &server,
        &mail(
            "Lunch on Friday",
            "Hi Bob,\r\n\r\nShall we meet at noon on Friday?\r\n\r\nAlice",
        ),
    );
    assert_eq!(clean.status, 200, "{}", clean.body);
    let clean = clean.json();
    assert_eq!(clean["spam"], false, "{clean}");
    assert!(clean["score"].as_f64().unwrap() < clean["threshold"].as_f64().unwrap());

    let letter = format!(
        "From: a@example.com\r\nTo: b@example.com\r\nSubject: News\r\nContent-Type: text/html\r\n\r\n{}\r\n",
        newsletter()
    );
    let started = Instant::now();
    assert_eq!(spam_check(&server, letter.as_bytes()).status, 200);
    eprintln!(
        "FIGURE spam check of a 100 KB newsletter: {} ms",
        started.elapsed().as_millis()
    );
}

#[test]
fn no_spamd_configured_is_404_and_spamd_down_is_503() {
    let server = Server::start();
    let response = spam_check(&server, &mail("x", "y"));
    assert_eq!(response.status, 404);
    assert_eq!(response.error(), "no spam checker configured");
    let down = format!("127.0.0.1:{}", common::free_port());
    let server = Server::start_with(&["--spamassassin", &down]);
    let response = spam_check(&server, &mail("x", "y"));
    assert_eq!(response.status, 503, "{}", response.body);
    assert!(response.error().contains(&down), "{}", response.body);
}

fn newsletter() -> String {
    let mut html = String::from("<html><body><table>");
    let mut i = 0;
    while html.len() < 100 * 1024 {
        html.push_str(&format!(
            "<tr><td style=\"padding:12px\"><h2>Story {i}</h2><p>Lorem ipsum dolor sit amet.</p><a href=\"https://example.com/{i}\">Read</a></td></tr>"
        ));
        i += 1;
    }
    html + "</table></body></html>"
}
