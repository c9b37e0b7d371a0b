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
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
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
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| file_err(&self.key, e))?;
        let provider = Arc::new(ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(ca).map_err(|e| file_err(ca, e))? {
                    roots.add(cert.map_err(|e| file_err(ca, e))?).map_err(|e| file_err(ca, e))?;
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
