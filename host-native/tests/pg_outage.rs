//! Failures of a `--database` service on a real PostgreSQL: a node killed
//! with SIGKILL under load loses nothing it acknowledged; the database
//! stopped under load makes SMTP answer 451 (never 250) and `/health` say
//! why, and once it is back the nodes reconnect and catch up by themselves.

mod common;
mod pg;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Smtp, message};
use pg::load::{Log, acked, sender, subjects};
use pg::{Nodes, Postgres, eventually};

fn wait_for(what: &str, timeout: Duration, check: impl FnMut() -> bool) {
    assert!(eventually(timeout, check), "timed out waiting for {what}");
}

#[test]
fn a_node_killed_under_load_loses_nothing_it_acknowledged() {
    let pg = Postgres::start();
    let a = pg.node(&[]);
    let b = pg.node(&[]);
    let (log, stop) = (Log::default(), Arc::new(AtomicBool::new(false)));
    sender(&a, "a", 5_000, log.clone(), stop.clone());
    sender(&a, "a2", 5_000, log.clone(), stop.clone());
    wait_for("100 acknowledged", Duration::from_secs(20), || {
        acked(&log).len() >= 100
    });
    let status = std::process::Command::new("kill")
        .args(["-KILL", &a.pid().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let mut a = a;
    assert!(a.wait_exit(Duration::from_secs(5)).is_some());
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Release);
    let acked = acked(&log);
    wait_for(
        "B to hold every acknowledged message",
        Duration::from_secs(10),
        || subjects(&b).is_superset(&acked),
    );
    // B carries on.
    let (mut smtp, _) = Smtp::connect(b.smtp);
    smtp.expect("EHLO sender.test", 250);
    let raw = message("app@app.test", "user@local.test", "after", "body");
    assert_eq!(
        smtp.transaction("app@app.test", &["user@local.test"], &raw)
            .code,
        250
    );
    // A started again loads every message, that one too.
    let a = pg.node(&[]);
    let on_b = subjects(&b);
    assert_eq!(subjects(&a), on_b);
    assert!(on_b.contains("after"));
}

#[test]
fn while_the_database_is_down_smtp_answers_451_and_the_nodes_catch_up_after() {
    let pg = Postgres::start();
    let a = pg.node(&[]);
    let b = pg.node(&[]);
    let (log, stop) = (Log::default(), Arc::new(AtomicBool::new(false)));
    sender(&a, "a", 100_000, log.clone(), stop.clone());
    wait_for("50 acknowledged", Duration::from_secs(20), || {
        acked(&log).len() >= 50
    });
    pg.stop();
    let stopped_at = log.lock().unwrap().len();
    wait_for("a 451", Duration::from_secs(10), || {
        log.lock().unwrap()[stopped_at..]
            .iter()
            .any(|(_, c)| *c == 451)
    });
    let codes: BTreeSet<u16> = log.lock().unwrap()[stopped_at..]
        .iter()
        .map(|(_, c)| *c)
        .collect();
    assert!(codes.is_subset(&[250, 451].into()), "{codes:?}");
    let health = a.health();
    assert_eq!(health["storage"]["ok"], false, "{health}");
    assert!(health["storage"]["error"].is_string(), "{health}");
    // The API serves what the node holds.
    assert!(subjects(&a).len() >= 50);
    let down_for = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    pg.start_again();
    let restarted = log.lock().unwrap().len();
    wait_for("250s again", Duration::from_secs(20), || {
        log.lock().unwrap()[restarted..]
            .iter()
            .filter(|(_, c)| *c == 250)
            .count()
            >= 20
    });
    stop.store(true, Ordering::Release);
    let recovered_in = down_for.elapsed();
    let acked = acked(&log);
    let held = eventually(Duration::from_secs(15), || {
        subjects(&a).is_superset(&acked) && subjects(&b).is_superset(&acked)
    });
    assert!(
        held,
        "acknowledged but missing on A: {:?}; on B: {:?}",
        acked.difference(&subjects(&a)).collect::<Vec<_>>(),
        acked.difference(&subjects(&b)).collect::<Vec<_>>()
    );
    assert_eq!(subjects(&a), subjects(&b));
    wait_for("health ok again", Duration::from_secs(5), || {
        a.health()["storage"]["ok"] == true
    });
    // Nothing answered 451 was stored under a 250 (a 451 means "not acknowledged").
    eprintln!(
        "outage: {} answered 451, recovered {} ms after the restart began",
        log.lock()
            .unwrap()
            .iter()
            .filter(|(_, c)| *c == 451)
            .count(),
        recovered_in.as_millis()
    );
}
