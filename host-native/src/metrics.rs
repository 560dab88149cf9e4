//! `GET /metrics`: counters, gauges and two histograms in the Prometheus
//! text format 0.0.4.
//!
//! Written by hand rather than with `prometheus-client`: the format is a few
//! lines of text, and doing it here keeps every update on the hot path one
//! relaxed atomic add in a table fixed at start (the crate's label families
//! take a lock to find a series, and its histograms take one per
//! observation). Nothing here allocates per message or per request, and the
//! label sets are bounded: routes are the API's templates, codes a fixed list.
//!
//! Gauges are read when scraped: the store's counts under the API lock for
//! O(1) reads (as `/health` reads them), the rest from atomics; the text is
//! built after the lock is released.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use mailjar_core::api::{Body, Request, Response, Scope};

use crate::smtp_load::SmtpLoad;

/// The `Content-Type` of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The route labels of `mailjar_http_requests_total`: the API's path
/// templates; anything else is `other`.
const ROUTES: &[&str] = &[
    "/health",
    "/metrics",
    "/api/openapi.json",
    "/api/session",
    "/api/send",
    "/api/emails",
    "/api/emails/latest",
    "/api/emails/wait",
    "/api/emails/:id",
    "/api/emails/:id/raw",
    "/api/emails/:id/html",
    "/api/emails/:id/transcript",
    "/api/emails/:id/release",
    "/api/emails/:id/attachments/:index",
    "/api/emails/:id/checks/:check",
    "/api/events",
    "/api/faults",
    "/api/faults/:id",
    "/api/inboxes",
    "/api/inboxes/:name",
    "/api/inboxes/:name/token",
    "/api/relay",
    "/ui",
    "other",
];

/// The HTTP status codes counted one by one; any other is counted under `other`.
const STATUSES: &[u16] = &[
    200, 204, 206, 304, 400, 401, 403, 404, 405, 406, 408, 409, 411, 413, 414, 415, 416, 422, 429,
    431, 500, 501, 502, 503, 504,
];

/// SMTP reply codes are counted for 200..=599 (a table of 400 atomics).
const SMTP_CODES: std::ops::RangeInclusive<u16> = 200..=599;

/// Upper bounds in seconds of both histograms' buckets (`+Inf` follows).
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A histogram of durations: one atomic per bucket, the sum in nanoseconds.
struct Histogram {
    /// Observations per bucket (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
        }
    }

    fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let index = BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(BUCKETS.len());
        self.buckets[index].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, help, "histogram");
        let mut cumulative = 0u64;
        for (i, count) in self.buckets.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            match BUCKETS.get(i) {
                Some(bound) => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
                }
                None => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
                }
            }
        }
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

/// Every counter and histogram of the server.
pub struct Metrics {
    received: AtomicU64,
    deleted: AtomicU64,
    smtp_replies: Box<[AtomicU64]>,
    /// `ROUTES.len()` rows of `STATUSES.len() + 1` columns (the last: other codes).
    http: Box<[AtomicU64]>,
    ingest: Histogram,
    storage_write: Histogram,
    /// The SMTP connections and bytes in flight, set once the listeners are bound.
    smtp_load: OnceLock<Arc<SmtpLoad>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        Metrics {
            received: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            smtp_replies: zeros(SMTP_CODES.len()),
            http: zeros(ROUTES.len() * (STATUSES.len() + 1)),
            ingest: Histogram::new(),
            storage_write: Histogram::new(),
            smtp_load: OnceLock::new(),
        }
    }
}

/// What the store and the API hold when scraped (read under the API lock).
pub struct Gauges {
    /// Messages stored.
    pub stored: usize,
    /// Bytes stored.
    pub bytes: usize,
    /// Messages evicted (or expired) since the start.
    pub evicted: u64,
    /// Parked waits.
    pub waits: usize,
    /// Open event streams.
    pub subscribers: usize,
}

impl Metrics {
    /// Has the SMTP connection gauge read `load` (once, at start).
    pub fn set_smtp_load(&self, load: Arc<SmtpLoad>) {
        let _ = self.smtp_load.set(load);
    }

    /// A message was stored: `elapsed` from the end of its data (or the API
    /// request) to stored.
    pub fn stored(&self, elapsed: Duration) {
        self.received.fetch_add(1, Ordering::Relaxed);
        self.ingest.observe(elapsed);
    }

    /// The storage writer committed a message `elapsed` after it was queued.
    pub fn written(&self, elapsed: Duration) {
        self.storage_write.observe(elapsed);
    }

    /// An SMTP reply was sent.
    pub fn smtp_reply(&self, code: u16) {
        if SMTP_CODES.contains(&code) {
            let index = usize::from(code - SMTP_CODES.start());
            self.smtp_replies[index].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An HTTP request to `path` was answered `status`.
    pub fn http_request(&self, path: &str, status: u16) {
        let row = route_index(path);
        let column = STATUSES
            .iter()
            .position(|&s| s == status)
            .unwrap_or(STATUSES.len());
        self.http[row * (STATUSES.len() + 1) + column].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts what a `DELETE` of the API removed (its answer's `deleted`).
    pub fn answered(&self, method: &str, path: &str, response: &Response) {
        if method != "DELETE" || response.status != 200 || !path.starts_with("/api/emails") {
            return;
        }
        #[derive(serde::Deserialize)]
        struct Deleted {
            deleted: u64,
        }
        if let Body::Full(body) = &response.body
            && let Ok(answer) = serde_json::from_slice::<Deleted>(body)
        {
            self.deleted.fetch_add(answer.deleted, Ordering::Relaxed);
        }
    }

    /// The text format of every series.
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            header(out, name, help, "counter");
            let _ = writeln!(out, "{name} {value}");
        };
        let gauge = |out: &mut String, name: &str, help: &str, value: u64| {
            header(out, name, help, "gauge");
            let _ = writeln!(out, "{name} {value}");
        };
        let load = |f: fn(&SmtpLoad) -> usize| self.smtp_load.get().map_or(0, |l| f(l) as u64);
        counter(
            &mut out,
            "mailjar_messages_received_total",
            "Messages stored since the start (SMTP and POST /api/send).",
            self.received.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "mailjar_messages_stored",
            "Messages in the store.",
            gauges.stored as u64,
        );
        gauge(
            &mut out,
            "mailjar_store_bytes",
            "Bytes of the messages in the store.",
            gauges.bytes as u64,
        );
        counter(
            &mut out,
            "mailjar_messages_evicted_total",
            "Messages evicted to keep the store's limits, or expired by --max-age.",
            gauges.evicted,
        );
        counter(
            &mut out,
            "mailjar_messages_deleted_total",
            "Messages deleted through the API.",
            self.deleted.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "mailjar_smtp_connections",
            "Open SMTP connections.",
            load(SmtpLoad::connections),
        );
        gauge(
            &mut out,
            "mailjar_smtp_inflight_bytes",
            "Bytes of messages being received over SMTP.",
            load(SmtpLoad::inflight_bytes),
        );
        gauge(
            &mut out,
            "mailjar_waits",
            "Parked waits.",
            gauges.waits as u64,
        );
        gauge(
            &mut out,
            "mailjar_subscribers",
            "Open event streams.",
            gauges.subscribers as u64,
        );
        self.render_smtp_replies(&mut out);
        self.render_http(&mut out);
        self.ingest.render(
            &mut out,
            "mailjar_ingest_seconds",
            "From the end of a message's data (or its POST /api/send) to stored.",
        );
        self.storage_write.render(
            &mut out,
            "mailjar_storage_write_seconds",
            "From a message queued to the storage writer (--data-dir) to committed.",
        );
        out
    }

    fn render_smtp_replies(&self, out: &mut String) {
        let name = "mailjar_smtp_replies_total";
        header(out, name, "SMTP replies sent, by code.", "counter");
        for (code, count) in SMTP_CODES.zip(self.smtp_replies.iter()) {
            let count = count.load(Ordering::Relaxed);
            if count > 0 {
                let _ = writeln!(out, "{name}{{code=\"{code}\"}} {count}");
            }
        }
    }

    fn render_http(&self, out: &mut String) {
        let name = "mailjar_http_requests_total";
        header(
            out,
            name,
            "HTTP requests answered, by route and status.",
            "counter",
        );
        let columns = STATUSES.len() + 1;
        for (i, count) in self.http.iter().enumerate() {
            let count = count.load(Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            let route = ROUTES[i / columns];
            let status = STATUSES
                .get(i % columns)
                .map_or_else(|| "other".to_owned(), u16::to_string);
            let _ = writeln!(
                out,
                "{name}{{route=\"{route}\",status=\"{status}\"}} {count}"
            );
        }
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The row of [`ROUTES`] a request path counts under.
fn route_index(path: &str) -> usize {
    let path = path
        .strip_suffix('/')
        .filter(|p| !p.is_empty())
        .unwrap_or(path);
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let route = match segments.as_slice() {
        [""] | ["ui", ..] => "/ui",
        ["health"] => "/health",
        ["metrics"] => "/metrics",
        ["api", "openapi.json"] => "/api/openapi.json",
        ["api", "session"] => "/api/session",
        ["api", "send"] => "/api/send",
        ["api", "emails"] => "/api/emails",
        ["api", "emails", "latest"] => "/api/emails/latest",
        ["api", "emails", "wait"] => "/api/emails/wait",
        ["api", "emails", _] => "/api/emails/:id",
        ["api", "emails", _, "raw"] => "/api/emails/:id/raw",
        ["api", "emails", _, "html"] => "/api/emails/:id/html",
        ["api", "emails", _, "transcript"] => "/api/emails/:id/transcript",
        ["api", "emails", _, "release"] => "/api/emails/:id/release",
        ["api", "emails", _, "attachments", _] => "/api/emails/:id/attachments/:index",
        ["api", "emails", _, "checks", _] => "/api/emails/:id/checks/:check",
        ["api", "events"] => "/api/events",
        ["api", "faults"] => "/api/faults",
        ["api", "faults", _] => "/api/faults/:id",
        ["api", "inboxes"] => "/api/inboxes",
        ["api", "inboxes", _] => "/api/inboxes/:name",
        ["api", "inboxes", _, "token"] => "/api/inboxes/:name/token",
        ["api", "relay"] => "/api/relay",
        _ => "other",
    };
    ROUTES
        .iter()
        .position(|&r| r == route)
        .unwrap_or(ROUTES.len() - 1)
}

/// Answers `GET /metrics` (the admin's with `--admin-token`) with these
/// counters and the gauges `gauges` reads; None for other paths.
pub fn route(
    metrics: &Metrics,
    gauges: impl FnOnce() -> Gauges,
    request: &Request,
) -> Option<Response> {
    if !matches!(request.path.as_str(), "/metrics" | "/metrics/") {
        return None;
    }
    if request.method != "GET" {
        let mut response = Response::error(405, "/metrics answers GET only");
        response.headers.push(("allow", "GET".into()));
        return Some(response);
    }
    if request.scope != Scope::All {
        return Some(Response::error(403, "admin token required"));
    }
    let text = metrics.render(&gauges());
    Some(Response {
        status: 200,
        content_type: CONTENT_TYPE.into(),
        headers: Vec::new(),
        body: Body::Full(bytes::Bytes::from(text)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_count_under_their_template() {
        let route = |path| ROUTES[route_index(path)];
        assert_eq!(route("/api/emails/01J/raw"), "/api/emails/:id/raw");
        assert_eq!(route("/api/emails/"), "/api/emails");
        assert_eq!(route("/api/emails/latest"), "/api/emails/latest");
        assert_eq!(
            route("/api/emails/x/attachments/0"),
            "/api/emails/:id/attachments/:index"
        );
        assert_eq!(route("/"), "/ui");
        assert_eq!(route("/ui/app.js"), "/ui");
        assert_eq!(route("/nothing/here"), "other");
        assert_eq!(route(""), "other");
    }

    #[test]
    fn histograms_are_cumulative_with_sum_and_count() {
        let h = Histogram::new();
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_millis(30));
        h.observe(Duration::from_secs(20));
        let mut out = String::new();
        h.render(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"0.0005\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.05\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"10\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_count 3\n"), "{out}");
        assert!(out.contains("x_sum 20.0301\n"), "{out}");
    }

    #[test]
    fn unknown_codes_are_counted_as_other() {
        let m = Metrics::default();
        m.http_request("/api/emails", 200);
        m.http_request("/api/emails", 418);
        m.smtp_reply(250);
        m.smtp_reply(999);
        let gauges = Gauges {
            stored: 0,
            bytes: 0,
            evicted: 0,
            waits: 0,
            subscribers: 0,
        };
        let out = m.render(&gauges);
        assert!(
            out.contains("route=\"/api/emails\",status=\"200\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("route=\"/api/emails\",status=\"other\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("mailjar_smtp_replies_total{code=\"250\"} 1\n"),
            "{out}"
        );
        assert!(!out.contains("999"), "{out}");
    }
}
