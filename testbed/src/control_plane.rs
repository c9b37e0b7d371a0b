//! etcd, kube-apiserver and kube-controller-manager on loopback.
//!
//! What had to be turned off, found by trying on machines without a kubelet:
//! - admission `ServiceAccount`: it wants a `default` ServiceAccount in every namespace
//!   (made by a controller we do not run) and token volumes nobody mounts;
//! - admission `TaintNodesByCondition`: it taints every new Node `not-ready`, and only a
//!   node-lifecycle controller fed by kubelet heartbeats would remove the taint;
//! - the endpoint reconciler: it refuses the loopback advertise address.
//!
//! Authentication is by static tokens: an admin (`system:masters`) for the harness,
//! kube-scheduler and kube-controller-manager, and the install's ServiceAccount names (in
//! its namespace, and in kube-system for an earlier release's install), so the shipped
//! ClusterRoles and bindings (`manifests/`) apply to them as in a cluster, with RBAC
//! authorization.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;

use crate::ports::{free_port, TempDir};
use crate::process::Proc;
use crate::{pki, Binaries};

/// What the API server says of a grant of the install made while the policy that gives it
/// its owner is not in effect yet (manifests/grants).
pub const GRANT_UNOWNED: &str = "metadata.ownerReferences.uid";

/// The install's namespace, as manifests/ name it.
pub const INSTALL_NAMESPACE: &str = "coloc-system";
/// Where an earlier release installed itself: its identities authenticate too.
pub const EARLIER_NAMESPACE: &str = "kube-system";
/// The ServiceAccounts pods of the install run as, each with a token in both namespaces:
/// the standalone extender, the uninstall Job, coloc-scheduler (whose pods run the
/// extender beside kube-scheduler) and the requeue controller.
pub const ACCOUNTS: [&str; 4] =
    ["coloc-extender", "coloc-extender-uninstall", "coloc-scheduler", "coloc-extender-requeue"];

/// The user a ServiceAccount authenticates as.
pub fn service_account(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// kube-controller-manager's controllers: the workload controllers whose behaviour the
/// extender relies on (recreating victims, Job failure accounting, PDB status), and the
/// namespace controller (a deleted namespace must finish whatever the extender left).
pub const CONTROLLERS: &[&str] = &[
    "namespace-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    "job-controller",
    "cronjob-controller",
    "disruption-controller",
    "garbage-collector-controller",
];

pub struct ControlPlane {
    pub bins: Binaries,
    // Field order is drop order: processes stop before their directory goes.
    pub controller_manager: Option<Proc>,
    pub apiserver: Proc,
    pub etcd: Proc,
    pub api_port: u16,
    pub admin_kubeconfig: PathBuf,
    /// The standalone extender's ServiceAccount, coloc-extender (of the install namespace).
    pub extender_kubeconfig: PathBuf,
    pub uninstall_kubeconfig: PathBuf,
    /// coloc-scheduler's ServiceAccount: its kube-scheduler's, and the extender's beside it.
    pub scheduler_kubeconfig: PathBuf,
    dir: TempDir,
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Start kube-controller-manager with [`CONTROLLERS`].
    pub controllers: bool,
    /// Extra kube-apiserver flags (e.g. a short watch cache for 410 tests).
    pub apiserver_args: Vec<String>,
    /// Keep admission `ServiceAccount` on, as in a real cluster: every namespace a pod is
    /// created in then needs its `default` ServiceAccount, which the case makes (no
    /// controller here does).
    pub service_account_admission: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { controllers: true, apiserver_args: Vec::new(), service_account_admission: false }
    }
}

impl ControlPlane {
    pub async fn start(bins: &Binaries, opts: Options) -> anyhow::Result<ControlPlane> {
        let dir = TempDir::new("coloc-testbed")?;
        let d = dir.path();
        let pki = pki::write(d)?;
        let mut tokens = "admin-token,testbed-admin,1,\"system:masters\"\n".to_string();
        for (i, (namespace, account)) in accounts().enumerate() {
            let user = service_account(namespace, account);
            tokens += &format!(
                "{},{user},{},\"system:serviceaccounts,system:serviceaccounts:{namespace}\"\n",
                token(namespace, account),
                i + 2
            );
        }
        std::fs::write(d.join("tokens.csv"), tokens)?;
        let etcd_port = free_port();
        let peer_port = free_port();
        let etcd = Proc::spawn(
            "etcd",
            &bins.etcd,
            &strings(&[
                "--data-dir",
                &d.join("etcd").display().to_string(),
                "--listen-client-urls",
                &format!("http://127.0.0.1:{etcd_port}"),
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{etcd_port}"),
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer_port}"),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer_port}"),
                "--initial-cluster",
                &format!("default=http://127.0.0.1:{peer_port}"),
                "--log-level",
                "warn",
            ]),
            &[],
            d,
        )?;
        let api_port = free_port();
        let mut args = strings(&[
            "--etcd-servers",
            &format!("http://127.0.0.1:{etcd_port}"),
            "--bind-address",
            "127.0.0.1",
            "--advertise-address",
            "127.0.0.1",
            "--secure-port",
            &api_port.to_string(),
            "--cert-dir",
            &d.join("apiserver-certs").display().to_string(),
            "--tls-cert-file",
            &pki.serving_cert.display().to_string(),
            "--tls-private-key-file",
            &pki.serving_key.display().to_string(),
            "--token-auth-file",
            &d.join("tokens.csv").display().to_string(),
            "--authorization-mode",
            "RBAC",
            "--service-account-issuer",
            "https://kubernetes.default.svc",
            "--service-account-key-file",
            &pki.service_account_pub.display().to_string(),
            "--service-account-signing-key-file",
            &pki.service_account_key.display().to_string(),
            "--service-cluster-ip-range",
            "10.0.0.0/24",
            "--disable-admission-plugins",
            if opts.service_account_admission {
                "TaintNodesByCondition"
            } else {
                "ServiceAccount,TaintNodesByCondition"
            },
            "--endpoint-reconciler-type",
            "none",
            "--allow-privileged=true",
            "--max-requests-inflight",
            "3000",
            "--max-mutating-requests-inflight",
            "1000",
            "-v",
            "1",
        ]);
        args.extend(opts.apiserver_args.iter().cloned());
        let apiserver = Proc::spawn("kube-apiserver", &bins.kube_apiserver, &args, &[], d)?;
        let admin_kubeconfig = d.join("admin.kubeconfig");
        std::fs::write(&admin_kubeconfig, kubeconfig(api_port, &pki.ca_cert, "admin-token"))?;
        for (namespace, account) in accounts() {
            let text = kubeconfig(api_port, &pki.ca_cert, &token(namespace, account));
            std::fs::write(kubeconfig_path(d, namespace, account), text)?;
        }
        let extender_kubeconfig = kubeconfig_path(d, INSTALL_NAMESPACE, "coloc-extender");
        let uninstall_kubeconfig = kubeconfig_path(d, INSTALL_NAMESPACE, "coloc-extender-uninstall");
        let scheduler_kubeconfig = kubeconfig_path(d, INSTALL_NAMESPACE, "coloc-scheduler");
        let mut plane = ControlPlane {
            bins: bins.clone(),
            controller_manager: None,
            apiserver,
            etcd,
            api_port,
            admin_kubeconfig,
            extender_kubeconfig,
            uninstall_kubeconfig,
            scheduler_kubeconfig,
            dir,
        };
        plane.wait_ready(Duration::from_secs(90)).await?;
        if opts.controllers {
            let kcm = Proc::spawn(
                "kube-controller-manager",
                &bins.kube_controller_manager,
                &strings(&[
                    "--kubeconfig",
                    &plane.admin_kubeconfig.display().to_string(),
                    "--controllers",
                    &CONTROLLERS.join(","),
                    "--leader-elect=false",
                    "--secure-port",
                    "0",
                    "--use-service-account-credentials=false",
                    "--kube-api-qps",
                    "1000",
                    "--kube-api-burst",
                    "2000",
                    "-v",
                    "1",
                ]),
                &[],
                plane.dir.path(),
            )?;
            plane.controller_manager = Some(kcm);
        }
        Ok(plane)
    }

    /// The serving certificate and key (127.0.0.1, localhost; signed by the test bed CA).
    pub fn serving_pair(&self) -> (PathBuf, PathBuf) {
        (self.dir().join("apiserver.crt"), self.dir().join("apiserver.key"))
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The kubeconfig of ServiceAccount `namespace/account` (one of [`ACCOUNTS`], in the
    /// install's namespace or an earlier release's).
    pub fn kubeconfig_of(&self, namespace: &str, account: &str) -> PathBuf {
        let path = kubeconfig_path(self.dir(), namespace, account);
        assert!(path.is_file(), "no token for {namespace}/{account}: see ACCOUNTS");
        path
    }

    /// A client with admin rights.
    pub async fn client(&self) -> anyhow::Result<Client> {
        client_from(&self.admin_kubeconfig).await
    }

    /// Waits for kube-apiserver's `/readyz`, failing early with its log if it exited.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let client = self.client().await?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.apiserver.exited() {
                anyhow::bail!("kube-apiserver exited ({status}):\n{}", self.apiserver.log_tail(4000));
            }
            let req = http_get("/readyz");
            if let Ok(body) = client.request_text(req).await {
                if body.trim() == "ok" {
                    return Ok(());
                }
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!("kube-apiserver not ready after {timeout:?}:\n{}", self.apiserver.log_tail(4000));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills kube-apiserver and starts it again on the same port and etcd: every client's
    /// connections and watches break, as in a control-plane upgrade.
    pub async fn restart_apiserver(&mut self) -> anyhow::Result<()> {
        self.apiserver.restart()?;
        self.wait_ready(Duration::from_secs(90)).await
    }

    /// Runs kubectl as the admin; fails with its stderr. Retried for a few seconds while
    /// the API server says it is "currently unable to handle the request" (its OpenAPI
    /// documents lag `/readyz` right after a start).
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        for attempt in 0.. {
            let out = std::process::Command::new(&self.bins.kubectl)
                .arg("--kubeconfig")
                .arg(&self.admin_kubeconfig)
                .args(args)
                .output()?;
            if out.status.success() {
                return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
            }
            let err = String::from_utf8_lossy(&out.stderr);
            if attempt < 40 && err.contains("unable to handle the request") {
                std::thread::sleep(Duration::from_millis(250));
                continue;
            }
            // The install's grants are refused until its grants policy, applied in the
            // same run, is in effect (a second at most): applied again, as the docs say.
            if attempt < 40 && args.first() == Some(&"apply") && err.contains(GRANT_UNOWNED) {
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
            anyhow::bail!("kubectl {}: {err}", args.join(" "));
        }
        unreachable!("the loop returns")
    }

    /// Applies a manifest file or directory as the admin (`kubectl apply -f`). Without
    /// kubectl's client-side schema check: the v1.36.2 binaries built here answer the
    /// protobuf `/openapi/v2` it fetches with 503. The API server still validates.
    pub fn apply(&self, path: &Path) -> anyhow::Result<String> {
        self.kubectl(&["apply", "--validate=false", "-f", &path.display().to_string()])
    }
}

/// An HTTPS client for another component's secure port (kube-scheduler's), which serves
/// the test bed's certificate: no credentials, for the always-allowed paths.
pub async fn component_client(plane: &ControlPlane, port: u16) -> anyhow::Result<Client> {
    let ca = plane.dir().join("ca.crt");
    let text = kubeconfig(port, &ca, "").replace("    token: \n", "    {}\n");
    let kc = Kubeconfig::from_yaml(&text)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// A client for a plain-HTTP endpoint (the extender's ports).
pub fn plain_client(port: u16) -> anyhow::Result<Client> {
    Ok(Client::try_from(kube::Config::new(format!("http://127.0.0.1:{port}").parse()?))?)
}

pub async fn client_from(kubeconfig: &Path) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

pub fn http_get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).expect("a GET with a static path")
}

fn kubeconfig(port: u16, ca: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority: {}\nusers:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: user\ncurrent-context: local\n",
        ca.display()
    )
}

/// Every (namespace, ServiceAccount) with a token.
fn accounts() -> impl Iterator<Item = (&'static str, &'static str)> {
    [INSTALL_NAMESPACE, EARLIER_NAMESPACE].into_iter().flat_map(|ns| ACCOUNTS.into_iter().map(move |a| (ns, a)))
}

fn token(namespace: &str, account: &str) -> String {
    format!("{namespace}-{account}-token")
}

fn kubeconfig_path(dir: &Path, namespace: &str, account: &str) -> PathBuf {
    dir.join(format!("{namespace}-{account}.kubeconfig"))
}

pub fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}
