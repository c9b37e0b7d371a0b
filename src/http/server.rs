//! Accept loop: HTTP/1.1 keep-alive (what kube-scheduler speaks), optional TLS, header
//! read timeout for slow clients, graceful drain on shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use crate::tls::TlsAcceptorCell;

pub struct ServeOptions {
    pub header_read_timeout: Duration,
    /// How long in-flight requests may take to finish after shutdown begins.
    pub drain_timeout: Duration,
    pub tls: Option<Arc<TlsAcceptorCell>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions { header_read_timeout: Duration::from_secs(10), drain_timeout: Duration::from_secs(20), tls: None }
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then drains open connections.
pub async fn serve(listener: TcpListener, app: Router, opts: ServeOptions, shutdown: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(opts.header_read_timeout).keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        match &opts.tls {
            None => {
                let conn = builder.serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            Some(tls) => {
                let acceptor = tls.current();
                let builder = builder.clone();
                let watcher = graceful.watcher();
                let handshake_timeout = opts.header_read_timeout;
                tokio::spawn(async move {
                    let stream = match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            let reason = crate::tls::handshake_failure(&e);
                            crate::tls::record_handshake_failure(reason);
                            tracing::warn!(%peer, reason, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            crate::tls::record_handshake_failure("timeout");
                            tracing::warn!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    if let Some(cert) = stream.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                        crate::tls::record_client_certificate(cert);
                    }
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = watcher.watch(conn).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
        }
    }
    // Stop accepting at once: new connections are refused (kube-scheduler retries on the
    // other replica) instead of hanging until the drain ends.
    drop(listener);
    tracing::info!("shutting down: listener closed, draining in-flight requests");
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("all connections closed"),
        _ = tokio::time::sleep(opts.drain_timeout) => tracing::warn!("drain timeout; closing remaining connections"),
    }
}

/// Completes on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
