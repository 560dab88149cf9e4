//! The driver over an in-memory duplex pipe, with a tiny warp service.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::DuplexStream;
use warp::Filter;

use super::*;

/// A source of `chunks` chunks of `size` bytes (`b'a' + i % 26`), counting pulls.
struct Counting {
    chunks: usize,
    size: usize,
    pulled: Arc<AtomicUsize>,
}

impl ChunkSource for Counting {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        let i = self.pulled.load(Ordering::SeqCst);
        if i == self.chunks {
            return false;
        }
        self.pulled.fetch_add(1, Ordering::SeqCst);
        out.resize(out.len() + self.size, b'a' + (i % 26) as u8);
        true
    }
}

fn timeouts() -> Timeouts {
    Timeouts {
        head: Duration::from_secs(10),
        body: Duration::from_millis(300),
        idle: Duration::from_secs(10),
        write_stall: Duration::from_secs(10),
    }
}

/// The test service: `/stream` streams `chunks` chunks of `size` bytes,
/// `/` answers `{"ok":true}` to GET only.
fn service(
    chunks: usize,
    size: usize,
    pulled: Arc<AtomicUsize>,
) -> impl Service<
    http::Request<Empty<Bytes>>,
    Response = warp::reply::Response,
    Error = Infallible,
    Future = impl Future<Output = Result<warp::reply::Response, Infallible>> + Send,
> + Clone
+ Send {
    let stream = warp::get().and(warp::path("stream")).map(move || {
        let mut response = warp::reply::Response::new(Vec::<u8>::new().into());
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
            .extensions_mut()
            .insert(StreamedBody::new(Box::new(Counting {
                chunks,
                size,
                pulled: pulled.clone(),
            })));
        response
    });
    let root = warp::get().and(warp::path::end()).map(|| {
        let mut response = warp::reply::Response::new(r#"{"ok":true}"#.into());
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    });
    let other = warp::any().map(|| {
        let mut response = warp::reply::Response::new(r#"{"error":"no"}"#.into());
        *response.status_mut() = http::StatusCode::METHOD_NOT_ALLOWED;
        response
    });
    warp::service(stream.or(root).unify().or(other).unify())
}

struct Running {
    client: DuplexStream,
    server: tokio::task::JoinHandle<io::Result<()>>,
    pulled: Arc<AtomicUsize>,
    _shutdown: watch::Sender<bool>,
}

fn start(pipe_bytes: usize, chunks: usize, size: usize, timeouts: Timeouts) -> Running {
    let (client, server) = tokio::io::duplex(pipe_bytes);
    let pulled = Arc::new(AtomicUsize::new(0));
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let service = service(chunks, size, pulled.clone());
    let server = tokio::spawn(serve_connection(
        server,
        service,
        shutdown_rx,
        timeouts,
        Default::default(),
        None,
    ));
    Running {
        client,
        server,
        pulled,
        _shutdown: shutdown_tx,
    }
}

/// One response read off the pipe.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads a response from `buf` + the pipe; `head_only` for HEAD.
async fn read_answer(client: &mut DuplexStream, buf: &mut Vec<u8>, head_only: bool) -> Answer {
    let (status, headers, consumed) = loop {
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut fields);
        if let httparse::Status::Complete(n) = response.parse(buf).expect("a response head") {
            let headers = response
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_owned(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect::<Vec<_>>();
            break (response.code.expect("a status"), headers, n);
        }
        assert!(client.read_buf(buf).await.expect("read") > 0, "EOF in head");
    };
    buf.drain(..consumed);
    let mut answer = Answer {
        status,
        headers,
        body: Vec::new(),
    };
    if head_only || status == 100 {
        return answer;
    }
    if let Some(length) = answer.header("content-length") {
        let length: usize = length.parse().expect("a length");
        while buf.len() < length {
            assert!(client.read_buf(buf).await.expect("read") > 0, "EOF in body");
        }
        answer.body = buf.drain(..length).collect();
    } else if answer.header("transfer-encoding") == Some("chunked") {
        loop {
            let line_end = loop {
                if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                assert!(
                    client.read_buf(buf).await.expect("read") > 0,
                    "EOF in chunk"
                );
            };
            let size = usize::from_str_radix(std::str::from_utf8(&buf[..line_end]).unwrap(), 16)
                .expect("a chunk size");
            while buf.len() < line_end + 2 + size + 2 {
                assert!(
                    client.read_buf(buf).await.expect("read") > 0,
                    "EOF in chunk"
                );
            }
            answer
                .body
                .extend_from_slice(&buf[line_end + 2..line_end + 2 + size]);
            assert_eq!(&buf[line_end + 2 + size..line_end + 4 + size], b"\r\n");
            buf.drain(..line_end + 4 + size);
            if size == 0 {
                break;
            }
        }
    } else {
        client.read_to_end(buf).await.expect("read to the end");
        answer.body = std::mem::take(buf);
    }
    answer
}

#[tokio::test]
async fn a_connect_or_authority_target_is_400_and_the_pipelined_request_behind_is_served() {
    let mut run = start(1 << 20, 0, 0, timeouts());
    run.client
        .write_all(
            b"CONNECT localhost:25 HTTP/1.1\r\nHost: localhost:25\r\n\r\n\
              GET evil.com HTTP/1.1\r\nHost: localhost\r\n\r\n\
              OPTIONS * HTTP/1.1\r\nHost: localhost\r\n\r\n\
              GET http://localhost/ HTTP/1.1\r\n\r\n\
              GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let mut buf = Vec::new();
    for _ in 0..3 {
        let answer = read_answer(&mut run.client, &mut buf, false).await;
        assert_eq!(answer.status, 400, "{answer:?}");
        assert_eq!(answer.header("content-type"), Some("application/json"));
        let json: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        assert!(json["error"].is_string(), "{json}");
    }
    for _ in 0..2 {
        let answer = read_answer(&mut run.client, &mut buf, false).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.body, br#"{"ok":true}"#);
    }
    run.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn head_answers_like_get_without_a_body() {
    let mut run = start(1 << 20, 3, 10, timeouts());
    run.client
        .write_all(
            b"GET / HTTP/1.1\r\n\r\nHEAD / HTTP/1.1\r\n\r\nHEAD /stream HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let mut buf = Vec::new();
    let get = read_answer(&mut run.client, &mut buf, false).await;
    let head = read_answer(&mut run.client, &mut buf, true).await;
    assert_eq!(get.status, 200);
    assert_eq!(head.status, get.status);
    assert_eq!(head.headers, get.headers);
    assert_eq!(head.header("content-length"), Some("11"));
    let streamed = read_answer(&mut run.client, &mut buf, true).await;
    assert_eq!(streamed.status, 200);
    assert_eq!(streamed.header("transfer-encoding"), Some("chunked"));
    // No body came before the next answer: it parses as a response.
    let last = read_answer(&mut run.client, &mut buf, false).await;
    assert_eq!(last.body, br#"{"ok":true}"#);
    run.server.await.unwrap().unwrap();
    assert_eq!(
        run.pulled.load(Ordering::SeqCst),
        0,
        "HEAD pulled the stream"
    );
}

#[tokio::test]
async fn continue_only_for_http_1_1() {
    for (version, continues) in [("1.0", false), ("1.1", true)] {
        let mut run = start(1 << 20, 0, 0, timeouts());
        run.client
            .write_all(
                format!("GET / HTTP/{version}\r\nContent-Length: 2\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
        let mut buf = Vec::new();
        if continues {
            let answer = read_answer(&mut run.client, &mut buf, false).await;
            assert_eq!(answer.status, 100);
        }
        run.client.write_all(b"ok").await.unwrap();
        let answer = read_answer(&mut run.client, &mut buf, false).await;
        assert_eq!(answer.status, 200, "HTTP/{version}: {answer:?}");
        run.server.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_408() {
    let mut run = start(1 << 20, 0, 0, timeouts());
    run.client
        .write_all(b"GET / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let answer = read_answer(&mut run.client, &mut buf, false).await;
    assert_eq!(answer.status, 408, "{answer:?}");
    assert_eq!(answer.header("connection"), Some("close"));
    assert!(String::from_utf8_lossy(&answer.body).contains("body"));
    run.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn duplicate_or_signed_content_lengths_are_400_and_close() {
    for raw in [
        &b"GET / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"[..],
        b"GET / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc",
    ] {
        let mut run = start(1 << 20, 0, 0, timeouts());
        run.client.write_all(raw).await.unwrap();
        let mut buf = Vec::new();
        let answer = read_answer(&mut run.client, &mut buf, false).await;
        assert_eq!(answer.status, 400, "{answer:?}");
        assert_eq!(answer.header("connection"), Some("close"));
        run.server.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn a_streamed_body_arrives_whole_chunked_and_close_delimited() {
    let chunks = 10_000;
    let mut run = start(1 << 16, chunks, 7, timeouts());
    run.client
        .write_all(b"GET /stream HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let answer = read_answer(&mut run.client, &mut buf, false).await;
    assert_eq!(answer.header("transfer-encoding"), Some("chunked"));
    assert_eq!(answer.header("content-length"), None);
    assert_eq!(answer.body.len(), chunks * 7);
    let expected: Vec<u8> = (0..chunks)
        .flat_map(|i| std::iter::repeat_n(b'a' + (i % 26) as u8, 7))
        .collect();
    assert!(answer.body == expected, "the body differs");
    // The connection goes on after a chunked body.
    let next = read_answer(&mut run.client, &mut buf, false).await;
    assert_eq!(next.body, br#"{"ok":true}"#);
    run.server.await.unwrap().unwrap();

    let mut run = start(1 << 16, 100, 5, timeouts());
    run.client
        .write_all(b"GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let answer = read_answer(&mut run.client, &mut buf, false).await;
    assert_eq!(answer.header("transfer-encoding"), None);
    assert_eq!(answer.header("connection"), Some("close"));
    assert_eq!(answer.body.len(), 500);
    run.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_client_that_does_not_read_holds_the_stream_a_chunk_or_two_ahead() {
    // A 64 KiB pipe (the socket buffers), 10,000 chunks of 64 KiB (625 MiB).
    let chunks = 10_000;
    let mut run = start(CHUNK_BYTES, chunks, CHUNK_BYTES, timeouts());
    run.client
        .write_all(b"GET /stream HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    // Let the server run as far as it can.
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pulled = run.pulled.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&pulled),
        "{pulled} chunks pulled while the client reads nothing"
    );
    // Reading lets it go on, never more than a couple of chunks ahead of the reader.
    let mut read = 0usize;
    let mut scratch = vec![0u8; 64 * 1024];
    while read < 4 * 1024 * 1024 {
        read += run.client.read(&mut scratch).await.unwrap();
        let pulled = run.pulled.load(Ordering::SeqCst);
        assert!(
            pulled <= read / CHUNK_BYTES + 3,
            "{pulled} chunks pulled for {read} bytes read"
        );
    }
    // A client that leaves mid-stream ends the connection; the rest is never pulled.
    drop(run.client);
    assert!(run.server.await.unwrap().is_err());
    assert!(run.pulled.load(Ordering::SeqCst) < chunks / 10);
}

#[tokio::test]
async fn a_write_that_makes_no_progress_ends_the_connection() {
    let mut timeouts = timeouts();
    timeouts.write_stall = Duration::from_millis(200);
    let mut run = start(CHUNK_BYTES, 10_000, CHUNK_BYTES, timeouts);
    run.client
        .write_all(b"GET /stream HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), run.server)
        .await
        .expect("the connection ended")
        .unwrap();
    let error = ended.expect_err("a stalled write is an error");
    assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    assert!(run.pulled.load(Ordering::SeqCst) <= 2);
}

#[tokio::test]
async fn a_ready_response_is_written_although_the_client_half_closed() {
    for _ in 0..20 {
        let mut run = start(1 << 20, 0, 0, timeouts());
        run.client
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        run.client.shutdown().await.unwrap();
        let mut buf = Vec::new();
        let answer = read_answer(&mut run.client, &mut buf, false).await;
        assert_eq!(answer.status, 200);
        run.server.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn large_bodies_are_written_after_their_head() {
    let body = Bytes::from(vec![b'x'; 100_000]);
    let service = {
        let body = body.clone();
        warp::service(warp::any().map(move || warp::reply::Response::new(body.clone().into())))
    };
    let (mut client, server) = tokio::io::duplex(1 << 20);
    let (_tx, rx) = watch::channel(false);
    let server = tokio::spawn(serve_connection(
        server,
        service,
        rx,
        timeouts(),
        Default::default(),
        None,
    ));
    client
        .write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let answer = read_answer(&mut client, &mut buf, false).await;
    assert_eq!(answer.body.len(), body.len());
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_refused_connection_gets_503_json() {
    let connections = HttpConnections::new(1);
    let held = connections.try_open().expect("one slot");
    assert_eq!(connections.open(), 1);
    assert!(connections.try_open().is_none());
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let refusal = Refusal {
        status: 503,
        error: "too many HTTP connections".to_owned(),
    };
    let refusing = tokio::spawn({
        let connections = connections.clone();
        async move { refuse_connection(server, &connections, &refusal).await }
    });
    client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut buf = Vec::new();
    let answer = read_answer(&mut client, &mut buf, false).await;
    assert_eq!(answer.status, 503);
    assert!(String::from_utf8_lossy(&answer.body).contains("too many"));
    drop(client);
    refusing.await.unwrap();
    drop(held);
    assert_eq!(connections.open(), 0);
}

#[test]
fn response_heads_carry_the_framing_and_close() {
    let mut out = Vec::new();
    let mut headers = http::HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("content-length", HeaderValue::from_static("999"));
    write_head(
        &mut out,
        http::StatusCode::NOT_FOUND,
        &headers,
        Framing::Length(12),
        true,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 12\r\nconnection: close\r\n\r\n"
    );
    let mut out = Vec::new();
    write_head(
        &mut out,
        http::StatusCode::OK,
        &http::HeaderMap::new(),
        Framing::Chunked,
        false,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    );
}

/// What every open connection costs besides its socket: the connection's
/// future (928 bytes in a debug build when this was written; the request in
/// flight, the body and the answer are boxed apart).
#[test]
fn a_connection_future_stays_small() {
    let (_client, server) = tokio::io::duplex(1024);
    let (_tx, rx) = watch::channel(false);
    let future = serve_connection(
        server,
        service(0, 0, Arc::default()),
        rx,
        timeouts(),
        Default::default(),
        None,
    );
    let size = std::mem::size_of_val(&future);
    assert!(size <= 1536, "the connection future is {size} bytes");
}

/// A writer that takes at most `most` bytes per write and records them.
struct Trickle {
    most: usize,
    got: Vec<u8>,
}

impl AsyncWrite for Trickle {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = buf.len().min(self.most);
        self.got.extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn parts_are_written_whole_and_in_order_across_short_writes() {
    let parts: [&[u8]; 5] = [b"", b"1f\r\n", b"", b"event: stored\ndata: {}\n\n", b"\r\n"];
    let whole: Vec<u8> = parts.concat();
    for most in [1, 3, 4, 5, 64] {
        let mut out = Trickle {
            most,
            got: Vec::new(),
        };
        let mut slices = parts.map(io::IoSlice::new);
        write_all_parts(&mut out, &mut slices, WRITE_STALL_TIMEOUT)
            .await
            .expect("written");
        assert_eq!(out.got, whole, "at most {most} bytes a write");
    }
    // Nothing to write is no write.
    let mut out = Trickle {
        most: 0,
        got: Vec::new(),
    };
    write_all(&mut out, b"", WRITE_STALL_TIMEOUT)
        .await
        .expect("nothing");
    let zero = write_all(&mut out, b"x", WRITE_STALL_TIMEOUT).await;
    assert_eq!(zero.map_err(|e| e.kind()), Err(io::ErrorKind::WriteZero));
}
