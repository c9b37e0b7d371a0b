//! kube-scheduler with a given list of extender registrations.

use std::time::Duration;

use crate::control_plane::strings;
use crate::ports::free_port;
use crate::process::Proc;
use crate::ControlPlane;

/// The prioritize weight of the shipped registrations (manifests/scheduler*).
pub const SHIPPED_WEIGHT: u32 = 5;

/// One `extenders:` entry of a KubeSchedulerConfiguration.
#[derive(Debug, Clone)]
pub struct ExtenderEntry {
    pub url_prefix: String,
    pub filter: bool,
    pub prioritize: bool,
    pub preempt: bool,
    pub node_cache_capable: bool,
    pub ignorable: bool,
    /// `managedResources` names, each `ignoredByScheduler: true`: the entry then sees only
    /// pods that request one of them.
    pub managed_resources: Vec<String>,
    pub http_timeout: Duration,
    /// The prioritize `weight`: kube-scheduler adds score × 10 × weight to its plugins'.
    pub weight: u32,
    /// HTTPS with a client certificate (`enableHTTPS`, `tlsConfig`); plain HTTP if `None`.
    pub tls: Option<ClientTls>,
}

/// kube-scheduler's side of mTLS to an extender, as files (it re-reads the certificate and
/// key at new handshakes, the CA only at start).
#[derive(Debug, Clone)]
pub struct ClientTls {
    pub cert_file: std::path::PathBuf,
    pub key_file: std::path::PathBuf,
    pub ca_file: std::path::PathBuf,
    pub server_name: String,
}

impl ExtenderEntry {
    /// filter, prioritize and preempt for every pod.
    pub fn all_verbs(url_prefix: &str, node_cache_capable: bool) -> ExtenderEntry {
        ExtenderEntry {
            url_prefix: url_prefix.to_string(),
            filter: true,
            prioritize: true,
            preempt: true,
            node_cache_capable,
            ignorable: false,
            managed_resources: Vec::new(),
            http_timeout: Duration::from_secs(5),
            weight: SHIPPED_WEIGHT,
            tls: None,
        }
    }

    fn yaml(&self) -> String {
        let mut s = format!("- urlPrefix: {}\n", self.url_prefix);
        if self.filter {
            s += "  filterVerb: filter\n";
        }
        if self.prioritize {
            s += &format!("  prioritizeVerb: prioritize\n  weight: {}\n", self.weight);
        }
        if self.preempt {
            s += "  preemptVerb: preempt\n";
        }
        s += &format!(
            "  nodeCacheCapable: {}\n  ignorable: {}\n  httpTimeout: {}ms\n  enableHTTPS: {}\n",
            self.node_cache_capable,
            self.ignorable,
            self.http_timeout.as_millis(),
            self.tls.is_some()
        );
        if let Some(t) = &self.tls {
            s += &format!(
                "  tlsConfig:\n    certFile: {}\n    keyFile: {}\n    caFile: {}\n    serverName: {}\n",
                t.cert_file.display(),
                t.key_file.display(),
                t.ca_file.display(),
                t.server_name
            );
        }
        if !self.managed_resources.is_empty() {
            s += "  managedResources:\n";
            for r in &self.managed_resources {
                s += &format!("  - name: {r}\n    ignoredByScheduler: true\n");
            }
        }
        s
    }
}

pub struct Scheduler {
    pub proc: Proc,
    pub port: u16,
    pub config: String,
    client: kube::Client,
}

/// The KubeSchedulerConfiguration the test bed runs kube-scheduler with.
pub fn config(kubeconfig: &str, extenders: &[ExtenderEntry], qps: u32) -> String {
    let mut s = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: {kubeconfig}\n  qps: {qps}\n  burst: {}\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: default-scheduler\n",
        qps * 2
    );
    if !extenders.is_empty() {
        s += "extenders:\n";
        for e in extenders {
            s += &e.yaml();
        }
    }
    s
}

impl Scheduler {
    /// Starts kube-scheduler against `plane` with these extenders; client QPS `qps`, so
    /// that binding is not what limits throughput. Returns once `/readyz` answers.
    pub async fn start(
        plane: &ControlPlane,
        name: &str,
        extenders: &[ExtenderEntry],
        qps: u32,
    ) -> anyhow::Result<Scheduler> {
        Scheduler::start_with(plane, name, extenders, qps, &[]).await
    }

    /// `start`, with `extra` flags after the test bed's own (e.g. `--feature-gates=…`).
    pub async fn start_with(
        plane: &ControlPlane,
        name: &str,
        extenders: &[ExtenderEntry],
        qps: u32,
        extra: &[&str],
    ) -> anyhow::Result<Scheduler> {
        let config = config(&plane.admin_kubeconfig.display().to_string(), extenders, qps);
        Scheduler::start_configured(plane, name, config, extra).await
    }

    /// kube-scheduler with this KubeSchedulerConfiguration as it is, and `extra` flags
    /// after the test bed's own (which serve /readyz on a free loopback port, and
    /// /metrics to anyone unless `extra` names the always-allowed paths itself).
    pub async fn start_configured(
        plane: &ControlPlane,
        name: &str,
        config: String,
        extra: &[&str],
    ) -> anyhow::Result<Scheduler> {
        let path = plane.dir().join(format!("{name}.yaml"));
        std::fs::write(&path, &config)?;
        let port = free_port();
        let (cert, key) = plane.serving_pair();
        // A repeated list flag adds to the first: the test bed's opening of /metrics
        // cannot be taken back by a later flag.
        const ALLOWED: &str = "--authorization-always-allow-paths";
        let open = if extra.iter().any(|f| f.starts_with(ALLOWED)) {
            vec![]
        } else {
            vec![ALLOWED, "/healthz,/readyz,/livez,/metrics"]
        };
        let proc = Proc::spawn(
            name,
            &plane.bins.kube_scheduler,
            &strings(&[
                "--config",
                &path.display().to_string(),
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                &port.to_string(),
                "--tls-cert-file",
                &cert.display().to_string(),
                "--tls-private-key-file",
                &key.display().to_string(),
                "-v",
                "2",
            ])
            .into_iter()
            .chain(strings(&open))
            .chain(strings(extra))
            .collect::<Vec<_>>(),
            &[],
            plane.dir(),
        )?;
        let client = crate::control_plane::component_client(plane, port).await?;
        let mut s = Scheduler { proc, port, config, client };
        s.until_ready().await?;
        Ok(s)
    }

    /// Starts it again with the same command line (after `proc.kill()`), and waits until
    /// `/readyz` answers.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.proc.restart()?;
        self.until_ready().await
    }

    async fn until_ready(&mut self) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.proc.exited() {
                anyhow::bail!("kube-scheduler exited ({status}):\n{}", self.proc.log_tail(4000));
            }
            if self.get("/readyz").await.is_ok_and(|b| b.trim() == "ok") {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!("kube-scheduler not ready:\n{}", self.proc.log_tail(4000));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// GET on kube-scheduler's secure port (these paths need no authentication).
    pub async fn get(&self, path: &str) -> anyhow::Result<String> {
        Ok(self.client.request_text(crate::control_plane::http_get(path)).await?)
    }

    /// kube-scheduler's Prometheus text.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        self.get("/metrics").await
    }
}
