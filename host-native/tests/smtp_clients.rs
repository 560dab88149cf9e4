//! Real SMTP clients against the real binary: Python's smtplib, curl and swaks.
//!
//! Each test records what the client actually wrote (smtplib's byte stream,
//! swaks' transcript, curl's input file) and compares the stored message with
//! it byte for byte through `GET /api/emails/latest`.

mod common;

use std::process::Command;

use common::{
    Server, Smtp, assert_stored, enc, message, nonce, parse_client_stream, run_ok, run_smtplib,
};

/// The one transaction in a client's byte stream.
fn only_transaction(wire: &[u8]) -> common::Sent {
    let mut sent = parse_client_stream(wire);
    assert_eq!(
        sent.len(),
        1,
        "one transaction in {:?}",
        String::from_utf8_lossy(wire)
    );
    sent.remove(0)
}

const SENDMAIL_STDIN: &str = r#"
raw = sys.stdin.buffer.read()
client = Recorder(HOST, PORT)
client.sendmail(sys.argv[1], sys.argv[2].split(","), raw)
client.quit()
done(client)
"#;

#[test]
fn smtplib_plain_message() {
    let server = Server::start();
    let n = nonce();
    let raw = message(
        "app@example.test",
        "user@example.test",
        &format!("Plain message {n}"),
        &format!("Hello {n}.\n.A line that starts with a dot\n..two dots\n.\nlast line"),
    );
    let (_, wire) = run_smtplib(
        &server,
        SENDMAIL_STDIN,
        &["app@example.test", "user@example.test,other@example.test"],
        &raw,
    );
    let sent = only_transaction(&wire);
    // smtplib wrote the bytes it was given: the comparison below is against the wire.
    assert_eq!(sent.data, raw, "smtplib altered the message");
    let email = server.assert_latest(
        &sent.from,
        &["user@example.test", "other@example.test"],
        &sent.data,
    );
    assert_eq!(email["subject"], format!("Plain message {n}"));
    assert!(
        email["text"]
            .as_str()
            .unwrap()
            .contains(".A line that starts with a dot")
    );
}

#[test]
fn smtplib_utf8_headers_and_body() {
    let server = Server::start();
    let n = nonce();
    let subject = format!("Grüße aus Köln — テスト ✓ {n}");
    let body = format!("Ünïcødé body: naïve café, 日本語, emoji 🎉 {n}\nsecond line\n");
    let script = r#"
from email.message import EmailMessage
m = EmailMessage()
m["From"] = "Zoë Exämple <zoe@example.test>"
m["To"] = sys.argv[2]
m["Subject"] = sys.argv[3]
m.set_content(sys.argv[4])
client = Recorder(HOST, PORT)
client.send_message(m, from_addr=sys.argv[1], to_addrs=[sys.argv[2]])
client.quit()
done(client)
"#;
    let (_, wire) = run_smtplib(
        &server,
        script,
        &["zoe@example.test", "user@example.test", &subject, &body],
        b"",
    );
    let sent = only_transaction(&wire);
    let raw_text = String::from_utf8(sent.data.clone()).unwrap();
    assert!(
        raw_text.contains("Subject: =?utf-8?"),
        "smtplib sent an RFC 2047 subject: {raw_text}"
    );
    let email = server.assert_latest("zoe@example.test", &["user@example.test"], &sent.data);
    assert_eq!(email["subject"], subject.as_str(), "decoded subject");
    assert_eq!(email["text"].as_str().unwrap().trim_end(), body.trim_end());
    assert!(
        email["from"].as_str().unwrap().contains("zoe@example.test"),
        "{}",
        email["from"]
    );
}

#[test]
fn smtplib_attachment_metadata() {
    let server = Server::start();
    let n = nonce();
    let filename = format!("report-{n}.pdf");
    // Bytes that differ per run, so the size is not something the server could guess.
    let content: Vec<u8> = (0..(3000 + n % 1000))
        .map(|i| (i.wrapping_mul(31) ^ n) as u8)
        .collect();
    let script = r#"
from email.message import EmailMessage
m = EmailMessage()
m["From"] = "app@example.test"
m["To"] = "user@example.test"
m["Subject"] = "Your report"
m.set_content("The report is attached.\n")
m.add_attachment(sys.stdin.buffer.read(), maintype="application", subtype="pdf", filename=sys.argv[1])
client = Recorder(HOST, PORT)
client.send_message(m)
client.quit()
done(client)
"#;
    let (_, wire) = run_smtplib(&server, script, &[&filename], &content);
    let sent = only_transaction(&wire);
    let email = server.assert_latest("app@example.test", &["user@example.test"], &sent.data);
    let attachments = email["attachments"].as_array().expect("attachments");
    assert_eq!(attachments.len(), 1, "{attachments:?}");
    assert_eq!(attachments[0]["filename"], filename.as_str());
    assert_eq!(attachments[0]["contentType"], "application/pdf");
    assert_eq!(attachments[0]["size"].as_u64(), Some(content.len() as u64));
    assert_eq!(
        email["text"].as_str().unwrap().trim_end(),
        "The report is attached."
    );
}

#[test]
fn smtplib_smtputf8_addresses() {
    let server = Server::start();
    let from = "sénder@exämple.test";
    let to = "usér.δοκιμή@exämple.test";
    let raw = format!(
        "From: {from}\r\nTo: {to}\r\nSubject: SMTPUTF8 {}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nInternationalised mailbox.\r\n",
        nonce()
    );
    let script = r#"
raw = sys.stdin.buffer.read()
client = Recorder(HOST, PORT)
client.ehlo()
assert client.has_extn("smtputf8"), "SMTPUTF8 not advertised"
client.sendmail(sys.argv[1], [sys.argv[2]], raw, mail_options=["SMTPUTF8"])
client.quit()
done(client)
"#;
    let (_, wire) = run_smtplib(&server, script, &[from, to], raw.as_bytes());
    let sent = only_transaction(&wire);
    assert!(
        sent.commands
            .iter()
            .any(|c| c.to_ascii_lowercase().starts_with("mail from:<sénder@")
                && c.contains("SMTPUTF8")),
        "{:?}",
        sent.commands
    );
    assert_eq!(
        (sent.from.as_str(), sent.to.as_slice()),
        (from, &[to.to_owned()][..])
    );
    server.assert_latest(from, &[to], raw.as_bytes());
    // The `to` filter finds it by its non-ASCII address, case-insensitively.
    for query in [to.to_owned(), to.to_uppercase()] {
        let found = server.emails(&format!("to={}", enc(&query)));
        assert_eq!(found.len(), 1, "to={query}");
    }
}

fn smtplib_auth(mechanism: &str) {
    let server = Server::start();
    let password = format!("any-password-{}", nonce());
    let raw = message(
        "app@example.test",
        "user@example.test",
        &format!("AUTH {mechanism}"),
        "authenticated",
    );
    let script = r#"
raw = sys.stdin.buffer.read()
client = Recorder(HOST, PORT)
client.ehlo()
client.esmtp_features["auth"] = sys.argv[1]  # use only this mechanism
code, _ = client.login(sys.argv[2], sys.argv[3])
print(code)
client.sendmail("app@example.test", ["user@example.test"], raw)
client.quit()
done(client)
"#;
    let (stdout, wire) = run_smtplib(&server, script, &[mechanism, "someone", &password], &raw);
    assert_eq!(stdout.trim(), "235", "login result");
    let sent = only_transaction(&wire);
    let auth = format!("AUTH {mechanism} ");
    assert!(
        sent.commands.iter().any(|c| c.starts_with(&auth)),
        "{:?}",
        sent.commands
    );
    server.assert_latest("app@example.test", &["user@example.test"], &sent.data);
}

#[test]
fn smtplib_auth_login_any_password() {
    smtplib_auth("LOGIN");
}

#[test]
fn smtplib_auth_plain_any_password() {
    smtplib_auth("PLAIN");
}

#[test]
fn smtplib_ten_mebibyte_message() {
    let server = Server::start();
    let mut raw = message("big@example.test", "user@example.test", "Ten MiB", "").to_vec();
    let target = 10 * 1024 * 1024;
    let mut i = 0u64;
    while raw.len() < target {
        // Every 7th line starts with a dot, so dot-stuffing is exercised all through.
        let line = if i.is_multiple_of(7) {
            format!(".{i:08} {}\r\n", "x".repeat(60))
        } else {
            format!("{i:08} {}\r\n", "abcdefghij".repeat(6))
        };
        raw.extend_from_slice(line.as_bytes());
        i += 1;
    }
    let (_, wire) = run_smtplib(
        &server,
        SENDMAIL_STDIN,
        &["big@example.test", "user@example.test"],
        &raw,
    );
    let sent = only_transaction(&wire);
    assert_eq!(sent.data.len(), raw.len());
    let size = format!("size={}", raw.len());
    assert!(
        sent.commands
            .iter()
            .any(|c| c.to_ascii_lowercase().starts_with("mail from:") && c.contains(&size)),
        "{:?}",
        sent.commands
    );
    let email = server.assert_latest("big@example.test", &["user@example.test"], &sent.data);
    assert!(email["size"].as_u64().unwrap() >= target as u64);
}

#[test]
fn message_over_max_message_bytes_is_refused_with_552_and_not_stored() {
    let server = Server::start_with(&["--max-message-bytes", "2000"]);
    let too_big = message(
        "a@example.test",
        "b@example.test",
        "too big",
        &"y".repeat(3000),
    );
    // smtplib announces SIZE=, which is refused at MAIL FROM.
    let script = r#"
raw = sys.stdin.buffer.read()
client = Recorder(HOST, PORT)
try:
    client.sendmail("a@example.test", ["b@example.test"], raw)
    print("accepted")
except smtplib.SMTPSenderRefused as e:
    print(e.smtp_code, e.smtp_error.decode())
client.quit()
"#;
    let (stdout, _) = run_smtplib(&server, script, &[], &too_big);
    assert!(stdout.starts_with("552 5.3.4"), "smtplib got {stdout:?}");

    // Without SIZE, the text is read and refused at its end; the session goes on.
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    let reply = smtp.transaction("a@example.test", &["b@example.test"], &too_big);
    assert_eq!(reply.code, 552, "{}", reply.wire);
    assert!(reply.lines[0].starts_with("5.3.4"), "{}", reply.wire);
    // Exactly at the limit is accepted.
    let mut exact = message("a@example.test", "b@example.test", "exactly the limit", "");
    let fill = 2000 - exact.len() - 2;
    exact.extend_from_slice("z".repeat(fill).as_bytes());
    exact.extend_from_slice(b"\r\n");
    assert_eq!(exact.len(), 2000);
    let reply = smtp.transaction("a@example.test", &["b@example.test"], &exact);
    assert_eq!(reply.code, 250, "{}", reply.wire);
    smtp.expect("QUIT", 221);
    assert_eq!(
        server.health()["messages"],
        1,
        "only the message within the limit is stored"
    );
    server.assert_latest("a@example.test", &["b@example.test"], &exact);
}

#[test]
fn curl_upload_with_several_recipients() {
    let server = Server::start();
    let n = nonce();
    let raw = message(
        "curl@example.test",
        "one@example.test, two@example.test",
        &format!("Sent by curl {n}"),
        &format!("Body {n}\n.leading dot\n..\nend"),
    );
    let path = std::env::temp_dir().join(format!("mailjar-e2e-curl-{n}.eml"));
    std::fs::write(&path, &raw).unwrap();
    let url = format!("smtp://{}/e2e.test", server.smtp);
    let recipients = ["one@example.test", "two@example.test", "three@example.test"];
    let mut curl = Command::new("curl");
    curl.args([
        "-sS",
        "--max-time",
        "20",
        "--url",
        &url,
        "--mail-from",
        "curl@example.test",
    ]);
    for rcpt in recipients {
        curl.args(["--mail-rcpt", rcpt]);
    }
    curl.arg("-T").arg(&path);
    run_ok(&mut curl);
    let _ = std::fs::remove_file(&path);
    let email = server.assert_latest("curl@example.test", &recipients, &raw);
    assert_eq!(email["subject"], format!("Sent by curl {n}"));
}

/// Runs swaks, which must be installed; returns its transcript.
fn swaks(server: &Server, args: &[&str]) -> String {
    run_ok(common::swaks(server).args(args))
}

fn swaks_message(extra: &[&str]) {
    let server = Server::start();
    let n = nonce();
    let subject = format!("Hello from swaks {n}");
    let body = format!("First line {n}\n.starts with a dot\nlast line");
    let mut args = vec![
        "--to",
        "one@example.test,two@example.test",
        "--from",
        "swaks@example.test",
    ];
    let subject_header = format!("Subject: {subject}");
    let test_header = format!("X-E2E: {n}");
    args.extend([
        "--header",
        &subject_header,
        "--header",
        &test_header,
        "--body",
        &body,
    ]);
    args.extend(extra);
    let transcript = swaks(&server, &args);
    let data = common::swaks_data(&transcript);
    let email = server.assert_latest(
        "swaks@example.test",
        &["one@example.test", "two@example.test"],
        &data,
    );
    assert_eq!(email["subject"], subject.as_str());
    assert_eq!(email["headers"]["x-e2e"], n.to_string());
    assert_eq!(email["text"].as_str().unwrap().trim_end(), body);
    // swaks reports the size the server acknowledged.
    assert!(
        transcript.contains(&format!(
            "250 2.0.0 Message accepted ({} bytes)",
            data.len()
        )),
        "{transcript}"
    );
}

#[test]
fn swaks_message_with_headers_and_body() {
    swaks_message(&[]);
}

#[test]
fn swaks_pipelined_message() {
    swaks_message(&["--pipeline"]);
}

#[test]
fn swaks_auth_login() {
    swaks_message(&[
        "--auth",
        "LOGIN",
        "--auth-user",
        "x",
        "--auth-password",
        "y",
    ]);
}

#[test]
fn auth_login_without_initial_response_over_a_raw_socket() {
    let server = Server::start();
    let mut smtp: Smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    let user = smtp.expect("AUTH LOGIN", 334);
    assert_eq!(user.lines, ["VXNlcm5hbWU6"], "base64 of Username:");
    let password = smtp.expect("dXNlcg==", 334);
    assert_eq!(password.lines, ["UGFzc3dvcmQ6"], "base64 of Password:");
    smtp.expect("d2hhdGV2ZXI=", 235);
    let raw = message("a@example.test", "b@example.test", "after auth", "ok");
    assert_eq!(
        smtp.transaction("a@example.test", &["b@example.test"], &raw)
            .code,
        250
    );
    smtp.expect("QUIT", 221);
    assert_stored(
        &server.latest(),
        "a@example.test",
        &["b@example.test"],
        &raw,
    );
}
