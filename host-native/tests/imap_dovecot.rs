//! ENVELOPE and BODYSTRUCTURE of the MIME corpus compared with Dovecot's
//! (Debian's `dovecot-imapd`, run by the test as `nobody` on a private
//! configuration, over a Maildir of the same files, through imaplib's
//! IMAP4_stream). Skipped when Dovecot or the corpus is missing.
//!
//! The differences kept, by kind (the run prints how many of each):
//! - a text part's type is written `"TEXT"` (imap-codec writes that field
//!   itself); Dovecot writes it as the message spells it. IMAP compares
//!   media types case-insensitively.
//! - display names are decoded (RFC 2047) where Dovecot leaves the encoded
//!   words; an address without a domain has an empty host where Dovecot
//!   writes `MISSING_DOMAIN`; a header value is unfolded and trimmed where
//!   Dovecot keeps its raw bytes.
//! - part sizes and line counts, and parts found, come from mail-parser's
//!   reading of malformed MIME (a missing final boundary, bare LF lines),
//!   which is not Dovecot's.
//!
//! What the test holds: every message answers on both, and at least as many
//! agree as when this was written (331 of 392 ENVELOPEs identical, 131
//! BODYSTRUCTUREs equal but for case), so a change that loses agreement fails.

mod common;

use std::path::Path;
use std::process::Command;

use common::Server;
use common::readers::{MIME_CORPUS, listener, mime_corpus};
use serde_json::Value;

const DOVECOT: &str = "/usr/lib/dovecot/imap";

const COMPARE: &str = r#"
import imaplib, json, re, sys
def grab(m, item):
    typ, data = m.fetch("1:*", f"({item})")
    out, cur = {}, b""
    for p in data:
        if isinstance(p, tuple):
            cur += p[0] + b"{lit}" + p[1]
        else:
            cur += p
            out[int(re.match(rb"(\d+) ", cur).group(1))] = cur
            cur = b""
    return out
dovecot = imaplib.IMAP4_stream(sys.argv[2])
dovecot.select("INBOX")
host, port = sys.argv[1].rsplit(":", 1)
mailjar = imaplib.IMAP4(host, int(port))
mailjar.login("u", "p")
mailjar.select("INBOX")
result = {}
for item in ["ENVELOPE", "BODYSTRUCTURE"]:
    a, b = grab(dovecot, item), grab(mailjar, item)
    result[item] = {
        "dovecot": len(a), "mailjar": len(b),
        "identical": sum(1 for k in a if a[k] == b.get(k)),
        "caseless": sum(1 for k in a if a[k].lower() == b.get(k, b"").lower()),
    }
print(json.dumps(result))
"#;

#[test]
fn envelope_and_bodystructure_agree_with_dovecot() {
    let files = mime_corpus();
    if files.is_empty() || !Path::new(DOVECOT).exists() {
        println!("skipped: needs {MIME_CORPUS} and {DOVECOT} (Debian's dovecot-imapd)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("mailjar-dovecot-{}", common::nonce()));
    let maildir = dir.join("md");
    for sub in ["cur", "new", "tmp"] {
        std::fs::create_dir_all(maildir.join(sub)).unwrap();
    }
    let server = Server::start_with(&["--imap-port", "0"]);
    for (i, path) in files.iter().enumerate() {
        let raw = std::fs::read(path).unwrap();
        std::fs::write(maildir.join(format!("cur/{:05}.mj:2,", i + 1)), &raw).unwrap();
        common::run_ok(
            Command::new("curl")
                .args(["-sS", "--fail", "-o", "/dev/null", "-X", "POST"])
                .args(["-H", "Content-Type: message/rfc822", "--data-binary"])
                .arg(format!("@{}", path.display()))
                .arg(format!(
                    "http://{}/api/send?from=s%40x.test&to=u%40x.test",
                    server.http
                )),
        );
    }
    let config = format!(
        "mail_location = maildir:{md}:INBOX={md}:LAYOUT=fs\nlog_path = {d}/dovecot.log\nssl = no\nbase_dir = {d}/run\nstate_dir = {d}/state\n",
        md = maildir.display(),
        d = dir.display()
    );
    std::fs::write(dir.join("dovecot.conf"), config).unwrap();
    // Dovecot will not serve as root: the files become nobody's, and so does it.
    common::run_ok(
        Command::new("chown")
            .args(["-R", "nobody:nogroup"])
            .arg(&dir),
    );
    let dovecot = format!(
        "setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME={d} USER=nobody {DOVECOT} -c {d}/dovecot.conf",
        d = dir.display()
    );
    let imap = listener(&server, "imap");
    let out = common::run_ok(
        Command::new("python3")
            .arg("-c")
            .arg(COMPARE)
            .arg(&imap)
            .arg(&dovecot),
    );
    let result: Value = serde_json::from_str(out.trim()).unwrap();
    println!("{result}");
    let _ = std::fs::remove_dir_all(&dir);
    for item in ["ENVELOPE", "BODYSTRUCTURE"] {
        assert_eq!(result[item]["dovecot"], files.len(), "{result}");
        assert_eq!(result[item]["mailjar"], files.len(), "{result}");
    }
    assert!(
        result["ENVELOPE"]["identical"].as_u64().unwrap() >= 331,
        "{result}"
    );
    assert!(
        result["BODYSTRUCTURE"]["caseless"].as_u64().unwrap() >= 131,
        "{result}"
    );
}
