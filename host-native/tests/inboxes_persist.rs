//! Inboxes with `--data-dir`: names, patterns, quotas and credential
//! digests survive a restart (the secrets are never written), and the
//! messages come back in the inboxes they were routed to.

mod common;
mod inboxes_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::Server;
use inboxes_common::{ADMIN, call, create, ids, inbox, send};
use serde_json::json;

fn data_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mailjar-inboxes-{}-{name}-{}",
        std::process::id(),
        common::nonce()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn start(dir: &Path) -> Server {
    let dir = dir.to_str().expect("a UTF-8 path");
    inboxes_common::start(&["--data-dir", dir])
}

fn stop(mut server: Server) {
    server.sigterm();
    let status = server.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success(), "{status}");
}

/// Every file of the data directory, as one byte string.
fn everything_on_disk(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the data directory") {
        let path = entry.expect("an entry").path();
        if path.is_file() {
            all.extend(std::fs::read(&path).unwrap_or_default());
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn inboxes_and_their_mail_survive_a_restart_without_their_secrets_on_disk() {
    let dir = data_dir("restart");
    let server = start(&dir);
    let a = inbox(&server, "a", &["*@a.test"]);
    let b = create(
        &server,
        json!({ "name": "b", "addresses": ["*@b.test"], "maxMessages": 2 }),
    );
    let gone = inbox(&server, "gone", &["*@gone.test"]);
    let only_a = send(&server, &["x@a.test"], "only a");
    let both = send(&server, &["x@a.test", "y@b.test"], "both");
    let unrouted = send(&server, &["z@nowhere.test"], "unrouted");
    // b's token rotated and "gone" deleted before the restart.
    let rotated = call(&server, "POST", "/api/inboxes/b/token", Some(ADMIN), None);
    assert_eq!(rotated.status, 200);
    let b_token = rotated.json()["inbox"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let deleted = call(&server, "DELETE", "/api/inboxes/gone", Some(ADMIN), None);
    assert_eq!(deleted.status, 200);
    stop(server);
    let disk = everything_on_disk(&dir);
    for secret in [
        &a.token,
        &a.password,
        &b.token,
        &b_token,
        &gone.token,
        ADMIN,
    ] {
        assert!(!contains(&disk, secret), "a secret is on disk");
    }

    let server = start(&dir);
    assert_eq!(
        ids(&server, &a.token, ""),
        vec![only_a.clone(), both.clone()]
    );
    assert_eq!(ids(&server, &b_token, ""), vec![both.clone()]);
    assert_eq!(
        call(&server, "GET", "/api/emails", Some(&b.token), None).status,
        401
    );
    assert_eq!(
        call(&server, "GET", "/api/emails", Some(&gone.token), None).status,
        401
    );
    assert_eq!(ids(&server, ADMIN, "").len(), 3);
    assert!(ids(&server, ADMIN, "").contains(&unrouted));
    let listed = inboxes_common::get_ok(&server, "/api/inboxes", ADMIN);
    let names: Vec<&str> = listed["inboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(listed["inboxes"][1]["limits"]["maxMessages"], 2);
    // Routing and quotas work as before the restart.
    let later = send(&server, &["w@b.test"], "later");
    let last = send(&server, &["v@b.test"], "last");
    assert_eq!(ids(&server, &b_token, ""), vec![later, last]);
    // The SMTP password too: a wrong one is still refused.
    let mut smtp = server.smtp();
    smtp.expect("EHLO persist.test", 250);
    smtp.expect(
        &format!("AUTH PLAIN {}", b64(&format!("\0a\0{}", a.password))),
        235,
    );
    smtp.expect("QUIT", 221);
    let mut smtp = server.smtp();
    smtp.expect("EHLO persist.test", 250);
    smtp.expect(&format!("AUTH PLAIN {}", b64("\0a\0wrong-password")), 535);
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Base64 (standard alphabet, padded), for AUTH PLAIN.
fn b64(text: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
