//! Does a pod fit on a node? The checks of kube-scheduler's NodeResourcesFit and
//! NodePorts filters, over the plain model.

use std::fmt;

use crate::cluster::usage::NodeUsage;
use crate::model::{Node, Pod};

/// Why a pod does not fit: numbers only, so checking costs no allocation (preempt asks
/// many times per node); formatted only when a reason is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misfit<'a> {
    TooManyPods { used: i64, allowed: i64 },
    Insufficient { resource: &'a str, want: i64, free: i64, allocatable: i64, unit: &'static str },
    HostPort { port: i32, protocol: &'a str },
}

impl fmt::Display for Misfit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Misfit::TooManyPods { used, allowed } => write!(f, "too many pods ({used} of {allowed} allowed)"),
            Misfit::Insufficient { resource, want, free, allocatable, unit } => {
                write!(f, "insufficient {resource}: requests {want}{unit}, {free}{unit} free of {allocatable}{unit}")
            }
            Misfit::HostPort { port, protocol } => write!(f, "host port {port}/{protocol} already in use"),
        }
    }
}

/// Why `pod` does not fit on `node` given `usage`, or `Ok` if it does.
pub fn fits<'a>(pod: &'a Pod, node: &'a Node, usage: &NodeUsage) -> Result<(), Misfit<'a>> {
    if usage.pods + 1 > node.allocatable_pods {
        return Err(Misfit::TooManyPods { used: usage.pods, allowed: node.allocatable_pods });
    }
    let r = &pod.requests;
    let a = &node.allocatable;
    let u = &usage.requested;
    let check = |resource: &'a str, want: i64, used: i64, allocatable: i64, unit: &'static str| {
        let free = allocatable.saturating_sub(used);
        if want > 0 && want > free {
            Err(Misfit::Insufficient { resource, want, free, allocatable, unit })
        } else {
            Ok(())
        }
    };
    check("cpu", r.milli_cpu, u.milli_cpu, a.milli_cpu, "m")?;
    check("memory", r.memory, u.memory, a.memory, "B")?;
    check("ephemeral-storage", r.ephemeral_storage, u.ephemeral_storage, a.ephemeral_storage, "B")?;
    for (name, want) in &r.scalar {
        check(name, *want, u.scalar(name), a.scalar(name), "")?;
    }
    if let Some(hp) = pod.host_ports.iter().find(|hp| usage.ports.iter().any(|p| p.conflicts(hp))) {
        return Err(Misfit::HostPort { port: hp.port, protocol: &hp.protocol });
    }
    Ok(())
}

/// Why `pod` could not fit on `node` even if the node were empty, if so.
pub fn exceeds_allocatable(pod: &Pod, node: &Node) -> Option<String> {
    fits(pod, node, &NodeUsage::default()).err().map(|m| m.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Resources;
    use crate::wire::k8s;

    #[test]
    fn absurd_requests_saturate_and_never_wrap_into_room() {
        // Two containers of cpu 1e18 each: the sum must not wrap negative and fit.
        let pod: k8s::Pod = serde_json::from_str(
            r#"{"metadata":{"name":"p","namespace":"x"},"spec":{"containers":[
                {"resources":{"requests":{"cpu":"1e18"}}},{"resources":{"requests":{"cpu":"1e18"}}}]}}"#,
        )
        .unwrap();
        let pod = pod.into_model().unwrap();
        assert!(pod.requests.milli_cpu > 0, "{:?}", pod.requests);
        let node = Node {
            name: "n".into(),
            allocatable: Resources { milli_cpu: 64_000, ..Default::default() },
            allocatable_pods: 110,
            ..Default::default()
        };
        assert!(exceeds_allocatable(&pod, &node).is_some());
        let mut usage = NodeUsage::default();
        usage.add(&pod);
        usage.add(&pod);
        assert_eq!(usage.requested.milli_cpu, i64::MAX, "usage saturates too");
    }

    #[test]
    fn the_per_pod_verbs_marker_is_no_resource() {
        // kube-scheduler ignores it (ignoredByScheduler) and no node lists it; a real
        // extended resource the node lacks still keeps the pod off.
        let pod = |extra: &str| -> Pod {
            let json = format!(
                r#"{{"metadata":{{"name":"p","namespace":"x"}},"spec":{{"containers":[
                {{"resources":{{"requests":{{"cpu":"1","{extra}":"1"}},"limits":{{"{extra}":"1"}}}}}}]}}}}"#
            );
            serde_json::from_str::<k8s::Pod>(&json).unwrap().into_model().unwrap()
        };
        let node = Node {
            name: "n".into(),
            allocatable: Resources { milli_cpu: 4_000, ..Default::default() },
            allocatable_pods: 110,
            ..Default::default()
        };
        assert_eq!(exceeds_allocatable(&pod(crate::model::marks::PER_POD_VERBS_MARKER), &node), None);
        assert!(exceeds_allocatable(&pod("vendor.example/gpu"), &node).is_some());
    }
}
