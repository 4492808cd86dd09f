//! A raw-socket HTTP/1.1 client, for answers ordinary clients cannot read.

use std::fmt::Write as _;
use std::net::SocketAddr;

use reqwest::StatusCode;
use serde_json::Value;

use super::DEADLINE;

/// Sends one HTTP/1.1 request over a plain socket and reads the answer, even when the
/// server answers (413, say) before the body is fully sent and closes the connection — a
/// case where ordinary clients report only a broken pipe.
pub fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (StatusCode, Value) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !content_type.is_empty() {
        let _ = write!(head, "Content-Type: {content_type}\r\n");
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes()).expect("write headers");
    for chunk in body.chunks(64 * 1024) {
        if conn.write_all(chunk).is_err() {
            break; // the server answered early and closed: read what it said
        }
    }
    let mut response = Vec::new();
    let _ = conn.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    let status: u16 = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let body = serde_json::from_str(body).unwrap_or(Value::Null);
    (StatusCode::from_u16(status).unwrap(), body)
}

/// Sends a GET with exactly the given headers (besides `Host` and `Connection: close`) and
/// returns the status, the response's headers (names lowercased) and its body as text: for
/// requests an ordinary client would add headers to (reqwest always sends `Accept`).
pub fn raw_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, Vec<(String, String)>, String) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (name, value) in headers {
        let _ = write!(head, "{name}: {value}\r\n");
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes()).expect("write headers");
    let mut response = Vec::new();
    conn.read_to_end(&mut response).expect("read the answer");
    let text = String::from_utf8(response).expect("a UTF-8 answer");
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {text:?}"));
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|line| line.get(9..12))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (
        StatusCode::from_u16(status).unwrap(),
        headers,
        body.to_owned(),
    )
}
