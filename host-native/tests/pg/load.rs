//! Mail the `--database` tests send to their nodes: senders that run until
//! stopped, what they saw acknowledged, and what a node lists.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{Server, Smtp, message};

/// What a sender saw: each message's subject and the code of its end of DATA.
pub type Log = Arc<Mutex<Vec<(String, u16)>>>;

/// Starts a thread that sends messages `{prefix}-{i}` to `server` on one
/// connection, at most `max`, until `stop` is set or the connection dies,
/// pausing 20 ms after any answer but 250; each answer goes to `log`.
pub fn sender(server: &Server, prefix: &'static str, max: usize, log: Log, stop: Arc<AtomicBool>) {
    let addr = server.smtp;
    std::thread::spawn(move || {
        // A panic below is the node going away mid-transaction: the log has what was answered.
        let _ = std::panic::catch_unwind(move || {
            let (mut smtp, _) = Smtp::connect(addr);
            smtp.expect("EHLO sender.test", 250);
            for i in 0..max {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                let subject = format!("{prefix}-{i}");
                let raw = message("app@app.test", "user@local.test", &subject, "body");
                let code = smtp
                    .transaction("app@app.test", &["user@local.test"], &raw)
                    .code;
                log.lock().unwrap().push((subject, code));
                if code != 250 {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
    });
}

/// The subjects `log` saw answered 250.
pub fn acked(log: &Log) -> BTreeSet<String> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(_, code)| *code == 250)
        .map(|(s, _)| s.clone())
        .collect()
}

/// The subjects of the messages `server` lists.
pub fn subjects(server: &Server) -> BTreeSet<String> {
    server
        .emails("view=summary")
        .iter()
        .map(|e| e["subject"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Sends `n` messages `{prefix}-{i}` with this body to `server` on one
/// connection; the codes of their ends of DATA.
pub fn send_codes(server: &Server, prefix: &str, n: usize, body: &str) -> Vec<u16> {
    let (mut smtp, _) = Smtp::connect(server.smtp);
    smtp.expect("EHLO sender.test", 250);
    (0..n)
        .map(|i| {
            let raw = message(
                "app@app.test",
                "user@local.test",
                &format!("{prefix}-{i}"),
                body,
            );
            smtp.transaction("app@app.test", &["user@local.test"], &raw)
                .code
        })
        .collect()
}
