//! A small HTTP/1.1 server connection that drives warp's service.
//!
//! Kept by hand instead of hyper's: hyper keeps two 8 KiB buffers per
//! connection for the connection's whole life, which makes 10,000 parked
//! waits cost over 160 MiB, and warp 0.4 gives no way to stream a body it did
//! not build. This driver reads requests with the sans-IO [`reader`] into a
//! buffer that grows only as needed (and is freed while a request is parked
//! or the connection idles), hands each request to the warp filter, and
//! writes the response itself. Every refusal it makes is JSON, like the
//! API's own.
//!
//! What it does:
//! - keep-alive (HTTP/1.1 by default, HTTP/1.0 on request), pipelined
//!   requests answered in order;
//! - deadlines: a head must arrive within the head timeout once its first
//!   byte has, a body within the body timeout once its head has (408 and
//!   close), a kept-alive connection is closed after [`IDLE_TIMEOUT`] without
//!   a request, and a write that makes no progress for
//!   [`WRITE_STALL_TIMEOUT`] ends the connection (a client that stops reading
//!   holds its socket buffers and one chunk, and only that long);
//! - caps on head, URL, headers and body sizes (see [`reader`]), and on open
//!   connections ([`HttpConnections`]: past it a new connection takes the
//!   slot of the kept-alive connection that has been idle longest, at least
//!   `RECLAIM_GRACE`, which is closed; with none, it gets 503);
//! - `Expect: 100-continue` for HTTP/1.1 clients; HEAD is asked of the API as
//!   GET and answered with GET's status and headers and no body;
//! - a client that goes away while its request is in flight drops that
//!   request (which cancels a parked wait); a response that is ready is
//!   always written first;
//! - an error that ends a connection before its request was read (413, 431,
//!   408) is answered, then what the client still sends is read and dropped
//!   for a while (`LINGER_BYTES`, `LINGER_TIME`) before the socket
//!   closes, so that a client still writing its body reads the answer
//!   instead of a reset;
//! - streamed bodies: a response that carries a [`StreamedBody`] extension is
//!   written chunked (HTTP/1.1) or close-delimited (HTTP/1.0), one chunk
//!   pulled from its [`ChunkSource`] only once the previous one is written;
//!   a source that ends cut short (its message was deleted) ends the
//!   connection without the last chunk, so the client sees the body incomplete;
//! - live bodies (event streams): a response that carries a [`LiveBody`] is
//!   written as its source produces bytes, for as long as it lasts, while
//!   the socket is watched so a client that goes away ends it at once.

mod idle;
pub mod reader;

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use mailjar_core::api::{CHUNK_BYTES, ChunkSource};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower_service::Service;
use warp::http::{self, HeaderValue};

pub use idle::IdleConnections;
pub use reader::{
    LargeBodyRoute, MAX_BODY_BYTES, MAX_HEAD_BYTES, MAX_HEADER_BYTES, MAX_URL_BYTES, Refusal,
    RequestHead, RequestReader, Step,
};

/// How long a connection may sit between requests before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a write may make no progress (the client reads nothing) before
/// the connection is ended.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(300);
/// Bodies up to this size are written in one piece with their head; larger
/// ones are written after it, not copied.
const SMALL_BODY_BYTES: usize = 16 * 1024;
/// Connections refused over the cap that may be answered at once; past it a
/// refused connection is closed without an answer.
const MAX_REFUSING: usize = 64;
/// How long a refused connection is read (and the bytes dropped) after its
/// 503, so that closing it does not reset the answer away.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// After an error that ends a connection before its request was read (a
/// body too large, a head too large or too slow): the most bytes, and the
/// longest time, read and dropped before the socket is closed. Closing a
/// socket with unread bytes resets the connection, and a client still
/// writing its request (Python's `http.client` sends a whole body before it
/// reads) would see the reset, not the answer; nginx calls this a lingering
/// close.
const LINGER_BYTES: usize = 16 * 1024 * 1024;
/// See `LINGER_BYTES`.
const LINGER_TIME: Duration = Duration::from_secs(2);
/// Room for a chunk-size line before a chunk: 16 hex digits and CRLF.
const CHUNK_PREFIX: usize = 18;

/// The deadlines of one connection.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// A request head, from its first byte.
    pub head: Duration,
    /// A request body, from the end of its head.
    pub body: Duration,
    /// Between requests.
    pub idle: Duration,
    /// A write that makes no progress.
    pub write_stall: Duration,
}

/// How long a new connection over the cap waits for the idle connection it
/// asked to close to let go of its slot.
const RECLAIM_WAIT: Duration = Duration::from_millis(250);
/// How long a kept-alive connection must have been idle before a new one
/// may take its slot: a client that has just had an answer may be sending
/// its next request on it at this moment.
const RECLAIM_GRACE: Duration = Duration::from_millis(100);

/// The cap on open HTTP connections, and the live count of them (for `/health`).
#[derive(Debug, Clone)]
pub struct HttpConnections {
    slots: Arc<Semaphore>,
    max: usize,
    refusing: Arc<Semaphore>,
    idle: IdleConnections,
}

impl HttpConnections {
    /// At most `max` connections open at once.
    pub fn new(max: usize) -> HttpConnections {
        let max = max.min(Semaphore::MAX_PERMITS);
        HttpConnections {
            slots: Arc::new(Semaphore::new(max)),
            max,
            refusing: Arc::new(Semaphore::new(MAX_REFUSING)),
            idle: IdleConnections::default(),
        }
    }

    /// The idle connections, for [`serve_connection`].
    pub fn idle(&self) -> IdleConnections {
        self.idle.clone()
    }

    /// How many HTTP connections are open now.
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.slots.available_permits())
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A slot for a new connection, held while it is open; None when full.
    pub fn try_open(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    /// For a new connection over the cap: the slot of the kept-alive
    /// connection that has been idle longest (at least `RECLAIM_GRACE`),
    /// which is asked to close; None when there is none, or its slot went
    /// to another new connection first.
    pub async fn reclaim(&self) -> Option<OwnedSemaphorePermit> {
        if !self.idle.close_oldest(RECLAIM_GRACE) {
            return None;
        }
        tokio::time::timeout(RECLAIM_WAIT, self.slots.clone().acquire_owned())
            .await
            .ok()?
            .ok()
    }

    /// Leave to answer a refused connection; None when too many are being answered.
    pub fn try_refuse(&self) -> Option<OwnedSemaphorePermit> {
        self.refusing.clone().try_acquire_owned().ok()
    }
}

/// What the accept loop needs besides the routes' context.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// How long a request body may take once its head has arrived.
    pub body_timeout: Duration,
    /// The connection cap and count.
    pub connections: HttpConnections,
    /// The route that takes bodies larger than [`MAX_BODY_BYTES`] (`POST /api/send`).
    pub large_body: Option<LargeBody>,
}

/// A route whose bodies may be large, and the budget they are charged to
/// while their request is handled (`--max-inflight-bytes`, shared with SMTP).
#[derive(Debug, Clone)]
pub struct LargeBody {
    /// The route and its limit.
    pub route: LargeBodyRoute,
    /// The bytes of mail in flight.
    pub load: Arc<crate::smtp_load::SmtpLoad>,
}

/// How many bytes a large body is charged: the body, and the message built
/// from it while both are held.
const LARGE_BODY_CHARGE: usize = 2;

/// The body of a request, handed to the routes as a request extension (the
/// warp service is called with an empty body).
#[derive(Debug, Clone)]
pub struct RequestBody(pub Bytes);

/// A response body produced chunk by chunk as the driver writes it.
///
/// warp 0.4's body cannot wrap a stream, so the route puts one of these in
/// `http::Response::extensions_mut()` (with an empty warp body) and the
/// driver writes it: chunked for HTTP/1.1, close-delimited for HTTP/1.0,
/// never pulled for HEAD.
#[derive(Clone)]
pub struct StreamedBody(pub Arc<Mutex<Option<Box<dyn ChunkSource>>>>);

impl StreamedBody {
    /// Wraps a source.
    pub fn new(source: Box<dyn ChunkSource>) -> StreamedBody {
        StreamedBody(Arc::new(Mutex::new(Some(source))))
    }

    /// The source, once (None afterwards).
    pub fn take(&self) -> Option<Box<dyn ChunkSource>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl std::fmt::Debug for StreamedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamedBody")
    }
}

/// The next pieces of a [`LiveSource`], with the source to ask again; None at its end.
pub type LiveNext = Pin<Box<dyn Future<Output = Option<(Vec<Bytes>, Box<dyn LiveSource>)>> + Send>>;

/// A body produced over time (an event stream): each call waits for the
/// next bytes to write, as pieces written in order in one go (shared
/// buffers are written as they are, not copied). The source moves into the
/// future it returns, so the driver can hold that future across its watch
/// of the socket.
pub trait LiveSource: Send {
    /// The next pieces, and the source back; None when the body is over.
    fn next(self: Box<Self>) -> LiveNext;
}

/// A response body written as it is produced, for as long as it lasts.
///
/// Put in `http::Response::extensions_mut()` like [`StreamedBody`]; written
/// chunked for HTTP/1.1 and close-delimited for HTTP/1.0, never pulled for HEAD.
#[derive(Clone)]
pub struct LiveBody(Arc<Mutex<Option<Box<dyn LiveSource>>>>);

impl LiveBody {
    /// Wraps a source.
    pub fn new(source: Box<dyn LiveSource>) -> LiveBody {
        LiveBody(Arc::new(Mutex::new(Some(source))))
    }

    fn take(&self) -> Option<Box<dyn LiveSource>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl std::fmt::Debug for LiveBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveBody")
    }
}

/// A response body as the driver writes it.
enum Payload {
    Full(Bytes),
    Stream(Box<dyn ChunkSource>),
    Live(Box<dyn LiveSource>),
}

/// How the end of a response body is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    /// The body ends when the connection closes (HTTP/1.0 streams).
    Close,
}

/// Serves one connection until the client closes it, a request asks to close,
/// a protocol error or a deadline ends it, the server shuts down while it is
/// idle, or (idle after an answer) `idle` asks it to give its slot to a new
/// connection.
pub async fn serve_connection<T, S>(
    mut stream: T,
    mut service: S,
    mut shutdown: watch::Receiver<bool>,
    timeouts: Timeouts,
    idle: IdleConnections,
    large: Option<LargeBody>,
) -> io::Result<()>
where
    T: AsyncRead + AsyncWrite + Unpin,
    S: Service<http::Request<Empty<Bytes>>, Response = warp::reply::Response, Error = Infallible>,
{
    let mut reader = RequestReader::new();
    reader.allow_large_body(large.as_ref().map(|l| l.route));
    // Only a connection that has been answered can give its slot away while idle.
    let mut kept_alive: Option<&IdleConnections> = None;
    loop {
        let next = read_head(
            &mut stream,
            &mut reader,
            &mut shutdown,
            &timeouts,
            kept_alive,
        )
        .await?;
        let admitted = match next {
            Next::Head(head) => charge_large_body(head, large.as_ref()),
            Next::Closed => return Ok(()),
            Next::Refused(refusal) => Err(refusal),
        };
        // A large body is charged to the mail budget until it is answered.
        let (head, charge) = match admitted {
            Ok(admitted) => admitted,
            Err(refusal) => return refuse(&mut stream, &refusal, timeouts.write_stall).await,
        };
        let exchanged = exchange(
            &mut stream,
            &mut reader,
            &mut service,
            head,
            &shutdown,
            &timeouts,
        )
        .await;
        drop(charge);
        if !exchanged? {
            let _ = stream.shutdown().await;
            return Ok(());
        }
        // An idle connection holds no buffer.
        reader.release();
        kept_alive = Some(&idle);
    }
}

/// Charges a body larger than [`MAX_BODY_BYTES`] (only a large route's can
/// be) to its budget: the charge to hold until it is answered, or the 503
/// when the budget has no room.
fn charge_large_body(
    head: Box<RequestHead>,
    large: Option<&LargeBody>,
) -> Result<(Box<RequestHead>, Option<crate::smtp_load::ConnectionBudget>), Refusal> {
    let Some(large) = large.filter(|_| head.body_length > MAX_BODY_BYTES) else {
        return Ok((head, None));
    };
    let mut budget = crate::smtp_load::ConnectionBudget::new(large.load.clone());
    // At most the whole budget: one send alone always fits.
    let bytes = head
        .body_length
        .saturating_mul(LARGE_BODY_CHARGE)
        .min(large.load.limit());
    if !mailjar_core::smtp::Budget::hold(&mut budget, bytes) {
        return Err(Refusal {
            status: 503,
            error: "too much mail is being received at once (--max-inflight-bytes): try again"
                .to_owned(),
        });
    }
    Ok((head, Some(budget)))
}

/// Reads the body of `head`, has the request answered and writes the
/// answer; false when the connection is to close.
async fn exchange<T, S>(
    stream: &mut T,
    reader: &mut RequestReader,
    service: &mut S,
    head: Box<RequestHead>,
    shutdown: &watch::Receiver<bool>,
    timeouts: &Timeouts,
) -> io::Result<bool>
where
    T: AsyncRead + AsyncWrite + Unpin,
    S: Service<http::Request<Empty<Bytes>>, Response = warp::reply::Response, Error = Infallible>,
{
    // The steps that wait on timers are boxed apart: a connection (and a
    // parked request) carries the space of the step it is in, not of the largest.
    if !Box::pin(read_body(stream, reader, &head, timeouts)).await? {
        return Ok(false);
    }
    let body = reader.take_body();
    // A parked wait should not hold a read buffer.
    reader.release();
    let is_head = head.method == http::Method::HEAD;
    let version = head.version;
    let keep_alive = head.keep_alive;
    let (parts, payload) = match head.refusal {
        Some(refusal) => error_response(&refusal),
        None => {
            let mut request = head.to_request();
            drop(head);
            // Only a POST or a PATCH has a body the API reads: no other
            // request (a parked wait above all) holds one.
            let reads_body = matches!(*request.method(), http::Method::POST | http::Method::PATCH);
            if !body.is_empty() && reads_body {
                request.extensions_mut().insert(RequestBody(body));
            }
            if is_head {
                *request.method_mut() = http::Method::GET;
            }
            // Boxed apart: a parked request holds the call's own size, no more.
            let call = Box::pin(service.call(request));
            let Some(response) = call_watching(stream, reader, call).await? else {
                // The client left; dropping the call cancels what it waited for.
                return Ok(false);
            };
            let (mut parts, body) = response.into_parts();
            let live = parts.extensions.remove::<LiveBody>().and_then(|l| l.take());
            let streamed = parts
                .extensions
                .remove::<StreamedBody>()
                .and_then(|s| s.take());
            match (live, streamed) {
                (Some(source), _) => (parts, Payload::Live(source)),
                (None, Some(source)) => (parts, Payload::Stream(source)),
                (None, None) => {
                    let body = match body.collect().await {
                        Ok(collected) => collected.to_bytes(),
                        Err(_) => Bytes::from_static(br#"{"error":"the response body failed"}"#),
                    };
                    (parts, Payload::Full(body))
                }
            }
        }
    };
    let mut closing = !keep_alive || *shutdown.borrow();
    let framing = match &payload {
        Payload::Full(body) => Framing::Length(body.len()),
        Payload::Stream(_) | Payload::Live(_) if version == http::Version::HTTP_11 => {
            Framing::Chunked
        }
        Payload::Stream(_) | Payload::Live(_) => {
            closing = true;
            Framing::Close
        }
    };
    let mut out = Vec::with_capacity(256);
    write_head(&mut out, parts.status, &parts.headers, framing, closing);
    drop(parts);
    let payload = match payload {
        Payload::Live(source) if !is_head => {
            write_all(stream, &out, timeouts.write_stall).await?;
            drop(out);
            let live = write_live(
                stream,
                source,
                framing == Framing::Chunked,
                timeouts.write_stall,
                shutdown.clone(),
            );
            // A live body ends the connection: its client is gone or the server stops.
            Box::pin(live).await?;
            return Ok(false);
        }
        payload => payload,
    };
    Box::pin(write_answer(
        stream,
        out,
        payload,
        is_head,
        framing,
        timeouts.write_stall,
    ))
    .await?;
    Ok(!closing)
}

/// Writes a response head (`out`) and its body (none for HEAD).
async fn write_answer<T: AsyncWrite + Unpin>(
    stream: &mut T,
    mut out: Vec<u8>,
    payload: Payload,
    is_head: bool,
    framing: Framing,
    stall: Duration,
) -> io::Result<()> {
    match payload {
        Payload::Full(body) if is_head => {
            drop(body);
            write_all(stream, &out, stall).await?;
        }
        Payload::Full(body) if body.len() <= SMALL_BODY_BYTES => {
            out.extend_from_slice(&body);
            write_all(stream, &out, stall).await?;
        }
        Payload::Full(body) => {
            write_all(stream, &out, stall).await?;
            write_all(stream, &body, stall).await?;
        }
        // HEAD never pulls the stream.
        Payload::Stream(_) | Payload::Live(_) if is_head => write_all(stream, &out, stall).await?,
        // Written by `write_live`, which needs to read the socket too.
        Payload::Live(_) => write_all(stream, &out, stall).await?,
        Payload::Stream(source) => {
            write_all(stream, &out, stall).await?;
            drop(out);
            write_stream(stream, source, framing == Framing::Chunked, stall).await?;
        }
    }
    stream.flush().await
}

/// Answers a connection refused at accept (over the cap) with `refusal`
/// and closes it, reading what the client sent for a moment so that the
/// close does not reset the answer away. Bounded: when too many are being
/// answered already, the connection is closed without an answer.
pub async fn refuse_connection<T>(stream: T, connections: &HttpConnections, refusal: &Refusal)
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let Some(_answering) = connections.try_refuse() else {
        return;
    };
    answer_refused(stream, refusal).await;
}

/// What [`refuse_connection`] does once it has its leave
/// ([`HttpConnections::try_refuse`]), for a caller that needed the leave
/// earlier (an HTTPS refusal holds it through its handshake).
pub async fn answer_refused<T>(mut stream: T, refusal: &Refusal)
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    if write_error(&mut stream, refusal, REFUSAL_LINGER)
        .await
        .is_err()
    {
        return;
    }
    linger(&mut stream, MAX_HEAD_BYTES, REFUSAL_LINGER).await;
}

/// Answers `refusal` (closing the writing side), then reads and drops what
/// the client still sends, up to `LINGER_BYTES` and `LINGER_TIME`,
/// before the connection closes.
async fn refuse<T: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut T,
    refusal: &Refusal,
    stall: Duration,
) -> io::Result<()> {
    write_error(stream, refusal, stall).await?;
    linger(stream, LINGER_BYTES, LINGER_TIME).await;
    Ok(())
}

/// Reads and drops what the client sends until it closes, `max_bytes` have
/// come, or `max_time` has passed.
async fn linger<T: AsyncRead + Unpin>(stream: &mut T, max_bytes: usize, max_time: Duration) {
    let _ = tokio::time::timeout(max_time, async {
        let mut read = 0usize;
        let mut dropped = Vec::new();
        while read < max_bytes {
            match read_into(stream, &mut dropped).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
            dropped.clear();
        }
    })
    .await;
}

enum Next {
    Head(Box<RequestHead>),
    /// The client closed the connection between requests, or the server is shutting down.
    Closed,
    /// Answer this and close.
    Refused(Refusal),
}

async fn read_head<T: AsyncRead + Unpin>(
    stream: &mut T,
    reader: &mut RequestReader,
    shutdown: &mut watch::Receiver<bool>,
    timeouts: &Timeouts,
    kept_alive: Option<&IdleConnections>,
) -> io::Result<Next> {
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        match reader.next_step() {
            Step::Head(head) => return Ok(Next::Head(head)),
            Step::Fatal(refusal) => return Ok(Next::Refused(refusal)),
            Step::NeedMore | Step::BodyDone => {}
        }
        let idle = reader.is_idle();
        if !idle {
            deadline.get_or_insert_with(|| tokio::time::Instant::now() + timeouts.head);
        }
        let mut waiting = kept_alive.filter(|_| idle).map(IdleConnections::waiting);
        // Through a scratch array: an idle connection keeps no read buffer.
        let read = tokio::select! {
            // Biased: bytes that have arrived are read even when this connection was asked to close.
            biased;
            read = read_into(stream, reader.buffer_mut()) => read?,
            _ = sleep_until(deadline) => {
                return Ok(Next::Refused(Refusal {
                    status: 408,
                    error: "the request head did not arrive in time".to_owned(),
                }));
            }
            _ = shut_down(shutdown), if idle => return Ok(Next::Closed),
            // A kept-alive connection with nothing to ask is let go after a while.
            _ = tokio::time::sleep(timeouts.idle), if idle => return Ok(Next::Closed),
            // Or at once, when a new connection needs its slot.
            _ = async { match &mut waiting { Some(w) => w.asked().await, None => std::future::pending().await } }, if idle => {
                tracing::debug!("an idle HTTP connection closed to make room for a new one");
                return Ok(Next::Closed);
            }
        };
        drop(waiting);
        if read == 0 {
            return Ok(Next::Closed);
        }
    }
}

/// Reads (and drops) the body of `head` within the body timeout; false when
/// the connection is over (the client left, or a 408 was written).
async fn read_body<T: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut T,
    reader: &mut RequestReader,
    head: &RequestHead,
    timeouts: &Timeouts,
) -> io::Result<bool> {
    if head.expect_continue && reader.buffered() < head.body_length {
        write_all(
            stream,
            b"HTTP/1.1 100 Continue\r\n\r\n",
            timeouts.write_stall,
        )
        .await?;
    }
    let deadline = tokio::time::Instant::now() + timeouts.body;
    loop {
        match reader.next_step() {
            Step::BodyDone => return Ok(true),
            Step::NeedMore => {}
            // A body step never gives a head or an error.
            Step::Head(_) | Step::Fatal(_) => return Ok(false),
        }
        let buf = reader.buffer_mut();
        buf.reserve(4096);
        let read = tokio::select! {
            read = stream.read_buf(buf) => read?,
            _ = tokio::time::sleep_until(deadline) => {
                let refusal = Refusal {
                    status: 408,
                    error: "the request body did not arrive in time".to_owned(),
                };
                refuse(stream, &refusal, timeouts.write_stall).await?;
                return Ok(false);
            }
        };
        if read == 0 {
            return Ok(false);
        }
    }
}

/// Runs the call while watching the socket: EOF means the client left (None).
async fn call_watching<T, F>(
    stream: &mut T,
    reader: &mut RequestReader,
    mut call: Pin<Box<F>>,
) -> io::Result<Option<warp::reply::Response>>
where
    T: AsyncRead + Unpin,
    F: Future<Output = Result<warp::reply::Response, Infallible>>,
{
    loop {
        tokio::select! {
            // A response that is ready is taken before a half-close is seen.
            biased;
            result = call.as_mut() => match result {
                Ok(response) => return Ok(Some(response)),
                Err(never) => match never {},
            },
            read = read_into(stream, reader.buffer_mut()) => match read? {
                0 => return Ok(None),
                // A flood of pipelined bytes: not a client we serve.
                _ if reader.buffered() > MAX_HEAD_BYTES => return Ok(None),
                _ => {}
            },
        }
    }
}

/// Reads what the socket has into `buf` through a small scratch array that
/// lives only while polled, so a parked request's future does not carry it
/// and its buffer is not grown in advance.
async fn read_into<T: AsyncRead + Unpin>(stream: &mut T, buf: &mut Vec<u8>) -> io::Result<usize> {
    std::future::poll_fn(|cx: &mut Context<'_>| {
        let mut scratch = [0u8; 4096];
        let mut read = ReadBuf::new(&mut scratch);
        match Pin::new(&mut *stream).poll_read(cx, &mut read) {
            Poll::Ready(Ok(())) => {
                buf.extend_from_slice(read.filled());
                Poll::Ready(Ok(read.filled().len()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Writes all of `data`; fails when a write makes no progress within `stall`.
async fn write_all<T: AsyncWrite + Unpin>(
    stream: &mut T,
    data: &[u8],
    stall: Duration,
) -> io::Result<()> {
    write_all_parts(stream, &mut [io::IoSlice::new(data)], stall).await
}

/// Writes all of `parts` in order, in as few writes as the socket takes
/// (one `writev` each); fails when a write makes no progress within `stall`.
async fn write_all_parts<T: AsyncWrite + Unpin>(
    stream: &mut T,
    mut parts: &mut [io::IoSlice<'_>],
    stall: Duration,
) -> io::Result<()> {
    io::IoSlice::advance_slices(&mut parts, 0);
    while !parts.is_empty() {
        match write_some(stream, parts, stall).await? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => io::IoSlice::advance_slices(&mut parts, n),
        }
    }
    Ok(())
}

/// One write of what it can of `parts`. Most writes go through at once: the
/// stall deadline (a timer to set and cancel) is armed only for one that has
/// to wait for the client.
async fn write_some<T: AsyncWrite + Unpin>(
    stream: &mut T,
    parts: &[io::IoSlice<'_>],
    stall: Duration,
) -> io::Result<usize> {
    let at_once = std::future::poll_fn(|cx: &mut Context<'_>| {
        match Pin::new(&mut *stream).poll_write_vectored(cx, parts) {
            Poll::Ready(result) => Poll::Ready(Some(result)),
            Poll::Pending => Poll::Ready(None),
        }
    })
    .await;
    if let Some(result) = at_once {
        return result;
    }
    match tokio::time::timeout(stall, stream.write_vectored(parts)).await {
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client stopped reading",
        )),
        Ok(result) => result,
    }
}

/// Writes a streamed body: one chunk pulled, framed and written at a time
/// into one reused buffer, so a client that does not read holds one chunk
/// and pauses this stream only.
async fn write_stream<T: AsyncWrite + Unpin>(
    stream: &mut T,
    mut source: Box<dyn ChunkSource>,
    chunked: bool,
    stall: Duration,
) -> io::Result<()> {
    let mut frame: Vec<u8> = Vec::with_capacity(CHUNK_PREFIX + CHUNK_BYTES + 2);
    loop {
        frame.clear();
        frame.resize(CHUNK_PREFIX, 0);
        let more = source.next_chunk(&mut frame);
        let len = frame.len() - CHUNK_PREFIX;
        // An empty chunk would end a chunked body: nothing is written for it.
        if len > 0 {
            let start = if chunked {
                let size = format!("{len:x}\r\n");
                let start = CHUNK_PREFIX - size.len();
                frame[start..CHUNK_PREFIX].copy_from_slice(size.as_bytes());
                frame.extend_from_slice(b"\r\n");
                start
            } else {
                CHUNK_PREFIX
            };
            write_all(stream, &frame[start..], stall).await?;
        }
        if !more {
            break;
        }
        // Serialising a chunk is CPU work: let other connections (a /health
        // probe, a small request) run between chunks of a long body.
        tokio::task::yield_now().await;
    }
    if source.cut_short() {
        // No last chunk: the connection ends, and the client sees the body incomplete.
        return Err(io::Error::other(
            "the body was cut short (its message was deleted)",
        ));
    }
    if chunked {
        write_all(stream, b"0\r\n\r\n", stall).await?;
    }
    Ok(())
}

/// Writes a live body as its source produces it, until the source ends, the
/// client goes away (EOF or an error on the socket) or the server shuts down.
async fn write_live<T: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut T,
    source: Box<dyn LiveSource>,
    chunked: bool,
    stall: Duration,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let mut next = source.next();
    // What the client sends meanwhile is dropped; only its EOF matters.
    let mut ignored = Vec::new();
    loop {
        tokio::select! {
            biased;
            _ = shut_down(&mut shutdown) => break,
            read = read_into(stream, &mut ignored) => match read {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => ignored.clear(),
            },
            produced = &mut next => match produced {
                None => break,
                Some((pieces, source)) => {
                    write_pieces(stream, &pieces, chunked, stall).await?;
                    // What the pieces share is not held while idle.
                    drop(pieces);
                    next = source.next();
                }
            },
        }
    }
    if chunked {
        write_all(stream, b"0\r\n\r\n", stall).await?;
    }
    stream.flush().await
}

/// Writes `pieces` as one chunk (HTTP/1.1) or as they are: framed around
/// them, not copied, in one writev of the chunk-size line, the pieces and
/// the CRLF (as many as the socket takes at a time).
async fn write_pieces<T: AsyncWrite + Unpin>(
    stream: &mut T,
    pieces: &[Bytes],
    chunked: bool,
    stall: Duration,
) -> io::Result<()> {
    let len: usize = pieces.iter().map(Bytes::len).sum();
    if len == 0 {
        return Ok(());
    }
    let size = if chunked {
        format!("{len:x}\r\n")
    } else {
        String::new()
    };
    let end: &[u8] = if chunked { b"\r\n" } else { b"" };
    let mut parts = Vec::with_capacity(pieces.len() + 2);
    parts.push(io::IoSlice::new(size.as_bytes()));
    parts.extend(pieces.iter().map(|piece| io::IoSlice::new(piece)));
    parts.push(io::IoSlice::new(end));
    write_all_parts(stream, &mut parts, stall).await
}

/// Resolves once the server shuts down (or is gone).
async fn shut_down(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|down| *down).await;
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

fn write_head(
    out: &mut Vec<u8>,
    status: http::StatusCode,
    headers: &http::HeaderMap,
    framing: Framing,
    closing: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name == http::header::CONTENT_LENGTH
            || name == http::header::CONNECTION
            || name == http::header::TRANSFER_ENCODING
        {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        Framing::Length(length) => {
            out.extend_from_slice(format!("content-length: {length}\r\n").as_bytes());
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::Close => {}
    }
    if closing {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The head and body of a JSON `{"error"}` answer made by the driver.
fn error_response(refusal: &Refusal) -> (http::response::Parts, Payload) {
    let body = serde_json::json!({ "error": refusal.error }).to_string();
    let mut response = http::Response::new(());
    *response.status_mut() =
        http::StatusCode::from_u16(refusal.status).unwrap_or(http::StatusCode::BAD_REQUEST);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    let (parts, ()) = response.into_parts();
    (parts, Payload::Full(Bytes::from(body)))
}

/// Writes a JSON error with `connection: close` and closes the writing side.
async fn write_error<T: AsyncWrite + Unpin>(
    stream: &mut T,
    refusal: &Refusal,
    stall: Duration,
) -> io::Result<()> {
    let (parts, payload) = error_response(refusal);
    let Payload::Full(body) = payload else {
        return Ok(());
    };
    let mut out = Vec::with_capacity(256 + body.len());
    write_head(
        &mut out,
        parts.status,
        &parts.headers,
        Framing::Length(body.len()),
        true,
    );
    out.extend_from_slice(&body);
    write_all(stream, &out, stall).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests;
