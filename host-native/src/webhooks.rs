//! Webhooks (`--webhook URL`): a POST of
//! `{"event": "stored", "email": <summary>}` to each URL for every stored message.
//!
//! Never in the way of a 250: a stored message's summary (the JSON the store
//! already keeps, shared, not copied) is handed to a bounded queue with
//! `try_send` after the message is stored and outside every lock; a full
//! queue drops it (counted in `dropped`, logged). [`MAX_IN_FLIGHT`] workers
//! take messages from the queue, each delivering one at a time with its own
//! retries (5xx, 429, connection errors and timeouts, after 1, 2, 4, 8 and
//! 16 s; then `failed`). So what webhooks hold is bounded by
//! `--webhook-queue` + [`MAX_IN_FLIGHT`] summaries, whatever the receivers do.
//!
//! The requests go out with the hyper client the link check uses
//! (`client`: HTTP/1.1, TLS with the webpki roots for `https`), each
//! worker keeping its connection to each URL for its next message; each
//! request is bounded by `--webhook-timeout` from connect to the end of the
//! response. The URL is the operator's: it is not filtered, only
//! time-bounded.

mod client;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::{Mutex, mpsc};

use crate::config::{WebhookSettings, webhook_url as parse_url};

/// Messages being delivered (with their retries) at once: the workers.
pub const MAX_IN_FLIGHT: usize = 16;

/// The waits before each retry.
const BACKOFF_SECS: [u64; 5] = [1, 2, 4, 8, 16];

/// What `/health` says of the webhooks.
#[derive(Debug, Default)]
struct Counts {
    /// Messages in the queue or being delivered.
    queued: AtomicU64,
    /// Requests a receiver took (2xx): one per message and URL.
    delivered: AtomicU64,
    /// Deliveries given up: a 4xx other than 429, or every retry spent.
    failed: AtomicU64,
    /// Messages dropped because the queue was full.
    dropped: AtomicU64,
    /// Retries made.
    retried: AtomicU64,
}

/// Where and how to POST.
struct Target {
    clients: Vec<client::Client>,
    secret: Option<Vec<u8>>,
    timeout: Duration,
}

/// The webhooks' queue and counts.
pub struct Webhooks {
    queue: mpsc::Sender<Bytes>,
    counts: Arc<Counts>,
    capacity: usize,
}

impl Webhooks {
    /// Starts the dispatcher on the current runtime; None without `--webhook`.
    pub fn start(settings: &WebhookSettings) -> Result<Option<Arc<Webhooks>>, String> {
        if settings.webhook.is_empty() {
            return Ok(None);
        }
        settings.validate()?;
        // The webpki roots cost about 1 MiB: loaded only for an https URL.
        let urls = settings
            .webhook
            .iter()
            .map(|u| parse_url(u))
            .collect::<Result<Vec<_>, _>>()?;
        let https = urls.iter().any(|u| u.scheme() == "https");
        let tls = https.then(crate::tls::client_config).transpose()?;
        let target = Arc::new(Target {
            clients: urls
                .into_iter()
                .map(|url| client::Client::new(url, tls.clone()))
                .collect(),
            secret: settings.webhook_secret.clone().map(String::into_bytes),
            timeout: settings.webhook_timeout,
        });
        let (queue, receiver) = mpsc::channel(settings.webhook_queue);
        let receiver = Arc::new(Mutex::new(receiver));
        let counts = Arc::new(Counts::default());
        for _ in 0..MAX_IN_FLIGHT {
            tokio::spawn(work(receiver.clone(), target.clone(), counts.clone()));
        }
        Ok(Some(Arc::new(Webhooks {
            queue,
            counts,
            capacity: settings.webhook_queue,
        })))
    }

    /// Queues the webhooks of a stored message, never waiting: a full queue drops it.
    pub fn stored(&self, summary: Bytes) {
        self.counts.queued.fetch_add(1, Ordering::Relaxed);
        if self.queue.try_send(summary).is_err() {
            self.counts.queued.fetch_sub(1, Ordering::Relaxed);
            let dropped = self.counts.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // Logged at the 1st, 2nd, 4th... and every 1000th: a flood of drops is not a flood of lines.
            if !(dropped.is_power_of_two() || dropped.is_multiple_of(1000)) {
                return;
            }
            tracing::warn!(
                dropped,
                "webhook queue full (--webhook-queue {}): a message's webhook was dropped",
                self.capacity
            );
        }
    }

    /// `/health`'s `webhooks`.
    pub fn health(&self) -> serde_json::Value {
        let c = &self.counts;
        serde_json::json!({
            "queued": c.queued.load(Ordering::Relaxed),
            "delivered": c.delivered.load(Ordering::Relaxed),
            "failed": c.failed.load(Ordering::Relaxed),
            "dropped": c.dropped.load(Ordering::Relaxed),
            "retried": c.retried.load(Ordering::Relaxed),
        })
    }
}

/// One worker: takes a message off the queue and delivers it to every URL
/// (at once), then the next, on the connections it keeps.
async fn work(queue: Arc<Mutex<mpsc::Receiver<Bytes>>>, target: Arc<Target>, counts: Arc<Counts>) {
    let mut kept: Vec<client::Connection> =
        target.clients.iter().map(|_| Default::default()).collect();
    loop {
        let Some(summary) = queue.lock().await.recv().await else {
            return;
        };
        let body = event_body(&summary);
        drop(summary);
        let posts = target
            .clients
            .iter()
            .zip(kept.iter_mut())
            .map(|(client, kept)| deliver(&target, client, kept, body.clone(), &counts));
        futures_util::future::join_all(posts).await;
        counts.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `{"event":"stored","email":<summary>}`.
fn event_body(summary: &[u8]) -> Bytes {
    let mut body = Vec::with_capacity(summary.len() + 32);
    body.extend_from_slice(br#"{"event":"stored","email":"#);
    body.extend_from_slice(summary);
    body.push(b'}');
    Bytes::from(body)
}

/// The signature header's value: `sha256=<hex HMAC-SHA256 of body>`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(7 + 64);
    text.push_str("sha256=");
    for byte in digest {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 15)]));
    }
    text
}

/// Whether a status is worth a retry.
fn retryable(status: u16) -> bool {
    status >= 500 || status == 429
}

/// POSTs `body` to `url`, retrying after each of [`BACKOFF_SECS`].
async fn deliver(
    target: &Target,
    client: &client::Client,
    kept: &mut client::Connection,
    body: Bytes,
    counts: &Counts,
) {
    let url = client.url();
    let signature = target.secret.as_ref().map(|s| signature(s, &body));
    let mut last = String::new();
    for attempt in 0..=BACKOFF_SECS.len() {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(BACKOFF_SECS[attempt - 1])).await;
            counts.retried.fetch_add(1, Ordering::Relaxed);
        }
        let post = client.post(kept, body.clone(), signature.as_deref());
        let sent = tokio::time::timeout(target.timeout, post).await;
        match sent {
            Ok(Ok(status)) if (200..300).contains(&status) => {
                counts.delivered.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Ok(Ok(status)) if !retryable(status) => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%url, status, "webhook refused: not retried");
                return;
            }
            Ok(Ok(status)) => last = format!("status {status}"),
            Ok(Err(e)) => last = e,
            Err(_) => last = format!("no answer within {:?}", target.timeout),
        }
        tracing::debug!(%url, attempt, "webhook failed: {last}");
    }
    counts.failed.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(%url, "webhook given up after {} retries: {last}", BACKOFF_SECS.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_rfc_4231s_hmac_sha256() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn the_body_wraps_the_summary() {
        let body = event_body(br#"{"id":"x"}"#);
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["event"], "stored");
        assert_eq!(value["email"]["id"], "x");
    }

    #[test]
    fn only_http_urls_are_taken() {
        assert!(parse_url("http://127.0.0.1:9/hook").is_ok());
        assert!(parse_url("https://chat.example/hook?x=1").is_ok());
        assert!(parse_url("ftp://x/").is_err());
        assert!(parse_url("not a url").is_err());
        assert!(retryable(503) && retryable(429) && !retryable(404) && !retryable(400));
    }
}
