//! The synthetic cluster, rendered on the fly from a pod's index: its objects as JSON,
//! and the verbs' request bodies.

use std::fmt::Write as _;

use coloc_testbed::ids::{mix, uuid};

pub(crate) const NAMESPACES: usize = 16;
pub(crate) const APPS: usize = 64;
pub(crate) const SEQ_LABEL: &str = "viewload.example.com/seq";
/// Decision time: pods started in January 2026, long past every minRuntime.
pub(crate) const NOW: i64 = 1_800_000_000;
pub(crate) const TS: &str = "2026-01-05T10:00:00Z";

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Online,
    Batch,
    Free,
}

impl Class {
    pub(crate) fn of_slot(slot: usize) -> Class {
        match slot % 5 {
            0 => Class::Online,
            4 => Class::Free,
            _ => Class::Batch,
        }
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            Class::Online => "online",
            Class::Batch => "batch",
            Class::Free => "free",
        }
    }
    pub(crate) fn priority_class(self) -> (&'static str, i32) {
        match self {
            Class::Online => ("online-prod", 10000),
            Class::Batch => ("offline-batch", 5000),
            Class::Free => ("free-tier", 3000),
        }
    }
    /// 6 online × 2 cpu + 18 batch × 1 cpu + 6 free × 250m = 31.5 of a node's 32 cpu.
    pub(crate) fn requests(self) -> (&'static str, &'static str) {
        match self {
            Class::Online => ("2", "4Gi"),
            Class::Batch => ("1", "2Gi"),
            Class::Free => ("250m", "512Mi"),
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Spec {
    pub(crate) nodes: usize,
    pub(crate) per_node: usize,
}

impl Spec {
    pub(crate) fn pods(&self) -> usize {
        self.nodes * self.per_node
    }
}

pub(crate) fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

pub(crate) struct PodId {
    pub(crate) node: usize,
    pub(crate) class: Class,
    pub(crate) namespace: String,
    pub(crate) app: String,
    pub(crate) rs: String,
    pub(crate) hash: String,
    pub(crate) name: String,
}

pub(crate) fn pod_id(spec: Spec, p: usize) -> PodId {
    let node = p / spec.per_node;
    let class = Class::of_slot(p % spec.per_node);
    let team = p % NAMESPACES;
    let app = format!("{}-app-{:02}", class.name(), (p / NAMESPACES) % APPS);
    let hash =
        format!("{:010x}", mix((team * 1000 + (p / NAMESPACES) % APPS) as u64 * 3 + class as u64) & 0xff_ffff_ffff);
    let rs = format!("{app}-{hash}");
    let name = format!("{rs}-{p:05x}");
    PodId { node, class, namespace: format!("team-{team:02}"), app, rs, hash, name }
}

pub(crate) fn pod_key(spec: Spec, p: usize) -> String {
    let id = pod_id(spec, p);
    format!("{}/{}", id.namespace, id.name)
}

pub(crate) fn pod_uid(p: usize) -> String {
    uuid(1, p as u64)
}

/// One Pod as the API server writes it (~3 kB).
pub(crate) fn write_pod(out: &mut String, spec: Spec, p: usize, rv: u64, seq: Option<u64>) {
    let id = pod_id(spec, p);
    let (pc, prio) = id.class.priority_class();
    let (cpu, memory) = id.class.requests();
    let node = node_name(id.node);
    let uid = pod_uid(p);
    let rs_uid = uuid(2, mix(p as u64 % (NAMESPACES * APPS) as u64));
    let h = mix(p as u64 ^ 0x5eed);
    let seq_label = seq.map(|s| format!(r#","{SEQ_LABEL}":"{s}""#)).unwrap_or_default();
    let _ = write!(
        out,
        concat!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","generateName":"{rs}-","namespace":"{ns}","uid":"{uid}","resourceVersion":"{rv}","creationTimestamp":"{ts}","#,
            r#""labels":{{"app":"{app}","app.kubernetes.io/name":"{app}","app.kubernetes.io/part-of":"{ns}","pod-template-hash":"{hash}","workload-class":"{class}","team":"{ns}"{seq_label}}},"#,
            r#""annotations":{{"kubectl.kubernetes.io/restartedAt":"{ts}","prometheus.io/scrape":"true","prometheus.io/port":"9090"}},"#,
            r#""ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"{rs}","uid":"{rs_uid}","controller":true,"blockOwnerDeletion":true}}],"#,
            r#""managedFields":[{{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"{ts}","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:generateName":{{}},"f:labels":{{".":{{}},"f:app":{{}},"f:pod-template-hash":{{}}}},"f:ownerReferences":{{".":{{}},"k:{{\"uid\":\"{rs_uid}\"}}":{{}}}}}},"f:spec":{{"f:containers":{{"k:{{\"name\":\"main\"}}":{{".":{{}},"f:image":{{}},"f:name":{{}},"f:resources":{{".":{{}},"f:requests":{{".":{{}},"f:cpu":{{}},"f:memory":{{}}}}}}}}}}}}}}}},"#,
            r#"{{"manager":"kubelet","operation":"Update","apiVersion":"v1","time":"{ts}","fieldsType":"FieldsV1","fieldsV1":{{"f:status":{{"f:conditions":{{}},"f:containerStatuses":{{}},"f:hostIP":{{}},"f:phase":{{}},"f:podIP":{{}},"f:startTime":{{}}}}}},"subresource":"status"}}]}},"#,
            r#""spec":{{"containers":[{{"name":"main","image":"registry.example.com/{ns}/{app}:v1.4.2","ports":[{{"name":"http","containerPort":8080,"protocol":"TCP"}}],"env":[{{"name":"LOG_LEVEL","value":"info"}}],"#,
            r#""resources":{{"requests":{{"cpu":"{cpu}","memory":"{memory}"}},"limits":{{"memory":"{memory}"}}}},"volumeMounts":[{{"name":"kube-api-access","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true}}],"#,
            r#""terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","#,
            r#""serviceAccountName":"default","nodeName":"{node}","schedulerName":"default-scheduler","priorityClassName":"{pc}","priority":{prio},"preemptionPolicy":"PreemptLowerPriority","enableServiceLinks":true,"#,
            r#""tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}},{{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}],"#,
            r#""volumes":[{{"name":"kube-api-access","projected":{{"sources":[{{"serviceAccountToken":{{"expirationSeconds":3607,"path":"token"}}}}],"defaultMode":420}}}}]}},"#,
            r#""status":{{"phase":"Running","conditions":[{{"type":"Initialized","status":"True","lastTransitionTime":"{ts}"}},{{"type":"Ready","status":"True","lastTransitionTime":"{ts}"}},{{"type":"ContainersReady","status":"True","lastTransitionTime":"{ts}"}},{{"type":"PodScheduled","status":"True","lastTransitionTime":"{ts}"}}],"#,
            r#""hostIP":"10.0.{n1}.{n2}","podIP":"10.{p1}.{p2}.{p3}","podIPs":[{{"ip":"10.{p1}.{p2}.{p3}"}}],"startTime":"{ts}","#,
            r#""containerStatuses":[{{"name":"main","state":{{"running":{{"startedAt":"{ts}"}}}},"lastState":{{}},"ready":true,"restartCount":0,"image":"registry.example.com/{ns}/{app}:v1.4.2","imageID":"registry.example.com/{ns}/{app}@sha256:{h:016x}{h:016x}{h:016x}{h:016x}","containerID":"containerd://{h:016x}{h:016x}{h:016x}{h:016x}","started":true}}],"qosClass":"Burstable"}}}}"#,
        ),
        name = id.name,
        rs = id.rs,
        ns = id.namespace,
        uid = uid,
        rv = rv,
        ts = TS,
        app = id.app,
        hash = id.hash,
        class = id.class.name(),
        seq_label = seq_label,
        rs_uid = rs_uid,
        cpu = cpu,
        memory = memory,
        node = node,
        pc = pc,
        prio = prio,
        n1 = id.node / 256 % 256,
        n2 = id.node % 256,
        p1 = 64 + (p >> 16) % 64,
        p2 = (p >> 8) % 256,
        p3 = p % 256,
        h = h,
    );
}

pub(crate) fn write_node(out: &mut String, i: usize, rv: u64) {
    let name = node_name(i);
    let offline = if i % 3 != 0 { r#","colocation.example.com/offline-allowed":"true""# } else { "" };
    let gpu = if i % 10 == 0 { r#","example.com/gpu":"8""# } else { "" };
    let res = format!(r#"{{"cpu":"32","memory":"128Gi","ephemeral-storage":"500Gi","pods":"110"{gpu}}}"#);
    let _ = write!(
        out,
        concat!(
            r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{name}","uid":"{uid}","resourceVersion":"{rv}","creationTimestamp":"{ts}","#,
            r#""labels":{{"kubernetes.io/arch":"amd64","kubernetes.io/hostname":"{name}","kubernetes.io/os":"linux","topology.kubernetes.io/zone":"zone-{zone}","node.example.com/pool":"{pool}"{offline}}},"#,
            r#""annotations":{{"node.alpha.kubernetes.io/ttl":"0","volumes.kubernetes.io/controller-managed-attach-detach":"true"}}}},"#,
            r#""spec":{{"podCIDR":"10.{a}.{b}.0/24","podCIDRs":["10.{a}.{b}.0/24"],"providerID":"example://{name}"}},"#,
            r#""status":{{"capacity":{res},"allocatable":{res},"conditions":["#,
            r#"{{"type":"MemoryPressure","status":"False","lastHeartbeatTime":"{ts}","lastTransitionTime":"{ts}","reason":"KubeletHasSufficientMemory","message":"kubelet has sufficient memory available"}},"#,
            r#"{{"type":"DiskPressure","status":"False","lastHeartbeatTime":"{ts}","lastTransitionTime":"{ts}","reason":"KubeletHasNoDiskPressure","message":"kubelet has no disk pressure"}},"#,
            r#"{{"type":"PIDPressure","status":"False","lastHeartbeatTime":"{ts}","lastTransitionTime":"{ts}","reason":"KubeletHasSufficientPID","message":"kubelet has sufficient PID available"}},"#,
            r#"{{"type":"Ready","status":"True","lastHeartbeatTime":"{ts}","lastTransitionTime":"{ts}","reason":"KubeletReady","message":"kubelet is posting ready status"}}],"#,
            r#""addresses":[{{"type":"InternalIP","address":"10.0.{a}.{b}"}},{{"type":"Hostname","address":"{name}"}}],"daemonEndpoints":{{"kubeletEndpoint":{{"Port":10250}}}},"#,
            r#""nodeInfo":{{"machineID":"m{i}","systemUUID":"u{i}","bootID":"b{i}","kernelVersion":"6.1.0-13-amd64","osImage":"Debian GNU/Linux 12","containerRuntimeVersion":"containerd://1.7.13","kubeletVersion":"v1.35.0","kubeProxyVersion":"","operatingSystem":"linux","architecture":"amd64"}}}}}}"#,
        ),
        name = name,
        uid = uuid(3, i as u64),
        rv = rv,
        ts = TS,
        zone = i % 3 + 1,
        pool = if i % 10 == 0 { "gpu" } else { "general" },
        offline = offline,
        a = i / 256 % 256,
        b = i % 256,
        res = res,
        i = i,
    );
}

/// PDB `i` covers the batch pods of namespace `team-i` (`healthy` of them, as the
/// disruption controller last counted).
pub(crate) fn write_pdb(out: &mut String, i: usize, healthy: Option<usize>) {
    let current = healthy.map(|h| format!(r#""currentHealthy":{h},"#)).unwrap_or_default();
    let _ = write!(
        out,
        concat!(
            r#"{{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{{"name":"batch-pdb","namespace":"team-{i:02}","uid":"{uid}","resourceVersion":"900"}},"#,
            r#""spec":{{"maxUnavailable":"10%","selector":{{"matchLabels":{{"workload-class":"batch"}}}}}},"#,
            r#""status":{{{current}"desiredHealthy":0,"disruptionsAllowed":500,"expectedPods":0,"observedGeneration":1}}}}"#,
        ),
        i = i,
        uid = uuid(4, i as u64),
        current = current,
    );
}

/// Namespace `team-i`, where the pods of every `NAMESPACES`th index run.
pub(crate) fn write_namespace(out: &mut String, i: usize) {
    let _ = write!(
        out,
        r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"team-{i:02}","uid":"{uid}","resourceVersion":"700","labels":{{"kubernetes.io/metadata.name":"team-{i:02}"}}}},"spec":{{"finalizers":["kubernetes"]}},"status":{{"phase":"Active"}}}}"#,
        uid = uuid(6, i as u64),
    );
}

/// Batch pods in namespace `team-i`: what the disruption controller would count.
pub(crate) fn batch_pods_in(spec: Spec, i: usize) -> usize {
    (0..spec.pods()).filter(|p| p % NAMESPACES == i && Class::of_slot(p % spec.per_node) == Class::Batch).count()
}

pub(crate) const PRIORITY_CLASSES: [(&str, i32); 5] = [
    ("system-cluster-critical", 2_000_000_000),
    ("online-prod", 10000),
    ("offline-batch", 5000),
    ("free-tier", 3000),
    ("koord-batch", 5500),
];

pub(crate) fn write_priority_class(out: &mut String, i: usize) {
    let (name, value) = PRIORITY_CLASSES[i];
    let _ = write!(
        out,
        r#"{{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{{"name":"{name}","uid":"{uid}","resourceVersion":"800"}},"value":{value},"preemptionPolicy":"PreemptLowerPriority"}}"#,
        uid = uuid(5, i as u64),
    );
}

/// The preemptor: an online pod (class online preempts batch and free) that fits nowhere.
pub(crate) fn write_preemptor(out: &mut String) {
    out.push_str(concat!(
        r#"{"metadata":{"name":"online-api-0","namespace":"online","uid":"11111111-2222-4333-8444-555555555555","resourceVersion":"1","creationTimestamp":"2026-01-05T10:00:00Z","#,
        r#""labels":{"app":"online-api","workload-class":"online"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"StatefulSet","name":"online-api","uid":"21111111-2222-4333-8444-555555555555","controller":true}]},"#,
        r#""spec":{"containers":[{"name":"main","image":"registry.example.com/online/api:v1","resources":{"requests":{"cpu":"8","memory":"16Gi"}}}],"#,
        r#""priorityClassName":"online-prod","priority":10000,"preemptionPolicy":"PreemptLowerPriority","schedulerName":"default-scheduler"},"#,
        r#""status":{"phase":"Pending"}}"#,
    ));
}

/// Filter with every node by name (`nodeCacheCapable: true`).
pub(crate) fn filter_body(spec: Spec) -> Vec<u8> {
    let mut s = String::from(r#"{"Pod":"#);
    write_preemptor(&mut s);
    s.push_str(r#","Nodes":null,"NodeNames":["#);
    for i in 0..spec.nodes {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, r#""{}""#, node_name(i));
    }
    s.push_str("]}");
    s.into_bytes()
}

/// Preempt with `candidates` nodes spread over the cluster, each with its batch and free
/// pods as UID-only victims (what kube-scheduler sends with `nodeCacheCapable: true`).
pub(crate) fn preempt_body(spec: Spec, candidates: usize) -> Vec<u8> {
    let mut s = String::from(r#"{"Pod":"#);
    write_preemptor(&mut s);
    s.push_str(r#","NodeNameToVictims":null,"NodeNameToMetaVictims":{"#);
    let candidates = candidates.min(spec.nodes).max(1);
    for c in 0..candidates {
        let node = c * spec.nodes / candidates;
        if c > 0 {
            s.push(',');
        }
        let _ = write!(s, r#""{}":{{"Pods":["#, node_name(node));
        let mut first = true;
        for p in node * spec.per_node..(node + 1) * spec.per_node {
            if Class::of_slot(p % spec.per_node) == Class::Online {
                continue;
            }
            if !first {
                s.push(',');
            }
            first = false;
            let _ = write!(s, r#"{{"UID":"{}"}}"#, pod_uid(p));
        }
        s.push_str(r#"],"NumPDBViolations":0}"#);
    }
    s.push_str("}}");
    s.into_bytes()
}
