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

/// A ReplicaSet (namespace `batch`), its pods pinned to `node` if set, with a PDB allowing
/// `pdb_max_unavailable` disruptions if set.
#[derive(Debug, Deserialize)]
pub struct ReplicaSetSpec {
    pub name: String,
    pub class: String,
    pub cpu_m: i64,
    #[serde(default)]
    pub node: Option<String>,
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

/// A Job (namespace `batch`), its pods pinned to `node` if set.
#[derive(Debug, Deserialize)]
pub struct JobSpec {
    pub name: String,
    pub class: String,
    pub cpu_m: i64,
    #[serde(default)]
    pub node: Option<String>,
    pub pods: i32,
    pub backoff_limit: i32,
    #[serde(default)]
    pub on_disruption: Option<String>,
}

/// An online pod that arrives (namespace `online`, class `online-prod`) with its wave.
#[derive(Debug, Deserialize)]
pub struct OnlinePod {
    pub name: String,
    pub cpu_m: i64,
    /// Waves arrive in order, a few seconds apart; 0 is the first.
    #[serde(default)]
    pub wave: u32,
}

impl OnlinePod {
    pub fn pod(&self) -> k8s_openapi::api::core::v1::Pod {
        PodBuilder::new("online", &self.name, "online-prod", self.cpu_m).build()
    }
}

/// A small deterministic generator (SplitMix64): the same seed, the same cluster.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
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
                let mut job = cluster::job(
                    "batch",
                    &j.name,
                    j.pods,
                    j.backoff_limit,
                    j.on_disruption.as_deref(),
                    &j.class,
                    j.cpu_m,
                );
                if let (Some(t), Some(node)) = (job.spec.as_mut().and_then(|s| s.template.spec.as_mut()), &j.node) {
                    t.node_selector = Some(BTreeMap::from([("kubernetes.io/hostname".to_string(), node.clone())]));
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
                if let (Some(t), Some(node)) = (rs.spec.template.as_mut().and_then(|t| t.spec.as_mut()), &r.node) {
                    t.node_selector = Some(BTreeMap::from([("kubernetes.io/hostname".to_string(), node.clone())]));
                }
                rs
            })
            .collect()
    }

    pub fn pdb_objects(&self) -> Vec<k8s_openapi::api::policy::v1::PodDisruptionBudget> {
        self.replica_sets
            .iter()
            .filter_map(|r| Some(cluster::pdb("batch", &r.name, &r.name, r.pdb_max_unavailable?)))
            .collect()
    }

    /// Offline pods the scenario starts with.
    pub fn offline_pod_count(&self) -> usize {
        self.bare.len()
            + self.jobs.iter().map(|j| j.pods as usize).sum::<usize>()
            + self.replica_sets.iter().map(|r| r.replicas as usize).sum::<usize>()
    }

    /// A cluster of `nodes` nodes as a platform team runs one, the same for the same
    /// `nodes` and `seed`: 4- and 8-CPU nodes in three zones, nearly full of offline work
    /// at four priorities (`offline-batch`, `offline-batch-low`, `free-high`, `free`):
    /// ReplicaSets (most under a PDB) and Jobs of every failure policy, whose pods are not
    /// pinned (kube-scheduler places them, and their replacements, wherever it likes), and
    /// bare pods bound where the generator put them, some in gangs. Online pods of 1 to 3
    /// CPU, about one per node, arrive in waves of one to three.
    ///
    /// Controllers' pods request 1 CPU each and the bare pods leave room for exactly as
    /// many of them, in whole CPUs per node: wherever kube-scheduler puts them, all fit.
    pub fn generate(nodes: usize, seed: u64) -> Scenario {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ nodes as u64);
        let zones = ["zone-a", "zone-b", "zone-c"];
        let mut sc = Scenario {
            about: String::new(),
            nodes: Vec::new(),
            bare: Vec::new(),
            jobs: Vec::new(),
            replica_sets: Vec::new(),
            online: Vec::new(),
        };
        let mut slots = 0;
        let mut gang: Option<(String, u32, u32)> = None; // name, members, placed
        for i in 0..nodes {
            let node = format!("node-{:02}", i + 1);
            let cpu_m = if rng.below(3) == 0 { 8000 } else { 4000 };
            sc.nodes.push(NodeSpec { name: node.clone(), cpu_m, zone: zones[i % 3].into() });
            // About 40 % for controllers' pods, a little left free on some nodes.
            let k = 1 + rng.below((cpu_m / 1000 * 2 / 5) as u64) as i64;
            slots += k;
            let slack = 250 * rng.below(3) as i64;
            let mut left = cpu_m - k * 1000 - slack;
            while left > 0 {
                let cpu = (250 * (1 + rng.below(4) as i64)).min(left);
                left -= cpu;
                let n = sc.bare.len() + 1;
                let (name, class, g) = match rng.below(10) {
                    0..=3 => (format!("scratch-{n}"), "free", None),
                    4..=5 => (format!("sweep-{n}"), "free-high", None),
                    6..=7 => (
                        format!("report-{n}"),
                        if rng.below(2) == 0 { "offline-batch" } else { "offline-batch-low" },
                        None,
                    ),
                    _ => {
                        // The next member of the gang being filled (2 or 3 members, on
                        // this node or the next ones), or the first of a new one.
                        let (gname, size, placed) = gang
                            .take()
                            .filter(|(_, size, placed)| placed < size)
                            .unwrap_or_else(|| (format!("gang-{n}"), 2 + rng.below(2) as u32, 0));
                        let name = format!("{gname}-{}", placed + 1);
                        gang = Some((gname.clone(), size, placed + 1));
                        (name, "free", Some(gname))
                    }
                };
                sc.bare.push(BarePod {
                    name,
                    class: class.into(),
                    cpu_m: cpu,
                    node: node.clone(),
                    gang: g,
                    gang_min: None,
                });
            }
        }
        // Every gang needs all its members (the last one may be left short: its minimum is
        // what it has).
        let sizes: BTreeMap<String, u32> =
            sc.gangs().into_iter().map(|(g, members)| (g.to_string(), members.len() as u32)).collect();
        for b in &mut sc.bare {
            if let Some(g) = &b.gang {
                b.gang_min = Some(sizes[g]);
            }
        }
        let mut left = slots as i32;
        while left > 0 {
            let n = sc.replica_sets.len() + sc.jobs.len() + 1;
            let class = if rng.below(3) == 0 { "offline-batch-low" } else { "offline-batch" };
            if rng.below(20) < 11 {
                let replicas = (2 + rng.below(5) as i32).min(left);
                let pdb = (rng.below(4) != 0).then_some(if replicas >= 5 { 2 } else { 1 });
                sc.replica_sets.push(ReplicaSetSpec {
                    name: format!("worker-{n}"),
                    class: class.into(),
                    cpu_m: 1000,
                    node: None,
                    replicas,
                    pdb_max_unavailable: pdb,
                });
                left -= replicas;
            } else {
                let pods = (2 + rng.below(3) as i32).min(left);
                // Every failure policy in turn: backoffLimit alone, FailJob, Ignore.
                let (backoff_limit, on_disruption) = match sc.jobs.len() % 4 {
                    0 => (3, None),
                    1 => (6, Some("FailJob".to_string())),
                    2 => (1, Some("Ignore".to_string())),
                    _ => (0, None),
                };
                let class = if rng.below(4) == 0 { "free" } else { class };
                sc.jobs.push(JobSpec {
                    name: format!("train-{n}"),
                    class: class.into(),
                    cpu_m: 1000,
                    node: None,
                    pods,
                    backoff_limit,
                    on_disruption,
                });
                left -= pods;
            }
        }
        let arrivals = nodes + nodes / 10;
        let mut wave = 0;
        while sc.online.len() < arrivals {
            for _ in 0..(1 + rng.below(3)).min((arrivals - sc.online.len()) as u64) {
                let cpu_m = [1000, 1500, 2000, 2000, 3000][rng.below(5) as usize];
                sc.online.push(OnlinePod { name: format!("web-{:02}", sc.online.len() + 1), cpu_m, wave });
            }
            wave += 1;
        }
        sc.about = format!(
            "{nodes} nodes (seed {seed}): {} offline pods ({} bare, {} ReplicaSets, {} Jobs, unpinned); {} online pods in {wave} waves",
            sc.offline_pod_count(),
            sc.bare.len(),
            sc.replica_sets.len(),
            sc.jobs.len(),
            sc.online.len()
        );
        sc
    }

    /// Online pods by wave, in order.
    pub fn waves(&self) -> Vec<Vec<&OnlinePod>> {
        let mut waves: BTreeMap<u32, Vec<&OnlinePod>> = BTreeMap::new();
        for o in &self.online {
            waves.entry(o.wave).or_default().push(o);
        }
        waves.into_values().collect()
    }

    /// How long an offline pod of the scenario has been running when the online pods
    /// arrive: 5 minutes to 3 hours, fixed per name, so the run time a choice discards
    /// compares across runs.
    pub fn age_seconds(name: &str) -> i64 {
        let h = name.bytes().fold(1469598103934665603u64, |h, b| (h ^ b as u64).wrapping_mul(1099511628211));
        300 + (h % (3 * 3600 - 300)) as i64
    }

    pub fn online_pods(&self) -> Vec<k8s_openapi::api::core::v1::Pod> {
        self.online.iter().map(OnlinePod::pod).collect()
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
