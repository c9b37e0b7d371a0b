//! How each kind decisions read enters and leaves their `View`.

use super::{split, Store, Takes};
use crate::cluster::lean::{DecisionPodKind, JobKind, NodeKind, PdbKind, PodGroupApi, PodGroupKind, POD_GROUP_SOURCES};
use crate::cluster::View;
use crate::policy::Policy;

impl Store for View {
    fn watched(policy: &Policy) -> View {
        let mut view = View::empty(policy);
        view.watch_namespaces();
        view
    }
    fn rebuild(&self, policy: &Policy) -> View {
        View::rebuild(self, policy)
    }
    fn set_clock_ms(&mut self, ms: i64) {
        View::set_clock_ms(self, ms)
    }
    fn record(&self) {
        metrics::gauge!("coloc_view_nodes").set(self.node_count() as f64);
        metrics::gauge!("coloc_view_pods").set(self.pod_count() as f64);
        metrics::gauge!("coloc_view_generation").set(self.generation() as f64);
        // PodGroups per source (a bounded label: the source, never the group).
        for source in POD_GROUP_SOURCES {
            metrics::gauge!("coloc_view_pod_groups", "source" => source.name())
                .set(self.pod_groups(source).count() as f64);
        }
    }
}

takes_pods_and_context!(View, DecisionPodKind);

impl Takes<NodeKind> for View {
    fn apply(&mut self, model: crate::model::Node, _: &Policy) {
        self.apply_node(model);
    }
    fn remove(&mut self, key: &str, _: &Policy) {
        self.remove_node(split(key).1);
    }
    fn keys(&self) -> Vec<String> {
        self.node_names().map(|n| format!("/{n}")).collect()
    }
}

impl Takes<PdbKind> for View {
    fn apply(&mut self, model: crate::model::Pdb, _: &Policy) {
        self.apply_pdb(model);
    }
    fn remove(&mut self, key: &str, _: &Policy) {
        let (ns, name) = split(key);
        self.remove_pdb(ns, name);
    }
    fn keys(&self) -> Vec<String> {
        self.pdb_keys().collect()
    }
}

impl Takes<JobKind> for View {
    fn apply(&mut self, model: crate::model::Job, _: &Policy) {
        self.apply_job(model);
    }
    fn remove(&mut self, key: &str, _: &Policy) {
        let (ns, name) = split(key);
        self.remove_job(ns, name);
    }
    fn keys(&self) -> Vec<String> {
        self.jobs().keys().cloned().collect()
    }
}

impl<A: PodGroupApi> Takes<PodGroupKind<A>> for View {
    fn apply(&mut self, model: crate::model::PodGroup, _: &Policy) {
        self.apply_pod_group(model);
    }
    fn remove(&mut self, key: &str, _: &Policy) {
        let (ns, name) = split(key);
        self.remove_pod_group(A::SOURCE, ns, name);
    }
    fn keys(&self) -> Vec<String> {
        self.pod_groups(A::SOURCE).map(|g| format!("{}/{}", g.namespace, g.name)).collect()
    }
}
