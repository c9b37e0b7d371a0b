//! One case's world: a control plane, the kubelet stand-in, the namespaces, the default
//! policy's PriorityClasses, the shipped RBAC, the extender(s) and kube-scheduler.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::control_plane::Options;
use coloc_testbed::{kubelet, prepared, wait, Binaries, ControlPlane, Extender, ExtenderEntry, Kubelet, Scheduler};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;

use crate::coloc_pod::ColocPod;

/// The extender binary this test run built.
pub const EXTENDER: &str = env!("CARGO_BIN_EXE_coloc-extender");

/// kube-scheduler's client QPS: binding is never what limits a case.
pub const QPS: u32 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `nodeCacheCapable: true`: names and victim UIDs.
    Names,
    /// `nodeCacheCapable: false`: full Node and Pod objects.
    Objects,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Names => "names",
            Mode::Objects => "objects",
        }
    }

    pub fn node_cache_capable(self) -> bool {
        self == Mode::Names
    }
}

pub use coloc_testbed::prepared::repo;

pub struct Bed {
    pub mode: Mode,
    // Field order is drop order: kube-scheduler first, the control plane last.
    pub scheduler: Option<Scheduler>,
    /// Pods of coloc-scheduler (the default install), as processes.
    pub coloc: Vec<ColocPod>,
    /// Pods of coloc-requeue (the default install's requeue component), as processes.
    pub requeue: Vec<coloc_testbed::extender::RequeueController>,
    pub extenders: Vec<Extender>,
    pub kubelet: Kubelet,
    pub client: Client,
    pub plane: ControlPlane,
}

impl Bed {
    /// A control plane with the controllers, namespaces `online` and `batch`, the default
    /// policy's PriorityClasses and the shipped RBAC (base and requeue) for the extender.
    pub async fn up(bins: Binaries, mode: Mode) -> anyhow::Result<Bed> {
        Bed::up_with(bins, mode, Options::default()).await
    }

    pub async fn up_with(bins: Binaries, mode: Mode, opts: Options) -> anyhow::Result<Bed> {
        Bed::up_with_kubelet(bins, mode, opts, kubelet::Options::default()).await
    }

    /// A bed whose kubelet stand-in keeps every terminating pod for its whole grace period
    /// (the pods' 30 s): evictions in flight stay visible, as on real nodes.
    pub async fn up_honouring_grace(bins: Binaries, mode: Mode) -> anyhow::Result<Bed> {
        let kubelet = kubelet::Options { grace: kubelet::Grace::Honour, ..Default::default() };
        Bed::up_with_kubelet(bins, mode, Options::default(), kubelet).await
    }

    pub async fn up_with_kubelet(
        bins: Binaries,
        mode: Mode,
        opts: Options,
        kubelet_opts: kubelet::Options,
    ) -> anyhow::Result<Bed> {
        let rbac = [&prepared::BASE_RBAC[..], &prepared::REQUEUE_RBAC[..], &prepared::WAKE_RBAC[..]].concat();
        Bed::up_applying(bins, mode, opts, kubelet_opts, &rbac).await
    }

    /// A bed with nothing of the install applied (no namespace of its own either): for
    /// cases that apply a rendered install whole.
    pub async fn up_without_install(bins: Binaries, mode: Mode, kubelet_opts: kubelet::Options) -> anyhow::Result<Bed> {
        Bed::up_applying(bins, mode, Options::default(), kubelet_opts, &[]).await
    }

    async fn up_applying(
        bins: Binaries,
        mode: Mode,
        opts: Options,
        kubelet_opts: kubelet::Options,
        manifests: &[&str],
    ) -> anyhow::Result<Bed> {
        let (plane, client) = prepared::start(&bins, opts, manifests).await?;
        let kubelet = Kubelet::start(client.clone(), kubelet_opts);
        Ok(Bed {
            mode,
            scheduler: None,
            coloc: Vec::new(),
            requeue: Vec::new(),
            extenders: Vec::new(),
            kubelet,
            client,
            plane,
        })
    }

    /// Ready nodes `names`, each `milli_cpu` and 64 GiB, in zone-1.
    pub async fn nodes(&self, names: &[&str], milli_cpu: i64) -> anyhow::Result<()> {
        cluster::create_all(&self.client, names.iter().map(|n| cluster::node(n, milli_cpu, 64, "zone-1")).collect())
            .await
    }

    /// Bare pods bound directly to their node (running before the scenario starts).
    pub async fn bound(&self, pods: Vec<PodBuilder>) -> anyhow::Result<()> {
        cluster::create_all(&self.client, pods.into_iter().map(PodBuilder::build).collect()).await
    }

    /// Starts an extender process: `serve --kube --wake <args>` with the default policy,
    /// as the shipped Deployment with the wake component runs it, enforcing (the shipped
    /// default is in shadow) unless `args` name a `--mode`.
    pub async fn extender(&mut self, args: &[&str]) -> anyhow::Result<usize> {
        let i = self.extenders.len();
        let mut all = vec!["--kube", "--wake"];
        if !args.contains(&"--mode") {
            all.extend(["--mode", "enforce"]);
        }
        all.extend_from_slice(args);
        let e = Extender::start(&self.plane, &format!("coloc-extender-{i}"), Path::new(EXTENDER), &all).await?;
        self.extenders.push(e);
        Ok(i)
    }

    /// The all-verbs registration of extender `i`, in this case's mode.
    pub fn entry(&self, i: usize) -> ExtenderEntry {
        ExtenderEntry::all_verbs(&self.extenders[i].url(), self.mode.node_cache_capable())
    }

    pub async fn schedule_with(&mut self, entries: &[ExtenderEntry]) -> anyhow::Result<()> {
        self.scheduler = Some(Scheduler::start(&self.plane, "kube-scheduler", entries, QPS).await?);
        Ok(())
    }

    /// Waits until `check` accepts the pods of `namespace`.
    pub async fn until_pods<T>(
        &self,
        namespace: &str,
        timeout: Duration,
        what: &str,
        check: impl Fn(&[Pod]) -> Result<T, String>,
    ) -> anyhow::Result<T> {
        let r = wait::until(timeout, what, || async {
            let pods = cluster::pods(&self.client, Some(namespace)).await.map_err(|e| e.to_string())?;
            check(&pods)
        })
        .await;
        r.map_err(|e| anyhow::anyhow!("{e:#}\n{}", self.logs()))
    }

    /// Checks that hold at the end of every case: kube-scheduler never had a preemption
    /// fail on the extender's answer (a victim it does not have, an empty victim list).
    pub fn finish(&self) -> anyhow::Result<()> {
        for k in self.scheduler.iter().chain(self.coloc.iter().map(|p| &p.scheduler)) {
            let log = std::fs::read_to_string(&k.proc.log).unwrap_or_default();
            for bad in ["claims to preempt pod", "expected at least one victim pod"] {
                if let Some(line) = log.lines().find(|l| l.contains(bad)) {
                    anyhow::bail!("kube-scheduler rejected a preempt answer: {line}");
                }
            }
        }
        Ok(())
    }

    /// Waits until `n` pods of `namespace` are Running.
    pub async fn until_running(&self, namespace: &str, n: usize) -> anyhow::Result<()> {
        self.until_pods(namespace, Duration::from_secs(60), &format!("{n} pods running"), |pods| {
            let running = pods.iter().filter(|p| cluster::phase(p) == "Running").count();
            if running == n {
                Ok(())
            } else {
                Err(format!("{running} running"))
            }
        })
        .await
    }

    /// The smallest full node: node-1 (4 CPU) with two bare `free` pods of 1.9 CPU, running.
    pub async fn one_node_two_free_pods(&self) -> anyhow::Result<()> {
        self.nodes(&["node-1"], 4000).await?;
        self.bound(vec![
            PodBuilder::new("batch", "free-1", "free", 1900).on("node-1"),
            PodBuilder::new("batch", "free-2", "free", 1900).on("node-1"),
        ])
        .await?;
        self.until_running("batch", 2).await
    }

    /// `nodes` of 4 CPU, each full with two bare `free` pods of 1.9 CPU (free-1, free-2 on the
    /// first, …), running; returns them as (name, uid).
    pub async fn full_of_free_pods(&self, nodes: &[&str]) -> anyhow::Result<Vec<(String, String)>> {
        self.nodes(nodes, 4000).await?;
        let pods = nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| {
                (1..=2).map(move |j| PodBuilder::new("batch", &format!("free-{}", 2 * i + j), "free", 1900).on(n))
            })
            .collect();
        self.bound(pods).await?;
        self.until_running("batch", 2 * nodes.len()).await?;
        crate::invariants::bare_pods(self, "batch").await
    }

    /// The storm: `n` online pods at once (web-1, …), each needing a whole node of
    /// `full_of_free_pods`.
    pub async fn storm(&self, n: usize) -> anyhow::Result<()> {
        let pods = (1..=n).map(|i| PodBuilder::new("online", &format!("web-{i}"), "online-prod", 3000).build());
        cluster::create_all(&self.client, pods.collect()).await
    }

    /// Every one of the storm's `n` online pods placed within `timeout`.
    pub async fn until_storm_placed(&self, n: usize, timeout: Duration) -> anyhow::Result<()> {
        self.until_pods("online", timeout, &format!("all {n} online pods placed"), |pods| {
            let placed = placement(pods);
            (placed.len() == n).then_some(()).ok_or(format!("placed: {placed:?}"))
        })
        .await
    }

    /// The tail of every component's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for e in &self.extenders {
            s += &e.log_tails(3000);
        }
        if let Some(k) = &self.scheduler {
            s += &format!("--- kube-scheduler (last 3 KB) ---\n{}\n", k.proc.log_tail(3000));
        }
        for p in &self.coloc {
            s += &p.logs();
        }
        for r in &self.requeue {
            s += &format!("--- {} (last 3 KB) ---\n{}\n", r.proc.name, r.proc.log_tail(3000));
        }
        s
    }
}

/// name → node for the placed pods.
pub fn placement(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .filter(|p| cluster::is_placed(p))
        .map(|p| (cluster::name(p).to_string(), cluster::node_of(p).unwrap_or_default().to_string()))
        .collect()
}
