//! Does a pod fit on a node? The checks of kube-scheduler's NodeResourcesFit and
//! NodePorts filters, over the plain model.

use crate::model::{HostPort, Node, Pod, Resources};

/// What the pods on a node hold.
#[derive(Debug, Clone, Default)]
pub struct NodeUsage {
    pub requested: Resources,
    pub pods: i64,
    pub ports: Vec<HostPort>,
}

impl NodeUsage {
    pub fn of<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> NodeUsage {
        let mut u = NodeUsage::default();
        for p in pods {
            u.add(p);
        }
        u
    }

    pub fn add(&mut self, pod: &Pod) {
        self.requested.add(&pod.requests);
        self.pods += 1;
        self.ports.extend(pod.host_ports.iter().cloned());
    }

    pub fn remove(&mut self, pod: &Pod) {
        self.requested.sub(&pod.requests);
        self.pods -= 1;
        for hp in &pod.host_ports {
            if let Some(i) = self.ports.iter().position(|p| p == hp) {
                self.ports.swap_remove(i);
            }
        }
    }
}

/// Why `pod` does not fit on `node` given `usage`, or `Ok` if it does.
pub fn fits(pod: &Pod, node: &Node, usage: &NodeUsage) -> Result<(), String> {
    if usage.pods + 1 > node.allocatable_pods {
        return Err(format!("too many pods ({} of {} allowed)", usage.pods, node.allocatable_pods));
    }
    let r = &pod.requests;
    let a = &node.allocatable;
    let u = &usage.requested;
    let check = |name: &str, want: i64, used: i64, alloc: i64, unit: &str| {
        if want > 0 && want > alloc - used {
            Err(format!("insufficient {name}: requests {want}{unit}, {}{unit} free of {alloc}{unit}", alloc - used))
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
        return Err(format!("host port {}/{} already in use", hp.port, hp.protocol));
    }
    Ok(())
}

/// Why `pod` could not fit on `node` even if the node were empty, if so.
pub fn exceeds_allocatable(pod: &Pod, node: &Node) -> Option<String> {
    fits(pod, node, &NodeUsage::default()).err()
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let node = Node { name: "n".into(), allocatable: Resources { milli_cpu: 64_000, ..Default::default() }, allocatable_pods: 110, ..Default::default() };
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
            let json = format!(r#"{{"metadata":{{"name":"p","namespace":"x"}},"spec":{{"containers":[
                {{"resources":{{"requests":{{"cpu":"1","{extra}":"1"}},"limits":{{"{extra}":"1"}}}}}}]}}}}"#);
            serde_json::from_str::<k8s::Pod>(&json).unwrap().into_model().unwrap()
        };
        let node = Node { name: "n".into(), allocatable: Resources { milli_cpu: 4_000, ..Default::default() }, allocatable_pods: 110, ..Default::default() };
        assert_eq!(exceeds_allocatable(&pod(crate::policy::PER_POD_VERBS_MARKER), &node), None);
        assert!(exceeds_allocatable(&pod("vendor.example/gpu"), &node).is_some());
    }
}
