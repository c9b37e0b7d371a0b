//! A real Prometheus server (Debian's package) configured as the Prometheus Operator would
//! configure it from the shipped PodMonitors and PrometheusRule, with static loopback
//! targets instead of pod discovery, and read through its HTTP API.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use coloc_testbed::control_plane::{http_get, plain_client, strings};
use coloc_testbed::ports::free_port;
use coloc_testbed::prepared::repo;
use coloc_testbed::process::Proc;
use serde_json::{json, Value};

/// Where the server is: `PROMETHEUS`, else Debian's; or why the case cannot run.
pub fn binary() -> Result<PathBuf, String> {
    let path = std::env::var_os("PROMETHEUS").map(PathBuf::from).unwrap_or_else(|| "/usr/bin/prometheus".into());
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("no {} (Debian's prometheus package; PROMETHEUS names another)", path.display()))
    }
}

/// A scrape job as the operator makes one of a PodMonitor's first endpoint.
#[derive(Debug)]
pub struct Job {
    /// `<namespace>/<PodMonitor name>`: the operator's `job` label.
    pub name: String,
    /// The container port's name the endpoint scrapes.
    pub port: String,
    pub path: String,
    pub scheme: String,
    pub insecure_skip_verify: bool,
    /// `authorization.type`.
    pub auth_type: String,
    /// (namespace, name) of the ServiceAccount whose token the credentials Secret holds.
    pub account: (String, String),
}

fn yaml_docs(rel: &str) -> anyhow::Result<Vec<Value>> {
    let text = std::fs::read_to_string(repo(rel))?;
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

fn text<'a>(v: &'a Value, what: &str) -> anyhow::Result<&'a str> {
    v.as_str().ok_or_else(|| anyhow::anyhow!("no {what}"))
}

/// The job of the PodMonitor in `monitor` (a file of manifests/monitoring), whose
/// credentials Secret is among `rbac`'s objects.
pub fn job(monitor: &str, rbac: &str) -> anyhow::Result<Job> {
    let m = yaml_docs(&format!("manifests/monitoring/{monitor}"))?.remove(0);
    anyhow::ensure!(m["kind"] == "PodMonitor", "{monitor} is no PodMonitor");
    let namespace = text(&m["metadata"]["namespace"], "namespace")?;
    let e = &m["spec"]["podMetricsEndpoints"][0];
    let auth = &e["authorization"];
    let secret_name = text(&auth["credentials"]["name"], "authorization.credentials.name")?;
    anyhow::ensure!(text(&auth["credentials"]["key"], "the Secret's key")? == "token", "{monitor}: key");
    let objects = yaml_docs(&format!("manifests/monitoring/{rbac}"))?;
    let secret = objects
        .iter()
        .find(|o| {
            o["kind"] == "Secret" && o["metadata"]["name"] == secret_name && o["metadata"]["namespace"] == namespace
        })
        .ok_or_else(|| anyhow::anyhow!("{rbac} has no Secret {namespace}/{secret_name}"))?;
    anyhow::ensure!(secret["type"] == "kubernetes.io/service-account-token", "{secret}");
    let account = text(&secret["metadata"]["annotations"]["kubernetes.io/service-account.name"], "account")?;
    Ok(Job {
        name: format!("{namespace}/{}", text(&m["metadata"]["name"], "name")?),
        port: text(&e["port"], "port")?.to_string(),
        path: text(&e["path"], "path")?.to_string(),
        scheme: e["scheme"].as_str().unwrap_or("http").to_string(),
        insecure_skip_verify: e["tlsConfig"]["insecureSkipVerify"].as_bool().unwrap_or(false),
        auth_type: text(&auth["type"], "authorization.type")?.to_string(),
        account: (namespace.to_string(), account.to_string()),
    })
}

/// The shipped PrometheusRule's groups as a Prometheus rules file.
fn rules() -> anyhow::Result<Value> {
    let rule = yaml_docs("manifests/monitoring/prometheusrule.yaml")?.remove(0);
    Ok(json!({ "groups": rule["spec"]["groups"] }))
}

pub struct Prometheus {
    pub proc: Proc,
    client: kube::Client,
}

impl Prometheus {
    /// Scrapes each job at its target (`host:port`) with the token in its file, every
    /// second, and evaluates the shipped rules every second; returns once it is ready.
    pub async fn start(bin: &Path, dir: &Path, jobs: &[(Job, String, PathBuf)]) -> anyhow::Result<Prometheus> {
        let scrape_configs: Vec<Value> = jobs
            .iter()
            .map(|(job, target, token)| {
                let mut c = json!({
                    "job_name": job.name,
                    "metrics_path": job.path,
                    "scheme": job.scheme,
                    "authorization": { "type": job.auth_type, "credentials_file": token },
                    "static_configs": [{ "targets": [target] }],
                });
                if job.scheme == "https" {
                    c["tls_config"] = json!({ "insecure_skip_verify": job.insecure_skip_verify });
                }
                c
            })
            .collect();
        let config = json!({
            "global": { "scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s" },
            "rule_files": [dir.join("prometheus-rules.yaml")],
            "scrape_configs": scrape_configs,
        });
        std::fs::write(dir.join("prometheus-rules.yaml"), serde_yaml_ng::to_string(&rules()?)?)?;
        std::fs::write(dir.join("prometheus.yaml"), serde_yaml_ng::to_string(&config)?)?;
        let port = free_port();
        let arg = |p: PathBuf| p.display().to_string();
        let proc = Proc::spawn(
            "prometheus",
            bin,
            &strings(&[
                "--config.file",
                &arg(dir.join("prometheus.yaml")),
                "--storage.tsdb.path",
                &arg(dir.join("prometheus-data")),
                "--web.listen-address",
                &format!("127.0.0.1:{port}"),
            ]),
            &[],
            dir,
        )?;
        let mut p = Prometheus { proc, client: plain_client(port)? };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = p.proc.exited() {
                anyhow::bail!("prometheus exited ({status}):\n{}", p.proc.log_tail(4000));
            }
            if p.client.request_text(http_get("/-/ready")).await.is_ok() {
                return Ok(p);
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!("prometheus not ready:\n{}", p.proc.log_tail(4000));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The `data` of an API answer.
    async fn api(&self, path: &str) -> Result<Value, String> {
        let text = self.client.request_text(http_get(path)).await.map_err(|e| format!("GET {path}: {e}"))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("GET {path}: {e}: {text}"))?;
        if v["status"] != "success" {
            return Err(format!("GET {path}: {text}"));
        }
        Ok(v["data"].clone())
    }

    /// Each scrape target's job → (health, lastError).
    pub async fn targets(&self) -> Result<BTreeMap<String, (String, String)>, String> {
        let data = self.api("/api/v1/targets").await?;
        Ok(data["activeTargets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                let job = t["labels"]["job"].as_str().unwrap_or_default().to_string();
                let health = t["health"].as_str().unwrap_or_default().to_string();
                (job, (health, t["lastError"].as_str().unwrap_or_default().to_string()))
            })
            .collect())
    }

    /// Every alert pending or firing: alertname → state.
    pub async fn alerts(&self) -> Result<BTreeMap<String, String>, String> {
        let data = self.api("/api/v1/alerts").await?;
        Ok(data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let name = a["labels"]["alertname"].as_str().unwrap_or_default().to_string();
                (name, a["state"].as_str().unwrap_or_default().to_string())
            })
            .collect())
    }

    /// Every alerting rule loaded: name → (state, health).
    pub async fn rules(&self) -> Result<BTreeMap<String, (String, String)>, String> {
        let data = self.api("/api/v1/rules?type=alert").await?;
        Ok(data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .map(|r| {
                let name = r["name"].as_str().unwrap_or_default().to_string();
                let state = r["state"].as_str().unwrap_or_default().to_string();
                (name, (state, r["health"].as_str().unwrap_or_default().to_string()))
            })
            .collect())
    }

    /// The latest sample of each series of `metric` (a bare name: no escaping needed):
    /// (labels, value).
    pub async fn series(&self, metric: &str) -> Result<Vec<(BTreeMap<String, String>, f64)>, String> {
        let data = self.api(&format!("/api/v1/query?query={metric}")).await?;
        Ok(data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                let labels = s["metric"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                let value = s["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
                (labels, value)
            })
            .collect())
    }
}
