//! `mailjar health`, the container image's HEALTHCHECK: exit 0 when the
//! running server's `/health` answers 200, and 1 with one line on stderr
//! saying why otherwise (nothing listening, another status, no answer).

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::binary;

/// Runs `mailjar health` with `args` and `env`, with no `MAILJAR_*` inherited.
fn health(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(binary());
    command.arg("health").args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MAILJAR_") {
            command.env_remove(name);
        }
    }
    command
        .envs(env.iter().copied())
        .output()
        .expect("run mailjar health")
}

/// The one line on stderr of a failed check.
fn failure_line(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.starts_with("mailjar health: "), "{stderr:?}");
    stderr.trim_end().to_owned()
}

#[test]
fn a_running_server_is_healthy_by_flag_and_by_environment() {
    let server = common::Server::start();
    let port = server.http.port().to_string();
    let by_flag = health(&["--http-port", &port], &[]);
    assert!(by_flag.status.success(), "{by_flag:?}");
    assert!(
        by_flag.stderr.is_empty() && by_flag.stdout.is_empty(),
        "{by_flag:?}"
    );
    let by_env = health(
        &[],
        &[
            ("MAILJAR_HTTP_PORT", &port),
            ("MAILJAR_HTTP_HOST", "127.0.0.1"),
        ],
    );
    assert!(by_env.status.success(), "{by_env:?}");
}

/// In a container the server binds 0.0.0.0 (MAILJAR_HTTP_HOST), and the
/// check, reading the same variable, asks it on loopback.
#[test]
fn an_all_addresses_bind_is_asked_on_loopback() {
    let server = common::Server::start_with(&["--http-host", "0.0.0.0"]);
    let port = server.http.port().to_string();
    let env = [
        ("MAILJAR_HTTP_HOST", "0.0.0.0"),
        ("MAILJAR_HTTP_PORT", port.as_str()),
    ];
    let output = health(&[], &env);
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn nothing_listening_is_a_failure_that_names_the_address() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let line = failure_line(&health(&["--http-port", &port.to_string()], &[]));
    assert!(
        line.contains(&format!("cannot connect to 127.0.0.1:{port}")),
        "{line}"
    );
}

#[test]
fn another_status_is_a_failure_that_names_it() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let answer = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut request = [0u8; 1024];
        let n = stream.read(&mut request).expect("read the request");
        let request = String::from_utf8_lossy(&request[..n]).into_owned();
        let reply = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n";
        stream.write_all(reply).expect("answer");
        request
    });
    let line = failure_line(&health(&["--http-port", &port.to_string()], &[]));
    assert!(
        line.ends_with(&format!("http://127.0.0.1:{port}/health answered 503")),
        "{line}"
    );
    let request = answer.join().expect("the fake server");
    assert!(
        request.starts_with("GET /health HTTP/1.1\r\n"),
        "{request:?}"
    );
}

#[test]
fn a_server_that_does_not_answer_fails_within_the_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port().to_string();
    let started = Instant::now();
    let line = failure_line(&health(&["--http-port", &port, "--timeout", "300ms"], &[]));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        line.contains(&format!("http://127.0.0.1:{port}/health")),
        "{line}"
    );
    drop(listener);
}

/// `--http-tls` speaks TLS: against a plain HTTP API the handshake fails,
/// which the check reports instead of a status.
#[test]
fn http_tls_against_a_plain_api_fails_with_the_tls_error() {
    let server = common::Server::start();
    let port = server.http.port().to_string();
    let line = failure_line(&health(
        &["--http-port", &port],
        &[("MAILJAR_HTTP_TLS", "true")],
    ));
    assert!(
        line.contains(&format!("https://127.0.0.1:{port}/health")),
        "{line}"
    );
}

/// A one-request HTTPS server with a self-signed certificate (as `--tls-self-signed`
/// makes), answering `status`; returns its port.
fn https_once(status: &'static str) -> u16 {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("certificate");
    let key = rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .expect("key");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .expect("server config");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let (tcp, _) = listener.accept().expect("accept");
        let connection =
            rustls::ServerConnection::new(std::sync::Arc::new(config)).expect("connection");
        let mut tls = rustls::StreamOwned::new(connection, tcp);
        let mut request = [0u8; 1024];
        if tls.read(&mut request).is_ok() {
            let reply = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
            let _ = tls.write_all(reply.as_bytes());
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    port
}

/// `--http-tls` completes a handshake with a self-signed certificate (the
/// check trusts any) and reads the status through it.
#[test]
fn http_tls_reads_the_status_over_tls_with_a_self_signed_certificate() {
    let port = https_once("200 OK").to_string();
    let output = health(&["--http-tls", "--http-port", &port], &[]);
    assert!(output.status.success(), "{output:?}");
    let port = https_once("503 Service Unavailable").to_string();
    let line = failure_line(&health(
        &["--http-port", &port],
        &[("MAILJAR_HTTP_TLS", "true")],
    ));
    assert!(
        line.ends_with(&format!("https://127.0.0.1:{port}/health answered 503")),
        "{line}"
    );
}
