//! TLS for the scheduler→extender hop (rustls): server certificate, optional client
//! certificate verification against a CA, and reload when the files change on disk
//! (Kubernetes updates mounted Secrets by swapping a symlink).

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{CertificateError, RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn file_err(path: &std::path::Path, message: impl ToString) -> TlsError {
    TlsError::File { path: path.display().to_string(), message: message.to_string() }
}

impl TlsFiles {
    pub fn load(&self) -> Result<ServerConfig, TlsError> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .map_err(|e| file_err(&self.cert, e))?
            .collect::<Result<_, _>>()
            .map_err(|e| file_err(&self.cert, e))?;
        if certs.is_empty() {
            return Err(file_err(&self.cert, "no certificate found"));
        }
        let serving_expiry = not_after(&certs[0]).ok_or_else(|| file_err(&self.cert, "not an X.509 certificate"))?;
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| file_err(&self.key, e))?;
        let provider = Arc::new(ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                let mut first_expiry: Option<i64> = None;
                for cert in CertificateDer::pem_file_iter(ca).map_err(|e| file_err(ca, e))? {
                    let cert = cert.map_err(|e| file_err(ca, e))?;
                    // Several CAs during a rotation: the first to expire is the one to watch.
                    if let Some(at) = not_after(&cert) {
                        first_expiry = Some(first_expiry.map_or(at, |f: i64| f.min(at)));
                    }
                    roots.add(cert).map_err(|e| file_err(ca, e))?;
                }
                if let Some(at) = first_expiry {
                    metrics::gauge!("coloc_tls_client_ca_expiry_timestamp_seconds").set(at as f64);
                }
                if roots.is_empty() {
                    return Err(file_err(ca, "no CA certificate found"));
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .map_err(|e| TlsError::Config(e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(certs, key).map_err(|e| TlsError::Config(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        metrics::gauge!("coloc_tls_serving_cert_expiry_timestamp_seconds").set(serving_expiry as f64);
        Ok(config)
    }

    /// Contents of every file, to notice changes however the files were replaced.
    fn fingerprint(&self) -> Vec<u8> {
        let mut all = Vec::new();
        for p in [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()].into_iter().flatten() {
            all.extend(std::fs::read(p).unwrap_or_default());
            all.push(0);
        }
        all
    }
}

/// A certificate's notAfter, in Unix seconds; `None` if it cannot be read as X.509.
pub fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

/// A certificate's subject common name (or the whole subject), at most 64 characters: the
/// `client` label of a client certificate's expiry. Only certificates the client CA signed
/// get this far, so the set of values is the CA owner's.
fn subject_of(cert: &x509_parser::certificate::X509Certificate<'_>) -> String {
    let subject = cert.subject();
    let cn = subject.iter_common_name().next().and_then(|cn| cn.as_str().ok().map(str::to_string));
    let name = cn.unwrap_or_else(|| subject.to_string());
    name.chars().take(64).collect()
}

/// Every reason a handshake is counted failed with (`coloc_tls_handshake_failures_total`).
pub const HANDSHAKE_FAILURES: [&str; 8] = [
    "timeout",
    "no_client_certificate",
    "client_certificate_expired",
    "client_certificate_unknown_issuer",
    "client_certificate_invalid",
    "rejected_by_client",
    "protocol",
    "other",
];

/// Why a TLS handshake failed, as a metric label: the client's certificate (missing,
/// expired, signed by a CA we do not trust), the client refusing ours (an alert: it does
/// not trust our CA), or the protocol (plain HTTP on the TLS port, no common version).
pub fn handshake_failure(e: &std::io::Error) -> &'static str {
    use tokio_rustls::rustls::Error;
    let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<Error>()) else {
        return match e.kind() {
            std::io::ErrorKind::InvalidData => "protocol",
            _ => "other",
        };
    };
    match tls {
        Error::NoCertificatesPresented => "no_client_certificate",
        Error::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. }) => {
            "client_certificate_expired"
        }
        Error::InvalidCertificate(CertificateError::UnknownIssuer) => "client_certificate_unknown_issuer",
        Error::InvalidCertificate(_) => "client_certificate_invalid",
        Error::AlertReceived(_) => "rejected_by_client",
        Error::InvalidMessage(_) | Error::PeerIncompatible(_) | Error::InappropriateMessage { .. } => "protocol",
        _ => "other",
    }
}

/// Counts a failed handshake; each reason's series exists from the start (`register_metrics`).
pub fn record_handshake_failure(reason: &'static str) {
    metrics::counter!("coloc_tls_handshake_failures_total", "reason" => reason).increment(1);
}

/// A handshake that succeeded: the expiry of the certificate the client presented.
pub fn record_client_certificate(cert: &CertificateDer<'_>) {
    if let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) {
        let at = parsed.validity().not_after.timestamp();
        metrics::gauge!("coloc_tls_client_cert_expiry_timestamp_seconds", "client" => subject_of(&parsed))
            .set(at as f64);
    }
}

/// Registers the handshake counters at zero, so that an alert on their increase sees the
/// first failure.
pub fn register_metrics() {
    for reason in HANDSHAKE_FAILURES {
        metrics::counter!("coloc_tls_handshake_failures_total", "reason" => reason).absolute(0);
    }
}

/// The acceptor new connections use; swapped on reload.
pub struct TlsAcceptorCell {
    current: ArcSwap<TlsAcceptor>,
}

impl TlsAcceptorCell {
    pub fn new(config: ServerConfig) -> Self {
        TlsAcceptorCell { current: ArcSwap::from_pointee(TlsAcceptor::from(Arc::new(config))) }
    }

    pub fn current(&self) -> TlsAcceptor {
        (**self.current.load()).clone()
    }

    pub fn replace(&self, config: ServerConfig) {
        self.current.store(Arc::new(TlsAcceptor::from(Arc::new(config))));
    }
}

/// Polls the files and swaps in a new configuration when they change, or at once on
/// `reload` (SIGHUP); a broken reload keeps the previous one and says so in logs and
/// metrics.
pub async fn watch(
    files: TlsFiles,
    cell: Arc<TlsAcceptorCell>,
    every: std::time::Duration,
    reload: tokio::sync::watch::Receiver<u64>,
) {
    let mut last = files.fingerprint();
    let mut ticker = crate::reload::ReloadTicker::new(every, reload);
    loop {
        let forced = ticker.next().await;
        let now = files.fingerprint();
        if now == last && !forced {
            continue;
        }
        last = now;
        match files.load() {
            Ok(config) => {
                cell.replace(config);
                metrics::counter!("coloc_tls_reloads_total", "result" => "ok").increment(1);
                tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded");
            }
            Err(e) => {
                metrics::counter!("coloc_tls_reloads_total", "result" => "error").increment(1);
                tracing::error!(error = %e, "TLS reload failed; keeping the previous certificate");
            }
        }
    }
}
