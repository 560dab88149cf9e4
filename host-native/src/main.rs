//! `mailjar`: the command-line entry point.

use mailjar::{Server, Settings};
use tracing_subscriber::EnvFilter;

mod health_cmd;

fn main() -> std::process::ExitCode {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|first| first == "health")
    {
        return health_cmd::main(std::env::args_os().skip(1));
    }
    let settings = Settings::from_command_line();
    let filter = EnvFilter::try_new(&settings.log).unwrap_or_else(|e| {
        eprintln!(
            "mailjar: --log {:?} is not a log filter ({e}); using info",
            settings.log
        );
        EnvFilter::new("info")
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        // Logs go to stderr: stdout is only for --ready-json.
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Err(why) = settings.validate() {
        eprintln!("mailjar: {why}");
        return std::process::ExitCode::from(2);
    }
    let ready_json = settings.ready_json;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mailjar: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        // Listened for before the ports are logged: a SIGTERM that follows
        // the first request must stop mailjar cleanly, not kill it.
        let stop = stop_signal();
        let server = match Server::bind(settings).await {
            Ok(server) => server,
            Err(e) if e.get_ref().is_some_and(|inner| inner.is::<mailjar::storage::StorageError>()) => {
                // The message names the data directory or the database file.
                eprintln!("mailjar: {e}");
                return std::process::ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("mailjar: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        if let Some(Ok(smtps)) = server.smtps_addr() {
            tracing::info!("SMTPS (implicit TLS) on {smtps}");
        }
        for (key, addr) in server.mail_reader_addrs() {
            tracing::info!("{} on {addr}", key.to_uppercase());
        }
        if let (Ok(smtp), Ok(http)) = (server.smtp_addr(), server.http_addr()) {
            let scheme = server.http_scheme();
            tracing::info!("SMTP on {smtp}, HTTP API on {scheme}://{http}");
            if ready_json {
                // One line, once both listeners are bound: how a test runner learns the ports.
                let mut line = serde_json::json!({ "smtp": smtp.to_string(), "http": format!("{scheme}://{http}") });
                if let Some(Ok(smtps)) = server.smtps_addr() {
                    line["smtps"] = smtps.to_string().into();
                }
                for (key, addr) in server.mail_reader_addrs() {
                    line[key] = addr.to_string().into();
                }
                println!("{line}");
            }
        }
        server.run(stop).await;
        std::process::ExitCode::SUCCESS
    })
}

/// Listens for SIGINT and SIGTERM from now on; the future resolves on either.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt());
        let terminate = signal(SignalKind::terminate());
        async move {
            match (interrupt, terminate) {
                (Ok(mut interrupt), Ok(mut terminate)) => {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = terminate.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
