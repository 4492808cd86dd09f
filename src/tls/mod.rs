//! TLS on the listener, with rustls: the server's certificate and key (swapped without a
//! restart), the client certificates it asks for, and the handshake of each connection.
//!
//! - [`ServerTls`] holds the rustls configuration in use; a reload builds a whole new one
//!   from the files and swaps it in, so each new connection gets the newest pair while the
//!   open ones keep theirs. A reload that fails leaves the old configuration in place.
//! - `reload`: what triggers a reload (SIGHUP, and changes in the files' directories).
//! - `handshake`: accepting one connection, and why a handshake failed.
//! - [`Peer`]: the names a verified client certificate carries, which the token file may
//!   give a name and a role, and whether it is another daemon's.
//! - `peer`: the client side of a request sent on to the writer (`--tls-peer-ca`).
//!
//! The protocol versions are TLS 1.2 and 1.3 and the cipher suites rustls' defaults (ring's
//! provider: no CBC, no RSA key exchange); ALPN offers `http/1.1`, the only protocol the
//! server speaks.

mod handshake;
mod identity;
mod peer;
mod reload;

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::WebPkiServerVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

use crate::config::{ClientAuth, TlsFiles};
use crate::metrics::Metrics;
use crate::pem::{certificates, private_key, read, roots};

pub use handshake::Accepted;
pub use identity::Peer;
pub use peer::{forwarding_config, FORWARDED_NAMES_HEADER};
pub use reload::log_hangups;

/// A TLS configuration built from the files, with what the logs and metrics show of it.
struct Loaded {
    config: Arc<ServerConfig>,
    /// The same certificate and key, which this daemon presents as a client when it sends
    /// a request on to the writer ([`peer`]).
    certified: Arc<CertifiedKey>,
    /// Verifies a client's certificate with `--tls-peer-ca` alone: whether the client is
    /// another daemon.
    daemons: Option<Arc<dyn ClientCertVerifier>>,
    /// Verifies the writer's certificate with `--tls-peer-ca` when a request is sent on.
    writers: Option<Arc<WebPkiServerVerifier>>,
    /// The files' bytes, to tell a change from a touch.
    sources: Vec<Vec<u8>>,
    /// The leaf certificate's serial number, in hex.
    serial: String,
    /// The leaf certificate's notAfter, unix seconds.
    not_after: i64,
}

/// The listener's TLS: the configuration in use, and the files it is reloaded from.
pub struct ServerTls {
    files: TlsFiles,
    current: ArcSwap<Loaded>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .field("serial", &self.current.load().serial)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads the files; the error names the file and what is wrong with it.
    pub fn load(files: TlsFiles, metrics: Arc<Metrics>) -> Result<Arc<ServerTls>, String> {
        let loaded = load(&files)?;
        tracing::info!(
            cert = %files.cert.display(),
            serial = %loaded.serial,
            not_after = loaded.not_after,
            client_ca = ?files.client_ca.as_ref().map(|p| p.display().to_string()),
            client_auth = ?files.client_auth,
            "TLS certificate loaded"
        );
        metrics.tls.certificate(loaded.not_after);
        Ok(Arc::new(ServerTls {
            files,
            current: ArcSwap::from_pointee(loaded),
            metrics,
        }))
    }

    /// Reads the files again and, if they changed and make a configuration, uses it for
    /// new connections; otherwise keeps the one in use and logs why.
    pub fn reload(&self, why: &str) {
        match load(&self.files) {
            Ok(loaded) if loaded.sources == self.current.load().sources => {
                tracing::debug!(why, "TLS files unchanged");
            }
            Ok(loaded) => {
                tracing::info!(
                    why,
                    serial = %loaded.serial,
                    not_after = loaded.not_after,
                    "TLS certificate reloaded"
                );
                self.metrics.tls.certificate(loaded.not_after);
                self.metrics.tls.reloaded(true);
                self.current.store(Arc::new(loaded));
            }
            Err(e) => {
                tracing::error!(
                    why,
                    error = %e,
                    serial = %self.current.load().serial,
                    "TLS reload failed; keeping the certificate in use"
                );
                self.metrics.tls.reloaded(false);
            }
        }
    }

    /// The configuration for the next connection.
    fn config(&self) -> Arc<ServerConfig> {
        self.current.load().config.clone()
    }
}

/// When the first certificate of the PEM file at `path` (the `what` of errors) expires, as
/// unix seconds.
pub fn expiry(what: &str, path: &std::path::Path) -> Result<i64, String> {
    let pem = read(what, path)?;
    let chain = certificates(what, path, &pem)?;
    let (_, not_after) = identity::serial_and_expiry(&chain[0])
        .map_err(|e| format!("the {what} {}: {e}", path.display()))?;
    Ok(not_after)
}

fn load(files: &TlsFiles) -> Result<Loaded, String> {
    let cert_pem = read("TLS certificate", &files.cert)?;
    let key_pem = read("TLS key", &files.key)?;
    let chain = certificates("TLS certificate", &files.cert, &cert_pem)?;
    let key = private_key("TLS key", &files.key, &key_pem)?;
    let (serial, not_after) = identity::serial_and_expiry(&chain[0])
        .map_err(|e| format!("the TLS certificate {}: {e}", files.cert.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let mut sources = vec![cert_pem, key_pem];
    let client_roots = match &files.client_ca {
        Some(path) => Some(roots("TLS client CA", path, &mut sources)?),
        None => None,
    };
    let peer_roots = match &files.peer_ca {
        Some(path) => Some(roots("TLS peer CA", path, &mut sources)?),
        None => None,
    };
    let verifier = |roots: RootCertStore, required: bool| {
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
        let verifier = if required {
            verifier
        } else {
            verifier.allow_unauthenticated()
        };
        verifier
            .build()
            .map_err(|e| format!("TLS client verification: {e}"))
    };
    let daemons = match &peer_roots {
        Some(roots) => Some(verifier(roots.clone(), true)? as Arc<dyn ClientCertVerifier>),
        None => None,
    };
    let writers = match &peer_roots {
        Some(roots) => Some(
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots.clone()), provider.clone())
                .build()
                .map_err(|e| format!("the TLS peer CA: {e}"))?,
        ),
        None => None,
    };
    // Another daemon sending a request on presents its own certificate, so the listener
    // takes those of either CA.
    let builder = match (client_roots, peer_roots) {
        (None, None) => builder.with_no_client_auth(),
        (Some(mut roots), peer) => {
            roots.roots.extend(peer.into_iter().flat_map(|p| p.roots));
            let required = files.client_auth == ClientAuth::Required;
            builder.with_client_cert_verifier(verifier(roots, required)?)
        }
        (None, Some(peer)) => builder.with_client_cert_verifier(verifier(peer, false)?),
    };
    let certified =
        CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider).map_err(|e| {
            format!(
                "the TLS key {} does not go with the certificate {}: {e}",
                files.key.display(),
                files.cert.display()
            )
        })?;
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "the TLS key {} does not go with the certificate {}: {e}",
            files.key.display(),
            files.cert.display()
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Loaded {
        config: Arc::new(config),
        certified: Arc::new(certified),
        daemons,
        writers,
        sources,
        serial,
        not_after,
    })
}
