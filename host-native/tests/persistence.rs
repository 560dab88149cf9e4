//! `--data-dir` end to end: the real binary, real sockets, Python's smtplib
//! as the sender and curl for the raw downloads; restarts by SIGTERM and by
//! `kill -9`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, binary};
use serde_json::Value;

/// A fresh data directory under the target directory, removed first.
fn data_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mailjar-persist-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn start(dir: &Path, extra: &[&str]) -> Server {
    let mut flags = vec!["--data-dir", dir.to_str().expect("utf-8 temp dir")];
    flags.extend_from_slice(extra);
    Server::start_with(&flags)
}

fn kill_9(mut server: Server) {
    let status = Command::new("kill")
        .args(["-KILL", &server.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());
}

fn stop(mut server: Server) {
    server.sigterm();
    let status = server.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success(), "{status}");
}

/// Sends each message with Python's smtplib; the reply codes in order.
fn smtplib_send(server: &Server, messages: &[Vec<u8>]) -> Vec<u16> {
    let script = r#"
import smtplib, sys, json
host, port, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
codes = []
with smtplib.SMTP(host, port, timeout=60) as s:
    for path in paths:
        data = open(path, 'rb').read()
        try:
            s.sendmail('sender@app.test', ['rcpt@local.test'], data)
            codes.append(250)
        except smtplib.SMTPDataError as e:
            codes.append(e.smtp_code)
            print(e.smtp_error.decode(), file=sys.stderr)
print(json.dumps(codes))
"#;
    let dir = std::env::temp_dir().join(format!("mailjar-persist-msgs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let paths: Vec<PathBuf> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let p = dir.join(format!("{i}-{}.eml", rand_suffix()));
            std::fs::write(&p, m).unwrap();
            p
        })
        .collect();
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(server.smtp.ip().to_string())
        .arg(server.smtp.port().to_string())
        .args(&paths)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "smtplib: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("codes")
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The exact bytes of `/api/emails/:id/raw`, through curl.
fn raw(server: &Server, id: &str) -> Vec<u8> {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "30"])
        .arg(format!("http://{}/api/emails/{id}/raw", server.http))
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Every stored message as its summary, oldest first.
fn summaries(server: &Server) -> Vec<Value> {
    server.emails("view=summary")
}

fn ids(server: &Server) -> Vec<String> {
    summaries(server)
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

fn message(subject: &str, body: &[u8]) -> Vec<u8> {
    let mut m = format!("From: app@app.test\r\nTo: rcpt@local.test\r\nSubject: {subject}\r\n\r\n")
        .into_bytes();
    m.extend_from_slice(body);
    m.extend_from_slice(b"\r\n");
    m
}

/// A message with a 1 MiB attachment, base64 in lines of 76.
fn with_attachment() -> Vec<u8> {
    let payload: Vec<u8> = (0..1024 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
    let b64 = base64_lines(&payload);
    let mut m = b"From: app@app.test\r\nTo: rcpt@local.test\r\nSubject: big attachment\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n--b1\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n--b1\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"blob.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n".to_vec();
    m.extend_from_slice(&b64);
    m.extend_from_slice(b"--b1--\r\n");
    m
}

fn base64_lines(data: &[u8]) -> Vec<u8> {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut line = 0;
    for chunk in data.chunks(3) {
        let n = chunk.len();
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= n {
                out.push(A[((v >> (18 - 6 * k)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
        line += 4;
        if line == 76 {
            out.extend_from_slice(b"\r\n");
            line = 0;
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[test]
fn a_restart_keeps_every_message_byte_exact_with_the_same_ids() {
    let dir = data_dir("restart");
    let server = start(&dir, &[]);
    let sent = vec![
        message("plain", b"hello"),
        // Latin-1 bytes: not UTF-8 anywhere.
        b"From: app@app.test\r\nTo: rcpt@local.test\r\nSubject: latin-1 \xe9t\xe9\r\n\r\ncaf\xe9 cr\xe8me \xff\xfe\r\n".to_vec(),
        with_attachment(),
    ];
    assert_eq!(smtplib_send(&server, &sent), [250, 250, 250]);
    let before = summaries(&server);
    assert_eq!(before.len(), 3);
    let full_before: Vec<Value> = before
        .iter()
        .map(|e| server.get_ok(&format!("/api/emails/{}", e["id"].as_str().unwrap())))
        .collect();
    let health = server.health();
    assert_eq!(health["storage"]["kind"], "sqlite");
    assert_eq!(health["storage"]["ok"], true);
    assert_eq!(
        health["storage"]["path"].as_str().unwrap(),
        dir.join("mailjar.db").to_str().unwrap()
    );
    // The database and its log hold the 1 MiB attachment (the writer reports
    // the size once it has been idle for a moment).
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.health()["storage"]["bytes"].as_u64().unwrap() <= 1024 * 1024 {
        assert!(Instant::now() < deadline, "{}", server.health()["storage"]);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.health()["storage"]["damaged"], 0);
    stop(server);

    for round in 0..2 {
        let server = start(&dir, &[]);
        let after = summaries(&server);
        assert_eq!(
            after, before,
            "round {round}: same ids, times, envelopes, summaries"
        );
        for ((summary, raw_sent), full) in after.iter().zip(&sent).zip(&full_before) {
            let id = summary["id"].as_str().unwrap();
            assert_eq!(
                &raw(&server, id),
                raw_sent,
                "round {round}: raw bytes of {id}"
            );
            assert_eq!(&server.get_ok(&format!("/api/emails/{id}")), full);
        }
        let attachment = &full_before[2]["email"]["attachments"][0];
        assert_eq!(attachment["size"], 1024 * 1024);
        if round == 0 {
            kill_9(server);
        } else {
            stop(server);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Python smtplib senders that print each acknowledged subject.
const SENDERS: &str = include_str!("common/smtplib_senders.py");

#[test]
fn kill_9_while_smtplib_senders_run_loses_no_acknowledged_message() {
    let dir = data_dir("kill9");
    let server = start(&dir, &[]);
    let mut python = Command::new("python3")
        .arg("-c")
        .arg(SENDERS)
        .arg(server.smtp.ip().to_string())
        .arg(server.smtp.port().to_string())
        .arg("6")
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let stdout = python.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    // Let mail flow, then kill mailjar in the middle of it.
    let mut acknowledged = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acknowledged.len() < 500 && Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) {
            acknowledged.insert(line);
        }
    }
    assert!(acknowledged.len() >= 500, "the senders got going");
    kill_9(server);
    let _ = python.wait();
    let _ = reader.join();
    acknowledged.extend(rx.try_iter());

    let server = start(&dir, &[]);
    let stored: BTreeSet<String> = summaries(&server)
        .iter()
        .map(|e| e["subject"].as_str().unwrap().to_owned())
        .collect();
    let lost: Vec<_> = acknowledged.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged messages lost, e.g. {:?}",
        lost.len(),
        acknowledged.len(),
        &lost[..lost.len().min(5)]
    );
    println!(
        "acknowledged {}, stored {}, lost 0",
        acknowledged.len(),
        stored.len()
    );
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ids_after_a_restart_sort_after_the_old_ones_and_a_wait_resumes() {
    let dir = data_dir("resume");
    // --fsync (synchronous = FULL) behaves the same, only slower.
    let server = start(&dir, &["--fsync"]);
    assert_eq!(smtplib_send(&server, &[message("before", b"1")]), [250]);
    let old = ids(&server);
    kill_9(server);
    let server = start(&dir, &[]);
    // A test that was waiting with the last id it saw asks again.
    let url = format!(
        "http://{}/api/emails/wait?afterId={}&timeoutMs=30000",
        server.http, old[0]
    );
    let waiter = std::thread::spawn(move || {
        Command::new("curl")
            .args(["-sS", "--max-time", "40", &url])
            .output()
            .expect("curl runs")
    });
    // The wait is parked before the new mail arrives.
    server.poll_health("waits", 1, Duration::from_secs(20));
    assert_eq!(smtplib_send(&server, &[message("after", b"2")]), [250]);
    let answer = waiter.join().unwrap();
    let answer: Value = serde_json::from_slice(&answer.stdout).expect("the wait's JSON");
    assert_eq!(answer["email"]["subject"], "after");
    let new_id = answer["email"]["id"].as_str().unwrap().to_owned();
    assert!(new_id > old[0], "{new_id} sorts after {}", old[0]);
    assert_eq!(ids(&server), [old[0].clone(), new_id]);
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ids_sort_after_a_deleted_newest_message_across_a_restart_even_when_the_clock_is_behind_it() {
    let dir = data_dir("floor");
    let server = start(&dir, &[]);
    assert_eq!(smtplib_send(&server, &[message("stored", b"1")]), [250]);
    stop(server);
    // As if the clock had been an hour ahead when it was received: its id
    // (48 bits of milliseconds first) is moved an hour into the future, and
    // its row's checksum (CRC-32 of each field after its length) follows.
    let shifted = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, struct, sys, zlib\n\
             c = sqlite3.connect(sys.argv[1])\n\
             (seq, i), = c.execute('select seq, id from messages').fetchall()\n\
             ms = int.from_bytes(i[:6], 'big') + 3600000\n\
             new = ms.to_bytes(6, 'big') + i[6:]\n\
             row = c.execute('select received_ms, sender, recipients, helo, remote_addr, tls_version, tls_cipher, auth_mechanism, auth_username, raw, transcript from messages where seq = ?', (seq,)).fetchone()\n\
             field = lambda b: struct.pack('<Q', 2**64 - 1) if b is None else struct.pack('<Q', len(b)) + b\n\
             values = [new, struct.pack('<q', row[0])] + [v.encode() if isinstance(v, str) else v for v in row[1:10]]\n\
             values += [] if row[10] is None else [row[10]]\n\
             crc = zlib.crc32(b''.join(field(v) for v in values))\n\
             c.execute('update messages set id = ?, checksum = ? where seq = ?', (new, crc, seq))\n\
             c.commit()\n",
        )
        .arg(dir.join("mailjar.db"))
        .status()
        .expect("python3");
    assert!(shifted.success());
    let server = start(&dir, &[]);
    assert_eq!(smtplib_send(&server, &[message("ahead", b"2")]), [250]);
    let ahead = ids(&server)[1].clone();
    // Everything is deleted before the next restart: no stored id is left to sort after.
    assert_eq!(server.delete_all(), 2);
    stop(server);
    let server = start(&dir, &[]);
    assert_eq!(smtplib_send(&server, &[message("later", b"3")]), [250]);
    let later = ids(&server)[0].clone();
    assert!(later > ahead, "{later} sorts after the deleted {ahead}");
    let listed = server.get_ok(&format!("/api/emails?afterId={ahead}"));
    assert_eq!(listed["emails"][0]["subject"], "later", "{listed}");
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn deletes_and_evictions_survive_a_restart() {
    let dir = data_dir("deletes");
    let server = start(&dir, &["--max-messages", "4"]);
    let sent: Vec<_> = (0..6).map(|i| message(&format!("m{i}"), b"x")).collect();
    assert_eq!(smtplib_send(&server, &sent), [250; 6]);
    let subjects = |server: &Server| -> Vec<String> {
        summaries(server)
            .iter()
            .map(|e| e["subject"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(subjects(&server), ["m2", "m3", "m4", "m5"]);
    let kept = ids(&server);
    let deleted = server.request("DELETE", &format!("/api/emails/{}", kept[1]));
    assert_eq!(deleted.status, 200);
    let deleted = server.request("DELETE", "/api/emails?to=nobody%40local.test");
    assert_eq!(deleted.json()["deleted"], 0);
    kill_9(server);
    // A larger limit brings back nothing that was evicted or deleted.
    let server = start(&dir, &["--max-messages", "100"]);
    assert_eq!(subjects(&server), ["m2", "m4", "m5"]);
    assert_eq!(server.health()["evicted"], 0);
    stop(server);
    // A lower limit evicts the oldest at load, from disk too.
    let server = start(&dir, &["--max-messages", "1"]);
    assert_eq!(subjects(&server), ["m5"]);
    assert_eq!(server.health()["evicted"], 2);
    kill_9(server);
    let server = start(&dir, &["--max-messages", "100"]);
    assert_eq!(subjects(&server), ["m5"]);
    assert_eq!(server.delete_all(), 1);
    kill_9(server);
    let server = start(&dir, &[]);
    assert!(subjects(&server).is_empty());
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn max_age_expires_from_memory_and_disk() {
    let dir = data_dir("maxage");
    let server = start(&dir, &["--max-age", "1s"]);
    assert_eq!(server.health()["limits"]["maxAgeMs"], 1000);
    assert_eq!(
        smtplib_send(&server, &[message("short-lived", b"x")]),
        [250]
    );
    let id = ids(&server);
    // Removed within a second by the timer; counted as evicted.
    server.poll_health("evicted", 1, Duration::from_secs(20));
    assert_eq!(server.health()["messages"], 0);
    assert_eq!(server.get(&format!("/api/emails/{}", id[0])).status, 404);
    stop(server);
    let server = start(&dir, &[]);
    assert!(
        ids(&server).is_empty(),
        "expired mail is gone from disk too"
    );
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the binary expecting it to refuse to start: its exit code and stderr.
fn refused(dir: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(binary())
        .args(["--smtp-port", "0", "--http-port", "0", "--data-dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mailjar");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mailjar did not refuse to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_second_instance_on_the_same_directory_is_refused_at_start() {
    let dir = data_dir("second");
    let server = start(&dir, &[]);
    let (code, stderr) = refused(&dir);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(dir.to_str().unwrap()),
        "names the directory: {stderr}"
    );
    assert!(stderr.contains("another mailjar"), "{stderr}");
    // With its lock file deleted (a stale-lock cleanup), the database itself
    // is still held: the refusal says so, and does not blame the file.
    std::fs::remove_file(dir.join("mailjar.lock")).unwrap();
    let (code, stderr) = refused(&dir);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cannot read"), "{stderr}");
    assert!(stderr.contains("database is locked"), "{stderr}");
    assert!(!stderr.contains("move it away"), "{stderr}");
    // The first one is unharmed.
    assert_eq!(smtplib_send(&server, &[message("still here", b"x")]), [250]);
    stop(server);
    // Once it is gone the directory is free.
    let server = start(&dir, &[]);
    assert_eq!(ids(&server).len(), 1);
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The bytes of every file in `dir`, by name.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn assert_refused_untouched(dir: &Path, why: &str) {
    let before = files(dir);
    let (code, stderr) = refused(dir);
    assert_eq!(code, Some(1), "{stderr}");
    let db = dir.join("mailjar.db");
    assert!(
        stderr.contains(db.to_str().unwrap()),
        "names the file: {stderr}"
    );
    assert!(stderr.contains(why), "says why ({why}): {stderr}");
    let after = files(dir);
    assert_eq!(
        before.get("mailjar.db"),
        after.get("mailjar.db"),
        "the database is left byte-identical"
    );
    let mut names: Vec<_> = after.keys().filter(|n| *n != "mailjar.lock").collect();
    names.retain(|n| !before.contains_key(*n));
    assert!(names.is_empty(), "no new files beside it: {names:?}");
}

#[test]
fn a_damaged_journal_of_an_older_version_is_refused_at_start_and_left_untouched() {
    let dir = data_dir("damaged-journal");
    let server = start(&dir, &[]);
    assert_eq!(smtplib_send(&server, &[message("kept", b"x")]), [250]);
    stop(server);
    let journal = dir.join("journal-0000000000000007.log");
    let mut bytes = b"mjjrnl01".to_vec();
    bytes.extend_from_slice(&7u64.to_le_bytes());
    bytes.extend_from_slice(&[0x5a; 64]);
    std::fs::write(&journal, &bytes).unwrap();
    let before = files(&dir);
    let (code, stderr) = refused(&dir);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(journal.to_str().unwrap()),
        "names the file: {stderr}"
    );
    assert!(stderr.contains("damaged at byte 16"), "{stderr}");
    assert!(stderr.contains("move it away"), "{stderr}");
    let after = files(&dir);
    for name in ["mailjar.db", "journal-0000000000000007.log"] {
        assert_eq!(
            before.get(name),
            after.get(name),
            "{name} is left as it was"
        );
    }
    // Moved away, mailjar starts with the mail it had.
    std::fs::remove_file(&journal).unwrap();
    let server = start(&dir, &[]);
    assert_eq!(ids(&server).len(), 1);
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_or_newer_database_is_refused_and_left_untouched() {
    // A file where the directory should be.
    let file = data_dir("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let (code, stderr) = refused(&file);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is not a directory"), "{stderr}");
    assert_eq!(std::fs::read(&file).unwrap(), b"not a directory");
    let _ = std::fs::remove_file(&file);

    // Not a database at all.
    let dir = data_dir("garbage");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("mailjar.db"),
        b"this is not sqlite, just some bytes\n".repeat(100),
    )
    .unwrap();
    assert_refused_untouched(&dir, "not an SQLite database");
    let _ = std::fs::remove_dir_all(&dir);

    // Written by a newer mailjar: a real database, with a higher schema version.
    let dir = data_dir("newer");
    let server = start(&dir, &[]);
    assert_eq!(smtplib_send(&server, &[message("m", b"x")]), [250]);
    stop(server);
    let status = Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA user_version = 99'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()")
        .arg(dir.join("mailjar.db"))
        .status()
        .expect("python3 runs");
    assert!(status.success());
    assert_refused_untouched(&dir, "newer");
    let _ = std::fs::remove_dir_all(&dir);

    // Damaged: a b-tree page overwritten.
    let dir = data_dir("damaged");
    let server = start(&dir, &[]);
    let sent: Vec<_> = (0..40)
        .map(|i| message(&format!("m{i}"), &[b'y'; 3000]))
        .collect();
    assert_eq!(smtplib_send(&server, &sent), [250; 40]);
    stop(server);
    let status = Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()")
        .arg(dir.join("mailjar.db"))
        .status()
        .expect("python3 runs");
    assert!(status.success());
    let db = dir.join("mailjar.db");
    let mut bytes = std::fs::read(&db).unwrap();
    assert!(bytes.len() > 3 * 16384, "several pages: {}", bytes.len());
    // Page 3 (the second b-tree page) becomes noise.
    for b in &mut bytes[2 * 16384..2 * 16384 + 4000] {
        *b = 0xa5;
    }
    std::fs::write(&db, &bytes).unwrap();
    assert_refused_untouched(&dir, "integrity");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A data directory and the file whose existence makes writes fail
/// (`MAILJAR_DEBUG_FAIL_WRITES_WHILE`); None, with a notice, against a
/// release binary, which has no such hook.
fn with_write_faults(name: &str) -> Option<(PathBuf, PathBuf)> {
    if std::env::var_os("MAILJAR_E2E_BIN").is_some() {
        println!(
            "NOTICE: the write-fault hook exists only in debug builds; skipped for MAILJAR_E2E_BIN"
        );
        return None;
    }
    let dir = data_dir(name);
    let flag = dir.with_extension("fail");
    let _ = std::fs::remove_file(&flag);
    Some((dir, flag))
}

/// mailjar on `dir`, its writes failing while `flag` exists.
fn start_failing_while(dir: &Path, flag: &Path, extra: &[&str]) -> Server {
    let mut flags = vec!["--data-dir", dir.to_str().expect("utf-8 temp dir")];
    flags.extend_from_slice(extra);
    Server::start_with_env(
        &flags,
        &[("MAILJAR_DEBUG_FAIL_WRITES_WHILE", flag.as_os_str())],
    )
}

/// Waits until `/health` says the storage writes again (a retried write went through).
fn until_storage_ok(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.health()["storage"]["ok"] != true {
        assert!(Instant::now() < deadline, "the write was not retried");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_failed_write_answers_452_and_mailjar_recovers_by_itself() {
    let Some((dir, flag)) = with_write_faults("fault") else {
        return;
    };
    let server = start_failing_while(&dir, &flag, &["--log", "info"]);
    assert_eq!(smtplib_send(&server, &[message("first", b"1")]), [250]);
    std::fs::write(&flag, b"").unwrap();
    // Every message of a failing transaction: 452 4.3.1, never 250.
    let mut smtp = server.smtp();
    smtp.expect("EHLO e2e.test", 250);
    let reply = smtp.transaction("a@app.test", &["b@local.test"], &message("lost", b"2"));
    assert_eq!(reply.code, 452, "{}", reply.wire);
    assert!(reply.wire.contains("4.3.1"), "{}", reply.wire);
    // The session stays usable, and the API serves what is stored.
    let reply = smtp.transaction("a@app.test", &["b@local.test"], &message("lost too", b"3"));
    assert_eq!(reply.code, 452, "{}", reply.wire);
    let health = server.health();
    assert_eq!(health["storage"]["ok"], false);
    assert!(
        health["storage"]["error"]
            .as_str()
            .unwrap()
            .contains("readonly"),
        "{health}"
    );
    let stored: Vec<_> = summaries(&server)
        .iter()
        .map(|e| e["subject"].clone())
        .collect();
    assert_eq!(stored, ["first"]);
    // Writes work again: mailjar recovers without a restart.
    std::fs::remove_file(&flag).unwrap();
    let reply = smtp.transaction("a@app.test", &["b@local.test"], &message("second", b"4"));
    assert_eq!(reply.code, 250, "{}", reply.wire);
    smtp.expect("QUIT", 221);
    let health = server.health();
    assert_eq!(health["storage"]["ok"], true);
    assert!(health["storage"].get("error").is_none());
    kill_9(server);
    let server = start(&dir, &[]);
    let stored: Vec<_> = summaries(&server)
        .iter()
        .map(|e| e["subject"].clone())
        .collect();
    assert_eq!(stored, ["first", "second"]);
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_delete_that_cannot_be_written_is_a_503_and_is_written_once_the_disk_works() {
    let Some((dir, flag)) = with_write_faults("fault-delete") else {
        return;
    };
    let server = start_failing_while(&dir, &flag, &[]);
    let sent: Vec<_> = (0..3).map(|i| message(&format!("d{i}"), b"x")).collect();
    assert_eq!(smtplib_send(&server, &sent), [250; 3]);
    let kept = ids(&server);
    std::fs::write(&flag, b"").unwrap();
    // The disk refuses the delete: the client hears it, not a 200.
    let deleted = server.request("DELETE", &format!("/api/emails/{}", kept[0]));
    assert_eq!(deleted.status, 503, "{}", deleted.body);
    let error = deleted.error();
    assert!(error.contains("readonly"), "{error}");
    assert!(error.contains("retr"), "{error}");
    assert_eq!(server.health()["storage"]["ok"], false);
    // A delete that removes nothing writes nothing: still a 200.
    let none = server.request("DELETE", "/api/emails?to=nobody%40local.test");
    assert_eq!(none.status, 200, "{}", none.body);
    assert_eq!(none.json()["deleted"], 0);
    // Writes work again: the delete is written without another request.
    std::fs::remove_file(&flag).unwrap();
    until_storage_ok(&server);
    kill_9(server);
    let server = start_failing_while(&dir, &flag, &[]);
    assert_eq!(ids(&server), kept[1..]);
    // Clearing the mailbox, the same.
    std::fs::write(&flag, b"").unwrap();
    let cleared = server.request("DELETE", "/api/emails");
    assert_eq!(cleared.status, 503, "{}", cleared.body);
    assert!(cleared.error().contains("readonly"), "{}", cleared.body);
    std::fs::remove_file(&flag).unwrap();
    until_storage_ok(&server);
    kill_9(server);
    let server = start(&dir, &[]);
    assert!(ids(&server).is_empty());
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn with_a_failing_disk_a_read_that_expires_mail_is_still_answered() {
    let Some((dir, flag)) = with_write_faults("fault-expiry") else {
        return;
    };
    let server = start_failing_while(&dir, &flag, &["--max-age", "1s"]);
    assert_eq!(
        smtplib_send(&server, &[message("short-lived", b"x")]),
        [250]
    );
    std::fs::write(&flag, b"").unwrap();
    // Reads go on while the message expires: whichever of them (or the
    // timer) removes it, none is refused for the disk's sake.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut seen = 0;
    while Instant::now() < deadline {
        let health = server.request("GET", "/health");
        assert_eq!(health.status, 200, "{}", health.body);
        seen += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(seen > 10);
    assert_eq!(server.emails("").len(), 0, "expired");
    assert_eq!(server.health()["storage"]["ok"], false);
    std::fs::remove_file(&flag).unwrap();
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn while_mailjar_runs_another_process_cannot_open_its_database() {
    let dir = data_dir("excl");
    let read = |dir: &Path| {
        let script = "import sqlite3,sys\ntry:\n  c = sqlite3.connect(sys.argv[1], timeout=0.2)\n  print(c.execute('select count(*) from messages').fetchone()[0])\nexcept sqlite3.OperationalError as e:\n  print(e)\n";
        let out = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(dir.join("mailjar.db"))
            .output()
            .expect("python3");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let server = start(&dir, &[]);
    assert_eq!(smtplib_send(&server, &[message("mine", b"x")]), [250]);
    assert_eq!(read(&dir), "database is locked");
    stop(server);
    assert_eq!(read(&dir), "1");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stored_message_alone_over_a_lower_byte_limit_is_evicted_at_start() {
    let dir = data_dir("alone-over");
    let server = start(&dir, &[]);
    let big = message("big", &vec![b'x'; 300_000]);
    assert_eq!(
        smtplib_send(&server, &[message("small", b"1"), big]),
        [250, 250]
    );
    let gone = ids(&server)[1].clone();
    stop(server);
    // Today's store bound is a third of that one message: keeping it would
    // hold memory past --max-store-bytes for as long as mailjar runs.
    let limits = [
        "--max-store-bytes",
        "100000",
        "--max-message-bytes",
        "100000",
    ];
    let server = start(&dir, &limits);
    let subjects = |server: &Server| -> Vec<String> {
        summaries(server)
            .iter()
            .map(|e| e["subject"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        subjects(&server),
        ["small"],
        "only the message over the bound goes"
    );
    let health = server.health();
    assert_eq!(health["evicted"], 1, "{health}");
    assert!(
        health["storeBytes"].as_u64().unwrap() <= 100_000,
        "{health}"
    );
    kill_9(server);
    // It left the disk too (the core's tests check that ids sort after it whatever the clock says).
    let server = start(&dir, &[]);
    assert_eq!(subjects(&server), ["small"]);
    assert_eq!(smtplib_send(&server, &[message("after", b"1")]), [250]);
    let after = ids(&server)[1].clone();
    assert!(after > gone, "{after} sorts after the evicted {gone}");
    stop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn space_freed_by_a_lower_limit_at_start_goes_back_to_the_file_system() {
    let dir = data_dir("reclaim-at-start");
    let server = start(&dir, &[]);
    let body = vec![b'x'; 20_000];
    let sent: Vec<_> = (0..200).map(|i| message(&format!("r{i}"), &body)).collect();
    assert_eq!(smtplib_send(&server, &sent), vec![250; 200]);
    stop(server);
    let db = dir.join("mailjar.db");
    let before = std::fs::metadata(&db).unwrap().len();
    assert!(
        before > 4_000_000,
        "{before} bytes for 200 messages of 20 kB"
    );
    // The lower limit removes 199 rows at load; their pages are handed back
    // in steps while mailjar idles, without a write or a delete to start it.
    let server = start(&dir, &["--max-messages", "1"]);
    assert_eq!(ids(&server).len(), 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // The database and its log.
        let bytes = server.health()["storage"]["bytes"].as_u64().unwrap();
        if bytes < before / 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {bytes} bytes on disk, {before} before"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stop(server);
    let after = std::fs::metadata(&db).unwrap().len();
    assert!(after < before / 4, "{after} bytes after, {before} before");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What mailjar logs at info on `dir` until it listens (the open, an upgrade,
/// the load); then it is stopped with SIGTERM.
fn startup_log(dir: &Path) -> Vec<String> {
    let mut child = Command::new(binary())
        .args(["--smtp-port", "0", "--http-port", "0", "--log", "info"])
        .arg("--data-dir")
        .arg(dir)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mailjar");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = Vec::new();
    for line in lines.by_ref() {
        let Ok(line) = line else { break };
        let listening = line.contains("HTTP API on");
        log.push(line);
        if listening {
            break;
        }
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    log.extend(lines.map_while(Result::ok));
    assert!(child.wait().unwrap().success(), "{log:#?}");
    log
}

/// The messages `tests/data/journal-upgrade/generate.py` sent, in order.
fn upgrade_messages() -> Vec<Vec<u8>> {
    (0..7)
        .map(|i| {
            let body = match i {
                4 => b"caf\xe9 cr\xe8me \xff\xfe".to_vec(),
                5 => vec![b'L'; 70_000],
                _ => format!("body {i}").into_bytes(),
            };
            message(&format!("upgrade {i}"), &body)
        })
        .collect()
}

#[test]
fn a_data_directory_with_an_older_versions_journal_loses_nothing_on_upgrade() {
    // Left by kill -9 with four acknowledged messages in the journal alone
    // (see tests/data/journal-upgrade/README.md).
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/journal-upgrade");
    let dir = data_dir("upgrade");
    std::fs::create_dir_all(&dir).unwrap();
    let journal = "journal-0000000000000001.log";
    for name in ["mailjar.db", "mailjar.db-wal", "mailjar.lock", journal] {
        std::fs::copy(fixture.join(name), dir.join(name)).unwrap();
    }
    // The space that version gave each journal file ahead, cut from the fixture.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(journal))
        .unwrap();
    file.set_len(32 * 1024 * 1024).unwrap();
    drop(file);
    let log = startup_log(&dir);
    let said = |log: &[String], what: &str| log.iter().any(|line| line.contains(what));
    assert!(said(&log, "migrating schema 2 to 3"), "{log:#?}");
    assert!(
        said(&log, "computed the checksums of 3 stored messages"),
        "{log:#?}"
    );
    assert!(
        said(&log, "moved 4 messages from 1 journal files"),
        "{log:#?}"
    );
    assert!(said(&log, "loaded 7 messages"), "{log:#?}");
    assert!(!dir.join(journal).exists(), "the journal is deleted");

    let listed: Vec<Value> =
        serde_json::from_slice(&std::fs::read(fixture.join("listed.json")).unwrap()).unwrap();
    let server = start(&dir, &[]);
    let now = summaries(&server);
    assert_eq!(now.len(), listed.len());
    for ((now, then), sent) in now.iter().zip(&listed).zip(upgrade_messages()) {
        for key in ["id", "subject", "receivedAt", "from", "to", "size"] {
            assert_eq!(now[key], then[key], "{key} of {then}");
        }
        let id = now["id"].as_str().unwrap();
        assert_eq!(raw(&server, id), sent, "raw bytes of {id}");
    }
    let smtp = |i: usize| {
        let id = listed[i]["id"].as_str().unwrap();
        server.get_ok(&format!("/api/emails/{id}"))["email"]["smtp"].clone()
    };
    assert_eq!(smtp(0)["helo"], "first.test", "moved before the kill");
    assert_eq!(smtp(3)["helo"], "second.test", "from the journal alone");
    assert_eq!(smtp(3)["auth"]["username"], "user");
    assert_eq!(smtp(6)["helo"], "third.test");
    let health = server.health();
    assert_eq!(health["storage"]["ok"], true, "{health}");
    assert_eq!(health["storage"]["damaged"], 0, "{health}");
    stop(server);
    // Once: nothing is moved again.
    let log = startup_log(&dir);
    assert!(!said(&log, "journal"), "{log:#?}");
    assert!(said(&log, "loaded 7 messages"), "{log:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Copies the write-ahead log of the stopped mailjar's database into it.
fn checkpoint(dir: &Path) {
    let status = Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()")
        .arg(dir.join("mailjar.db"))
        .status()
        .expect("python3 runs");
    assert!(status.success());
}

#[test]
fn a_stored_message_with_a_flipped_bit_is_not_served_and_health_counts_it() {
    let dir = data_dir("flipped");
    let server = start(&dir, &[]);
    let marker = b"the bit of this line flips on disk";
    let sent = [
        message("kept", b"fine"),
        message("flipped", marker),
        message("kept too", b"fine"),
    ];
    assert_eq!(smtplib_send(&server, &sent), [250; 3]);
    let before = ids(&server);
    stop(server);
    // One bit of the message, in the database file itself.
    checkpoint(&dir);
    let db = dir.join("mailjar.db");
    let mut bytes = std::fs::read(&db).unwrap();
    let at: Vec<usize> = bytes
        .windows(marker.len())
        .enumerate()
        .filter(|(_, w)| w == marker)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "stored once");
    bytes[at[0] + 4] ^= 0x01;
    std::fs::write(&db, &bytes).unwrap();

    let log = startup_log(&dir);
    let named = log
        .iter()
        .any(|l| l.contains("ERROR") && l.contains(&before[1]) && l.contains("damaged"));
    assert!(named, "an error names the message: {log:#?}");
    let server = start(&dir, &[]);
    assert_eq!(ids(&server), [before[0].clone(), before[2].clone()]);
    assert_eq!(
        server.get(&format!("/api/emails/{}/raw", before[1])).status,
        404
    );
    let health = server.health();
    assert_eq!(health["storage"]["damaged"], 1, "{health}");
    assert_eq!(health["storage"]["ok"], true, "{health}");
    assert_eq!(smtplib_send(&server, &[message("after", b"x")]), [250]);
    stop(server);
    // Kept aside as it was, and still counted, until someone deletes it.
    let server = start(&dir, &[]);
    assert_eq!(ids(&server).len(), 3);
    assert_eq!(server.health()["storage"]["damaged"], 1);
    stop(server);
    let out = Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); [print(r[0], bytes(r[1]).decode('latin-1')) for r in c.execute('select reason, raw from damaged')]")
        .arg(&db)
        .output()
        .expect("python3 runs");
    let kept = String::from_utf8_lossy(&out.stdout);
    assert!(kept.contains("checksum"), "{kept}");
    assert!(
        kept.contains("the cit of this line"),
        "the bytes as they were: {kept}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
