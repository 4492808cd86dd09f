//! The TLS metrics: when the listener's certificate and the client certificate given to
//! etcd expire, the listener's reloads, and the handshakes that failed. No series of a
//! certificate the daemon does not use.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateLabels {
    pub certificate: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandshakeLabels {
    pub reason: &'static str,
}

pub struct TlsMetrics {
    not_after: Family<CertificateLabels, Gauge>,
    reloads: Family<ReloadLabels, Counter>,
    handshake_failures: Family<HandshakeLabels, Counter>,
}

impl TlsMetrics {
    pub(super) fn register(registry: &mut Registry) -> TlsMetrics {
        let not_after = Family::<CertificateLabels, Gauge>::default();
        registry.register(
            "tls_certificate_not_after_seconds",
            "When the certificate in use expires (its notAfter), unix seconds: alert well \
             before it",
            not_after.clone(),
        );
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "tls_reloads",
            "Reloads of the TLS certificate and key (on SIGHUP or a change of the files) that \
             changed them, by result: ok, or failed (the pair in use stays)",
            reloads.clone(),
        );
        let handshake_failures = Family::<HandshakeLabels, Counter>::default();
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes that failed, by reason: plain_http, timeout, closed, not_tls, \
             incompatible (no common version or cipher suite), no_client_certificate, \
             bad_client_certificate, client_refused_certificate (the client's alert), io, other",
            handshake_failures.clone(),
        );
        TlsMetrics {
            not_after,
            reloads,
            handshake_failures,
        }
    }

    /// The server's certificate in use expires at `not_after` (unix seconds).
    pub fn certificate(&self, not_after: i64) {
        self.expires("server", not_after);
    }

    /// The client certificate the daemon gives etcd (`--etcd-cert`, read at start)
    /// expires at `not_after` (unix seconds).
    pub fn etcd_client_certificate(&self, not_after: i64) {
        self.expires("etcd-client", not_after);
    }

    fn expires(&self, certificate: &'static str, not_after: i64) {
        self.not_after
            .get_or_create(&CertificateLabels { certificate })
            .set(not_after);
    }

    pub fn reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
    }

    pub fn handshake_failed(&self, reason: &'static str) {
        self.handshake_failures
            .get_or_create(&HandshakeLabels { reason })
            .inc();
    }
}
