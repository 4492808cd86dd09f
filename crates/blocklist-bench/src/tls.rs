//! TLS for the daemons the bench starts (`--tls`, `--tls-for`): a CA and a certificate for
//! 127.0.0.1 made for the run (rcgen), the daemon's flags to serve it, and the client side
//! every connection to such a daemon takes.
//!
//! Which addresses speak TLS is a registry ([`speaks_tls`]) rather than a parameter of
//! every scenario: a daemon started with TLS registers its address, and every connection
//! the bench opens to it — the load's, the scrapes', the feed's — goes over TLS, while the
//! ceilings and peers stay plain. A daemon's [`crate::server::Server`] takes its address
//! out again when it is dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// The certificate the daemons of a TLS arm serve, and the client configuration that
/// trusts it.
#[derive(Debug)]
pub struct BenchTls {
    /// Holds the certificate and key files.
    _dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    client: Arc<ClientConfig>,
}

impl BenchTls {
    /// A CA and a server certificate for 127.0.0.1, ECDSA P-256 (rcgen's default), as an
    /// operator following docs/operations.md would make them.
    pub fn new() -> Result<BenchTls, String> {
        let fail = |e: rcgen::Error| format!("making the bench's certificate: {e}");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_key = rcgen::KeyPair::generate().map_err(fail)?;
        let ca_cert = ca_params.self_signed(&ca_key).map_err(fail)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).map_err(fail)?;
        let key = rcgen::KeyPair::generate().map_err(fail)?;
        let cert = params.signed_by(&key, &issuer).map_err(fail)?;
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let (cert_path, key_path) = (dir.path().join("server.crt"), dir.path().join("server.key"));
        let write = |path: &PathBuf, text: String| {
            std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
        };
        write(&cert_path, cert.pem())?;
        write(&key_path, key.serialize_pem())?;
        let mut roots = rustls::RootCertStore::empty();
        let ca = CertificateDer::from_pem_slice(ca_cert.pem().as_bytes())
            .map_err(|e| format!("the bench's CA: {e}"))?;
        roots.add(ca).map_err(|e| format!("the bench's CA: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(BenchTls {
            _dir: dir,
            cert: cert_path,
            key: key_path,
            client: Arc::new(client),
        })
    }

    /// The daemon's flags to serve this certificate.
    pub fn daemon_flags(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.cert.display().to_string(),
            "--tls-key".into(),
            self.key.display().to_string(),
        ]
    }

    /// From now on, connections to `addr` go over TLS, trusting this certificate.
    pub fn register(&self, addr: SocketAddr) {
        speaks_tls(addr, Some(self.client.clone()));
    }
}

/// The addresses that speak TLS, and the client configuration for each.
static REGISTRY: LazyLock<Mutex<HashMap<SocketAddr, Arc<ClientConfig>>>> =
    LazyLock::new(Mutex::default);

/// Records that `addr` speaks TLS with `config`, or (`None`) no longer does.
pub fn speaks_tls(addr: SocketAddr, config: Option<Arc<ClientConfig>>) {
    let mut registry = REGISTRY.lock().expect("not poisoned");
    match config {
        Some(config) => registry.insert(addr, config),
        None => registry.remove(&addr),
    };
}

/// `stream`, connected to `addr`, past a TLS handshake if `addr` speaks TLS.
pub async fn wrap(
    addr: SocketAddr,
    stream: TcpStream,
) -> Result<Result<TlsStream<TcpStream>, TcpStream>, String> {
    let config = REGISTRY.lock().expect("not poisoned").get(&addr).cloned();
    let Some(config) = config else {
        return Ok(Err(stream));
    };
    let name = ServerName::IpAddress(addr.ip().into());
    let tls = TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|e| format!("TLS handshake with {addr}: {e}"))?;
    Ok(Ok(tls))
}
