//! The webhooks' HTTP client: hyper's HTTP/1.1 client connection (the one
//! the link check uses), TLS with the webpki roots for `https`, and up to
//! [`MAX_IDLE`] kept-alive connections per URL, so a busy receiver is not
//! paid a TCP (and TLS) handshake per message.
//!
//! A response's body is read (at most [`MAX_RESPONSE_BODY`] bytes) only so
//! that its connection can be used again; a larger one, or one the receiver
//! closes, is not kept. A kept connection that fails before it answers is
//! replaced by a new one once, within the same attempt.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper::header;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use url::Url;

/// Idle connections kept per URL (as many as deliveries may run at once).
pub const MAX_IDLE: usize = super::MAX_IN_FLIGHT;

/// The most of a response body read to keep its connection.
const MAX_RESPONSE_BODY: usize = 64 * 1024;

const USER_AGENT: &str = concat!("mailjar/", env!("CARGO_PKG_VERSION"), " webhook");

type Sender = SendRequest<Full<Bytes>>;

/// One webhook URL and its idle connections.
pub struct Client {
    url: Url,
    /// For an `https` URL.
    tls: Option<Arc<rustls::ClientConfig>>,
    idle: Mutex<Vec<Sender>>,
}

impl Client {
    /// A client of `url`, no connection open yet.
    pub fn new(url: Url, tls: Option<Arc<rustls::ClientConfig>>) -> Client {
        Client {
            url,
            tls,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The URL.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// POSTs `body` (with this signature header, if any): the response's status.
    pub async fn post(&self, body: Bytes, signature: Option<&str>) -> Result<u16, String> {
        if let Some(sender) = self.take_idle()
            && let Ok(status) = self.send_on(sender, body.clone(), signature).await
        {
            return Ok(status);
        }
        let sender = self.connect().await?;
        self.send_on(sender, body, signature).await
    }

    fn take_idle(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        std::iter::from_fn(|| idle.pop()).find(|sender| !sender.is_closed())
    }

    async fn send_on(
        &self,
        mut sender: Sender,
        body: Bytes,
        signature: Option<&str>,
    ) -> Result<u16, String> {
        sender.ready().await.map_err(|e| e.to_string())?;
        let response = sender
            .send_request(self.request(body, signature)?)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let closing = response
            .headers()
            .get(header::CONNECTION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let read = Limited::new(response.into_body(), MAX_RESPONSE_BODY)
            .collect()
            .await
            .is_ok();
        if read && !closing && !sender.is_closed() {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push(sender);
            }
        }
        Ok(status)
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

    /// A new connection (TLS for `https`), its driver running until it closes.
    async fn connect(&self) -> Result<Sender, String> {
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

/// HTTP/1.1 on `io`; the connection's task ends when its last sender is dropped.
async fn handshake<I>(io: I) -> Result<Sender, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Send + Unpin + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}
