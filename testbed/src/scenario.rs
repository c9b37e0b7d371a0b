//! A scenario file: the cluster before, and the online pods that arrive. Run it behind
//! kube-scheduler alone and behind the extender (`coloc-demo`), and compare.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::cluster::{self, PodBuilder};

#[derive(Debug, Deserialize)]
pub struct Scenario {
    #[serde(default)]
    pub about: String,
    pub nodes: Vec<NodeSpec>,
    #[serde(default)]
    pub bare: Vec<BarePod>,
    #[serde(default)]
    pub jobs: Vec<JobSpec>,
    #[serde(default)]
    pub replica_sets: Vec<ReplicaSetSpec>,
    pub online: Vec<OnlinePod>,
}

/// A ReplicaSet whose pods are pinned to one node (namespace `batch`), with a PDB allowing
/// `pdb_max_unavailable` disruptions if set.
#[derive(Debug, Deserialize)]
pub struct ReplicaSetSpec {
    pub name: String,
    pub class: String,
    pub cpu_m: i64,
    pub node: String,
    pub replicas: i32,
    #[serde(default)]
    pub pdb_max_unavailable: Option<i32>,
}

#[derive(Debug, Deserialize)]
pub struct NodeSpec {
    pub name: String,
    pub cpu_m: i64,
    #[serde(default = "default_zone")]
    pub zone: String,
}

fn default_zone() -> String {
    "zone-a".into()
}

/// A pod no controller owns, bound before the scenario starts (namespace `batch`).
#[derive(Debug, Deserialize)]
pub struct BarePod {
    pub name: String,
    pub class: String,
    pub cpu_m: i64,
    pub node: String,
    #[serde(default)]
    pub gang: Option<String>,
    #[serde(default)]
    pub gang_min: Option<u32>,
}

/// A Job whose pods are pinned to one node (namespace `batch`).
#[derive(Debug, Deserialize)]
pub struct JobSpec {
    pub name: String,
    pub class: String,
    pub cpu_m: i64,
    pub node: String,
    pub pods: i32,
    pub backoff_limit: i32,
    #[serde(default)]
    pub on_disruption: Option<String>,
}

/// An online pod that arrives (namespace `online`, class `online-prod`).
#[derive(Debug, Deserialize)]
pub struct OnlinePod {
    pub name: String,
    pub cpu_m: i64,
}

/// The gang label and minimum annotation the default policy reads (`labels` source).
pub const GANG_LABEL: &str = "pod-group.scheduling.sigs.k8s.io/name";
pub const GANG_MIN: &str = "pod-group.scheduling.sigs.k8s.io/min-available";

impl Scenario {
    pub fn load(path: &Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    pub fn node_objects(&self) -> Vec<k8s_openapi::api::core::v1::Node> {
        self.nodes.iter().map(|n| cluster::node(&n.name, n.cpu_m, 64, &n.zone)).collect()
    }

    pub fn bare_pods(&self) -> Vec<k8s_openapi::api::core::v1::Pod> {
        self.bare
            .iter()
            .map(|b| {
                let mut p = PodBuilder::new("batch", &b.name, &b.class, b.cpu_m).on(&b.node);
                if let Some(g) = &b.gang {
                    p = p.label(GANG_LABEL, g).annotate(GANG_MIN, &b.gang_min.unwrap_or(1).to_string());
                }
                p.build()
            })
            .collect()
    }

    pub fn job_objects(&self) -> Vec<k8s_openapi::api::batch::v1::Job> {
        self.jobs
            .iter()
            .map(|j| {
                let mut job = cluster::job("batch", &j.name, j.pods, j.backoff_limit, j.on_disruption.as_deref(), &j.class, j.cpu_m);
                if let Some(t) = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
                    t.node_selector = Some(BTreeMap::from([("kubernetes.io/hostname".to_string(), j.node.clone())]));
                }
                job
            })
            .collect()
    }

    pub fn replica_set_objects(&self) -> Vec<k8s_openapi::api::apps::v1::ReplicaSet> {
        self.replica_sets
            .iter()
            .map(|r| {
                let mut rs = cluster::replica_set("batch", &r.name, r.replicas, &r.class, r.cpu_m);
                if let Some(t) = rs.spec.template.as_mut().and_then(|t| t.spec.as_mut()) {
                    t.node_selector = Some(BTreeMap::from([("kubernetes.io/hostname".to_string(), r.node.clone())]));
                }
                rs
            })
            .collect()
    }

    pub fn pdb_objects(&self) -> Vec<k8s_openapi::api::policy::v1::PodDisruptionBudget> {
        self.replica_sets.iter().filter_map(|r| Some(cluster::pdb("batch", &r.name, &r.name, r.pdb_max_unavailable?))).collect()
    }

    /// Offline pods the scenario starts with.
    pub fn offline_pod_count(&self) -> usize {
        self.bare.len() + self.jobs.iter().map(|j| j.pods as usize).sum::<usize>() + self.replica_sets.iter().map(|r| r.replicas as usize).sum::<usize>()
    }

    /// A cluster of `nodes` full 4-CPU nodes, each holding one kind of offline work in
    /// turn (bare `free` pods, a ReplicaSet pair under a PDB allowing one disruption, a
    /// Job of each failure policy, a gang, bare `offline-batch` pods, a worker beside a
    /// free pod), and online pods for two thirds of the nodes arriving at once,
    /// alternately needing one and two evictions (so a choice that fails no Job and
    /// violates no PDB exists for each). Deterministic: the same `nodes` gives the same
    /// scenario.
    pub fn generate(nodes: usize) -> Scenario {
        let zones = ["zone-a", "zone-b", "zone-c"];
        let mut sc = Scenario {
            about: format!("{nodes} full 4-CPU nodes of mixed offline work; {} online pods arrive at once", Self::arrivals(nodes)),
            nodes: Vec::new(),
            bare: Vec::new(),
            jobs: Vec::new(),
            replica_sets: Vec::new(),
            online: Vec::new(),
        };
        let bare = |name: String, class: &str, node: &str, gang: Option<&str>| BarePod {
            name,
            class: class.into(),
            cpu_m: 1900,
            node: node.into(),
            gang: gang.map(Into::into),
            gang_min: gang.map(|_| 2),
        };
        for i in 0..nodes {
            let node = format!("node-{:02}", i + 1);
            sc.nodes.push(NodeSpec { name: node.clone(), cpu_m: 4000, zone: zones[i % 3].into() });
            let n = i + 1;
            match i % 6 {
                0 => sc.bare.extend([bare(format!("scratch-{n}a"), "free", &node, None), bare(format!("scratch-{n}b"), "free", &node, None)]),
                1 => sc.replica_sets.push(ReplicaSetSpec { name: format!("svc-{n}"), class: "offline-batch".into(), cpu_m: 1900, node: node.clone(), replicas: 2, pdb_max_unavailable: Some(1) }),
                2 => {
                    let (backoff_limit, on_disruption) = match (i / 6) % 3 {
                        0 => (0, None),
                        1 => (6, Some("FailJob".to_string())),
                        _ => (0, Some("Ignore".to_string())),
                    };
                    sc.jobs.push(JobSpec { name: format!("job-{n}"), class: "offline-batch".into(), cpu_m: 1900, node: node.clone(), pods: 2, backoff_limit, on_disruption });
                }
                3 => {
                    let gang = format!("gang-{n}");
                    sc.bare.extend([bare(format!("{gang}-a"), "free", &node, Some(&gang)), bare(format!("{gang}-b"), "free", &node, Some(&gang))]);
                }
                4 => sc.bare.extend([bare(format!("report-{n}a"), "offline-batch", &node, None), bare(format!("report-{n}b"), "offline-batch", &node, None)]),
                _ => {
                    sc.bare.push(bare(format!("spare-{n}"), "free", &node, None));
                    sc.replica_sets.push(ReplicaSetSpec { name: format!("cache-{n}"), class: "offline-batch".into(), cpu_m: 1900, node: node.clone(), replicas: 1, pdb_max_unavailable: None });
                }
            }
        }
        for k in 0..Self::arrivals(nodes) {
            sc.online.push(OnlinePod { name: format!("web-{:02}", k + 1), cpu_m: if k % 2 == 0 { 1500 } else { 3000 } });
        }
        sc
    }

    fn arrivals(nodes: usize) -> usize {
        (nodes * 2 / 3).max(1)
    }

    /// How long an offline pod of the scenario has been running when the online pods
    /// arrive: 5 minutes to 3 hours, fixed per name, so the run time a choice discards
    /// compares across runs.
    pub fn age_seconds(name: &str) -> i64 {
        let h = name.bytes().fold(1469598103934665603u64, |h, b| (h ^ b as u64).wrapping_mul(1099511628211));
        300 + (h % (3 * 3600 - 300)) as i64
    }

    pub fn online_pods(&self) -> Vec<k8s_openapi::api::core::v1::Pod> {
        self.online.iter().map(|o| PodBuilder::new("online", &o.name, "online-prod", o.cpu_m).build()).collect()
    }

    /// Gang name → its members' names.
    pub fn gangs(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut g: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for b in &self.bare {
            if let Some(name) = &b.gang {
                g.entry(name.as_str()).or_default().push(&b.name);
            }
        }
        g
    }
}
