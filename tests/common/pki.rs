//! A private CA and the certificates it signs, made in the test (rcgen): a server's for
//! 127.0.0.1 and localhost, a client's with a name, and the bad ones a client must refuse.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CrlDistributionPoint, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};

use super::DEADLINE;

/// A CA: its certificate as PEM, and what it signs with.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

/// A certificate and its key, as PEM, and its serial number as the daemon logs it (hex).
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub serial: String,
}

impl Issued {
    /// Writes `NAME.crt` and `NAME.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("write the certificate");
        std::fs::write(&key, &self.key_pem).expect("write the key");
        (cert, key)
    }
}

/// Distinct serial numbers across the certificates of one test process.
static SERIAL: AtomicU8 = AtomicU8::new(1);

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        Ca {
            issuer: Issuer::new(params, key),
            pem: cert.pem(),
        }
    }

    /// Writes the CA's certificate to `dir/NAME.crt`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.crt"));
        std::fs::write(&path, &self.pem).expect("write the CA");
        path
    }

    /// A server certificate for `names` (DNS names or IP addresses), valid now.
    pub fn server(&self, names: &[&str]) -> Issued {
        self.issue(names, &[ExtendedKeyUsagePurpose::ServerAuth], false)
    }

    /// A daemon's certificate for `names`: it serves with it, and presents it as a client
    /// when it sends a request on to the writer.
    pub fn daemon(&self, names: &[&str]) -> Issued {
        let both = [
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.issue(names, &both, false)
    }

    /// A server certificate for 127.0.0.1 and localhost that expired in 2021.
    pub fn expired_server(&self) -> Issued {
        self.issue(
            &["127.0.0.1", "localhost"],
            &[ExtendedKeyUsagePurpose::ServerAuth],
            true,
        )
    }

    /// A client certificate whose subject alternative name and common name are `name`.
    pub fn client(&self, name: &str) -> Issued {
        self.issue(&[name], &[ExtendedKeyUsagePurpose::ClientAuth], false)
    }

    fn issue(&self, names: &[&str], usage: &[ExtendedKeyUsagePurpose], expired: bool) -> Issued {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("certificate params");
        params
            .distinguished_name
            .push(DnType::CommonName, names[0].clone());
        // Where a CA publishes revocations: a scanner rates a certificate without one HIGH,
        // which is about the CA, not the daemon serving it.
        params.crl_distribution_points = vec![CrlDistributionPoint {
            uris: vec!["http://ca.example/crl.pem".to_owned()],
        }];
        params.extended_key_usages = usage.to_vec();
        let serial = [0x42, SERIAL.fetch_add(1, Ordering::Relaxed)];
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2021, 1, 1);
        } else {
            // 90 days from today, as an ACME CA issues them (a scanner rates a
            // certificate valid for years HIGH).
            let (year, month, day) = today();
            params.not_before = date_time_ymd(year, month, day);
            params.not_after = params.not_before + std::time::Duration::from_secs(90 * 86_400);
        }
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("certificate");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            serial: format!("{:02x}:{:02x}", serial[0], serial[1]),
        }
    }
}

/// An https client trusting `ca` only, presenting `identity` if given, that reports the
/// server's certificate.
pub fn https_client(ca: &Ca, identity: Option<&Issued>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap())
        .tls_info(true)
        .timeout(DEADLINE);
    if let Some(identity) = identity {
        let pem = format!("{}\n{}", identity.cert_pem, identity.key_pem);
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    builder.build().unwrap()
}

/// Today's date (UTC): the civil date of the days since 1970 (Howard Hinnant's
/// `civil_from_days`).
fn today() -> (i32, u8, u8) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
    (year, month, day)
}
