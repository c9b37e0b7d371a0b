//! The controller's side of its Lease (`lease`): one replica of `coloc-extender requeue`
//! leads and writes; the others keep their view (so they record the same evictions) and
//! take over once the leader's claim lapses. The leader also publishes on the Lease
//! whether it can store copies, which is what the extender beside kube-scheduler reads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use super::availability::Availability;
use super::lease::{self, Leading, LeaseState};

/// Whether this replica leads now: it renewed its claim recently enough that no other
/// replica can have taken over.
pub struct Leadership {
    epoch: Instant,
    leading: AtomicBool,
    /// Milliseconds since `epoch` of the last renewal that the API server took.
    renewed_ms: AtomicU64,
}

impl Default for Leadership {
    fn default() -> Self {
        Leadership { epoch: Instant::now(), leading: AtomicBool::new(false), renewed_ms: AtomicU64::new(0) }
    }
}

impl Leadership {
    /// A replica that lost touch with the API server stops before its claim could lapse.
    pub fn is_leading(&self) -> bool {
        let since = self.epoch.elapsed().as_millis() as u64 - self.renewed_ms.load(Ordering::Relaxed);
        self.leading.load(Ordering::Relaxed) && since < (lease::DURATION_SECS as u64 - 3) * 1000
    }

    fn renewed(&self) {
        self.renewed_ms.store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        if !self.leading.swap(true, Ordering::Relaxed) {
            tracing::info!("requeue: this replica leads (it stores, releases and deletes copies)");
            metrics::gauge!("coloc_requeue_leading").set(1.0);
        }
    }

    fn follows(&self, leader: &str) {
        if self.leading.swap(false, Ordering::Relaxed) {
            tracing::warn!(leader, "requeue: another replica leads now; this one stands by");
        }
        metrics::gauge!("coloc_requeue_leading").set(0.0);
    }
}

/// Where the Lease is and who this replica is.
#[derive(Debug, Clone)]
pub struct LeaseRef {
    pub namespace: String,
    pub name: String,
    /// This replica's name (its pod's).
    pub me: String,
}

/// Looks every `lease::RENEW_EVERY_SECS`: creates, takes over or renews the Lease as
/// `lease::step` says, publishing `availability` on it, until `stop`; then lets it go so
/// that another replica leads at once.
pub async fn lead(
    client: Client,
    at: LeaseRef,
    availability: Arc<Availability>,
    leadership: Arc<Leadership>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &at.namespace);
    metrics::gauge!("coloc_requeue_leading").set(0.0);
    loop {
        if let Err(e) = look(&api, &at, &availability, &leadership).await {
            tracing::warn!(lease = %format!("{}/{}", at.namespace, at.name), error = %e, "requeue: cannot read or write its Lease");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(lease::RENEW_EVERY_SECS)) => {}
            _ = stop.changed() => break,
        }
    }
    if leadership.is_leading() {
        let _ = let_go(&api, &at).await;
    }
}

async fn look(
    api: &Api<Lease>,
    at: &LeaseRef,
    availability: &Availability,
    leadership: &Leadership,
) -> Result<(), kube::Error> {
    let found = api.get_opt(&at.name).await?;
    let state = found.as_ref().map(state_of);
    let now = crate::clock::system_now();
    let copies = availability.why_not().unwrap_or_else(|| lease::ALLOWED.to_string());
    let mut written = match lease::step(state.as_ref(), &at.me, now) {
        Leading::Follow { leader } => {
            leadership.follows(&leader);
            return Ok(());
        }
        Leading::Create => Lease {
            metadata: ObjectMeta {
                name: Some(at.name.clone()),
                namespace: Some(at.namespace.clone()),
                labels: Some([("app.kubernetes.io/name".to_string(), "coloc-requeue".to_string())].into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec { lease_transitions: Some(0), acquire_time: Some(micro_now()), ..Default::default() }),
        },
        Leading::TakeOver => {
            let mut l = found.unwrap_or_default();
            let spec = l.spec.get_or_insert_with(Default::default);
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.acquire_time = Some(micro_now());
            l
        }
        Leading::Renew => found.unwrap_or_default(),
    };
    let spec = written.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(at.me.clone());
    spec.lease_duration_seconds = Some(lease::DURATION_SECS as i32);
    spec.renew_time = Some(micro_now());
    written.metadata.annotations.get_or_insert_with(Default::default).insert(lease::COPIES.to_string(), copies);
    // The resourceVersion read makes a replace fail on a conflict: of two replicas
    // taking over at once, one wins.
    let result = match written.metadata.resource_version {
        None => api.create(&PostParams::default(), &written).await,
        Some(_) => api.replace(&at.name, &PostParams::default(), &written).await,
    };
    match result {
        Ok(_) => leadership.renewed(),
        Err(kube::Error::Api(s)) if s.code == 409 => leadership.follows("another replica (a conflict)"),
        Err(e) => return Err(e),
    }
    Ok(())
}

/// Gives the Lease up (no holder), so a standing-by replica leads at its next look.
async fn let_go(api: &Api<Lease>, at: &LeaseRef) -> Result<(), kube::Error> {
    let Some(mut l) = api.get_opt(&at.name).await? else { return Ok(()) };
    let spec = l.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(at.me.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    api.replace(&at.name, &PostParams::default(), &l).await?;
    tracing::info!("requeue: stopping; the Lease is let go for another replica");
    Ok(())
}

pub(super) fn state_of(l: &Lease) -> LeaseState {
    let spec = l.spec.clone().unwrap_or_default();
    LeaseState {
        holder: spec.holder_identity,
        renewed: spec.renew_time.map(|t| t.0.as_second()),
        duration_secs: spec.lease_duration_seconds.map(i64::from),
        copies: l.metadata.annotations.as_ref().and_then(|a| a.get(lease::COPIES)).cloned(),
    }
}

fn micro_now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}
