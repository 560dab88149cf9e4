//! curl as a streaming client: what it prints, line by line, as it comes.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

/// Runs `curl -sSN --max-time 60 ARGS`: the process, and the lines it prints as they come.
pub fn curl_lines(args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new("curl")
        .args(["-sSN", "--max-time", "60"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl must be installed");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}
