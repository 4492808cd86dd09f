//! PEM files — certificates, keys, trust roots — read with the file named in every error, for
//! the listener's TLS and the connections to etcd.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

/// Reads `path`, naming it in the error.
pub fn read(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))
}

/// The certificates of a PEM file: at least one.
pub fn certificates(
    what: &str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the {what} {} is not PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "the {what} {} holds no certificate (PEM `BEGIN CERTIFICATE`)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The certificates of the CA file at `path`, as trust roots; its bytes join `sources`.
pub fn roots(what: &str, path: &Path, sources: &mut Vec<Vec<u8>>) -> Result<RootCertStore, String> {
    let pem = read(what, path)?;
    let mut roots = RootCertStore::empty();
    for cert in certificates(what, path, &pem)? {
        roots
            .add(cert)
            .map_err(|e| format!("the {what} {}: {e}", path.display()))?;
    }
    sources.push(pem);
    Ok(roots)
}

/// The PEM file at `path` (named `what` in errors), once it is known to hold at least one
/// certificate.
pub fn read_certificates(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    let pem = read(what, path)?;
    certificates(what, path, &pem)?;
    Ok(pem)
}

/// The PEM file at `path` (named `what` in errors), once it is known to hold a private key.
pub fn read_key(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    let pem = read(what, path)?;
    private_key(what, path, &pem)?;
    Ok(pem)
}

pub fn private_key(what: &str, path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
        format!(
            "the {what} {} holds no private key (PEM PKCS#8, PKCS#1 or SEC1): {e}",
            path.display()
        )
    })
}
