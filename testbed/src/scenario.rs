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
    pub online: Vec<OnlinePod>,
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
