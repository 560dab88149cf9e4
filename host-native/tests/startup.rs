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

/// An empty `MAILJAR_*` variable (`MAILJAR_DATA_DIR=` in a compose file or a
/// CI matrix) means the setting is off, as if it were not set: mailjar starts
/// with the default, not with "a value is required".
#[test]
fn an_empty_environment_variable_counts_as_unset() {
    let empty = std::ffi::OsStr::new("");
    let server = common::Server::start_with_env(
        &[],
        &[
            ("MAILJAR_DATA_DIR", empty),
            ("MAILJAR_MAX_AGE", empty),
            ("MAILJAR_FSYNC", empty),
            ("MAILJAR_AUTH", empty),
            ("MAILJAR_TLS_CERT", empty),
        ],
    );
    let health = server.health();
    assert_eq!(health["storage"]["kind"], "memory", "{health}");
    // No --auth: any credentials are accepted.
    let (mut smtp, _) = common::Smtp::connect(server.smtp);
    smtp.write(b"EHLO t\r\nAUTH PLAIN AGFueQBhbnk=\r\n");
    assert_eq!(smtp.reply().code, 250);
    assert_eq!(smtp.reply().code, 235);
}
