//! Accepting one connection: the handshake within a deadline, and why one failed, logged and
//! counted by reason.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::{Peer, ServerTls};

/// A connection past its handshake.
pub struct Accepted {
    pub stream: TlsStream<TcpStream>,
    /// The client's verified certificate, if it presented one.
    pub peer: Option<Peer>,
}

/// The answer to plain HTTP on the TLS port, written before closing: a client pointed at
/// `http://` gets told why instead of a reset.
const PLAIN_HTTP: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
content-type: application/json\r\ncontent-length: 72\r\nconnection: close\r\n\r\n\
{\"errors\":[\"this port speaks HTTPS only: send the request to https://\"]}";

enum Failure {
    PlainHttp(TcpStream),
    Timeout,
    Handshake(std::io::Error),
}

impl ServerTls {
    /// The handshake of a connection `addr` opened, which must be done within `deadline`
    /// (the header deadline: a client that stalls here holds a connection as one that
    /// stalls its headers does). `None` when it failed: then it is logged and counted.
    pub async fn accept(
        &self,
        stream: TcpStream,
        addr: SocketAddr,
        deadline: Duration,
    ) -> Option<Accepted> {
        let acceptor = TlsAcceptor::from(self.config());
        let shaken = tokio::time::timeout(deadline, async move {
            // A TLS record starts with its content type (22, a handshake); an HTTP request
            // with its method, in capitals.
            let mut first = [0u8; 1];
            match stream.peek(&mut first).await {
                Ok(1) if first[0].is_ascii_uppercase() => return Err(Failure::PlainHttp(stream)),
                Err(e) => return Err(Failure::Handshake(e)),
                Ok(_) => {}
            }
            acceptor.accept(stream).await.map_err(Failure::Handshake)
        })
        .await
        .unwrap_or(Err(Failure::Timeout));
        let (reason, error) = match shaken {
            Ok(stream) => {
                let chain = stream.get_ref().1.peer_certificates().unwrap_or_default();
                let peer = chain.split_first().and_then(|(leaf, intermediates)| {
                    let mut peer = Peer::of(leaf)?;
                    peer.daemon = self.is_daemon(leaf, intermediates);
                    Some(peer)
                });
                return Some(Accepted { stream, peer });
            }
            Err(Failure::PlainHttp(mut stream)) => {
                let _ = tokio::time::timeout(deadline, async {
                    let _ = stream.write_all(PLAIN_HTTP).await;
                    let _ = stream.shutdown().await;
                })
                .await;
                ("plain_http", None)
            }
            Err(Failure::Timeout) => ("timeout", None),
            Err(Failure::Handshake(e)) => (reason(&e), Some(e)),
        };
        self.metrics.tls.handshake_failed(reason);
        match &error {
            Some(e) if reason == "closed" => {
                tracing::debug!(%addr, reason, error = %e, "TLS handshake failed");
            }
            Some(e) => tracing::info!(%addr, reason, error = %e, "TLS handshake failed"),
            None => tracing::info!(%addr, reason, "TLS handshake failed"),
        }
        None
    }
}

/// Why a handshake failed, as the `reason` label of the failure counter.
fn reason(e: &std::io::Error) -> &'static str {
    // tokio-rustls hands rustls' own error over inside the I/O error.
    let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return match e.kind() {
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe => "closed",
            _ => "io",
        };
    };
    match tls {
        // No certificate where --tls-client-auth required one.
        rustls::Error::NoCertificatesPresented => "no_client_certificate",
        // The client's certificate: an unknown issuer, expired, revoked, not for clients.
        rustls::Error::InvalidCertificate(_) => "bad_client_certificate",
        // The client gave up on ours (an unknown CA, a name mismatch, expired) and said so.
        rustls::Error::AlertReceived(_) => "client_refused_certificate",
        // No protocol version or cipher suite in common (TLS 1.1 and older, weak suites).
        rustls::Error::PeerIncompatible(_) => "incompatible",
        rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. }
        | rustls::Error::PeerMisbehaved(_) => "not_tls",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::PLAIN_HTTP;

    #[test]
    fn the_plain_http_answer_is_a_whole_response() {
        let text = std::str::from_utf8(PLAIN_HTTP).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}\r\n", body.len())));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(body["errors"][0].as_str().unwrap().contains("https://"));
    }
}
