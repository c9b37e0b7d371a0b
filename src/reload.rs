//! Reloading without a restart: SIGHUP and a timer pace the policy and certificate reload
//! loops. Below `http` and `tls`, which both use it.

use std::time::Duration;

/// Yields once per SIGHUP (the daemon convention: reload policy and certificates). While
/// this runs, SIGHUP no longer terminates the process.
pub fn reload_signals() -> tokio::sync::watch::Receiver<u64> {
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hup) => {
            tokio::spawn(async move {
                let mut n = 0;
                while hup.recv().await.is_some() {
                    n += 1;
                    tracing::info!("SIGHUP: reloading policy and certificates");
                    if tx.send(n).is_err() {
                        break;
                    }
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot handle SIGHUP"),
    }
    #[cfg(not(unix))]
    drop(tx);
    rx
}

/// Paces a reload loop: fires every `every`, or at once on SIGHUP (see `reload_signals`).
pub struct ReloadTicker {
    every: Duration,
    /// `None` once the signal source is gone: then only the timer fires.
    signals: Option<tokio::sync::watch::Receiver<u64>>,
}

impl ReloadTicker {
    pub fn new(every: Duration, signals: tokio::sync::watch::Receiver<u64>) -> Self {
        ReloadTicker { every, signals: Some(signals) }
    }

    /// Waits for the next check; `true` when a SIGHUP asked for it (reload even if
    /// nothing seems to have changed).
    pub async fn next(&mut self) -> bool {
        let every = self.every;
        let signalled = match self.signals.as_mut() {
            Some(rx) => tokio::select! {
                _ = tokio::time::sleep(every) => None,
                changed = rx.changed() => Some(changed.is_ok()),
            },
            None => {
                tokio::time::sleep(every).await;
                None
            }
        };
        if signalled == Some(false) {
            self.signals = None;
        }
        signalled == Some(true)
    }
}
