//! `GET /api/emails/:id/checks/auth` on the real binary, with a DNS server the
//! test runs on loopback (`--dns`): a message the test signs with DKIM passes,
//! and fails once its body is changed; SPF and DMARC are evaluated for the
//! envelope sender and the connecting address (127.0.0.1).

mod common;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::Instant;

use base64::Engine;
use common::Server;
use mail_auth::common::crypto::Ed25519Key;
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::DkimSigner;
use serde_json::Value;

/// A DNS server answering TXT queries from `records` (names lower-case, no
/// trailing dot), NXDOMAIN for any other name.
fn dns_server(records: HashMap<String, String>) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            if let Some(reply) = answer(&buf[..n], &records) {
                let _ = socket.send_to(&reply, peer);
            }
        }
    });
    addr
}

fn answer(query: &[u8], records: &HashMap<String, String>) -> Option<Vec<u8>> {
    let mut at = 12;
    let mut labels = Vec::new();
    while *query.get(at)? != 0 {
        let len = usize::from(query[at]);
        labels.push(String::from_utf8_lossy(query.get(at + 1..at + 1 + len)?).to_ascii_lowercase());
        at += 1 + len;
    }
    let question_end = at + 5;
    let qtype = u16::from_be_bytes([*query.get(at + 1)?, *query.get(at + 2)?]);
    let mut reply = query.get(..question_end)?.to_vec();
    reply[2] = 0x85; // response, authoritative, recursion desired
    reply[8..12].copy_from_slice(&[0, 0, 0, 0]);
    match records.get(&labels.join(".")) {
        Some(text) if qtype == 16 => {
            let mut rdata = Vec::new();
            for chunk in text.as_bytes().chunks(255) {
                rdata.push(chunk.len() as u8);
                rdata.extend_from_slice(chunk);
            }
            reply[3] = 0x80;
            reply[6..8].copy_from_slice(&[0, 1]);
            reply.extend_from_slice(&[0xc0, 12, 0, 16, 0, 1, 0, 0, 0, 60]);
            reply.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            reply.extend_from_slice(&rdata);
        }
        Some(_) => {
            reply[3] = 0x80;
            reply[6..8].copy_from_slice(&[0, 0]);
        }
        None => {
            reply[3] = 0x83; // NXDOMAIN
            reply[6..8].copy_from_slice(&[0, 0]);
        }
    }
    Some(reply)
}

fn auth_check(server: &Server, from: &str, raw: &[u8]) -> Value {
    assert_eq!(server.send(from, &["bob@example.net"], raw).code, 250);
    let id = server.latest()["id"].as_str().unwrap().to_owned();
    server.get_ok(&format!("/api/emails/{id}/checks/auth"))
}

#[test]
fn a_signed_message_passes_and_fails_once_its_body_is_changed() {
    let pkcs8 = Ed25519Key::generate_pkcs8().unwrap();
    let key = Ed25519Key::from_pkcs8_der(&pkcs8).unwrap();
    let public = base64::engine::general_purpose::STANDARD.encode(key.public_key());
    let records = HashMap::from([
        (
            "mail._domainkey.example.test".to_owned(),
            format!("v=DKIM1; k=ed25519; p={public}"),
        ),
        (
            "example.test".to_owned(),
            "v=spf1 ip4:127.0.0.1 -all".to_owned(),
        ),
        (
            "_dmarc.example.test".to_owned(),
            "v=DMARC1; p=reject".to_owned(),
        ),
        (
            "other.test".to_owned(),
            "v=spf1 ip4:192.0.2.1 -all".to_owned(),
        ),
    ]);
    let dns = dns_server(records);
    let server = Server::start_with(&["--dns", &dns.to_string()]);

    let body = "Hello Bob,\r\n\r\nYour code is 123456.\r\n";
    let unsigned = format!(
        "From: Alice <alice@example.test>\r\nTo: bob@example.net\r\nSubject: Your code\r\n\
         Date: Thu, 26 Nov 2026 10:00:00 +0000\r\nMessage-ID: <{}@example.test>\r\n\r\n{body}",
        common::nonce()
    );
    let signature = DkimSigner::from_key(key)
        .domain("example.test")
        .selector("mail")
        .headers(["From", "To", "Subject", "Date", "Message-ID"])
        .sign(unsigned.as_bytes())
        .unwrap();
    let signed = format!("{}{unsigned}", signature.to_header());

    let started = Instant::now();
    let good = auth_check(&server, "alice@example.test", signed.as_bytes());
    eprintln!(
        "FIGURE auth check (DKIM + SPF + DMARC, loopback DNS): {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(good["dkim"][0]["result"], "pass", "{good}");
    assert_eq!(good["dkim"][0]["domain"], "example.test");
    assert_eq!(good["dkim"][0]["selector"], "mail");
    assert_eq!(good["spf"]["result"], "pass", "{good}");
    assert_eq!(good["dmarc"]["result"], "pass", "{good}");
    assert_eq!(good["dmarc"]["policy"], "reject");

    // A 100 KB newsletter, signed the same way: the figure of the check's time.
    let mut letter = unsigned.replace(body, "");
    while letter.len() < 100 * 1024 {
        letter.push_str(
            "<tr><td style=\"padding:12px\"><p>Lorem ipsum dolor sit amet.</p></td></tr>\r\n",
        );
    }
    let key = Ed25519Key::from_pkcs8_der(&pkcs8).unwrap();
    let signer = DkimSigner::from_key(key)
        .domain("example.test")
        .selector("mail");
    let letter_signature = signer
        .headers(["From", "Subject"])
        .sign(letter.as_bytes())
        .unwrap();
    let letter = format!("{}{letter}", letter_signature.to_header());
    let started = Instant::now();
    let report = auth_check(&server, "alice@example.test", letter.as_bytes());
    let ms = started.elapsed().as_millis();
    eprintln!("FIGURE auth check of a 100 KB newsletter: {ms} ms");
    assert_eq!(report["dkim"][0]["result"], "pass", "{report}");

    let tampered = signed.replace("123456", "654321");
    let bad = auth_check(&server, "alice@example.test", tampered.as_bytes());
    assert_eq!(bad["dkim"][0]["result"], "fail", "{bad}");

    // Sent from an address other.test's SPF does not list, with no signature:
    // SPF fails, no DKIM, and DMARC has no record for other.test.
    let unsigned_other = unsigned.replace("example.test", "other.test");
    let other = auth_check(&server, "alice@other.test", unsigned_other.as_bytes());
    assert_eq!(other["dkim"], serde_json::json!([]), "{other}");
    assert_eq!(other["spf"]["result"], "fail", "{other}");
    assert_eq!(other["dmarc"]["result"], "none", "{other}");
}

#[test]
fn a_dns_server_that_does_not_answer_gives_temperror_not_a_hang() {
    // Bound but never answering.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let server = Server::start_with(&["--dns", &silent.local_addr().unwrap().to_string()]);
    let started = Instant::now();
    let raw = common::message("alice@example.test", "bob@example.net", "x", "y");
    let report = auth_check(&server, "alice@example.test", &raw);
    assert_eq!(report["spf"]["result"], "temperror", "{report}");
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
}
