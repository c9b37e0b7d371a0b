//! The cluster view: an immutable, indexed snapshot of what decisions read. Sources
//! (snapshot file, Kubernetes watches) build a new one on change; readers share it via
//! `Arc` and never lock.

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::{Node, Pdb, Pod, PodRef, PriorityClass, Resources};
use crate::policy::Policy;

/// Raw objects a view is built from.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub pdbs: Vec<Pdb>,
    pub priority_classes: Vec<PriorityClass>,
}

#[derive(Debug, Default)]
pub struct View {
    nodes: HashMap<String, Node>,
    pods_on_node: HashMap<String, Vec<PodRef>>,
    pods_by_uid: HashMap<String, PodRef>,
    pdbs_by_namespace: HashMap<String, Vec<Pdb>>,
    priority_classes: HashMap<String, i32>,
    /// Members per gang ("namespace/group"), using the policy's group labels.
    gang_sizes: HashMap<String, usize>,
    /// Weighted dominant share per tenant of the resources held by evictable classes.
    tenant_shares: HashMap<String, f64>,
    /// Sum of node allocatable: the denominator of shares.
    capacity: Resources,
    pod_count: usize,
}

impl View {
    /// Indexes `objects` for decisions under `policy` (gang labels, tenants and classes
    /// come from it: rebuild the view when the policy changes).
    pub fn build(objects: Objects, policy: &Policy) -> View {
        let mut view = View {
            priority_classes: objects.priority_classes.iter().map(|p| (p.name.clone(), p.value)).collect(),
            ..View::default()
        };
        let mut capacity = Resources::default();
        for node in objects.nodes {
            capacity.add(&node.allocatable);
            view.nodes.insert(node.name.clone(), node);
        }
        let mut usage: HashMap<String, Resources> = HashMap::new();
        for pod in objects.pods {
            // kube-scheduler's cache holds only bound, non-terminal pods.
            let Some(node) = pod.node_name.clone() else { continue };
            if pod.is_terminal() {
                continue;
            }
            if let Some(group) = policy.gangs.group_of(&pod) {
                *view.gang_sizes.entry(group).or_default() += 1;
            }
            let class = policy.classify(&pod, view.priority_of(&pod));
            if policy.class(class).victim.allowed {
                usage.entry(policy.tenants.tenant_of(&pod)).or_default().add(&pod.requests);
            }
            let pod = Arc::new(pod);
            view.pods_by_uid.insert(pod.uid.clone(), pod.clone());
            view.pods_on_node.entry(node).or_default().push(pod);
            view.pod_count += 1;
        }
        // A stable order, whichever source listed the pods: explanations stay reproducible.
        for pods in view.pods_on_node.values_mut() {
            pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        }
        for (tenant, used) in usage {
            let share = dominant_share(&used, &capacity) / policy.tenants.weight(&tenant);
            view.tenant_shares.insert(tenant, share);
        }
        view.capacity = capacity;
        for pdb in objects.pdbs {
            view.pdbs_by_namespace.entry(pdb.namespace.clone()).or_default().push(pdb);
        }
        view
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)
    }

    pub fn pods_on(&self, node: &str) -> &[PodRef] {
        self.pods_on_node.get(node).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn pod_by_uid(&self, uid: &str) -> Option<&PodRef> {
        self.pods_by_uid.get(uid)
    }

    /// PDBs whose selector covers `pod`.
    pub fn pdbs_covering<'a>(&'a self, pod: &'a Pod) -> impl Iterator<Item = &'a Pdb> + 'a {
        self.pdbs_by_namespace
            .get(&pod.namespace)
            .into_iter()
            .flatten()
            .filter(move |p| p.covers(pod))
    }

    /// The pod's priority: `spec.priority` as admitted, else its PriorityClass, else 0.
    pub fn priority_of(&self, pod: &Pod) -> i32 {
        pod.priority
            .or_else(|| pod.priority_class_name.as_ref().and_then(|n| self.priority_classes.get(n).copied()))
            .unwrap_or(0)
    }

    pub fn gang_size(&self, group: &str) -> usize {
        self.gang_sizes.get(group).copied().unwrap_or(0)
    }

    pub fn tenant_share(&self, tenant: &str) -> f64 {
        self.tenant_shares.get(tenant).copied().unwrap_or(0.0)
    }

    /// The weighted share `requests` adds to `tenant` (what one pod moves the needle).
    pub fn share_of(&self, requests: &Resources, weight: f64) -> f64 {
        dominant_share(requests, &self.capacity) / weight
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn pod_count(&self) -> usize {
        self.pod_count
    }
}

/// Kueue-style dominant resource share: the largest fraction of any cluster resource used.
fn dominant_share(used: &Resources, capacity: &Resources) -> f64 {
    let frac = |u: i64, c: i64| if c > 0 { u as f64 / c as f64 } else { 0.0 };
    let mut share = frac(used.milli_cpu, capacity.milli_cpu).max(frac(used.memory, capacity.memory));
    for (name, u) in &used.scalar {
        share = share.max(frac(*u, capacity.scalar(name)));
    }
    share
}
