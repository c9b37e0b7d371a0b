//! The policy file, re-read while serving: a valid change is taken at once, a refused one
//! keeps the policy in force and is said (log, `/readyz`, metrics, an Event).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};

use crate::cluster::{Objects, View, ViewCell};
use crate::http;
use crate::policy::{Mode, Policy};

/// What the reload loop reads and updates.
pub struct PolicyReload {
    pub path: PathBuf,
    /// `serve --mode`, which wins over the file's.
    pub mode: Option<Mode>,
    pub policy: Arc<ArcSwap<Policy>>,
    /// Rebuilt from `snapshot` on a change (a snapshot view is classified by the policy).
    pub view: Arc<ViewCell>,
    pub snapshot: Option<Objects>,
    /// Why the file is not in force, for `/readyz`; `None` while it is.
    pub problem: Arc<ArcSwapOption<String>>,
    pub alarm: PolicyAlarm,
}

/// Says on this replica's own pod (a Warning Event) that its policy file was refused: with
/// --events, in a pod (POD_NAME and POD_NAMESPACE, as the shipped Deployment sets them).
pub type PolicyAlarm = Option<Box<dyn Fn(&str) + Send + Sync>>;

pub fn policy_alarm(events: Option<Arc<crate::events::kube::EventSink>>) -> PolicyAlarm {
    let sink = events?;
    let (Ok(namespace), Ok(pod)) = (std::env::var("POD_NAMESPACE"), std::env::var("POD_NAME")) else {
        tracing::info!("POD_NAME or POD_NAMESPACE unset: a refused policy file is said in the log, /readyz and metrics, not in an Event");
        return None;
    };
    Some(Box::new(move |problem: &str| sink.offer(crate::events::policy_invalid(&namespace, &pod, problem))))
}

/// Re-reads the policy file every 2 s, and at once on SIGHUP (mounted ConfigMaps change by
/// symlink swap, which file-event watchers easily miss). Parsing runs off the async
/// runtime. An invalid or unreadable file keeps the old policy, and says so in the log,
/// the metrics and `/readyz`.
pub async fn reload_policy(reloading: PolicyReload, reload: tokio::sync::watch::Receiver<u64>) {
    let PolicyReload { path, mode, policy, view, snapshot, problem, alarm } = reloading;
    let raise = |what: &str| {
        if let Some(alarm) = &alarm {
            alarm(what);
        }
    };
    let mut last = std::fs::read(&path).unwrap_or_default();
    // A problem before the first look can only be an invalid file at start: the built-in
    // default serves in shadow mode until a valid file is read.
    let mut serving_fallback = problem.load().is_some();
    if let Some(why) = problem.load_full() {
        raise(&why);
    }
    let mut ticker = crate::reload::ReloadTicker::new(Duration::from_secs(2), reload);
    loop {
        let forced = ticker.next().await;
        let now = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                let why =
                    format!("policy file {} is unreadable ({e}); the last good policy stays in force", path.display());
                if problem.load().as_deref() != Some(&why) {
                    http::prometheus::record_policy_reload("unreadable");
                    tracing::error!(policy = %path.display(), error = %e, "policy file unreadable; keeping the previous policy");
                    raise(&why);
                    problem.store(Some(Arc::new(why)));
                }
                continue;
            }
        };
        if now == last && !forced && problem.load().is_none() {
            continue;
        }
        last = now.clone();
        let parsed = tokio::task::spawn_blocking(move || {
            let text = String::from_utf8(now).map_err(|e| anyhow::anyhow!("not UTF-8: {e}"))?;
            let mut p = Policy::from_yaml(&text)?;
            if let Some(mode) = mode {
                p.mode = mode;
            }
            Ok::<_, anyhow::Error>(p)
        })
        .await;
        match parsed {
            Ok(Ok(p)) => {
                serving_fallback = false;
                http::prometheus::record_policy_fallback(false);
                if let Some(objects) = &snapshot {
                    let (objects, p2) = (objects.clone(), p.clone());
                    if let Ok(v) = tokio::task::spawn_blocking(move || View::build(objects, &p2)).await {
                        view.publish(v);
                    }
                }
                let (mode, fingerprint) = (p.mode.as_str(), p.fingerprint());
                http::prometheus::record_policy(mode, &fingerprint);
                policy.store(Arc::new(p));
                problem.store(None);
                http::prometheus::record_policy_reload("ok");
                tracing::info!(policy = %path.display(), mode, fingerprint, "policy reloaded");
            }
            Ok(Err(e)) => {
                let error = format!("{e:#}");
                // Tried again on every tick while the problem lasts: said once per new error.
                if problem.load().as_deref().is_none_or(|p| !p.contains(&error)) {
                    http::prometheus::record_policy_reload("error");
                    tracing::error!(policy = %path.display(), error, "policy reload failed; keeping the previous policy");
                    let keeping = match serving_fallback {
                        true => "the built-in default policy stays in force, in shadow mode",
                        false => "the last good policy stays in force",
                    };
                    let why = format!("policy file {} is invalid ({error}); {keeping}", path.display());
                    raise(&why);
                    problem.store(Some(Arc::new(why)));
                }
            }
            Err(e) => tracing::error!(error = %e, "policy reload task failed"),
        }
    }
}
