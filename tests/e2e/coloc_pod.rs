//! The default install as rendered (`kubectl kustomize`), and a pod of its coloc-scheduler
//! Deployment as the test bed runs one: no kubelet runs containers here, so each container
//! is a process started from the rendered pod template, as its ServiceAccount, in its
//! namespace: the extender with the container's flags, kube-scheduler with the container's
//! flags and the rendered KubeSchedulerConfiguration, which calls that extender on loopback.

use std::path::Path;

use coloc_testbed::extender::{Pod, RequeueController};
use coloc_testbed::{Extender, Scheduler};
use serde_json::Value;

use crate::bed::{repo, EXTENDER};
use crate::Bed;

/// `kubectl kustomize DIR`, one object per document.
pub fn render(bed: &Bed, dir: &Path) -> anyhow::Result<Vec<Value>> {
    let text = bed.plane.kubectl(&["kustomize", &dir.display().to_string()])?;
    let mut objects = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        if !v.is_null() {
            objects.push(v);
        }
    }
    Ok(objects)
}

/// The default install: `kubectl kustomize manifests`.
pub fn default_install(bed: &Bed) -> anyhow::Result<Vec<Value>> {
    render(bed, &repo("manifests"))
}

/// The default install with `components` of manifests/ enabled in an overlay, as the
/// README says to (`namespace` unset: the base's).
pub fn default_install_with(bed: &Bed, components: &[&str]) -> anyhow::Result<Vec<Value>> {
    let overlay = bed.plane.dir().join("overlay");
    std::fs::create_dir_all(&overlay)?;
    let up = relative_root(&overlay);
    let manifests = |c: &str| format!("{up}{}", repo(&format!("manifests/{c}")).display());
    let components: Vec<String> = components.iter().map(|c| manifests(c)).collect();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources: [{}]\ncomponents: [{}]\ntransformers: [{}, {}]\n",
            manifests(""),
            components.join(", "),
            manifests("install-namespace"),
            manifests("grants-owned"),
        ),
    )?;
    render(bed, &overlay)
}

/// `../` up to the root from `dir`, so that an absolute path of the repository reads as
/// relative (kustomize takes no absolute resource path).
pub fn relative_root(dir: &Path) -> String {
    let depth = dir.components().filter(|c| matches!(c, std::path::Component::Normal(_))).count();
    "../".repeat(depth).trim_end_matches('/').to_string()
}

/// `objects` but those of `kinds`.
pub fn without(objects: &[Value], kinds: &[&str]) -> Vec<Value> {
    objects.iter().filter(|o| !kinds.iter().any(|k| o["kind"] == *k)).cloned().collect()
}

pub fn find<'a>(objects: &'a [Value], kind: &str, name_prefix: &str) -> anyhow::Result<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"].as_str().is_some_and(|n| n.starts_with(name_prefix)))
        .ok_or_else(|| anyhow::anyhow!("the rendered manifests have no {kind} {name_prefix}"))
}

/// Applies `objects` as the admin (`kubectl apply -f`), in one file.
pub fn apply(bed: &Bed, objects: &[Value], name: &str) -> anyhow::Result<String> {
    let docs: Vec<String> = objects.iter().map(serde_yaml_ng::to_string).collect::<Result<_, _>>()?;
    let path = bed.plane.dir().join(format!("{name}.yaml"));
    std::fs::write(&path, docs.join("---\n"))?;
    bed.plane.apply(&path)
}

/// One pod of coloc-scheduler: its two containers as processes. Field order is drop
/// order: kube-scheduler before the extender it calls.
pub struct ColocPod {
    pub scheduler: Scheduler,
    pub extender: Extender,
}

/// What the rendered coloc-scheduler Deployment gives each of its pods.
pub struct Template {
    namespace: String,
    account: String,
    extender_args: Vec<String>,
    scheduler_flags: Vec<String>,
    /// The KubeSchedulerConfiguration, as the ConfigMap holds it.
    config: serde_yaml_ng::Value,
    /// The policy ConfigMap's policy.yaml.
    policy: String,
}

impl Template {
    /// From the rendered install's coloc-scheduler Deployment and ConfigMaps.
    pub fn of(objects: &[Value]) -> anyhow::Result<Template> {
        let d = find(objects, "Deployment", "coloc-scheduler")?;
        let namespace = d["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        let pod = &d["spec"]["template"]["spec"];
        let account = pod["serviceAccountName"].as_str().unwrap_or_default().to_string();
        let containers = pod["containers"].as_array().ok_or_else(|| anyhow::anyhow!("no containers in {d}"))?;
        let container = |name: &str| {
            containers
                .iter()
                .find(|c| c["name"] == name)
                .ok_or_else(|| anyhow::anyhow!("coloc-scheduler's pods have no container {name}"))
        };
        let words = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|w| w.replace("$(POD_NAMESPACE)", &namespace))
                .collect()
        };
        let map = find(objects, "ConfigMap", "coloc-scheduler-config")?;
        let text = map["data"]["config.yaml"].as_str().ok_or_else(|| anyhow::anyhow!("no config.yaml in {map}"))?;
        let policy = find(objects, "ConfigMap", "coloc-extender-policy")?["data"]["policy.yaml"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("no policy.yaml in the policy ConfigMap"))?
            .to_string();
        Ok(Template {
            extender_args: words(&container("coloc-extender")?["args"]),
            scheduler_flags: words(&container("kube-scheduler")?["command"]),
            config: serde_yaml_ng::from_str(text)?,
            policy,
            namespace,
            account,
        })
    }

    /// The extender container's flags, but those of the ports the test bed picks itself
    /// (each process its own), the admin port's token check (the test bed reads /metrics
    /// on loopback) and the policy file's path (`policy`, the ConfigMap's file).
    pub fn extender_flags(&self, policy: &Path) -> anyhow::Result<Vec<String>> {
        let mut flags = Vec::new();
        let mut args = self.extender_args.iter();
        anyhow::ensure!(args.next().map(String::as_str) == Some("serve"), "the extender container runs serve");
        while let Some(a) = args.next() {
            match a.as_str() {
                "--listen" | "--health-listen" => {
                    args.next();
                }
                "--policy" => {
                    args.next();
                    flags.extend(["--policy".to_string(), policy.display().to_string()]);
                }
                _ if a.starts_with("--admin-listen") || a.starts_with("--admin-auth") => {}
                _ => flags.push(a.clone()),
            }
        }
        Ok(flags)
    }

    /// The pod's ServiceAccount and namespace.
    pub fn identity(&self) -> (&str, &str) {
        (&self.namespace, &self.account)
    }

    /// The rendered KubeSchedulerConfiguration, pointed at `extender` (its verb port in
    /// place of the container's, the path kept), run as the pod's ServiceAccount
    /// (`kubeconfig`), in this case's mode; nothing else changed.
    fn scheduler_config(&self, kubeconfig: &Path, extender: &Extender, names: bool) -> anyhow::Result<String> {
        let mut config = self.config.clone();
        config["clientConnection"]["kubeconfig"] = kubeconfig.display().to_string().into();
        let extenders =
            config["extenders"].as_sequence_mut().ok_or_else(|| anyhow::anyhow!("no extenders in the config"))?;
        anyhow::ensure!(extenders.len() == 1, "one extender registration, not {}", extenders.len());
        let e = &mut extenders[0];
        let url = e["urlPrefix"].as_str().unwrap_or_default();
        let path = url
            .strip_prefix("http://127.0.0.1:")
            .and_then(|rest| rest.split_once('/'))
            .map(|(_, path)| path)
            .ok_or_else(|| anyhow::anyhow!("the registration is not plain HTTP on loopback: {url}"))?;
        e["urlPrefix"] = format!("{}/{path}", extender.url()).into();
        e["nodeCacheCapable"] = names.into();
        Ok(serde_yaml_ng::to_string(&config)?)
    }
}

/// Is `p` a pod of the install's Deployment `name` (its `app.kubernetes.io/name`)?
pub fn of_deployment(p: &k8s_openapi::api::core::v1::Pod, name: &str) -> bool {
    p.metadata.labels.as_ref().and_then(|l| l.get("app.kubernetes.io/name")).map(String::as_str) == Some(name)
}

/// A pod of the rendered coloc-requeue Deployment (the requeue component): its container as
/// a process, as the requeue identity, with the container's flags but the ports the test
/// bed picks and the admin port's token check, and the policy ConfigMap's file.
pub async fn start_requeue_pod(bed: &Bed, objects: &[Value], name: &str) -> anyhow::Result<RequeueController> {
    let d = find(objects, "Deployment", "coloc-requeue")?;
    let container = &d["spec"]["template"]["spec"]["containers"][0];
    let policy = bed.plane.dir().join(format!("{name}-policy.yaml"));
    let text = find(objects, "ConfigMap", "coloc-extender-policy")?["data"]["policy.yaml"].as_str().unwrap_or_default();
    std::fs::write(&policy, text)?;
    let mut flags = Vec::new();
    let mut args = container["args"].as_array().into_iter().flatten().filter_map(Value::as_str);
    anyhow::ensure!(args.next() == Some("requeue"), "coloc-requeue's container runs requeue");
    while let Some(a) = args.next() {
        match a {
            "--health-listen" => {
                args.next();
            }
            "--policy" => {
                args.next();
                flags.extend(["--policy".to_string(), policy.display().to_string()]);
            }
            _ if a.starts_with("--admin-listen") || a.starts_with("--admin-auth") => {}
            _ => flags.push(a.to_string()),
        }
    }
    RequeueController::start(&bed.plane, name, Path::new(EXTENDER), &flags).await
}

/// The UID of the Pod object `namespace/name` these processes stand for: the Deployment's
/// pod where the case applied the Deployment, else one made to stand for it (unscheduled:
/// what the extender publishes is owned by it, and goes when it is deleted).
pub async fn pod_object(bed: &Bed, namespace: &str, name: &str) -> anyhow::Result<String> {
    use k8s_openapi::api::core::v1::Pod as PodObject;
    let pods: kube::Api<PodObject> = kube::Api::namespaced(bed.client.clone(), namespace);
    let pod = match pods.get_opt(name).await? {
        Some(p) => p,
        None => {
            let stand_in: PodObject = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": namespace,
                    "labels": {"app.kubernetes.io/name": "coloc-scheduler", "app.kubernetes.io/part-of": "coloc-extender"}},
                "spec": {"schedulerName": "no-scheduler", "containers": [{"name": "stand-in", "image": "stand-in"}]},
            }))?;
            pods.create(&Default::default(), &stand_in).await?
        }
    };
    pod.metadata.uid.ok_or_else(|| anyhow::anyhow!("pod {namespace}/{name} has no UID"))
}

impl ColocPod {
    /// Starts pod `name`'s containers, the extender first (ready) then kube-scheduler
    /// (ready), each with `extra` flags after the rendered ones.
    pub async fn start(
        bed: &Bed,
        template: &Template,
        name: &str,
        extender_extra: &[&str],
    ) -> anyhow::Result<ColocPod> {
        let (namespace, account) = template.identity();
        let kubeconfig = bed.plane.kubeconfig_of(namespace, account);
        let policy = bed.plane.dir().join(format!("{name}-policy.yaml"));
        std::fs::write(&policy, &template.policy)?;
        let mut args = template.extender_flags(&policy)?;
        // The pod's name, as the downward API gives it (the process is named otherwise).
        args.extend(["--pod-name".to_string(), name.to_string()]);
        args.extend(extender_extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let uid = pod_object(bed, namespace, name).await?;
        let pod = Pod { kubeconfig: &kubeconfig, namespace, uid: Some(&uid), requeue_kubeconfig: None };
        let extender =
            Extender::start_in(&bed.plane, &format!("{name}-extender"), Path::new(EXTENDER), &args, pod).await?;
        let config = template.scheduler_config(&kubeconfig, &extender, bed.mode.node_cache_capable())?;
        let flags: Vec<&str> = template
            .scheduler_flags
            .iter()
            .skip(1)
            .filter(|f| !f.starts_with("--config"))
            .map(String::as_str)
            .collect();
        let scheduler = Scheduler::start_configured(&bed.plane, &format!("{name}-scheduler"), config, &flags).await?;
        Ok(ColocPod { scheduler, extender })
    }

    /// SIGKILL to both containers, as a node lost or a pod deleted.
    pub fn kill(&mut self) {
        self.scheduler.proc.kill();
        self.extender.kill();
    }

    /// Both containers again, as the kubelet starts them in a new pod: the extender
    /// first, then kube-scheduler; each ready.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.extender.restart().await?;
        self.scheduler.restart().await
    }

    /// The last lines of both containers' logs.
    pub fn logs(&self) -> String {
        format!(
            "--- {} (last 3 KB) ---\n{}\n--- {} (last 3 KB) ---\n{}\n",
            self.extender.proc.name,
            self.extender.proc.log_tail(3000),
            self.scheduler.proc.name,
            self.scheduler.proc.log_tail(3000)
        )
    }
}
