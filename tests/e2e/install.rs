//! The README's install path, run as written on the test bed: in a copy of manifests/,
//! requeue turned on and the policy set to enforce (its "Try it safely, then enforce"),
//! `kubectl apply -k`, no certificate and no Secret made or found, `rollout status`,
//! namespaces labelled; then a routed pod placed through the extender, a storm whose bare
//! victims come back, and the removal of docs/deploy.md §8 (routing off, coloc-scheduler
//! scaled to 0, the uninstall Job, `kubectl delete -k`), after which nothing of the install
//! is left.
//!
//! The test bed runs no containers: the Deployment's pods are placed and marked Running,
//! and their containers are processes started from the rendered pod template; the
//! uninstall Job's container is the uninstall command, run as the Job's ServiceAccount
//! with the Job's flags.

use std::path::Path;

use coloc_testbed::cluster;
use coloc_testbed::control_plane::INSTALL_NAMESPACE;
use coloc_testbed::{kubelet, Binaries};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use crate::apart::{
    copies_placed, full_pool, in_pool, online_placed_by_coloc_scheduler, routed_pod_placed, system_nodes,
};
use crate::bed::{repo, EXTENDER};
use crate::coloc_pod::{find, of_deployment, render, start_requeue_pod, ColocPod, Template};
use crate::invariants::{gated, nothing_lost};
use crate::own_scheduler::{scheduler_name, until_routing_applies, GOVERNED};
use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "install_the_readme_path_with_no_certificate_places_routed_pods_brings_victims_back_and_uninstalls_to_nothing",
        run: |b, m| Box::pin(readme_path(b, m)),
    }]
}

/// The labels the install's objects carry, the uninstall Job's included.
const OURS: &str = "app.kubernetes.io/name in (coloc-extender,coloc-scheduler,coloc-requeue,coloc-extender-uninstall,coloc-extender-mark-writer)";

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        let target = to.join(path.file_name().unwrap_or_default());
        if path.is_dir() {
            copy_dir(&path, &target)?;
        } else {
            std::fs::copy(&path, &target)?;
        }
    }
    Ok(())
}

/// A copy of manifests/ edited as the README says: the requeue component uncommented in
/// its kustomization.yaml, `mode: enforce` in its policy.yaml.
fn edited_manifests(bed: &Bed) -> anyhow::Result<std::path::PathBuf> {
    let dir = bed.plane.dir().join("manifests");
    copy_dir(&repo("manifests"), &dir)?;
    let edit = |file: &str, from: &str, to: &str| -> anyhow::Result<()> {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path)?;
        anyhow::ensure!(text.matches(from).count() == 1, "{file} has no single {from:?}");
        std::fs::write(&path, text.replacen(from, to, 1))?;
        Ok(())
    };
    edit("kustomization.yaml", "  # - requeue\n", "  - requeue\n")?;
    edit("policy.yaml", "\nmode: shadow\n", "\nmode: enforce\n")?;
    Ok(dir)
}

/// `kubectl get KINDS -A -l OURS -o name`: what of the install is left.
fn left(bed: &Bed, kinds: &str) -> anyhow::Result<Vec<String>> {
    let out = bed.plane.kubectl(&["get", kinds, "-A", "-l", OURS, "-o", "name"])?;
    Ok(out.lines().map(str::to_string).collect())
}

async fn readme_path(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up_without_install(bins, mode, kubelet::Options::default()).await?;
    system_nodes(&bed, &["system-1", "system-2"]).await?;
    bed.schedule_with(&[]).await?;
    // Workloads that ran before the install: bare pods of batch (not routed: the default
    // scheduler's), their nodes full.
    let originals = full_pool(&bed, 4).await?;

    let manifests = edited_manifests(&bed)?;
    let objects = render(&bed, &manifests)?;
    for kind in ["Secret", "Service", "Certificate"] {
        anyhow::ensure!(!objects.iter().any(|o| o["kind"] == kind), "the install ships a {kind}");
    }
    bed.plane.kubectl(&["apply", "--validate=false", "-k", &manifests.display().to_string()])?;
    let secrets = bed.plane.kubectl(&["-n", INSTALL_NAMESPACE, "get", "secrets", "-o", "name"])?;
    anyhow::ensure!(secrets.trim().is_empty(), "Secrets in {INSTALL_NAMESPACE}: {secrets}");
    bed.plane.kubectl(&["-n", INSTALL_NAMESPACE, "rollout", "status", "deploy/coloc-scheduler", "--timeout=60s"])?;
    for ns in ["online", "batch"] {
        bed.plane.kubectl(&["label", "namespace", ns, &format!("{}={}", GOVERNED.0, GOVERNED.1)])?;
    }
    bed.plane.kubectl(&["-n", INSTALL_NAMESPACE, "rollout", "status", "deploy/coloc-requeue", "--timeout=60s"])?;

    // The containers of coloc-scheduler's and coloc-requeue's pods, as the rendered
    // templates run them (the policy file says enforce).
    let template = Template::of(&objects)?;
    let pods = cluster::pods(&bed.client, Some(INSTALL_NAMESPACE)).await?;
    for p in pods.iter().filter(|p| cluster::node_of(p).is_some()) {
        if of_deployment(p, "coloc-scheduler") {
            let pod = ColocPod::start(&bed, &template, cluster::name(p), &[]).await?;
            bed.coloc.push(pod);
        } else if of_deployment(p, "coloc-requeue") {
            bed.requeue.push(start_requeue_pod(&bed, &objects, cluster::name(p)).await?);
        }
    }
    anyhow::ensure!(bed.coloc.len() == 2, "{} pods of coloc-scheduler placed", bed.coloc.len());
    anyhow::ensure!(bed.requeue.len() == 2, "{} pods of coloc-requeue placed", bed.requeue.len());
    // Routed once coloc-scheduler runs (it publishes the policy's classes).
    until_routing_applies(&bed, "online").await?;

    // A routed pod, placed through the extender.
    routed_pod_placed(&bed, "web-1").await?;
    let mut asked = 0.0;
    for pod in &bed.coloc {
        asked += pod.extender.metric_sum("coloc_requests_total", "verb=\"preempt\"").await?;
    }
    anyhow::ensure!(asked >= 1.0, "web-1 placed without the extender");
    // A storm: three at once, each needing a full node.
    let storm = ["web-2", "web-3", "web-4"];
    let pods: Vec<Pod> =
        storm.iter().map(|w| in_pool(cluster::PodBuilder::new("online", w, "online-prod", 2000))).collect();
    cluster::create_all(&bed.client, pods).await?;
    for web in storm {
        online_placed_by_coloc_scheduler(&bed, web).await?;
    }
    // Every bare victim back, each copy as its original was: the default scheduler's,
    // since these pods were there before the namespace was labelled.
    nothing_lost(&bed, "batch", &originals).await?;
    for copy in copies_placed(&bed, 4).await? {
        anyhow::ensure!(
            scheduler_name(&copy) == "default-scheduler",
            "{}: {}",
            cluster::name(&copy),
            scheduler_name(&copy)
        );
    }

    uninstall(&mut bed, &manifests).await?;
    bed.finish()
}

/// docs/deploy.md §8: the routing off, coloc-scheduler scaled to 0 (its pods and
/// containers gone), the uninstall Job, then `kubectl delete -k` of both. Nothing of the
/// install is left: no namespace, no cluster-scoped object, no gated copy, no placeholder.
async fn uninstall(bed: &mut Bed, manifests: &Path) -> anyhow::Result<()> {
    bed.plane.kubectl(&["delete", "mutatingadmissionpolicybinding", "coloc-scheduler"])?;
    for deployment in ["deploy/coloc-scheduler", "deploy/coloc-requeue"] {
        bed.plane.kubectl(&["-n", INSTALL_NAMESPACE, "scale", deployment, "--replicas=0"])?;
    }
    for pod in &mut bed.coloc {
        pod.kill();
    }
    for controller in &mut bed.requeue {
        controller.proc.kill();
    }
    bed.until_pods(INSTALL_NAMESPACE, MINUTE, "coloc-scheduler's and coloc-requeue's pods gone", |pods| {
        pods.is_empty().then_some(()).ok_or(format!("{} left", pods.len()))
    })
    .await?;

    let job_dir = repo("manifests/uninstall").display().to_string();
    bed.plane.kubectl(&["apply", "--validate=false", "-k", &job_dir])?;
    let job = render(bed, &repo("manifests/uninstall"))?;
    let job = find(&job, "Job", "coloc-extender-uninstall")?;
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let namespace = job["metadata"]["namespace"].as_str().unwrap_or_default();
    let account = job["spec"]["template"]["spec"]["serviceAccountName"].as_str().unwrap_or_default();
    let out = std::process::Command::new(EXTENDER)
        .args(&args)
        .env("KUBECONFIG", bed.plane.kubeconfig_of(namespace, account))
        .env("POD_NAMESPACE", namespace)
        .output()?;
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    anyhow::ensure!(out.status.success(), "uninstall failed:\n{log}");
    bed.plane.kubectl(&["delete", "--wait=true", "-k", &job_dir])?;
    // The routing's binding went first: --ignore-not-found, as §8 says.
    bed.plane.kubectl(&["delete", "--ignore-not-found", "--wait=true", "-k", &manifests.display().to_string()])?;

    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(bed.client.clone());
    coloc_testbed::wait::until(MINUTE, "the install's namespace gone", || async {
        match namespaces.get_opt(INSTALL_NAMESPACE).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("terminating".to_string()),
        }
    })
    .await?;
    let cluster_scoped = "clusterrole,clusterrolebinding,validatingadmissionpolicy,validatingadmissionpolicybinding,\
        mutatingadmissionpolicy,mutatingadmissionpolicybinding,priorityclass";
    let namespaced = "pods,serviceaccounts,configmaps,secrets,roles,rolebindings,deployments,jobs,leases";
    for kinds in [cluster_scoped, namespaced] {
        let left = left(bed, kinds)?;
        anyhow::ensure!(left.is_empty(), "left after uninstall: {left:?}\n{log}");
    }
    let pods = cluster::pods(&bed.client, None).await?;
    let marked: Vec<&str> = pods
        .iter()
        .filter(|p| gated(p) || p.metadata.labels.as_ref().is_some_and(|l| l.contains_key(coloc_extender::wake::LABEL)))
        .map(cluster::name)
        .collect();
    anyhow::ensure!(marked.is_empty(), "gated copies or placeholders left: {marked:?}\n{log}");
    Ok(())
}
