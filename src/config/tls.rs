//! The listener's TLS flags: the server's certificate and key, and the client certificates
//! it asks for.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Whether a client must present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClientAuth {
    /// A client may present one; without one it is a caller like any other (a token, or
    /// none).
    Optional,
    /// A client without a certificate the CA signed cannot complete the handshake.
    Required,
}

/// The listener's TLS flags. Without `--tls-cert` the daemon speaks plain HTTP.
#[derive(Debug, Clone, Args)]
pub struct TlsFlags {
    /// Serve HTTPS with this certificate (PEM; the leaf first, then its chain). Reloaded on
    /// SIGHUP and when the file changes; a reload that fails keeps the pair in use.
    #[arg(long, env = "BLOCKLISTD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "BLOCKLISTD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Ask clients for a certificate signed by a CA in this file (PEM). A verified
    /// certificate is an identity: the token file may give its subject a name and a role.
    #[arg(long, env = "BLOCKLISTD_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// With --tls-client-ca: whether a client must present a certificate.
    #[arg(long, env = "BLOCKLISTD_TLS_CLIENT_AUTH", value_enum,
          default_value_t = ClientAuth::Optional, requires = "tls_client_ca")]
    pub tls_client_auth: ClientAuth,

    /// With --store etcd: the CA (PEM) that signed the other daemons' --tls-cert. Requests
    /// sent on to the writer go over https verified with it, this daemon's own certificate
    /// as the client's, and the writer takes a certificate this CA verifies as another
    /// daemon's (see docs/operations.md). Reloaded with --tls-cert.
    #[arg(long, env = "BLOCKLISTD_TLS_PEER_CA", requires = "tls_cert")]
    pub tls_peer_ca: Option<PathBuf>,
}

/// The files of a TLS listener, as [`TlsFlags`] named them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
    pub peer_ca: Option<PathBuf>,
}

impl TlsFlags {
    /// The files to serve TLS with, or `None` for plain HTTP.
    pub fn files(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
            client_auth: self.tls_client_auth,
            peer_ca: self.tls_peer_ca.clone(),
        })
    }
}
