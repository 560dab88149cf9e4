//! IMAP (`--imap-port`, STARTTLS, `--imaps-port`) against the real binary
//! with Python's `imaplib`, `curl imap://` and `mbsync`: the mailbox is the
//! store, BODY[] gives the stored bytes exactly, ENVELOPE and BODYSTRUCTURE
//! have the shapes of RFC 3501, SEARCH looks at decoded headers, STORE and
//! EXPUNGE delete from the store, IDLE hears an SMTP delivery at once, and
//! with `--admin-token` an inbox's SMTP credentials open only its mail.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::readers::{
    IMAP_IDLE, MIME_CORPUS, ids, listener, mime_corpus, python_json, stdout_ok, team_inbox,
    tls_server,
};
use common::{Server, http_exchange, message, run_ok};
use serde_json::Value;

/// Runs an imaplib script with `ADDR` (host:port) and `ARGS` in `sys.argv[1:]`; its stdout as JSON.
fn imaplib(script: &str, args: &[&str]) -> Value {
    python_json(
        "base64, imaplib, json, re, smtplib, ssl, sys, time",
        script,
        args,
    )
}

/// The stored bytes of message `id`, from the raw download.
fn raw_download(server: &Server, id: &str) -> Vec<u8> {
    stdout_ok(
        Command::new("curl")
            .args(["-sS", "--fail", "--max-time", "10"])
            .arg(format!("http://{}/api/emails/{id}/raw", server.http)),
    )
}

const READ_ALL: &str = r#"
m = imaplib.IMAP4(host, port, timeout=10)
m.login(sys.argv[2], sys.argv[3])
typ, data = m.select("INBOX")
count = int(data[0])
typ, fetched = m.uid("FETCH", "1:*", "(UID RFC822.SIZE FLAGS BODY.PEEK[] ENVELOPE BODYSTRUCTURE)")
messages = []
for part in fetched:
    if isinstance(part, tuple):
        messages.append({"meta": part[0].decode(), "body": base64.b64encode(part[1]).decode()})
    elif messages:
        messages[-1]["meta"] += part.decode()
m.literal = "caf\u00e9".encode()
typ, subject = m.search("UTF-8", "SUBJECT")
typ, from_ = m.uid("SEARCH", "FROM", "CARL")
typ, unseen = m.search(None, "UNSEEN")
m.store("1", "+FLAGS", "(\\Seen)")
typ, seen = m.search(None, "SEEN")
typ, part = m.fetch("2", "(BODY.PEEK[1] BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
m.store("1", "+FLAGS", "(\\Deleted)")
typ, expunged = m.expunge()
typ, after = m.search(None, "ALL")
m.store("1", "+FLAGS", "(\\Seen)")
m.logout()
print(json.dumps({"count": count, "messages": messages, "subject": subject[0].decode(),
    "from": from_[0].decode(), "unseen": unseen[0].decode(), "seen": seen[0].decode(),
    "part": b"".join(p if isinstance(p, bytes) else p[0] + p[1] for p in part).decode(),
    "expunged": [e.decode() for e in expunged if e], "after": after[0].decode()}))
"#;

#[test]
fn imaplib_reads_the_store_exactly_searches_and_expunges() {
    let server = Server::start_with(&["--imap-port", "0"]);
    let multipart = b"From: carl@example.org\r\nTo: Dee <dee@example.org>\r\nSubject: two\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhello\r\n--b\r\nContent-Type: application/octet-stream; name=\"a.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\nAAEC\r\n--b--\r\n".to_vec();
    let raws = [
        message(
            "ann@x.test",
            "u@x.test",
            "=?utf-8?q?caf=C3=A9?= first",
            "one line",
        ),
        multipart,
        message("a@x.test", "u@x.test", "third", ".a dot\r\n\r\n."),
    ];
    for raw in &raws {
        assert_eq!(server.send("a@x.test", &["u@x.test"], raw).code, 250);
    }
    let ids = ids(&server);
    let downloads: Vec<Vec<u8>> = ids.iter().map(|id| raw_download(&server, id)).collect();
    let read = imaplib(
        READ_ALL,
        &[&listener(&server, "imap"), "anyone", "anything"],
    );
    assert_eq!(read["count"], 3, "{read}");
    for (i, download) in downloads.iter().enumerate() {
        let message = &read["messages"][i];
        let body = base64_decode(message["body"].as_str().unwrap());
        assert_eq!(&body, download, "message {i}: BODY[] is the raw download");
        let meta = message["meta"].as_str().unwrap();
        assert!(meta.contains(&format!("UID {}", i + 1)), "{meta}");
        assert!(
            meta.contains(&format!("RFC822.SIZE {}", raws[i].len())),
            "{meta}"
        );
    }
    let first = read["messages"][0]["meta"].as_str().unwrap();
    assert!(
        first.contains("ENVELOPE (")
            && first.contains("\"=?utf-8?q?caf=C3=A9?= first\" ((NIL NIL \"ann\" \"x.test\"))"),
        "{first}"
    );
    assert!(
        first.contains("BODYSTRUCTURE (\"TEXT\" \"plain\" (\"charset\" \"us-ascii\")"),
        "{first}"
    );
    let second = read["messages"][1]["meta"].as_str().unwrap();
    assert!(
        second.contains("\"mixed\" (\"boundary\" \"b\")"),
        "{second}"
    );
    assert!(
        second.contains(
            "(\"application\" \"octet-stream\" (\"name\" \"a.bin\") NIL NIL \"base64\" 4"
        ),
        "{second}"
    );
    assert_eq!(read["subject"], "1");
    assert_eq!(read["from"], "2");
    assert_eq!(read["unseen"], "1 2 3");
    assert_eq!(read["seen"], "1");
    let part = read["part"].as_str().unwrap();
    assert!(part.contains("BODY[1] \"hello\""), "{part}");
    assert!(
        part.contains("BODY[HEADER.FIELDS (SUBJECT)] {16}Subject: two\r\n\r\n"),
        "{part}"
    );
    assert_eq!(read["expunged"], serde_json::json!(["1"]));
    assert_eq!(read["after"], "1 2");
    // EXPUNGE deleted the message from the store.
    let left = self::ids(&server);
    assert_eq!(left, ids[1..].to_vec());
    // STORE \Seen set the flag every reader shares.
    let seen: Vec<bool> = server
        .emails("")
        .iter()
        .map(|e| e["seen"] == true)
        .collect();
    assert_eq!(seen, [true, false]);
}

fn base64_decode(text: &str) -> Vec<u8> {
    let out = run_ok(
        Command::new("python3")
            .arg("-c")
            .arg("import base64, sys; sys.stdout.write(base64.b16encode(base64.b64decode(sys.argv[1])).decode())")
            .arg(text),
    );
    (0..out.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&out[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn idle_is_woken_by_an_smtp_delivery() {
    let server = Server::start_with(&["--imap-port", "0"]);
    server.send(
        "a@x.test",
        &["u@x.test"],
        &message("a@x.test", "u@x.test", "before", "x"),
    );
    let script = [
        IMAP_IDLE,
        r#"sh, sp = sys.argv[2].rsplit(":", 1)
with smtplib.SMTP(sh, int(sp), timeout=10) as s:
    s.sendmail("a@x.test", ["u@x.test"], b"Subject: during\r\n\r\nwoken\r\n")
    sent = time.monotonic()
woken = m.readline().decode()
latency_ms = (time.monotonic() - sent) * 1000
m.send(b"DONE\r\n")
done = m.readline().decode()
typ, data = m.fetch("2", "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
m.logout()
print(json.dumps({"started": started, "woken": woken, "done": done, "latency_ms": latency_ms,
    "subject": data[0][1].decode()}))
"#,
    ]
    .concat();
    let smtp = server.smtp.to_string();
    let out = imaplib(&script, &[&listener(&server, "imap"), &smtp]);
    assert_eq!(out["started"], "+ idling\r\n", "{out}");
    assert_eq!(out["woken"], "* 2 EXISTS\r\n", "{out}");
    assert!(
        out["done"]
            .as_str()
            .unwrap()
            .ends_with("OK IDLE terminated\r\n"),
        "{out}"
    );
    assert_eq!(out["subject"], "Subject: during\r\n\r\n");
    let latency = out["latency_ms"].as_f64().unwrap();
    println!("IDLE woken {latency:.1} ms after the SMTP 250");
    assert!(latency < 1000.0, "{latency}");
}

#[test]
fn starttls_and_implicit_tls() {
    let server = tls_server("--imap-port", "--imaps-port");
    let script = r#"
context = ssl._create_unverified_context()
plain = imaplib.IMAP4(host, port, timeout=10)
offered = "STARTTLS" in plain.capabilities
plain.starttls(ssl_context=context)
after = "STARTTLS" in plain.capabilities
plain.login("u", "p")
count = int(plain.select("INBOX")[1][0])
plain.logout()
sh, sp = sys.argv[2].rsplit(":", 1)
implicit = imaplib.IMAP4_SSL(sh, int(sp), ssl_context=context, timeout=10)
implicit.login("u", "p")
implicit.select("INBOX")
body = implicit.fetch("1", "(BODY.PEEK[TEXT])")[1][0][1].decode()
implicit.logout()
print(json.dumps({"offered": offered, "after": after, "count": count, "body": body}))
"#;
    let out = imaplib(
        script,
        &[&listener(&server, "imap"), &listener(&server, "imaps")],
    );
    assert_eq!(out["offered"], true, "{out}");
    assert_eq!(out["after"], false, "{out}");
    assert_eq!(out["count"], 1);
    assert!(out["body"].as_str().unwrap().contains("secret words"));
}

const COUNT: &str = r#"
m = imaplib.IMAP4(host, port, timeout=10)
try:
    m.login(sys.argv[2], sys.argv[3])
except imaplib.IMAP4.error as e:
    print(json.dumps({"refused": str(e)}))
    sys.exit(0)
count = int(m.select("INBOX")[1][0])
subjects = []
if count:
    for part in m.fetch("1:*", "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])")[1]:
        if isinstance(part, tuple):
            subjects.append(part[1].decode().strip())
m.logout()
print(json.dumps({"count": count, "subjects": subjects}))
"#;

#[test]
fn with_inboxes_a_login_opens_only_its_inbox() {
    let token = "imap-admin-token-0123456789";
    let (server, user, password) = team_inbox("--imap-port", token);
    let addr = listener(&server, "imap");
    let inbox = imaplib(COUNT, &[&addr, &user, &password]);
    assert_eq!(inbox["count"], 1, "{inbox}");
    assert_eq!(inbox["subjects"][0], "Subject: for a");
    assert_eq!(imaplib(COUNT, &[&addr, "admin", token])["count"], 2);
    let refused = imaplib(COUNT, &[&addr, &user, "wrong"]);
    assert!(
        refused["refused"]
            .as_str()
            .unwrap()
            .contains("invalid user name or password"),
        "{refused}"
    );
}

#[test]
fn curl_fetches_a_message_by_uid() {
    let server = Server::start_with(&["--imap-port", "0"]);
    let raw = message(
        "a@x.test",
        "u@x.test",
        "for curl",
        "fetched by curl\r\n.dot",
    );
    server.send("a@x.test", &["u@x.test"], &raw);
    let id = ids(&server).remove(0);
    let addr = listener(&server, "imap");
    let fetched = stdout_ok(
        Command::new("curl")
            .args(["-sS", "--max-time", "10", "-u", "u:p"])
            .arg(format!("imap://{addr}/INBOX;UID=1")),
    );
    assert_eq!(fetched, raw_download(&server, &id));
    let listed = run_ok(
        Command::new("curl")
            .args(["-sS", "--max-time", "10", "-u", "u:p"])
            .arg(format!("imap://{addr}/")),
    );
    assert!(listed.contains("INBOX"), "{listed}");
}

#[test]
fn a_literal_past_the_limit_is_refused_and_the_connection_goes_on() {
    use std::io::{BufRead, BufReader, Write};
    let server = Server::start_with(&["--imap-port", "0", "--imap-max-command-bytes", "4KiB"]);
    let addr = listener(&server, "imap");
    let stream = std::net::TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("* OK"), "{line}");
    writer.write_all(b"a LOGIN u {1000000000}\r\n").unwrap();
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("a BAD [TOOBIG]"), "{line}");
    writer.write_all(b"b NOOP\r\n").unwrap();
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "b OK done\r\n");
}

#[test]
fn mbsync_copies_the_whole_mailbox_byte_for_byte() {
    let server = Server::start_with(&["--imap-port", "0"]);
    for i in 0..3 {
        let raw = message(
            "a@x.test",
            "u@x.test",
            &format!("plain {i}"),
            "a body\r\n.dot",
        );
        server.send("a@x.test", &["u@x.test"], &raw);
    }
    let corpus = mime_corpus();
    if corpus.is_empty() {
        println!("{MIME_CORPUS} is missing: only the plain messages are synced");
    }
    for path in &corpus {
        let raw = std::fs::read(path).unwrap();
        let request = format!(
            "POST /api/send?from=s%40x.test&to=u%40x.test HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: message/rfc822\r\nContent-Length: {}\r\n\r\n",
            server.http,
            raw.len()
        );
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(&raw);
        let response = http_exchange(server.http, &bytes);
        assert_eq!(
            response.status,
            200,
            "{}: {}",
            path.display(),
            response.body
        );
    }
    let ids = ids(&server);
    assert_eq!(ids.len(), 3 + corpus.len());
    let dir = std::env::temp_dir().join(format!("mailjar-mbsync-{}", common::nonce()));
    let maildir = dir.join("mail");
    std::fs::create_dir_all(&maildir).unwrap();
    let (host, port) = listener(&server, "imap")
        .rsplit_once(':')
        .map(|(h, p)| (h.to_owned(), p.to_owned()))
        .unwrap();
    let config = format!(
        "IMAPAccount mailjar\nHost {host}\nPort {port}\nUser u\nPass p\nSSLType None\nAuthMechs LOGIN\n\nIMAPStore remote\nAccount mailjar\n\nMaildirStore local\nPath {}/\nInbox {}/INBOX\n\nChannel copy\nFar :remote:\nNear :local:\nPatterns INBOX\nCreate Near\nSync Pull\nSyncState *\n",
        maildir.display(),
        maildir.display()
    );
    let rc = dir.join("mbsyncrc");
    std::fs::write(&rc, config).unwrap();
    let out = Command::new("mbsync")
        .arg("-c")
        .arg(&rc)
        .arg("-a")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mbsync: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(maildir.join("INBOX/new"))
        .unwrap()
        .chain(std::fs::read_dir(maildir.join("INBOX/cur")).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    // mbsync names each file after the UID it had (",U=n"), and skips (with
    // a warning) a message whose header it finds incomplete, as a few of the
    // corpus's malformed samples are: every other message is there.
    files.sort_by_key(|p| uid_of(p));
    let raws: Vec<Vec<u8>> = ids.iter().map(|id| raw_download(&server, id)).collect();
    let warnings = String::from_utf8_lossy(&out.stderr).into_owned();
    let skipped: Vec<usize> = warnings
        .lines()
        .filter_map(|l| {
            l.strip_prefix("Warning: message ")?
                .strip_suffix(" from far side has incomplete header; skipping.")
        })
        .map(|uid| uid.parse::<usize>().unwrap() - 1)
        .collect();
    assert!(
        skipped.iter().all(|&i| i >= 3) && skipped.len() <= 5,
        "{warnings}"
    );
    // Its own UIDs number the files in the order it fetched them: the
    // mailbox's order, less what it skipped.
    let expected: Vec<usize> = (0..raws.len()).filter(|i| !skipped.contains(i)).collect();
    assert_eq!(files.len(), expected.len(), "{warnings}");
    for (path, &i) in files.iter().zip(&expected) {
        let synced = without_tuid(&std::fs::read(path).unwrap());
        // IMAP4rev1 cannot carry a NUL in a literal: it goes out as 0x80.
        let sent: Vec<u8> = raws[i]
            .iter()
            .map(|&b| if b == 0 { 0x80 } else { b })
            .collect();
        // mbsync stores Maildir files with LF line ends.
        let expected = String::from_utf8_lossy(&sent).replace("\r\n", "\n");
        assert!(
            synced == expected.as_bytes() || synced == crlf_to_lf(&sent),
            "{} differs from message {}",
            path.display(),
            ids[i]
        );
    }
    println!(
        "mbsync copied {} messages ({} from the corpus), equal to the raw downloads but for its LF line ends and X-TUID line",
        files.len(),
        corpus.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Maildir file without the `X-TUID:` line mbsync adds to the header
/// (to find the message again if a run is interrupted).
fn without_tuid(file: &[u8]) -> Vec<u8> {
    let Some(at) = file.windows(8).position(|w| w == b"X-TUID: ") else {
        return file.to_vec();
    };
    let end = file[at..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(file.len(), |i| at + i + 1);
    [&file[..at], &file[end..]].concat()
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

fn uid_of(path: &Path) -> u32 {
    let name = path.file_name().unwrap().to_string_lossy();
    let at = name.find(",U=").expect("a UID in the name") + 3;
    name[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}
