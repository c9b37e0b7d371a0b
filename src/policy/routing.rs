//! Which new pods the install hands to the extender, as the policy's classes say: the
//! admission policies that route pods to coloc-scheduler (`manifests/routing`) and mark
//! pods for the per-pod verbs (`manifests/per-pod-verbs`) read it from a ConfigMap the
//! extender publishes (`routing` module at the edge), so the policy is the one list of
//! governed classes. CEL cannot read YAML: each selector is one line its `split` reads,
//! `priorityClassNames|min|max|namespaces|labels`, lists comma-separated, labels `k=v`.

use super::model::{BareVictims, Class, Selector};
use super::Policy;

/// The highest priority a user's PriorityClass may have; above it are the system's own
/// (`system-cluster-critical`, which coloc-scheduler's own pods run at): never routed, so
/// no pod of the install waits on the scheduler it runs.
pub const HIGHEST_USER_PRIORITY: i32 = 1_000_000_000;

impl Policy {
    /// Every selector of every governed class: all but the default class, and but the
    /// selectors that match only the system's priorities.
    pub fn routed_selectors(&self) -> String {
        self.selector_lines(|_| true)
    }

    /// The selectors of the classes whose pods get something from filter/prioritize
    /// (`Class::per_pod_verbs_reasons`): the pods the per-pod verbs registration sends.
    pub fn per_pod_verbs_selectors(&self) -> String {
        self.selector_lines(|c| !c.per_pod_verbs_reasons().is_empty())
    }

    /// Is `pod` (of `priority`) one the routing admission policy sends to coloc-scheduler
    /// in a namespace labelled for it: of a governed class's selector, below the system's
    /// priorities?
    pub fn routes(&self, pod: &crate::model::Pod, priority: i32) -> bool {
        priority <= HIGHEST_USER_PRIORITY
            && self
                .classes
                .iter()
                .filter(|c| c.name != self.default_class)
                .any(|c| c.r#match.iter().any(|s| s.matches(pod, priority)))
    }

    /// A pod the routing must send to coloc-scheduler in `namespace`, to try whether it
    /// does: the first governed selector that holds there and names (or admits by its
    /// priority) a PriorityClass of `classes` (name, value). None where no class of the
    /// cluster is routed there.
    pub fn routing_probe(&self, namespace: &str, classes: &[(String, i32)]) -> Option<RoutingProbe> {
        let governed = self.classes.iter().filter(|c| c.name != self.default_class).flat_map(|c| &c.r#match);
        governed.filter(|s| s.namespaces.is_empty() || s.namespaces.iter().any(|n| n == namespace)).find_map(|s| {
            let (min, max) = s.priority.map(|r| (r.min, r.max)).unwrap_or((i32::MIN, i32::MAX));
            let fits = |(name, value): &&(String, i32)| {
                (s.priority_class_names.is_empty() || s.priority_class_names.contains(name))
                    && min <= *value
                    && *value <= max.min(HIGHEST_USER_PRIORITY)
            };
            let (name, _) = classes.iter().find(fits)?;
            let labels = s.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            Some(RoutingProbe { priority_class_name: name.clone(), labels })
        })
    }

    /// The selectors of the classes whose bare victims requeue brings back
    /// (`requeue_rule`): what admission holds a requeue copy's PriorityClass and priority
    /// to, so that no copy is of an online class whatever PriorityClass exists.
    pub fn requeued_selectors(&self) -> String {
        self.selector_lines(|c| c.victim.allowed && c.victim.bare() == BareVictims::Requeue)
    }

    fn selector_lines(&self, wanted: impl Fn(&Class) -> bool) -> String {
        let mut lines = Vec::new();
        for class in self.classes.iter().filter(|c| c.name != self.default_class && wanted(c)) {
            lines.extend(class.r#match.iter().filter_map(selector_line));
        }
        lines.join("\n")
    }
}

/// What a pod needs to be routed: its PriorityClass and labels (`Policy::routing_probe`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingProbe {
    pub priority_class_name: String,
    pub labels: Vec<(String, String)>,
}

/// The line of `s`, its priorities cut at `HIGHEST_USER_PRIORITY`; none where nothing is
/// left of them.
fn selector_line(s: &Selector) -> Option<String> {
    let (min, max) = s.priority.map(|r| (r.min, r.max)).unwrap_or((i32::MIN, i32::MAX));
    let max = max.min(HIGHEST_USER_PRIORITY);
    if min > max {
        return None;
    }
    let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Some(format!("{}|{min}|{max}|{}|{}", s.priority_class_names.join(","), s.namespaces.join(","), labels.join(",")))
}

#[cfg(test)]
mod tests {
    use crate::policy::Policy;

    #[test]
    fn the_default_policy_routes_its_classes_but_the_systems_and_the_default() {
        let policy = Policy::builtin_default();
        let routed = policy.routed_selectors();
        let lines: Vec<&str> = routed.lines().collect();
        assert_eq!(
            lines,
            [
                "online-prod,online-noevict,koord-prod|-2147483648|1000000000||",
                "|9000|1000000000||",
                "koord-mid|-2147483648|1000000000||",
                "|7000|7999||",
                "offline-batch,koord-batch|-2147483648|1000000000||",
                "|5000|6999||",
                "free,free-tier,koord-free|-2147483648|1000000000||",
                "|3000|3999||",
            ]
        );
        let per_pod = policy.per_pod_verbs_selectors();
        assert_eq!(per_pod.lines().collect::<Vec<_>>(), lines[4..], "batch and free: placement and packing");
    }

    #[test]
    fn a_copy_is_held_to_the_classes_whose_bare_victims_are_requeued() {
        let lines = |p: &Policy| p.requeued_selectors().lines().map(String::from).collect::<Vec<_>>();
        let shipped = Policy::builtin_default();
        assert_eq!(lines(&shipped), shipped.routed_selectors().lines().skip(4).collect::<Vec<_>>(), "batch and free");
        // Online is never a victim; a class that loses its bare pods has no copies.
        let policy = Policy::from_yaml(
            "defaultClass: rest\nclasses:\n\
             - name: web\n  match: [{priorityClassNames: [tier-1]}]\n  preempts: [jobs, scratch]\n\
             - name: jobs\n  match: [{priority: {min: 100, max: 200}}]\n  victim: {allowed: true}\n\
             - name: scratch\n  match: [{priorityClassNames: [scratch]}]\n  victim: {allowed: true, bare: lose}\n\
             - name: rest\n",
        )
        .unwrap();
        assert_eq!(lines(&policy), ["|100|200||"]);
    }

    #[test]
    fn the_routing_probe_is_a_governed_class_of_the_cluster_and_never_the_systems() {
        let policy = Policy::builtin_default();
        let cluster = |names: &[(&str, i32)]| names.iter().map(|(n, v)| (n.to_string(), *v)).collect::<Vec<_>>();
        let probe =
            policy.routing_probe("batch", &cluster(&[("system-cluster-critical", 2_000_000_000), ("free", 3000)]));
        assert_eq!(probe.map(|p| p.priority_class_name).as_deref(), Some("free"));
        // A class by its priority alone (the default policy's online range from 9000).
        let probe = policy.routing_probe("batch", &cluster(&[("tier-1", 9500)]));
        assert_eq!(probe.map(|p| p.priority_class_name).as_deref(), Some("tier-1"));
        assert_eq!(policy.routing_probe("batch", &cluster(&[("system-node-critical", 2_000_001_000)])), None);
        assert_eq!(policy.routing_probe("batch", &[]), None, "no PriorityClass, nothing to try");
    }

    #[test]
    fn a_class_renamed_in_the_policy_is_routed_by_its_new_names_and_its_namespaces_and_labels() {
        let policy = Policy::from_yaml(
            "defaultClass: rest\nclasses:\n\
             - name: web\n  match:\n  - priorityClassNames: [tier-1]\n    namespaces: [shop, cart]\n    labels: {team: a}\n\
             - name: rest\n",
        )
        .unwrap();
        assert_eq!(policy.routed_selectors(), "tier-1|-2147483648|1000000000|shop,cart|team=a");
    }
}
