//! The extender under test (or any extender binary) as a process of the test bed.

use std::path::Path;
use std::time::Duration;

use crate::control_plane::{plain_client, strings, INSTALL_NAMESPACE};
use crate::ports::free_port;
use crate::process::Proc;
use crate::ControlPlane;

/// What a pod gives the process standing in for its container: the credentials of its
/// ServiceAccount, its namespace and, where a Pod object stands for it, its UID.
#[derive(Clone, Copy)]
pub struct Pod<'a> {
    pub kubeconfig: &'a Path,
    pub namespace: &'a str,
    pub uid: Option<&'a str>,
    /// Whom the requeue controller beside it runs as (`--requeue`): by default the
    /// requeue identity of `namespace`.
    pub requeue_kubeconfig: Option<&'a Path>,
}

pub struct Extender {
    /// `serve`.
    pub proc: Proc,
    /// The requeue controller beside it (`coloc-extender requeue`, as the requeue identity),
    /// where the flags ask for requeue: the two processes of one replica of the install.
    pub requeue: Option<RequeueController>,
    /// The verb port (`--listen`).
    pub port: u16,
    /// The health port (`--health-listen`): /healthz, /readyz.
    pub health_port: u16,
    /// The admin port (`--admin-listen`): /metrics, /decisions.
    pub admin_port: u16,
    health: kube::Client,
    admin: kube::Client,
}

/// The requeue controller of a replica: `coloc-extender requeue`, as its own identity.
pub struct RequeueController {
    pub proc: Proc,
    /// The admin port (`--admin-listen`): /metrics.
    pub admin_port: u16,
    health: kube::Client,
    admin: kube::Client,
}

/// Flags of the test bed's `Extender::start` that are the requeue controller's, not
/// `serve`'s: `--requeue` starts it (and tells `serve` to read its Lease);
/// `--requeue-finish-only` starts it with `--copies=false` (finishing what an earlier run
/// left) and `serve` without `--requeue`; `--requeue-stuck-after` and
/// `--requeue-unrecorded-after` are passed on to it without their prefix; `--policy` and
/// `--admin-auth` go to both.
fn split_requeue_flags(args: &[&str]) -> (Vec<String>, Option<Vec<String>>) {
    let wanted = args.iter().any(|a| matches!(*a, "--requeue" | "--requeue-finish-only"));
    let (mut serve, mut requeue) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match *a {
            "--requeue" => serve.push(a.to_string()),
            "--requeue-finish-only" => requeue.push("--copies=false".to_string()),
            "--requeue-stuck-after" | "--requeue-unrecorded-after" => {
                requeue.push(format!("--{}", &a["--requeue-".len()..]));
                requeue.extend(it.next().map(|v| v.to_string()));
            }
            "--policy" | "--admin-auth" => {
                let value = it.next().map(|v| v.to_string()).unwrap_or_default();
                serve.extend([a.to_string(), value.clone()]);
                requeue.extend([a.to_string(), value]);
            }
            other => serve.push(other.to_string()),
        }
    }
    (serve, wanted.then_some(requeue))
}

impl Extender {
    /// Starts `binary serve --listen … --health-listen … --admin-listen … <args>` as the
    /// extender's own user (`KUBECONFIG` = its kubeconfig), in the install namespace, and
    /// waits until `/readyz` answers 200; with `--requeue` in `args`, the requeue
    /// controller beside it too, as the requeue identity (`split_requeue_flags`).
    pub async fn start(plane: &ControlPlane, name: &str, binary: &Path, args: &[&str]) -> anyhow::Result<Extender> {
        let pod = Pod {
            kubeconfig: &plane.extender_kubeconfig,
            namespace: INSTALL_NAMESPACE,
            uid: None,
            requeue_kubeconfig: None,
        };
        Extender::start_in(plane, name, binary, args, pod).await
    }

    /// `start`, as a container of a pod running as another ServiceAccount, in another
    /// namespace (the downward API's `POD_NAMESPACE`).
    pub async fn start_in(
        plane: &ControlPlane,
        name: &str,
        binary: &Path,
        args: &[&str],
        pod: Pod<'_>,
    ) -> anyhow::Result<Extender> {
        let (serve_args, requeue_args) = split_requeue_flags(args);
        let requeue = match requeue_args {
            Some(flags) => {
                let own = plane.kubeconfig_of(pod.namespace, "coloc-extender-requeue");
                let kubeconfig = pod.requeue_kubeconfig.unwrap_or(&own);
                let identity = Pod { kubeconfig, ..pod };
                Some(RequeueController::start_in(plane, &format!("{name}-requeue"), binary, &flags, identity).await?)
            }
            None => None,
        };
        let port = free_port();
        let health_port = free_port();
        // Each its own: the default (127.0.0.1:8082) would collide between extenders.
        let admin_port = free_port();
        let mut all = strings(&[
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--health-listen",
            &format!("127.0.0.1:{health_port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin_port}"),
        ]);
        all.extend(serve_args);
        let mut env = pod_env(pod.kubeconfig, name, pod.namespace);
        env.extend(pod.uid.map(|uid| ("POD_UID".to_string(), uid.to_string())));
        let proc = Proc::spawn(name, binary, &all, &env, plane.dir())?;
        let mut e = Extender {
            proc,
            requeue,
            port,
            health_port,
            admin_port,
            health: plain_client(health_port)?,
            admin: plain_client(admin_port)?,
        };
        e.wait_ready(Duration::from_secs(60)).await?;
        Ok(e)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.proc.exited() {
                anyhow::bail!("{} exited ({status}):\n{}", self.proc.name, self.proc.log_tail(4000));
            }
            if self.get("/readyz").await.is_ok() {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!("{} not ready after {timeout:?}:\n{}", self.proc.name, self.proc.log_tail(4000));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILL, as a crash or an OOM kill would (its requeue controller too: the replica).
    pub fn kill(&mut self) {
        self.proc.kill();
        if let Some(r) = &mut self.requeue {
            r.proc.kill();
        }
    }

    /// Starts it again on the same ports and waits until ready.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(r) = &mut self.requeue {
            r.proc.restart()?;
            r.wait_ready(Duration::from_secs(60)).await?;
        }
        self.proc.restart()?;
        self.wait_ready(Duration::from_secs(60)).await
    }

    /// GET on the health port; an error for any status but 2xx.
    pub async fn get(&self, path: &str) -> anyhow::Result<String> {
        Ok(self.health.request_text(crate::control_plane::http_get(path)).await?)
    }

    /// GET on the admin port (`/metrics`, `/decisions`); an error for any status but 2xx.
    pub async fn admin_get(&self, path: &str) -> anyhow::Result<String> {
        Ok(self.admin.request_text(crate::control_plane::http_get(path)).await?)
    }

    /// One counter or gauge summed over its label sets, from `/metrics` (requeue's
    /// `coloc_requeue_*` from its controller, where one runs beside it).
    pub async fn metric_sum(&self, name: &str, label_filter: &str) -> anyhow::Result<f64> {
        match &self.requeue {
            Some(r) if name.starts_with("coloc_requeue_") => {
                Ok(metric_sum(&r.admin_get("/metrics").await?, name, label_filter))
            }
            _ => Ok(metric_sum(&self.admin_get("/metrics").await?, name, label_filter)),
        }
    }

    /// The log tails of the replica's processes.
    pub fn log_tails(&self, bytes: u64) -> String {
        let mut s = format!("--- {} (last {bytes} B) ---\n{}\n", self.proc.name, self.proc.log_tail(bytes));
        if let Some(r) = &self.requeue {
            s += &format!("--- {} (last {bytes} B) ---\n{}\n", r.proc.name, r.proc.log_tail(bytes));
        }
        s
    }
}

impl RequeueController {
    /// Starts `binary requeue --health-listen … --admin-listen … <flags>` as the requeue
    /// identity, in the install namespace, and waits until it is ready.
    pub async fn start(plane: &ControlPlane, name: &str, binary: &Path, flags: &[String]) -> anyhow::Result<Self> {
        let kubeconfig = plane.kubeconfig_of(INSTALL_NAMESPACE, "coloc-extender-requeue");
        let pod = Pod { kubeconfig: &kubeconfig, namespace: INSTALL_NAMESPACE, uid: None, requeue_kubeconfig: None };
        RequeueController::start_in(plane, name, binary, flags, pod).await
    }

    /// `start`, as `pod`'s identity, in its namespace.
    pub async fn start_in(
        plane: &ControlPlane,
        name: &str,
        binary: &Path,
        flags: &[String],
        pod: Pod<'_>,
    ) -> anyhow::Result<Self> {
        let health_port = free_port();
        let admin_port = free_port();
        let mut all = strings(&[
            "requeue",
            "--health-listen",
            &format!("127.0.0.1:{health_port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin_port}"),
        ]);
        all.extend(flags.iter().cloned());
        let proc = Proc::spawn(name, binary, &all, &pod_env(pod.kubeconfig, name, pod.namespace), plane.dir())?;
        let mut r = RequeueController {
            proc,
            admin_port,
            health: plain_client(health_port)?,
            admin: plain_client(admin_port)?,
        };
        r.wait_ready(Duration::from_secs(60)).await?;
        Ok(r)
    }

    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.proc.exited() {
                anyhow::bail!("{} exited ({status}):\n{}", self.proc.name, self.proc.log_tail(4000));
            }
            if self.health.request_text(crate::control_plane::http_get("/readyz")).await.is_ok() {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!("{} not ready after {timeout:?}:\n{}", self.proc.name, self.proc.log_tail(4000));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// GET on the admin port (`/metrics`); an error for any status but 2xx.
    pub async fn admin_get(&self, path: &str) -> anyhow::Result<String> {
        Ok(self.admin.request_text(crate::control_plane::http_get(path)).await?)
    }
}

/// What a pod gives the process standing in for its container: its ServiceAccount's
/// credentials, its name and namespace (the downward API).
fn pod_env(kubeconfig: &Path, name: &str, namespace: &str) -> Vec<(String, String)> {
    vec![
        ("KUBECONFIG".to_string(), kubeconfig.display().to_string()),
        ("RUST_LOG".to_string(), std::env::var("COLOC_E2E_LOG").unwrap_or_else(|_| "info".into())),
        ("POD_NAME".to_string(), name.to_string()),
        ("POD_NAMESPACE".to_string(), namespace.to_string()),
    ]
}

/// Sums the samples of `name` whose label text contains `label_filter` (Prometheus text).
pub fn metric_sum(text: &str, name: &str, label_filter: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.contains(label_filter)).then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}
