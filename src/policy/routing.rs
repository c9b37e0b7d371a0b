//! Which new pods the install hands to the extender, as the policy's classes say: the
//! admission policies that route pods to coloc-scheduler (`manifests/routing`) and mark
//! pods for the per-pod verbs (`manifests/per-pod-verbs`) read it from a ConfigMap the
//! extender publishes (`routing` module at the edge), so the policy is the one list of
//! governed classes. CEL cannot read YAML: each selector is one line its `split` reads,
//! `priorityClassNames|min|max|namespaces|labels`, lists comma-separated, labels `k=v`.

use super::model::{Class, Selector};
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

    fn selector_lines(&self, wanted: impl Fn(&Class) -> bool) -> String {
        let mut lines = Vec::new();
        for class in self.classes.iter().filter(|c| c.name != self.default_class && wanted(c)) {
            lines.extend(class.r#match.iter().filter_map(selector_line));
        }
        lines.join("\n")
    }
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
