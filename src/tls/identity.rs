//! What a certificate says about its holder: the names of a client's, the serial and expiry
//! of the server's.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The client of a connection whose certificate the client CA verified: the names its
/// certificate carries, the subject alternative names (DNS, URI, email) first and then the
/// subject's common name. Every request on the connection carries it as an extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub names: Arc<[String]>,
    /// Whether `--tls-peer-ca` verifies it: another daemon of the prefix, sending a request
    /// on to this one.
    pub daemon: bool,
}

impl Peer {
    /// The names of a verified certificate; `None` if it cannot be parsed (rustls verified
    /// it, so it can) or names nothing.
    pub fn of(cert: &CertificateDer<'_>) -> Option<Peer> {
        let (_, cert) = X509Certificate::from_der(cert).ok()?;
        let mut names = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(n) | GeneralName::URI(n) | GeneralName::RFC822Name(n) => {
                        names.push((*n).to_owned());
                    }
                    _ => {}
                }
            }
        }
        for cn in cert.subject().iter_common_name() {
            if let Ok(cn) = cn.as_str() {
                names.push(cn.to_owned());
            }
        }
        (!names.is_empty()).then(|| Peer {
            names: names.into(),
            daemon: false,
        })
    }
}

/// The serial number (hex) and notAfter (unix seconds) of a certificate.
pub(super) fn serial_and_expiry(cert: &CertificateDer<'_>) -> Result<(String, i64), String> {
    let (_, cert) =
        X509Certificate::from_der(cert).map_err(|e| format!("not an X.509 certificate: {e}"))?;
    Ok((
        cert.tbs_certificate.raw_serial_as_string(),
        cert.validity().not_after.timestamp(),
    ))
}
