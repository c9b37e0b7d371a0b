//! Gang kinds: PodGroups of the native API and of the coscheduling and Volcano CRDs. Each
//! is watched only while the API server serves it and the policy enables its source, as
//! discovery (`GET /apis/{group}/{version}`) says at start-up and every few minutes after.
//! A kind that is not served is skipped and logged; one that stops being served is
//! dropped, with its objects (its gangs fall back to what their members declare).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::task::JoinHandle;

use super::{follow, watcher_of, Optional, Shared};
use crate::cluster::lean::{
    CoschedulingV1alpha1, LeanKind, NativeV1alpha2, NativeV1beta1, PodGroupApi, PodGroupKind, VolcanoV1beta1,
    POD_GROUP_SOURCES,
};
use crate::cluster::writer::Writer;
use crate::cluster::View;
use crate::model::GangSource;
use crate::policy::{GangSources, Policy};

/// One watchable gang kind.
struct GangKind {
    label: &'static str,
    source: GangSource,
    api_version: &'static str,
    plural: &'static str,
    probe_path: fn() -> String,
    start: fn(Client, Arc<Shared<View>>) -> JoinHandle<()>,
    /// Removes every object of this kind from the view.
    clear: fn(&Writer<View>, &Policy),
}

fn kind<A: PodGroupApi>() -> GangKind {
    type K<A> = PodGroupKind<A>;
    GangKind {
        label: K::<A>::LABEL,
        source: A::SOURCE,
        api_version: A::API_VERSION,
        plural: K::<A>::PLURAL,
        probe_path: super::probe_path::<K<A>>,
        start: |client, shared| tokio::spawn(follow(watcher_of::<K<A>>(client), shared)),
        clear: |writer, policy| writer.clear::<K<A>>(policy),
    }
}

/// Every gang kind; within a source, the preferred version first (v1beta1 and v1alpha2
/// serve the same native objects: only one is watched).
fn kinds() -> [GangKind; 4] {
    [kind::<NativeV1beta1>(), kind::<NativeV1alpha2>(), kind::<CoschedulingV1alpha1>(), kind::<VolcanoV1beta1>()]
}

/// The one-item list `probe_failing` sends for a failing gang kind.
pub(super) fn probe_path_of(label: &str) -> Option<String> {
    kinds().into_iter().find(|k| k.label == label).map(|k| (k.probe_path)())
}

/// Is `kind` served? `None`: discovery failed (unreachable, forbidden...): no change.
async fn served(client: &Client, kind: &GangKind) -> Option<bool> {
    let asked = tokio::time::timeout(Duration::from_secs(5), client.list_api_group_resources(kind.api_version)).await;
    match asked {
        Ok(Ok(list)) => Some(list.resources.iter().any(|r| r.name == kind.plural)),
        Ok(Err(kube::Error::Api(status))) if status.code == 404 => Some(false),
        Ok(Err(e)) => {
            tracing::warn!(kind = kind.label, error = %e, "gang kind discovery failed; keeping the current watches");
            None
        }
        Err(_) => {
            tracing::warn!(kind = kind.label, "gang kind discovery timed out; keeping the current watches");
            None
        }
    }
}

/// The gang kinds being watched, and what discovery last said of each.
#[derive(Default)]
pub(super) struct GangKinds {
    running: BTreeMap<&'static str, JoinHandle<()>>,
    served: BTreeMap<&'static str, bool>,
}

impl Optional<View> for GangKinds {
    async fn discover(&mut self, client: &Client, shared: &Arc<Shared<View>>, sources: GangSources) {
        let all = kinds();
        let mut wanted: Vec<&'static str> = Vec::new();
        for source in POD_GROUP_SOURCES.into_iter().filter(|s| sources.enabled(*s)) {
            for k in all.iter().filter(|k| k.source == source) {
                match served(client, k).await {
                    Some(true) => {
                        self.note(k.label, true);
                        wanted.push(k.label);
                        break;
                    }
                    Some(false) => self.note(k.label, false),
                    None => {
                        // Unknown: whatever runs for this source keeps running.
                        wanted.extend(
                            all.iter()
                                .filter(|o| o.source == source && self.running.contains_key(o.label))
                                .map(|o| o.label),
                        );
                        break;
                    }
                }
            }
        }
        // Stop first: a source's newer version replaces the older one's objects.
        for k in all.iter().filter(|k| !wanted.contains(&k.label)) {
            let Some(task) = self.running.remove(k.label) else { continue };
            task.abort();
            let mut m = shared.lock();
            let policy = m.policy.clone();
            (k.clear)(&shared.writer, &policy);
            m.relisting.remove(k.label);
            shared.fresh.forget(k.label);
            shared.open_when_synced(&mut m);
            tracing::info!(
                kind = k.label,
                "gang kind no longer watched (not served, or its source is disabled); its PodGroups left the view"
            );
        }
        for k in all.iter().filter(|k| wanted.contains(&k.label)) {
            if self.running.contains_key(k.label) {
                continue;
            }
            shared.fresh.watching_optional(k.label);
            self.running.insert(k.label, (k.start)(client.clone(), shared.clone()));
            tracing::info!(kind = k.label, "gang kind served: watching it");
        }
    }
}

impl GangKinds {
    /// Logs a change in what discovery says of `label`.
    fn note(&mut self, label: &'static str, served: bool) {
        if self.served.insert(label, served) != Some(served) && !served {
            tracing::info!(kind = label, "gang kind not served by the API server; skipped");
        }
    }
}
