//! The extender under test (or any extender binary) as a process of the test bed.

use std::path::Path;
use std::time::Duration;

use crate::control_plane::{plain_client, strings, INSTALL_NAMESPACE};
use crate::ports::free_port;
use crate::process::Proc;
use crate::ControlPlane;

/// What a pod gives the process standing in for its container: the credentials of its
/// ServiceAccount and its namespace.
#[derive(Clone, Copy)]
pub struct Pod<'a> {
    pub kubeconfig: &'a Path,
    pub namespace: &'a str,
}

pub struct Extender {
    pub proc: Proc,
    /// The verb port (`--listen`).
    pub port: u16,
    /// The health port (`--health-listen`): /healthz, /readyz.
    pub health_port: u16,
    /// The admin port (`--admin-listen`): /metrics, /decisions.
    pub admin_port: u16,
    health: kube::Client,
    admin: kube::Client,
}

impl Extender {
    /// Starts `binary serve --listen … --health-listen … --admin-listen … <args>` as the
    /// extender's own user (`KUBECONFIG` = its kubeconfig), in the install namespace, and
    /// waits until `/readyz` answers 200.
    pub async fn start(plane: &ControlPlane, name: &str, binary: &Path, args: &[&str]) -> anyhow::Result<Extender> {
        let pod = Pod { kubeconfig: &plane.extender_kubeconfig, namespace: INSTALL_NAMESPACE };
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
        all.extend(args.iter().map(|a| a.to_string()));
        let env = [
            ("KUBECONFIG".to_string(), pod.kubeconfig.display().to_string()),
            ("RUST_LOG".to_string(), std::env::var("COLOC_E2E_LOG").unwrap_or_else(|_| "info".into())),
            // What the shipped Deployment gives each replica (the downward API).
            ("POD_NAME".to_string(), name.to_string()),
            ("POD_NAMESPACE".to_string(), pod.namespace.to_string()),
        ];
        let proc = Proc::spawn(name, binary, &all, &env, plane.dir())?;
        let mut e = Extender {
            proc,
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

    /// SIGKILL, as a crash or an OOM kill would.
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// Starts it again on the same ports and waits until ready.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
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

    /// One counter or gauge summed over its label sets, from `/metrics`.
    pub async fn metric_sum(&self, name: &str, label_filter: &str) -> anyhow::Result<f64> {
        Ok(metric_sum(&self.admin_get("/metrics").await?, name, label_filter))
    }
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
