//! The bench's HTTP/1.1 client: one kept-alive hyper connection per load worker.
//!
//! Deliberately the lowest layer hyper offers (`client::conn::http1`): no pool, no
//! redirects, no per-request allocation beyond the request itself, so that the client costs
//! as little of the two shared cores as possible and every worker owns exactly one
//! connection (the "64 connections" of a scenario are 64 sockets). A daemon started with
//! TLS is reached over TLS on the same kept-alive connections ([`crate::tls`]).

use std::net::SocketAddr;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A connection that reconnects on the next request after a transport error.
pub struct Http {
    addr: SocketAddr,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Http {
    pub async fn connect(addr: SocketAddr) -> Result<Http, String> {
        let mut http = Http { addr, sender: None };
        http.ensure_connected().await?;
        Ok(http)
    }

    async fn ensure_connected(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, String> {
        if self
            .sender
            .as_ref()
            .is_none_or(hyper::client::conn::http1::SendRequest::is_closed)
        {
            self.sender = Some(open(self.addr).await?);
        }
        Ok(self.sender.as_mut().expect("connected above"))
    }

    /// Sends one request and reads the whole reply.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        json_body: Option<Bytes>,
    ) -> Result<(StatusCode, Bytes), String> {
        self.send_keyed(method, path, json_body, None).await
    }

    /// [`Http::send`] with an `Idempotency-Key` header when `idempotency_key` is set.
    pub async fn send_keyed(
        &mut self,
        method: Method,
        path: &str,
        json_body: Option<Bytes>,
        idempotency_key: Option<&str>,
    ) -> Result<(StatusCode, Bytes), String> {
        let (status, _, body) = self
            .exchange(method, path, json_body, idempotency_key)
            .await?;
        Ok((status, body))
    }

    /// A GET, with the reply's headers.
    pub async fn get_with_headers(
        &mut self,
        path: &str,
    ) -> Result<(StatusCode, HeaderMap, Bytes), String> {
        self.exchange(Method::GET, path, None, None).await
    }

    /// Sends one request and reads the whole reply, headers and all.
    async fn exchange(
        &mut self,
        method: Method,
        path: &str,
        json_body: Option<Bytes>,
        idempotency_key: Option<&str>,
    ) -> Result<(StatusCode, HeaderMap, Bytes), String> {
        let sender = self.ensure_connected().await?;
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, "127.0.0.1");
        if json_body.is_some() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        let request = request
            .body(Full::new(json_body.unwrap_or_default()))
            .map_err(|e| e.to_string())?;
        let result = async {
            sender
                .ready()
                .await
                .map_err(|e| format!("not ready: {e}"))?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("request: {e}"))?;
            let status = response.status();
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| format!("body: {e}"))?
                .to_bytes();
            Ok((status, parts.headers, body))
        }
        .await;
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    pub async fn get(&mut self, path: &str) -> Result<(StatusCode, Bytes), String> {
        self.send(Method::GET, path, None).await
    }

    pub async fn post(&mut self, path: &str, body: Bytes) -> Result<(StatusCode, Bytes), String> {
        self.send(Method::POST, path, Some(body)).await
    }

    pub async fn put(&mut self, path: &str, body: Bytes) -> Result<(StatusCode, Bytes), String> {
        self.send(Method::PUT, path, Some(body)).await
    }
}

/// A new HTTP/1.1 connection to `addr` (over TLS if it speaks TLS), its driver spawned.
pub async fn open<B>(addr: SocketAddr) -> Result<SendRequest<B>, String>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    // Small requests and replies: without NODELAY, Nagle + delayed ACK add ~40 ms.
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    match crate::tls::wrap(addr, stream).await? {
        Ok(tls) => handshake(tls).await,
        Err(plain) => handshake(plain).await,
    }
}

/// HTTP/1.1 over `io`, its connection driven by a task of its own.
async fn handshake<B, T>(io: T) -> Result<SendRequest<B>, String>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// `Err` with the status and (start of the) body unless `status` is one of `expected`.
pub fn expect_status(
    (status, body): (StatusCode, Bytes),
    expected: &[StatusCode],
) -> Result<(StatusCode, Bytes), String> {
    if expected.contains(&status) {
        Ok((status, body))
    } else {
        let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
        Err(format!("HTTP {status}: {text}"))
    }
}
