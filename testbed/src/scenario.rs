//! A scenario file: the cluster before, and the online pods that arrive. Run it behind
//! kube-scheduler alone and behind the extender (`coloc-demo`), and compare.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cluster::{self, PodBuilder};
use crate::kubelet::EXITS_AFTER_SECONDS;

#[derive(Debug, Default, Deserialize)]
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

/// How a pod stops once deleted: its declared grace period, and when its containers
/// really exit (read by the kubelet stand-in from [`EXITS_AFTER_SECONDS`], a test-bed-only
/// annotation; the extender never reads it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
pub struct Termination {
    /// `terminationGracePeriodSeconds`; `None`: the API server's default, 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_s: Option<i64>,
    /// Seconds from the delete until it exits; `None`: it runs to the end of its grace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_s: Option<f64>,
}

impl Termination {
    /// Both times multiplied by `factor` (the grace rounded up to whole seconds, at least
    /// 1 where it was not 0): a shorter run, the same proportions.
    pub fn scaled(self, factor: f64) -> Termination {
        Termination {
            grace_s: self.grace_s.map(|g| if g == 0 { 0 } else { ((g as f64 * factor).ceil() as i64).max(1) }),
            stop_s: self.stop_s.map(|s| s * factor),
        }
    }

    /// How long a pod deleted now keeps running at most.
    pub fn longest_s(&self) -> f64 {
        let grace = self.grace_s.unwrap_or(30) as f64;
        self.stop_s.map_or(grace, |s| s.min(grace))
    }

    /// A pod's spec and annotations as they say it.
    fn apply(&self, pod: &mut serde_json::Value) {
        if let Some(g) = self.grace_s {
            pod["spec"]["terminationGracePeriodSeconds"] = serde_json::json!(g);
        }
        if let Some(s) = self.stop_s {
            pod["metadata"]["annotations"][EXITS_AFTER_SECONDS] = serde_json::json!(format!("{s:.3}"));
        }
    }
}

/// The mix [`Scenario::mix_grace`] draws offline workloads' termination from.
pub const GRACE_MIX: &str = "30 % exit at once (grace 1-5 s, exit within 1 s), 45 % the default grace of 30 s (half exit within 1-3 s, half run it out), 25 % checkpointing batch (grace 120-600 s, exit at 60-95 % of it)";

/// Draws from [`GRACE_MIX`], in order, from a seed: what `--mixed-grace` and trace
/// converters give the workloads they fill in.
pub struct GraceMix(Rng);

impl GraceMix {
    pub fn seeded(seed: u64) -> GraceMix {
        GraceMix(Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ 0x0067_7261_6365))
    }

    /// The next workload's grace period and stop time.
    pub fn draw(&mut self) -> Termination {
        Termination::draw(&mut self.0)
    }
}

impl Termination {
    /// One draw from [`GRACE_MIX`].
    fn draw(rng: &mut Rng) -> Termination {
        let between = |rng: &mut Rng, lo: f64, hi: f64| lo + (hi - lo) * rng.below(1001) as f64 / 1000.0;
        match rng.below(100) {
            0..=29 => {
                let grace = 1 + rng.below(5) as i64;
                Termination { grace_s: Some(grace), stop_s: Some(between(rng, 0.0, 1.0)) }
            }
            30..=74 => Termination { grace_s: Some(30), stop_s: (rng.below(2) == 0).then(|| between(rng, 1.0, 3.0)) },
            _ => {
                let grace = 120 + 30 * rng.below(17) as i64;
                Termination { grace_s: Some(grace), stop_s: Some(grace as f64 * between(rng, 0.6, 0.95)) }
            }
        }
    }
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
    #[serde(default, flatten)]
    pub stop: Termination,
    #[serde(default)]
    pub memory_mi: Option<i64>,
    /// How long its pods have run when online pods arrive (default: `Scenario::age_seconds`).
    #[serde(default)]
    pub age_s: Option<i64>,
    #[serde(default = "batch")]
    pub namespace: String,
}

fn batch() -> String {
    crate::prepared::BATCH.into()
}

#[derive(Debug, Deserialize)]
pub struct NodeSpec {
    pub name: String,
    pub cpu_m: i64,
    #[serde(default = "default_zone")]
    pub zone: String,
    /// GiB of memory (64 by default).
    #[serde(default)]
    pub memory_gi: Option<i64>,
}

fn default_zone() -> String {
    "zone-a".into()
}

/// A pod no controller owns, there before the scenario starts (namespace `batch`), bound
/// to `node` (else kube-scheduler places it with the controllers' pods).
#[derive(Debug, Deserialize)]
pub struct BarePod {
    pub name: String,
    pub class: String,
    pub cpu_m: i64,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub gang: Option<String>,
    #[serde(default)]
    pub gang_min: Option<u32>,
    #[serde(default, flatten)]
    pub stop: Termination,
    #[serde(default)]
    pub memory_mi: Option<i64>,
    /// How long it has run when online pods arrive (default: `Scenario::age_seconds`).
    #[serde(default)]
    pub age_s: Option<i64>,
    /// Seconds after which it completes (default: it runs on).
    #[serde(default)]
    pub run_s: Option<u64>,
    #[serde(default = "batch")]
    pub namespace: String,
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
    #[serde(default, flatten)]
    pub stop: Termination,
    #[serde(default)]
    pub memory_mi: Option<i64>,
    #[serde(default)]
    pub age_s: Option<i64>,
    /// Seconds each of its pods runs before it completes (default: until evicted).
    #[serde(default)]
    pub run_s: Option<u64>,
    #[serde(default = "batch")]
    pub namespace: String,
}

/// A pod that arrives once the scenario has started: an online pod (namespace `online`,
/// class `online-prod`) unless it says otherwise, with its wave or at its time. Its time
/// to place is measured, per class.
#[derive(Debug, Deserialize)]
pub struct OnlinePod {
    pub name: String,
    pub cpu_m: i64,
    /// Waves arrive in order, a few seconds apart; 0 is the first.
    #[serde(default)]
    pub wave: u32,
    /// Seconds after the first arrival (instead of its wave's time).
    #[serde(default)]
    pub at_s: Option<f64>,
    #[serde(default = "online")]
    pub namespace: String,
    #[serde(default = "online_prod")]
    pub class: String,
    #[serde(default)]
    pub memory_mi: Option<i64>,
    #[serde(default, flatten)]
    pub stop: Termination,
    #[serde(default)]
    pub run_s: Option<u64>,
}

fn online() -> String {
    crate::prepared::ONLINE.into()
}

fn online_prod() -> String {
    "online-prod".into()
}

impl OnlinePod {
    pub fn pod(&self) -> k8s_openapi::api::core::v1::Pod {
        let mut p = PodBuilder::new(&self.namespace, &self.name, &self.class, self.cpu_m);
        p = with_memory(p, self.memory_mi);
        if let Some(run) = self.run_s {
            p = p.annotate(crate::kubelet::RUN_SECONDS, &run.to_string());
        }
        p.edit(|v| self.stop.apply(v)).build()
    }
}

fn with_memory(p: PodBuilder, memory_mi: Option<i64>) -> PodBuilder {
    match memory_mi {
        Some(mi) => p.memory(&format!("{mi}Mi")),
        None => p,
    }
}

/// A workload's pod template as `stop` and `memory_mi` say.
fn template(
    spec: Option<&mut k8s_openapi::api::core::v1::PodTemplateSpec>,
    stop: &Termination,
    memory_mi: Option<i64>,
) {
    let Some(t) = spec else { return };
    let mut v = serde_json::to_value(&*t).expect("a template is JSON");
    stop.apply(&mut v);
    if let Some(mi) = memory_mi {
        v["spec"]["containers"][0]["resources"]["requests"]["memory"] = serde_json::json!(format!("{mi}Mi"));
    }
    *t = serde_json::from_value(v).expect("still a template");
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
        self.nodes.iter().map(|n| cluster::node(&n.name, n.cpu_m, n.memory_gi.unwrap_or(64), &n.zone)).collect()
    }

    pub fn bare_pods(&self) -> Vec<k8s_openapi::api::core::v1::Pod> {
        self.bare
            .iter()
            .map(|b| {
                let mut p = PodBuilder::new(&b.namespace, &b.name, &b.class, b.cpu_m);
                if let Some(node) = &b.node {
                    p = p.on(node);
                }
                if let Some(g) = &b.gang {
                    p = p.label(GANG_LABEL, g).annotate(GANG_MIN, &b.gang_min.unwrap_or(1).to_string());
                }
                if let Some(run) = b.run_s {
                    p = p.annotate(crate::kubelet::RUN_SECONDS, &run.to_string());
                }
                with_memory(p, b.memory_mi).edit(|v| b.stop.apply(v)).build()
            })
            .collect()
    }

    pub fn job_objects(&self) -> Vec<k8s_openapi::api::batch::v1::Job> {
        self.jobs
            .iter()
            .map(|j| {
                let mut job = cluster::job(
                    &j.namespace,
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
                if let Some(spec) = job.spec.as_mut() {
                    if let Some(run) = j.run_s {
                        // Each pod completes after `run_s`; the Job, after all of its completions.
                        spec.completions = spec.parallelism;
                        let meta = spec.template.metadata.get_or_insert_with(Default::default);
                        meta.annotations
                            .get_or_insert_with(Default::default)
                            .insert(crate::kubelet::RUN_SECONDS.into(), run.to_string());
                    }
                    template(Some(&mut spec.template), &j.stop, j.memory_mi);
                }
                job
            })
            .collect()
    }

    pub fn replica_set_objects(&self) -> Vec<k8s_openapi::api::apps::v1::ReplicaSet> {
        self.replica_sets
            .iter()
            .map(|r| {
                let mut rs = cluster::replica_set(&r.namespace, &r.name, r.replicas, &r.class, r.cpu_m);
                if let (Some(t), Some(node)) = (rs.spec.template.as_mut().and_then(|t| t.spec.as_mut()), &r.node) {
                    t.node_selector = Some(BTreeMap::from([("kubernetes.io/hostname".to_string(), node.clone())]));
                }
                template(rs.spec.template.as_mut(), &r.stop, r.memory_mi);
                rs
            })
            .collect()
    }

    pub fn pdb_objects(&self) -> Vec<k8s_openapi::api::policy::v1::PodDisruptionBudget> {
        self.replica_sets
            .iter()
            .filter_map(|r| Some(cluster::pdb(&r.namespace, &r.name, &r.name, r.pdb_max_unavailable?)))
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
        let mut sc = Scenario::default();
        let mut slots = 0;
        let mut gang: Option<(String, u32, u32)> = None; // name, members, placed
        for i in 0..nodes {
            let node = format!("node-{:02}", i + 1);
            let cpu_m = if rng.below(3) == 0 { 8000 } else { 4000 };
            sc.nodes.push(NodeSpec { name: node.clone(), cpu_m, zone: zones[i % 3].into(), memory_gi: None });
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
                    node: Some(node.clone()),
                    gang: g,
                    gang_min: None,
                    stop: Termination::default(),
                    memory_mi: None,
                    age_s: None,
                    run_s: None,
                    namespace: batch(),
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
                    stop: Termination::default(),
                    memory_mi: None,
                    age_s: None,
                    namespace: batch(),
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
                    stop: Termination::default(),
                    memory_mi: None,
                    age_s: None,
                    run_s: None,
                    namespace: batch(),
                });
                left -= pods;
            }
        }
        let arrivals = nodes + nodes / 10;
        let mut wave = 0;
        while sc.online.len() < arrivals {
            for _ in 0..(1 + rng.below(3)).min((arrivals - sc.online.len()) as u64) {
                let cpu_m = [1000, 1500, 2000, 2000, 3000][rng.below(5) as usize];
                sc.online.push(OnlinePod {
                    name: format!("web-{:02}", sc.online.len() + 1),
                    cpu_m,
                    wave,
                    at_s: None,
                    namespace: online(),
                    class: online_prod(),
                    memory_mi: None,
                    stop: Termination::default(),
                    run_s: None,
                });
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

    /// Draws every offline workload's grace period and stop time from [`GRACE_MIX`]: each
    /// ReplicaSet, Job, gang and lone bare pod once (its pods share a template). Its own
    /// generator, seeded from `seed`: the cluster is the one `generate` made.
    pub fn mix_grace(&mut self, seed: u64) {
        let mut mix = GraceMix::seeded(seed);
        let mut gangs: BTreeMap<String, Termination> = BTreeMap::new();
        for b in &mut self.bare {
            b.stop = match &b.gang {
                Some(g) => *gangs.entry(g.clone()).or_insert_with(|| mix.draw()),
                None => mix.draw(),
            };
        }
        for r in &mut self.replica_sets {
            r.stop = mix.draw();
        }
        for j in &mut self.jobs {
            j.stop = mix.draw();
        }
        self.about += "; grace mixed";
    }

    /// Every grace period and stop time multiplied by `factor` (`Termination::scaled`).
    pub fn scale_time(&mut self, factor: f64) {
        let all = self
            .bare
            .iter_mut()
            .map(|b| &mut b.stop)
            .chain(self.replica_sets.iter_mut().map(|r| &mut r.stop))
            .chain(self.jobs.iter_mut().map(|j| &mut j.stop))
            .chain(self.online.iter_mut().map(|o| &mut o.stop));
        for stop in all {
            *stop = stop.scaled(factor);
        }
    }

    /// The longest any pod of the scenario keeps running once deleted, seconds.
    pub fn longest_stop_s(&self) -> f64 {
        self.bare
            .iter()
            .map(|b| b.stop)
            .chain(self.replica_sets.iter().map(|r| r.stop))
            .chain(self.jobs.iter().map(|j| j.stop))
            .chain(self.online.iter().map(|o| o.stop))
            .map(|t| t.longest_s())
            .fold(0.0, f64::max)
    }

    /// How long an offline pod (a bare pod by its name, a controller's by its `app` label,
    /// which names its workload) has run when the online pods arrive: its workload's
    /// `age_s` if set, else [`Scenario::age_seconds`] of its name.
    pub fn age_of(&self, name: &str, app: Option<&str>) -> i64 {
        let declared = self.bare.iter().find(|b| b.name == name).and_then(|b| b.age_s).or_else(|| {
            let app = app?;
            self.replica_sets
                .iter()
                .find(|r| r.name == app)
                .and_then(|r| r.age_s)
                .or_else(|| self.jobs.iter().find(|j| j.name == app).and_then(|j| j.age_s))
        });
        declared.unwrap_or_else(|| Scenario::age_seconds(name))
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
