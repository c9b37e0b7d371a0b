//! `serve --check-routing`: every `--check-routing-every` (30 s), off the answer path, whether the routing admission
//! policy is in effect (`check`): a dry run of a pod it must route, in the first namespace
//! labelled for it, as the routing-check identity (which admission lets create nothing but
//! that, and only as a dry run). Says so in `coloc_routing_in_effect` (1 or 0; absent until
//! a namespace is labelled and a PriorityClass of a governed class exists) and, on a
//! change, in the log; where it does not hold, a Warning Event `NotRouted` on each governed
//! pod of a labelled namespace created since it last held and left to the default scheduler.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};

use super::check::{self, Verdict, NAMESPACE_LABEL};
use crate::events::kube::EventSink;
use crate::events::{PodEvent, Regarding};
use crate::model::Timestamp;
use crate::policy::Policy;

/// The check's parts: reads as the extender, the dry run as the routing-check identity.
pub struct RoutingCheck {
    pub reader: Client,
    pub prober: Client,
    pub policy: Arc<ArcSwap<Policy>>,
    pub events: Option<Arc<EventSink>>,
    pub clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    pub every: Duration,
}

/// What one check found.
enum Found {
    /// The verdict in the first of the `labelled` namespaces.
    Verdict { labelled: Vec<String>, verdict: Verdict },
    /// Nothing to try: no labelled namespace, or no PriorityClass of a governed class.
    Nothing(&'static str),
}

/// Says `verdict` in `coloc_routing_in_effect`.
pub fn record(verdict: &Verdict) {
    let value = match verdict {
        Verdict::InEffect => 1.0,
        Verdict::NotInEffect { .. } => 0.0,
    };
    metrics::gauge!("coloc_routing_in_effect").set(value);
}

impl RoutingCheck {
    pub async fn run(self) {
        let mut last = String::new();
        let mut held_at = (self.clock)();
        loop {
            let now = (self.clock)();
            let said = match self.once().await {
                Ok(Found::Verdict { labelled, verdict: Verdict::InEffect }) => {
                    record(&Verdict::InEffect);
                    held_at = now;
                    format!(
                        "routing is in effect (a pod of a governed class in {} is sent to coloc-scheduler)",
                        labelled[0]
                    )
                }
                Ok(Found::Verdict { labelled, verdict: Verdict::NotInEffect { scheduler } }) => {
                    record(&Verdict::NotInEffect { scheduler: scheduler.clone() });
                    for namespace in &labelled {
                        self.mark_missed(namespace, held_at).await;
                    }
                    format!("routing is NOT in effect: a pod of a governed class in {} is left to {scheduler} (docs/troubleshooting.md, \"Pods of a labelled namespace left with the default scheduler\")", labelled[0])
                }
                Ok(Found::Nothing(why)) => format!("routing not checked: {why}"),
                Err(e) => format!("routing not checked: {e}"),
            };
            if said != last {
                match said.contains("NOT") {
                    true => tracing::warn!("{said}"),
                    false => tracing::info!("{said}"),
                }
                last = said;
            }
            tokio::time::sleep(self.every).await;
        }
    }

    async fn once(&self) -> Result<Found, kube::Error> {
        let (key, value) = NAMESPACE_LABEL;
        let labelled = ListParams::default().labels(&format!("{key}={value}"));
        let mut namespaces: Vec<String> = Api::<Namespace>::all(self.reader.clone())
            .list(&labelled)
            .await?
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        namespaces.sort();
        let Some(namespace) = namespaces.first().cloned() else {
            return Ok(Found::Nothing("no namespace is labelled"));
        };
        let classes: Vec<(String, i32)> = Api::<PriorityClass>::all(self.reader.clone())
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|c| Some((c.metadata.name?, c.value?)))
            .collect();
        let Some(probe) = self.policy.load().routing_probe(&namespace, &classes) else {
            return Ok(Found::Nothing("no PriorityClass of a governed class"));
        };
        let pod: Pod = serde_json::from_value(check::probe_pod(&namespace, &probe)).map_err(kube::Error::SerdeError)?;
        let dry = PostParams { dry_run: true, ..Default::default() };
        let admitted = Api::<Pod>::namespaced(self.prober.clone(), &namespace).create(&dry, &pod).await?;
        let scheduler = admitted.spec.and_then(|s| s.scheduler_name);
        Ok(Found::Verdict { labelled: namespaces, verdict: check::verdict(scheduler.as_deref()) })
    }

    /// A Warning on each governed pod of `namespace` created since `since` and left to the
    /// default scheduler (`kubectl describe pod` shows it); throttled per pod by the sink.
    async fn mark_missed(&self, namespace: &str, since: Timestamp) {
        let Some(events) = &self.events else { return };
        let left = ListParams::default().fields("spec.schedulerName=default-scheduler");
        let Ok(list) = Api::<Pod>::namespaced(self.reader.clone(), namespace).list(&left).await else { return };
        let pods: Vec<(crate::model::Pod, String)> = list
            .items
            .into_iter()
            .filter_map(|p| {
                let scheduler = p.spec.as_ref()?.scheduler_name.clone().unwrap_or_default();
                let wire: crate::wire::k8s::Pod = serde_json::from_value(serde_json::to_value(p).ok()?).ok()?;
                Some((wire.into_model().ok()?, scheduler))
            })
            .collect();
        let policy = self.policy.load();
        for pod in check::missed(&pods, &policy, since, |p| p.priority.unwrap_or(0)) {
            events.offer(PodEvent {
                regarding: Regarding::Pod,
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                warning: true,
                reason: "NotRouted",
                action: "Route",
                note: format!(
                    "coloc-extender: created while the routing admission policy was not in effect, so left to default-scheduler instead of {}; recreate it once routing holds again (docs/troubleshooting.md)",
                    check::ROUTED_TO
                ),
            });
        }
    }
}
