//! Where the store lives: the data dir (`--store sled`, the default) or an etcd cluster.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Which store the daemon keeps the blocklist in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// sled, in the data dir.
    Sled,
    /// An etcd cluster, under --etcd-prefix (the `etcd` build feature).
    Etcd,
}

/// The store's flags.
#[derive(Debug, Clone, Args)]
pub struct StoreFlags {
    /// Where the blocklist lives: `sled` in --data-dir, or `etcd` in the cluster at
    /// --etcd-endpoints (no data dir then; one daemon writes a prefix, every other started
    /// on it serves as a replica).
    #[arg(long = "store", env = "BLOCKLISTD_STORE", value_enum, default_value_t = StoreKind::Sled,
          global = true)]
    pub kind: StoreKind,

    /// etcd's client URLs, comma-separated.
    #[arg(
        long,
        env = "BLOCKLISTD_ETCD_ENDPOINTS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379",
        global = true
    )]
    pub etcd_endpoints: Vec<String>,

    /// Every key the daemon writes in etcd is under this prefix, so one cluster can hold
    /// several blocklists or serve other users. Ends with `/`.
    #[arg(long, env = "BLOCKLISTD_ETCD_PREFIX", default_value = "/blocklistd/",
          value_parser = parse_prefix, global = true)]
    pub etcd_prefix: String,

    /// etcd user, with --etcd-password-file.
    #[arg(
        long,
        env = "BLOCKLISTD_ETCD_USER",
        requires = "etcd_password_file",
        global = true
    )]
    pub etcd_user: Option<String>,

    /// A file holding the etcd user's password (its first line).
    #[arg(
        long,
        env = "BLOCKLISTD_ETCD_PASSWORD_FILE",
        requires = "etcd_user",
        global = true
    )]
    pub etcd_password_file: Option<PathBuf>,

    /// etcd's CA (PEM): the members' certificates are verified with it. Needs `https://`
    /// endpoints (and they need it). Read at start.
    #[arg(long, env = "BLOCKLISTD_ETCD_CACERT", global = true)]
    pub etcd_cacert: Option<PathBuf>,

    /// A client certificate (PEM) for a cluster run with `--client-cert-auth`, with
    /// --etcd-key. Read at start.
    #[arg(
        long,
        env = "BLOCKLISTD_ETCD_CERT",
        requires = "etcd_key",
        global = true
    )]
    pub etcd_cert: Option<PathBuf>,

    /// The private key of --etcd-cert (PEM).
    #[arg(
        long,
        env = "BLOCKLISTD_ETCD_KEY",
        requires = "etcd_cert",
        global = true
    )]
    pub etcd_key: Option<PathBuf>,

    /// The writer's lease, in seconds: how long after a writer dies a replica takes over.
    #[arg(long, env = "BLOCKLISTD_ETCD_LEASE_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(2..=3600), global = true)]
    pub etcd_lease_secs: u32,

    /// etcd's --max-request-bytes: a group's writes larger than this go in several parts.
    #[arg(long, env = "BLOCKLISTD_ETCD_MAX_REQUEST_BYTES", default_value_t = 1536 * 1024,
          value_parser = clap::value_parser!(u64).range(64 * 1024..=1024 * 1024 * 1024),
          global = true)]
    pub etcd_max_request_bytes: u64,

    /// Refuse to start when an etcd member runs a release without etcd's fixes for
    /// linearizable reads and the watch (older than 3.4.42, 3.5.28, 3.6.9): without it
    /// the daemon warns (in its log, /readyz and a metric) and runs.
    #[arg(long, env = "BLOCKLISTD_ETCD_REQUIRE_FIXED_VERSION", global = true)]
    pub etcd_require_fixed_version: bool,

    /// etcd's --max-txn-ops: folding the log into one key per stored key puts at most this
    /// many keys per transaction.
    #[arg(long, env = "BLOCKLISTD_ETCD_MAX_TXN_OPS", default_value_t = 128,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000), global = true)]
    pub etcd_max_txn_ops: u32,

    /// How many log entries wait before they are folded into one key per stored key. For
    /// tests: small values fold often.
    #[arg(long, env = "BLOCKLISTD_ETCD_FOLD_ENTRIES", hide = true, default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(1..), global = true)]
    pub etcd_fold_entries: u64,

    /// The deadline of each call to etcd, in ms: past it the write fails (503) rather than
    /// wait on a cluster without quorum.
    #[arg(long, env = "BLOCKLISTD_ETCD_TIMEOUT_MS", default_value_t = 3_000,
          value_parser = clap::value_parser!(u64).range(100..=60_000), global = true)]
    pub etcd_timeout_ms: u64,

    /// The URL other daemons on the prefix forward requests to while this one is the
    /// writer (written in the writer key); default: `http://` (`https://` with
    /// --tls-cert) and the bound --listen address, with this machine's host name for an
    /// unspecified address (0.0.0.0, ::).
    #[arg(long, env = "BLOCKLISTD_ADVERTISE_URL", value_parser = parse_advertise_url)]
    pub advertise_url: Option<String>,

    /// How long a request that must go to the writer waits while no writer is known (an
    /// election in progress), in ms; then it answers 503 with Retry-After.
    #[arg(long, env = "BLOCKLISTD_FORWARD_WAIT_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub forward_wait_ms: u64,
}

fn parse_advertise_url(text: &str) -> Result<String, String> {
    let uri: axum::http::Uri = text
        .parse()
        .map_err(|e| format!("not a URL ({e}); e.g. http://10.0.0.7:7224"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
        return Err("must be http:// or https:// with a host, e.g. https://10.0.0.7:7224".into());
    }
    if uri.path() != "/" || uri.query().is_some() {
        return Err("must name a host and port only, no path".into());
    }
    Ok(text.trim_end_matches('/').to_owned())
}

impl StoreFlags {
    /// Whether the store is an etcd prefix (`--store etcd`).
    pub fn on_etcd(&self) -> bool {
        matches!(self.kind, StoreKind::Etcd)
    }

    /// The URL this daemon announces as the writer ([`StoreFlags::advertise_url`]), for the
    /// address it is bound to; `https` when the listener serves TLS, which a given URL must
    /// match.
    pub fn advertised(&self, bound: std::net::SocketAddr, https: bool) -> Result<String, String> {
        let scheme = if https { "https" } else { "http" };
        if let Some(url) = &self.advertise_url {
            if !url.starts_with(&format!("{scheme}://")) {
                return Err(format!(
                    "--advertise-url {url} must be {scheme}://: the listener serves {}",
                    if https {
                        "TLS (--tls-cert)"
                    } else {
                        "plain HTTP"
                    }
                ));
            }
            return Ok(url.clone());
        }
        if !bound.ip().is_unspecified() {
            return Ok(format!("{scheme}://{bound}"));
        }
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        Ok(format!("{scheme}://{host}:{}", bound.port()))
    }

    /// [`StoreFlags::forward_wait_ms`].
    pub fn forward_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.forward_wait_ms)
    }
}

fn parse_prefix(text: &str) -> Result<String, String> {
    if !text.ends_with('/') || text.len() < 2 {
        return Err("must end with `/` and name something, e.g. /blocklistd/".into());
    }
    Ok(text.to_owned())
}

/// Who opens the store, which decides how an etcd prefix is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opener {
    /// The daemon: waits as a replica while another daemon writes the prefix, and
    /// creates the store in an empty one.
    Daemon,
    /// An offline tool: waits one lease for a killed daemon's key, no longer; `create`:
    /// whether an empty prefix gets a new store (`import`) or is an error (`check`).
    Tool { create: bool },
}

impl StoreFlags {
    /// Puts `store` where the flags say: left in its data dir for sled, or connected to
    /// the etcd cluster (nothing sent yet) under the name `name` for operators.
    #[cfg_attr(
        not(feature = "etcd"),
        allow(unused_variables),
        expect(
            clippy::needless_pass_by_value,
            reason = "the etcd store takes the name; without it the name is unused"
        )
    )]
    pub fn place(
        &self,
        store: &mut crate::store::StoreConfig,
        name: String,
        opener: Opener,
    ) -> Result<(), String> {
        match self.kind {
            StoreKind::Sled => Ok(()),
            #[cfg(feature = "etcd")]
            StoreKind::Etcd => {
                let mut etcd = self.etcd(name)?;
                if let Opener::Tool { create } = opener {
                    etcd.patience = Some(etcd.lease_and_a_second());
                    etcd.create = create;
                }
                let etcd = crate::store::etcd::Etcd::connect(etcd).map_err(|e| e.to_string())?;
                // Which etcd this is, before anything is written: a member that does not
                // answer now is judged when it does.
                let versions = etcd.read_versions();
                if self.etcd_require_fixed_version {
                    if let Some(warning) = crate::store::etcd::version_warning(&versions) {
                        return Err(format!("--etcd-require-fixed-version: {warning}"));
                    }
                }
                if opener == Opener::Daemon {
                    etcd.refresh_versions();
                }
                store.in_etcd(etcd);
                Ok(())
            }
            #[cfg(not(feature = "etcd"))]
            StoreKind::Etcd => Err(
                "this blocklistd was built without the etcd store: build it \
                 with `cargo build --release --features etcd` (its etcd client needs protoc, \
                 Debian: protobuf-compiler)"
                    .into(),
            ),
        }
    }

    /// The etcd store's settings; the password read from its file.
    #[cfg(feature = "etcd")]
    fn etcd(&self, name: String) -> Result<crate::store::etcd::EtcdConfig, String> {
        let user = match (&self.etcd_user, &self.etcd_password_file) {
            (Some(user), Some(file)) => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| format!("--etcd-password-file {}: {e}", file.display()))?;
                let password = text.lines().next().unwrap_or_default().to_owned();
                Some((user.clone(), password))
            }
            _ => None,
        };
        Ok(crate::store::etcd::EtcdConfig {
            tls: self.etcd_tls()?,
            endpoints: self.etcd_endpoints.clone(),
            prefix: self.etcd_prefix.clone(),
            user,
            lease_ttl_secs: i64::from(self.etcd_lease_secs),
            max_request_bytes: usize::try_from(self.etcd_max_request_bytes).unwrap_or(usize::MAX),
            max_txn_ops: self.etcd_max_txn_ops as usize,
            fold_entries: self.etcd_fold_entries,
            call_timeout: std::time::Duration::from_millis(self.etcd_timeout_ms),
            name,
            patience: None,
            create: true,
        })
    }

    /// The TLS of the connections to etcd: `None` for `http://` endpoints. The files are
    /// read here, so a wrong path or a file that is not PEM stops the start with its name.
    #[cfg(feature = "etcd")]
    fn etcd_tls(&self) -> Result<Option<etcd_client::TlsOptions>, String> {
        use etcd_client::{Certificate, Identity, TlsOptions};
        let https = self
            .etcd_endpoints
            .iter()
            .filter(|url| url.starts_with("https://"));
        let https = https.count();
        let given = self.etcd_cacert.is_some() || self.etcd_cert.is_some();
        if https == 0 && !given {
            return Ok(None);
        }
        if https != self.etcd_endpoints.len() {
            return Err(format!(
                "--etcd-endpoints {}: with --etcd-cacert or --etcd-cert every endpoint must \
                 be https://, and an https:// endpoint needs them all so",
                self.etcd_endpoints.join(",")
            ));
        }
        let Some(ca) = &self.etcd_cacert else {
            return Err(
                "https:// etcd endpoints need --etcd-cacert, the CA that signed the \
                        members' certificates"
                    .into(),
            );
        };
        let ca = crate::pem::read_certificates("--etcd-cacert", ca)?;
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
        if let (Some(cert), Some(key)) = (&self.etcd_cert, &self.etcd_key) {
            let cert = crate::pem::read_certificates("--etcd-cert", cert)?;
            let key = crate::pem::read_key("--etcd-key", key)?;
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        Ok(Some(tls))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{parse_advertise_url, StoreFlags};

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        store: StoreFlags,
    }

    fn flags(args: &[&str]) -> StoreFlags {
        let args = std::iter::once("blocklistd").chain(args.iter().copied());
        Flags::try_parse_from(args).expect("flags parse").store
    }

    #[test]
    fn the_advertised_scheme_is_the_listeners() {
        let bound: std::net::SocketAddr = "127.0.0.1:7224".parse().unwrap();
        assert_eq!(
            flags(&[]).advertised(bound, true).as_deref(),
            Ok("https://127.0.0.1:7224")
        );
        assert_eq!(
            flags(&[]).advertised(bound, false).as_deref(),
            Ok("http://127.0.0.1:7224")
        );
        let plain = flags(&["--advertise-url", "http://10.0.0.7:7224"]);
        let refused = plain.advertised(bound, true).unwrap_err();
        assert!(refused.contains("must be https://"), "{refused}");
        let secure = flags(&["--advertise-url", "https://10.0.0.7:7224"]);
        assert!(secure.advertised(bound, false).is_err());
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcds_tls_needs_https_endpoints_and_a_ca_that_is_pem() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, "not a certificate").unwrap();
        let ca = ca.to_str().unwrap();
        assert!(flags(&[]).etcd_tls().unwrap().is_none(), "plain by default");
        let refused = [
            (vec!["--etcd-cacert", ca], "must be https://"),
            (
                vec!["--etcd-endpoints", "https://10.0.0.1:2379"],
                "need --etcd-cacert",
            ),
            (
                vec![
                    "--etcd-endpoints",
                    "https://e:2379,http://f:2379",
                    "--etcd-cacert",
                    ca,
                ],
                "must be https://",
            ),
            (
                vec!["--etcd-endpoints", "https://e:2379", "--etcd-cacert", ca],
                "--etcd-cacert",
            ),
        ];
        for (args, says) in refused {
            let error = flags(&args).etcd_tls().unwrap_err();
            assert!(error.contains(says), "{args:?}: {error}");
        }
    }

    #[test]
    fn an_advertised_url_is_http_or_https_to_a_host() {
        assert_eq!(
            parse_advertise_url("http://10.0.0.7:7224/").as_deref(),
            Ok("http://10.0.0.7:7224")
        );
        assert_eq!(
            parse_advertise_url("https://replica-1.example:7224").as_deref(),
            Ok("https://replica-1.example:7224")
        );
        for refused in [
            "ftp://10.0.0.7:7224",
            "10.0.0.7:7224",
            "http://h:1/api",
            "http://h:1/?a=b",
        ] {
            assert!(parse_advertise_url(refused).is_err(), "{refused}");
        }
    }
}
