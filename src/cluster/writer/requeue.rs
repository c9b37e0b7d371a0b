//! How each kind the requeue controller reads enters and leaves its `RequeueView`: pods
//! (with the bytes and spec digests of those it may copy), PriorityClasses and Namespaces.

use super::Store;
use crate::cluster::lean::PodKind;
use crate::cluster::RequeueView;
use crate::policy::Policy;

impl Store for RequeueView {
    fn watched(policy: &Policy) -> RequeueView {
        let mut view = RequeueView::empty(policy);
        view.watch_namespaces();
        view
    }
    fn rebuild(&self, policy: &Policy) -> RequeueView {
        RequeueView::rebuild(self, policy)
    }
    fn record(&self) {
        metrics::gauge!("coloc_view_pods").set(self.pod_count() as f64);
    }
}

takes_pods_and_context!(RequeueView, PodKind);
