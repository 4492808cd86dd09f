//! HTTP to the daemon, and the mapping of every outcome onto the three exit codes.
//!
//! The rule: an HTTP answer that is not 2xx is a refusal (exit 1, the server's
//! `{"errors": [...]}` messages on stderr); no HTTP answer at all — connection refused,
//! reset, timed out — is "cannot reach" (exit 2), so a script can tell "retrying may help"
//! from "fix the request". Mistakes caught before sending count as refusals too: retrying
//! them cannot help. A write is retried here first, with its `Idempotency-Key`, when it was
//! sent and got no answer or a 503 (see [`Client::send`]).

use std::path::Path;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, StatusCode, Url};

/// Everything but RFC 3986's unreserved characters is encoded, so an id such as `a/b` or
/// `50% off` stays one path segment (the daemon decodes it back).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Connecting to a daemon on the same machine or network takes milliseconds; longer means
/// it is not there.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whole-request limit for ordinary requests. Writes wait for an fsync, which on a busy
/// disk can take a while, so this is generous. The watch stream has no such limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The waits before each retry of a write that got no answer after it was sent (a timeout,
/// a dropped connection) or a 503 (not acknowledged: it may or may not have been applied).
/// Every attempt carries the write's one `Idempotency-Key`, so the daemon applies it once
/// and answers a retry of an applied write as it answered the first time. A server that
/// cannot be connected to at all is not retried: nothing was sent.
const WRITE_RETRIES: [Duration; 2] = [Duration::from_millis(250), Duration::from_secs(1)];

/// Entries a page when a listing is read in pages ([`Client::pages`]).
pub const PAGE: usize = 1_000;

/// The header that carries the next page's `continue` token.
const CONTINUE_HEADER: &str = "x-blocklist-continue";

/// Why a command failed; [`Failure::exit_code`] maps it to the process's exit code.
#[derive(Debug)]
pub enum Failure {
    /// The server answered, but not with success: its messages (or a description of a
    /// non-JSON answer). Also used for requests this client refuses to send.
    Refused(Vec<String>),
    /// No HTTP answer: what went wrong, for stderr.
    Unreachable(String),
}

impl Failure {
    pub fn refused(message: impl Into<String>) -> Failure {
        Failure::Refused(vec![message.into()])
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Refused(_) => 1,
            Failure::Unreachable(_) => 2,
        }
    }

    /// The lines for stderr.
    pub fn messages(&self) -> Vec<String> {
        match self {
            Failure::Refused(messages) => messages.clone(),
            Failure::Unreachable(m) => vec![m.clone()],
        }
    }
}

/// A successful answer.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Vec<u8>,
    /// The next page's `continue` token (`X-Blocklist-Continue`), when the answer is a
    /// page of a listing with more after it.
    pub next: Option<String>,
}

impl Reply {
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Failure> {
        serde_json::from_slice(&self.body).map_err(|e| {
            Failure::refused(format!(
                "the server's answer ({}) is not what blocklistd sends: {e}",
                self.status
            ))
        })
    }
}

/// One daemon: its base URL, the optional bearer token, and a connection pool.
pub struct Client {
    http: reqwest::Client,
    /// The base URL without a trailing slash; API paths are appended to it.
    base: String,
    /// Marked sensitive, so that it never shows in a `Debug` print of a request.
    token: Option<HeaderValue>,
}

impl Client {
    /// `streaming` drops the whole-request timeout, for the watch stream (which watches
    /// its own idleness instead).
    pub fn new(
        server: &str,
        token_file: Option<&Path>,
        tls: &TlsFiles,
        streaming: bool,
    ) -> Result<Client, Failure> {
        let base = base_url(server).map_err(Failure::refused)?;
        let token = token_file.map(read_token).transpose()?;
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .https_only(base.starts_with("https://"));
        if !streaming {
            builder = builder.timeout(REQUEST_TIMEOUT);
        }
        builder = tls.apply(builder)?;
        let http = builder
            .build()
            .map_err(|e| Failure::refused(format!("cannot set up HTTP: {}", chain(&e))))?;
        Ok(Client { http, base, token })
    }

    /// The daemon's base URL, as requests are sent to it.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A request to `path` (which starts with `/`), with the token when there is one.
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            req = req.header(AUTHORIZATION, token.clone());
        }
        req
    }

    /// Sends a request with an optional JSON body; `Ok` only for a 2xx answer. A write
    /// (any method but GET and HEAD) carries a fresh `Idempotency-Key` and is retried with
    /// it ([`WRITE_RETRIES`]).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply, Failure> {
        self.send_with(method, path, body, &[]).await
    }

    /// [`Client::send`] with more headers (`Blocklist-Source`, `If-Match`), each checked
    /// before sending; every attempt of a write carries them with its key.
    pub async fn send_with(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        headers: &[(&'static str, &str)],
    ) -> Result<Reply, Failure> {
        let headers = headers
            .iter()
            .map(|(name, value)| {
                HeaderValue::from_str(value)
                    .map(|value| (*name, value))
                    .map_err(|_| {
                        Failure::refused(format!("{name}: {value:?} cannot be sent in a header"))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let key = (method != Method::GET && method != Method::HEAD)
            .then(|| uuid::Uuid::new_v4().to_string());
        let mut retries = WRITE_RETRIES.iter();
        loop {
            let answer = self
                .attempt(&method, path, body, &headers, key.as_deref())
                .await;
            let again = key.is_some()
                && match &answer {
                    Ok((status, _, _)) => *status == StatusCode::SERVICE_UNAVAILABLE,
                    Err(e) => !e.is_connect() && !e.is_builder(),
                };
            if let (true, Some(wait)) = (again, retries.next()) {
                tokio::time::sleep(*wait).await;
                continue;
            }
            let (status, body, next) = answer.map_err(|e| self.unreachable(&e))?;
            return if status.is_success() {
                Ok(Reply { status, body, next })
            } else {
                Err(refusal(status, &body))
            };
        }
    }

    /// Sends a request once, with `headers` and its key: its status and body, or what kept
    /// it from an answer.
    async fn attempt(
        &self,
        method: &Method,
        path: &str,
        body: Option<&serde_json::Value>,
        headers: &[(&'static str, HeaderValue)],
        key: Option<&str>,
    ) -> Result<(StatusCode, Vec<u8>, Option<String>), reqwest::Error> {
        // What the spinner names while a request is slow.
        let label = || format!("{method} {}{path}", self.base);
        let mut req = self.request(method.clone(), path);
        for (name, value) in headers {
            req = req.header(*name, value.clone());
        }
        if let Some(key) = key {
            req = req.header("Idempotency-Key", key);
        }
        if let Some(body) = body {
            req = req
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        crate::status::while_slow(label, async {
            let resp = req.send().await?;
            let status = resp.status();
            let next = resp
                .headers()
                .get(CONTINUE_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = resp.bytes().await?;
            Ok((status, body.to_vec(), next))
        })
        .await
    }

    /// Every page of the listing at `path` (which has no query), [`PAGE`] entries a page:
    /// each request is bounded however big the list, and each page is answered as of one
    /// revision; the walk's revision is the first page's.
    pub async fn pages(&self, path: &str) -> Result<Vec<Reply>, Failure> {
        let mut pages = vec![
            self.send(Method::GET, &format!("{path}?limit={PAGE}"), None)
                .await?,
        ];
        while let Some(token) = pages.last().and_then(|page| page.next.clone()) {
            let next = format!("{path}?limit={PAGE}&continue={token}");
            pages.push(self.send(Method::GET, &next, None).await?);
        }
        Ok(pages)
    }

    /// Describes a transport error. The token is never part of it: reqwest's messages
    /// carry the URL and the cause, not the headers.
    pub fn unreachable(&self, e: &reqwest::Error) -> Failure {
        Failure::Unreachable(format!(
            "cannot reach the server at {}: {}",
            self.base,
            chain(e)
        ))
    }
}

/// `X-Blocklist-Revision` of a response, if present and numeric.
pub fn revision_header(resp: &reqwest::Response) -> Option<u64> {
    resp.headers()
        .get("x-blocklist-revision")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What a 403 means with blocklistd: the daemon knew the token (a wrong one is 401) but its
/// role does not allow the request.
pub const FORBIDDEN_HINT: &str = "the token given is not an admin token: policy set, allow \
     add and remove, add and update --force, remove --hold-off and remove --all need one, \
     and a reader token may not write at all";

/// What a 412 means with blocklistd: only `update --if-match` gets one.
pub const PRECONDITION_HINT: &str = "the item changed after its ETag was read (an update, a \
     merge, or a new block after the old one ended): `blocklist get` shows it as it is now, \
     with its ETag; check the change still makes sense, then retry with that --if-match";

/// The messages of a non-2xx answer: the `errors` of blocklistd's `{"errors": [...]}`
/// body, each prefixed with the status; anything else (a proxy's HTML page, say) is
/// described with the start of its text. A 403 gets [`FORBIDDEN_HINT`] after them, a 412
/// [`PRECONDITION_HINT`].
pub fn refusal(status: StatusCode, body: &[u8]) -> Failure {
    let mut failure = server_messages(status, body);
    let hint = match status {
        StatusCode::FORBIDDEN => Some(FORBIDDEN_HINT),
        StatusCode::PRECONDITION_FAILED => Some(PRECONDITION_HINT),
        _ => None,
    };
    if let (Some(hint), Failure::Refused(messages)) = (hint, &mut failure) {
        messages.push(hint.to_owned());
    }
    failure
}

fn server_messages(status: StatusCode, body: &[u8]) -> Failure {
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<String>,
    }
    let status_text = match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    };
    match serde_json::from_slice::<Errors>(body) {
        Ok(Errors { errors }) if !errors.is_empty() => Failure::Refused(
            errors
                .into_iter()
                .map(|e| format!("{status_text}: {e}"))
                .collect(),
        ),
        _ => {
            let text = String::from_utf8_lossy(body);
            let text: String = text.trim().chars().take(200).collect();
            Failure::refused(if text.is_empty() {
                format!("{status_text} (no message)")
            } else {
                format!("{status_text}: {}", text.escape_debug())
            })
        }
    }
}

/// The path of one item: `/blocklist/nodes/a%2Fb`.
pub fn item_path(kind: blocklistd::model::Kind, id: &str) -> String {
    format!("/blocklist/{}/{}", kind.plural(), segment(id))
}

/// Percent-encodes an id for a path segment.
pub fn segment(id: &str) -> String {
    utf8_percent_encode(id, SEGMENT).to_string()
}

/// Checks an id with the daemon's own rules before it goes into a path: an empty id would
/// otherwise turn `/blocklist/nodes/{id}` into a different endpoint and a puzzling answer.
pub fn check_id(what: &str, id: &str) -> Result<(), Failure> {
    blocklistd::model::validate_id(id)
        .map_err(|e| Failure::refused(format!("{what} id {id:?} {e}")))
}

/// Normalises `--server`: `host:port` gets `http://`; https is refused because this build
/// carries no TLS (the daemon speaks plain HTTP; put a TLS proxy in front and use its
/// http side, or extend the build with reqwest's `rustls-tls`).
pub fn base_url(server: &str) -> Result<String, String> {
    let server = server.trim();
    let with_scheme = if server.contains("://") {
        server.to_owned()
    } else {
        format!("http://{server}")
    };
    let url = Url::parse(&with_scheme).map_err(|e| format!("--server {server:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "--server {server:?}: give an http:// or https:// URL"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "--server {server:?}: give a base URL without ?query or #fragment"
        ));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// The files an `https://` server is reached with: a CA to trust besides the system's, and
/// a client certificate with its key.
#[derive(Debug, Default, Clone)]
pub struct TlsFiles {
    pub cacert: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

impl TlsFiles {
    fn apply(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, Failure> {
        let read = |what: &str, path: &Path| {
            std::fs::read(path).map_err(|e| {
                Failure::refused(format!("cannot read the {what} {}: {e}", path.display()))
            })
        };
        if let Some(path) = &self.cacert {
            let pem = read("CA certificate (--cacert)", path)?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                Failure::refused(format!("--cacert {}: {}", path.display(), chain(&e)))
            })?;
            if certs.is_empty() {
                return Err(Failure::refused(format!(
                    "--cacert {}: no PEM certificate in it",
                    path.display()
                )));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let mut pem = read("client certificate (--cert)", cert)?;
                pem.push(b'\n');
                pem.extend(read("client key (--key)", key)?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    Failure::refused(format!(
                        "--cert {} with --key {}: {}",
                        cert.display(),
                        key.display(),
                        chain(&e)
                    ))
                })?;
                builder = builder.identity(identity);
            }
            (None, None) => {}
            _ => {
                return Err(Failure::refused(
                    "--cert and --key go together: the client certificate and its key",
                ))
            }
        }
        Ok(builder)
    }
}

/// Reads the token file. Errors never quote its content.
fn read_token(path: &Path) -> Result<HeaderValue, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::refused(format!(
            "cannot read the token file {}: {e}",
            path.display()
        ))
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(Failure::refused(format!(
            "the token file {} is empty",
            path.display()
        )));
    }
    let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
        Failure::refused(format!(
            "the token in {} has characters an HTTP header cannot carry",
            path.display()
        ))
    })?;
    value.set_sensitive(true);
    Ok(value)
}

/// An error with its causes: reqwest's own message ("error sending request for url …")
/// says little; the cause ("Connection refused") is what helps.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use blocklistd::model::Kind;

    #[test]
    fn base_urls() {
        assert_eq!(
            base_url("http://127.0.0.1:7224").unwrap(),
            "http://127.0.0.1:7224"
        );
        assert_eq!(
            base_url("http://127.0.0.1:7224/").unwrap(),
            "http://127.0.0.1:7224"
        );
        assert_eq!(base_url("localhost:9000").unwrap(), "http://localhost:9000");
        assert_eq!(
            base_url("http://proxy/blocklistd/").unwrap(),
            "http://proxy/blocklistd"
        );
        assert_eq!(
            base_url("https://example.com:7224/").unwrap(),
            "https://example.com:7224"
        );
        assert!(base_url("ftp://example.com").is_err());
        assert!(base_url("http://h/?x=1").is_err());
        assert!(base_url("http://").is_err());
    }

    #[test]
    fn ids_are_one_encoded_segment() {
        assert_eq!(item_path(Kind::Node, "n1"), "/blocklist/nodes/n1");
        assert_eq!(
            item_path(Kind::TaskManager, "a/b c%ü"),
            "/blocklist/taskmanagers/a%2Fb%20c%25%C3%BC"
        );
        assert_eq!(segment("x-_.~"), "x-_.~");
    }

    #[test]
    fn refusals_carry_the_servers_messages() {
        let Failure::Refused(m) = refusal(
            StatusCode::CONFLICT,
            br#"{"errors":["items[0] (id \"n1\"): already blocked","second"]}"#,
        ) else {
            panic!()
        };
        assert_eq!(
            m,
            [
                "409 Conflict: items[0] (id \"n1\"): already blocked",
                "409 Conflict: second"
            ]
        );
        let Failure::Refused(m) = refusal(StatusCode::BAD_GATEWAY, b"<html>\nbad</html>") else {
            panic!()
        };
        assert_eq!(m, ["502 Bad Gateway: <html>\\nbad</html>"]);
        let Failure::Refused(m) = refusal(StatusCode::NOT_FOUND, b"") else {
            panic!()
        };
        assert_eq!(m, ["404 Not Found (no message)"]);
        assert_eq!(refusal(StatusCode::NOT_FOUND, b"").exit_code(), 1);
        let Failure::Refused(m) = refusal(
            StatusCode::FORBIDDEN,
            br#"{"errors":["changing the allowlist needs an admin token; this token's role is writer"]}"#,
        ) else {
            panic!()
        };
        assert_eq!(
            m,
            [
                "403 Forbidden: changing the allowlist needs an admin token; this token's role \
                 is writer",
                FORBIDDEN_HINT
            ]
        );
        let Failure::Refused(m) = refusal(
            StatusCode::PRECONDITION_FAILED,
            br#"{"errors":["If-Match: node \"n1\" is at \"9\" now"]}"#,
        ) else {
            panic!()
        };
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[1], PRECONDITION_HINT);
        assert_eq!(Failure::Unreachable("x".into()).exit_code(), 2);
    }

    #[test]
    fn token_file_is_trimmed_and_sensitive() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\n").unwrap();
        let value = read_token(&path).unwrap();
        assert_eq!(value.to_str().unwrap(), "Bearer s3cret");
        assert!(value.is_sensitive());
        assert!(!format!("{value:?}").contains("s3cret"));

        std::fs::write(&path, "s3cret\nline").unwrap();
        let Err(Failure::Refused(m)) = read_token(&path) else {
            panic!()
        };
        assert!(!m[0].contains("s3cret"), "{m:?}");
        std::fs::write(&path, "  \n").unwrap();
        assert!(read_token(&path).is_err());
        assert!(read_token(&dir.path().join("missing")).is_err());
    }
}
