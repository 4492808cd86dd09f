//! The client side of TLS between daemons: a replica sends a request on to the writer over
//! `https`, verifying the writer's certificate with `--tls-peer-ca` and presenting its own
//! `--tls-cert` as its client certificate — both as the listener last loaded them, so a
//! rotation of the files (SIGHUP, or a change the listener noticed) covers this side too.
//!
//! A caller who authenticated to the replica with a client certificate has no token to
//! send on; the replica names the caller's certificate in [`FORWARDED_NAMES_HEADER`], and
//! the writer takes those names only on a connection whose own certificate
//! `--tls-peer-ca` verified (another daemon's), so a client cannot claim a name by
//! sending the header itself.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

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

/// Verifies the writer's certificate with the peer CA the listener last loaded (Web PKI:
/// the chain, the validity, the name of the URL's host).
#[derive(Debug)]
struct CurrentPeerCa {
    tls: Arc<ServerTls>,
    provider: Arc<CryptoProvider>,
}

impl CurrentPeerCa {
    fn algorithms(&self) -> &rustls::crypto::WebPkiSupportedAlgorithms {
        &self.provider.signature_verification_algorithms
    }
}

impl ServerCertVerifier for CurrentPeerCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let loaded = self.tls.current.load();
        let Some(writers) = &loaded.writers else {
            return Err(rustls::Error::General("no --tls-peer-ca".into()));
        };
        writers.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, self.algorithms())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, self.algorithms())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms().supported_schemes()
    }
}

/// The TLS configuration of requests sent on to the writer: its certificate verified with
/// the peer CA, this daemon's own presented (both as the listener last loaded them).
pub fn forwarding_config(tls: &Arc<ServerTls>) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = CurrentPeerCa {
        tls: tls.clone(),
        provider: provider.clone(),
    };
    // ALPN is the connector's to set (`http/1.1`).
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
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
