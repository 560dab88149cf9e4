//! A `--database` node stops on SIGTERM while PostgreSQL is down: it exits
//! within a few seconds, and nothing it answered 250 is lost (whatever it had
//! not committed was answered 451 or not answered at all).

mod common;
mod pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pg::load::{Log, acked, sender, subjects};
use pg::{Nodes, Postgres, eventually};

#[test]
fn a_node_stops_on_sigterm_while_the_database_is_down() {
    stops_while_down(false);
}

#[test]
fn a_node_stops_on_sigterm_while_the_database_hangs() {
    stops_while_down(true);
}

/// Two nodes, senders on A; the database stopped (or frozen: its connections
/// open, never answering); SIGTERM to A.
fn stops_while_down(hang: bool) {
    let pg = Postgres::start();
    let mut a = pg.node(&[]);
    let b = pg.node(&[]);
    let (log, stop) = (Log::default(), Arc::new(AtomicBool::new(false)));
    sender(&a, "a", usize::MAX, log.clone(), stop.clone());
    sender(&a, "a2", usize::MAX, log.clone(), stop.clone());
    assert!(eventually(Duration::from_secs(20), || acked(&log).len() >= 50));
    if hang {
        pg.signal("STOP");
    } else {
        pg.stop();
    }
    let stopped_at = log.lock().unwrap().len();
    // A hung database answers nothing, not even the failure that makes a 451.
    assert!(
        hang || eventually(Duration::from_secs(10), || {
            log.lock().unwrap()[stopped_at..]
                .iter()
                .any(|(_, c)| *c == 451)
        }),
        "no 451 while the database is down"
    );
    // The database stays down for longer than the node's reconnect pauses.
    std::thread::sleep(Duration::from_millis(2_500));
    let asked = Instant::now();
    a.sigterm();
    let exited = a.wait_exit(Duration::from_secs(30));
    let took = asked.elapsed();
    stop.store(true, Ordering::Release);
    let state = if hang { "hung" } else { "down" };
    eprintln!(
        "SIGTERM with the database {state}: exited after {} ms",
        took.as_millis()
    );
    assert!(
        exited.is_some(),
        "still running {} ms after SIGTERM",
        took.as_millis()
    );
    assert!(
        took < Duration::from_secs(5),
        "took {} ms to stop",
        took.as_millis()
    );
    if hang {
        pg.signal("CONT");
    } else {
        pg.start_again();
    }
    let acked = acked(&log);
    assert!(
        eventually(Duration::from_secs(15), || subjects(&b).is_superset(&acked)),
        "acknowledged but lost: {:?}",
        acked.difference(&subjects(&b)).collect::<Vec<_>>()
    );
}
