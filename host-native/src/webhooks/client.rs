//! The webhooks' HTTP client: hyper's HTTP/1.1 client connection (the one
//! the link check uses), TLS with the webpki roots for `https`.
//!
//! Each delivery worker keeps one connection per URL ([`Connection`]) and
//! drives it itself, inside the task that sends the request: no task per
//! connection, so a POST costs no wake-up of another task (or thread) for
//! its request and none for its response. A busy receiver is not paid a TCP
//! (and TLS) handshake per message.
//!
//! A response's body is read (at most [`MAX_RESPONSE_BODY`] bytes) only so
//! that its connection can be used again; a larger one, or one the receiver
//! closes, is not kept. A kept connection that fails before it answers is
//! replaced by a new one once, within the same attempt.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper::header;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use url::Url;

/// The most of a response body read to keep its connection.
const MAX_RESPONSE_BODY: usize = 64 * 1024;

const USER_AGENT: &str = concat!("mailjar/", env!("CARGO_PKG_VERSION"), " webhook");

type Sender = SendRequest<Full<Bytes>>;

/// A connection's I/O, run only while a request on it is.
type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One webhook URL.
pub struct Client {
    url: Url,
    /// For an `https` URL.
    tls: Option<Arc<rustls::ClientConfig>>,
}

/// A worker's kept-alive connection to one URL, if any.
#[derive(Default)]
pub struct Connection(Option<Open>);

struct Open {
    sender: Sender,
    driver: Driver,
}

impl Client {
    /// A client of `url`.
    pub fn new(url: Url, tls: Option<Arc<rustls::ClientConfig>>) -> Client {
        Client { url, tls }
    }

    /// The URL.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// POSTs `body` (with this signature header, if any) on `kept` or a new
    /// connection, which is kept for the next POST when it may be: the
    /// response's status.
    pub async fn post(
        &self,
        kept: &mut Connection,
        body: Bytes,
        signature: Option<&str>,
    ) -> Result<u16, String> {
        if let Some(open) = kept.0.take()
            && let Ok((status, open)) = self.send_on(open, body.clone(), signature).await
        {
            kept.0 = open;
            return Ok(status);
        }
        let open = self.connect().await?;
        let (status, open) = self.send_on(open, body, signature).await?;
        kept.0 = open;
        Ok(status)
    }

    /// The status, and the connection if it may serve another request.
    async fn send_on(
        &self,
        open: Open,
        body: Bytes,
        signature: Option<&str>,
    ) -> Result<(u16, Option<Open>), String> {
        let Open {
            mut sender,
            mut driver,
        } = open;
        let request = self.request(body, signature)?;
        let mut alive = true;
        let response = drive(&mut driver, &mut alive, async {
            sender.ready().await?;
            sender.send_request(request).await
        })
        .await
        .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let closing = response
            .headers()
            .get(header::CONNECTION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let read = Limited::new(response.into_body(), MAX_RESPONSE_BODY).collect();
        let read = drive(&mut driver, &mut alive, read).await.is_ok();
        let keep = read && alive && !closing && !sender.is_closed();
        Ok((status, keep.then_some(Open { sender, driver })))
    }

    fn request(
        &self,
        body: Bytes,
        signature: Option<&str>,
    ) -> Result<hyper::Request<Full<Bytes>>, String> {
        let url = &self.url;
        let path = &url[url::Position::BeforePath..url::Position::AfterQuery];
        let authority = &url[url::Position::BeforeHost..url::Position::AfterPort];
        let mut request = hyper::Request::builder()
            .method(hyper::Method::POST)
            .uri(if path.is_empty() { "/" } else { path })
            .header(header::HOST, authority)
            .header(header::USER_AGENT, USER_AGENT)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(signature) = signature {
            request = request.header("x-mailjar-signature", signature);
        }
        request
            .body(Full::new(body))
            .map_err(|e| format!("not a valid request: {e}"))
    }

    /// A new connection (TLS for `https`).
    async fn connect(&self) -> Result<Open, String> {
        let host = self.url.host_str().ok_or("no host")?;
        let port = self.url.port_or_known_default().ok_or("no port")?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let tcp = TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        if self.url.scheme() == "http" {
            return handshake(TokioIo::new(tcp)).await;
        }
        let name = ServerName::try_from(host.to_owned()).map_err(|e| format!("TLS name: {e}"))?;
        let config = self.tls.clone().ok_or("no TLS configuration")?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        handshake(TokioIo::new(tls)).await
    }
}

/// HTTP/1.1 on `io`; its I/O runs when [`drive`]n.
async fn handshake<I>(io: I) -> Result<Open, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Send + Unpin + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    let driver: Driver = Box::pin(async move {
        let _ = connection.await;
    });
    Ok(Open { sender, driver })
}

/// Runs `work` while the connection's I/O runs beside it in this task;
/// `alive` turns false once the connection has ended (then hyper ends
/// `work` with an error, or it had finished).
async fn drive<F: Future>(driver: &mut Driver, alive: &mut bool, work: F) -> F::Output {
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(out);
        }
        if *alive && driver.as_mut().poll(cx).is_ready() {
            *alive = false;
        }
        // Again: the connection may have just written its request or read its response.
        work.as_mut().poll(cx)
    })
    .await
}
