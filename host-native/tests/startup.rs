//! Starting the binary: a port that is taken is refused at start, naming the
//! listener and its address, with exit status 1 and nothing on stdout.

mod common;

use std::net::TcpListener;
use std::process::Command;

use common::binary;

#[test]
fn a_taken_port_names_the_listener_and_the_address() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind a port to take");
    let port = taken.local_addr().expect("its address").port();
    for (flag, other, name) in [
        ("--smtp-port", "--http-port", "SMTP"),
        ("--http-port", "--smtp-port", "HTTP"),
    ] {
        let output = Command::new(binary())
            .args([flag, &port.to_string(), other, "0", "--ready-json"])
            .output()
            .expect("run mailjar");
        assert_eq!(output.status.code(), Some(1), "{name}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let expected = format!("mailjar: {name} 127.0.0.1:{port}: address in use");
        assert!(
            stderr.lines().any(|line| line == expected),
            "{name}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "no ready line: {output:?}");
    }
}
