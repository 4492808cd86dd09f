//! The client side of TLS between daemons: a replica sends a request on to the writer over
//! `https`, verifying the writer's certificate with `--tls-peer-ca` and presenting its own
//! (`--tls-cert`, as reloaded) as its client certificate.
//!
//! A caller who authenticated to the replica with a client certificate has no token to
//! send on; the replica names the caller's certificate in [`FORWARDED_NAMES_HEADER`], and
//! the writer takes those names only on a connection whose own certificate
//! `--tls-peer-ca` verified (another daemon's), so a client cannot claim a name by
//! sending the header itself.

use std::path::Path;
use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, SignatureScheme};

use super::ServerTls;

/// On a request one daemon sends on to another: a name of the caller's verified client
/// certificate, one value per name, in the order the token file is searched.
pub const FORWARDED_NAMES_HEADER: &str = "blocklist-forwarded-certificate";

/// Presents the listener's current certificate: rotated with it.
#[derive(Debug)]
struct OwnCertificate(Arc<ServerTls>);

impl ResolvesClientCert for OwnCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current.load().certified.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The TLS configuration of requests sent on to the writer: its certificate verified with
/// the CA at `peer_ca`, this daemon's own presented.
pub fn forwarding_config(tls: &Arc<ServerTls>, peer_ca: &Path) -> Result<ClientConfig, String> {
    let roots = crate::pem::roots("TLS peer CA", peer_ca, &mut Vec::new())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // ALPN is the connector's to set (`http/1.1`).
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_client_cert_resolver(Arc::new(OwnCertificate(tls.clone())));
    Ok(config)
}

impl ServerTls {
    /// Whether a client's verified certificate is another daemon's: `--tls-peer-ca` verifies
    /// it too.
    pub(super) fn is_daemon(
        &self,
        leaf: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
    ) -> bool {
        let loaded = self.current.load();
        loaded.daemons.as_ref().is_some_and(|verifier| {
            verifier
                .verify_client_cert(leaf, intermediates, UnixTime::now())
                .is_ok()
        })
    }
}
