//! The upgrade from the previous release (7bf4f40: in kube-system, the extender's own
//! Deployment behind a Service, coloc-scheduler in another) to this one, as docs/deploy.md
//! §8 says: apply this release's install, then the one step that deletes the old
//! namespaced objects by their labels. Pods keep being placed and nothing is lost.
//!
//! The test bed runs no containers: each topology runs as processes, this build's binary
//! in both, as the pods would (the old one as its own ServiceAccount in kube-system with
//! its flags but TLS, which tests/e2e/tls.rs covers; the new one from the rendered pod
//! template). What the case shows is the cluster's side: the old objects, identities and
//! state, and the new install taking over from them.

use coloc_testbed::cluster;
use coloc_testbed::control_plane::{service_account, EARLIER_NAMESPACE, INSTALL_NAMESPACE};
use coloc_testbed::extender::Pod as PodIdentity;
use coloc_testbed::{kubelet, Binaries, Extender, Scheduler};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

use crate::apart::{copies_placed, full_pool, routed_pod_placed, system_nodes};
use crate::bed::{repo, EXTENDER};
use crate::coloc_pod::{apply, default_install_with, find, of_deployment, start_requeue_pod, ColocPod, Template};
use crate::invariants::nothing_lost;
use crate::own_scheduler::{scheduler_name, until_routing_applies, GOVERNED};
use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "upgrade_from_the_release_in_kube_system_takes_one_step_and_loses_nothing",
        run: |b, m| Box::pin(from_kube_system(b, m)),
    }]
}

/// The upgrade step, as docs/deploy.md §8 gives it: every namespaced object the earlier
/// release's base and components made in kube-system, by its labels.
pub const STEP: &str = "kubectl -n kube-system delete \
deployment,service,poddisruptionbudget,networkpolicy,configmap,secret,serviceaccount,role,rolebinding \
-l 'app.kubernetes.io/name in (coloc-extender,coloc-scheduler)'";

/// The earlier release's objects: its rendered install and its requeue component's.
fn earlier_release() -> anyhow::Result<Vec<Value>> {
    let mut objects = Vec::new();
    for file in ["coloc-extender.yaml", "requeue.yaml"] {
        let text = std::fs::read_to_string(repo(&format!("tests/data/release-7bf4f40/{file}")))?;
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc)?;
            if !v.is_null() {
                objects.push(v);
            }
        }
    }
    Ok(objects)
}

/// The earlier topology, as its pods ran: the extender as its own ServiceAccount in
/// kube-system (requeue on, its policy file), and coloc-scheduler with its rendered
/// configuration and flags, calling that extender (on loopback, without TLS here).
async fn earlier_topology(bed: &Bed, objects: &[Value]) -> anyhow::Result<(Extender, Scheduler)> {
    let policy = bed.plane.dir().join("earlier-policy.yaml");
    let text = find(objects, "ConfigMap", "coloc-extender-policy")?["data"]["policy.yaml"].as_str().unwrap_or_default();
    std::fs::write(&policy, text)?;
    let kubeconfig = bed.plane.kubeconfig_of(EARLIER_NAMESPACE, "coloc-extender");
    // The earlier release copied and released in its extender's process, as identities
    // this build's requeue controller (in a process of its own) does not split its writes
    // between: here it writes with the admin's credentials, which no admission policy of
    // either release judges. What this case shows is the step: the earlier objects and
    // identities gone, the copies they made carried through.
    let admin = bed.plane.admin_kubeconfig.clone();
    let pod = PodIdentity {
        kubeconfig: &kubeconfig,
        namespace: EARLIER_NAMESPACE,
        uid: None,
        requeue_kubeconfig: Some(&admin),
    };
    let policy = policy.display().to_string();
    let flags =
        ["--kube", "--events", "--requeue", "--mode", "enforce", "--path-prefix", "/scheduler", "--policy", &policy];
    let extender =
        Extender::start_in(&bed.plane, "earlier-extender", std::path::Path::new(EXTENDER), &flags, pod).await?;

    let map = find(objects, "ConfigMap", "coloc-scheduler-config")?;
    let mut config: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(map["data"]["config.yaml"].as_str().unwrap_or_default())?;
    let scheduler_kubeconfig = bed.plane.kubeconfig_of(EARLIER_NAMESPACE, "coloc-scheduler");
    config["clientConnection"]["kubeconfig"] = scheduler_kubeconfig.display().to_string().into();
    let e = &mut config["extenders"][0];
    anyhow::ensure!(e["urlPrefix"].as_str().is_some_and(|u| u.ends_with("/scheduler")), "{e:?}");
    e["urlPrefix"] = format!("{}/scheduler", extender.url()).into();
    e["enableHTTPS"] = false.into();
    e["nodeCacheCapable"] = bed.mode.node_cache_capable().into();
    if let Some(m) = e.as_mapping_mut() {
        m.remove("tlsConfig");
    }
    let d = find(objects, "Deployment", "coloc-scheduler")?;
    let flags: Vec<String> = d["spec"]["template"]["spec"]["containers"][0]["command"]
        .as_array()
        .into_iter()
        .flatten()
        .skip(1)
        .filter_map(Value::as_str)
        .filter(|f| !f.starts_with("--config"))
        .map(|f| f.replace("$(POD_NAMESPACE)", EARLIER_NAMESPACE))
        .collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let scheduler =
        Scheduler::start_configured(&bed.plane, "earlier-coloc-scheduler", serde_yaml_ng::to_string(&config)?, &flags)
            .await?;
    Ok((extender, scheduler))
}

/// What is left of the earlier release in kube-system: the names of the objects of `kinds`
/// that carry its labels.
fn left_in_kube_system(bed: &Bed, kinds: &str) -> anyhow::Result<Vec<String>> {
    let out = bed.plane.kubectl(&[
        "-n",
        EARLIER_NAMESPACE,
        "get",
        kinds,
        "-l",
        "app.kubernetes.io/name in (coloc-extender,coloc-scheduler)",
        "-o",
        "name",
    ])?;
    Ok(out.lines().map(str::to_string).collect())
}

/// Whether RBAC lets `user` `verb` pods in batch (a SubjectAccessReview, as the admin).
async fn may(bed: &Bed, user: &str, verb: &str) -> anyhow::Result<bool> {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{EARLIER_NAMESPACE}"), "system:authenticated"],
            "resourceAttributes": {"namespace": "batch", "verb": verb, "resource": "pods"},
        },
    }))?;
    let answer = Api::<SubjectAccessReview>::all(bed.client.clone()).create(&Default::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// `text` with shell line continuations joined and every run of white space one space.
fn one_line(text: &str) -> String {
    text.replace("\\\n", " ").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The step's command line as kubectl's arguments (its one quoted selector kept whole).
fn step_args() -> Vec<String> {
    let (words, selector) = STEP.split_once(" -l '").expect("the step selects by label");
    let mut args: Vec<String> = words.split_whitespace().skip(1).map(str::to_string).collect();
    args.extend(["-l".to_string(), selector.trim_end_matches('\'').to_string()]);
    args
}

/// The earlier release in kube-system places a routed pod and requeues its victim; this
/// release is applied and the step run; the earlier identities can write nothing any more,
/// nothing of the earlier release is left in kube-system, and the new topology (from the
/// rendered pod template, in coloc-system) places the next routed pod and requeues its
/// victim. Every bare pod is there or stood in for.
async fn from_kube_system(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up_without_install(bins, mode, kubelet::Options::default()).await?;
    system_nodes(&bed, &["system-1", "system-2"]).await?;
    bed.schedule_with(&[]).await?;
    let earlier = earlier_release()?;
    apply(&bed, &earlier, "earlier-release")?;
    let namespaces: Api<Namespace> = Api::all(bed.client.clone());
    for ns in ["online", "batch"] {
        let label = json!({"metadata": {"labels": {GOVERNED.0: GOVERNED.1}}});
        namespaces.patch(ns, &PatchParams::default(), &Patch::Merge(&label)).await?;
    }
    // The pods created from here on are routed, their copies too (a copy keeps its
    // original's scheduler).
    until_routing_applies(&bed, "batch").await?;
    let originals = full_pool(&bed, 2).await?;

    // The earlier release runs and places a routed pod through its extender.
    let (mut old_extender, mut old_scheduler) = earlier_topology(&bed, &earlier).await?;
    routed_pod_placed(&bed, "web-1").await?;
    let asked = old_extender.metric_sum("coloc_requests_total", "verb=\"preempt\"").await?;
    anyhow::ensure!(asked >= 1.0, "the earlier release placed web-1 without its extender");
    nothing_lost(&bed, "batch", &originals).await?;

    // This release, applied over it: the install with requeue, as the earlier one had.
    let objects = default_install_with(&bed, &["requeue"])?;
    apply(&bed, &objects, "this-release")?;
    // Cluster-scoped objects kept their names and now name this install's identities: the
    // earlier ones may write nothing (the old pods still run until the step).
    for (verb, user) in [("patch", "coloc-extender"), ("create", "coloc-extender-requeue")] {
        let user = service_account(EARLIER_NAMESPACE, user);
        anyhow::ensure!(!may(&bed, &user, verb).await?, "{user} may still {verb} pods in batch");
    }
    let binding = bed.plane.kubectl(&["get", "validatingadmissionpolicybinding", "coloc-extender", "-o", "json"])?;
    let binding: Value = serde_json::from_str(&binding)?;
    anyhow::ensure!(binding["spec"]["paramRef"].is_null(), "the earlier binding's parameter is gone: {binding}");

    // The step, as documented; the old pods go with their Deployments.
    let docs = std::fs::read_to_string(repo("docs/deploy.md"))?;
    anyhow::ensure!(one_line(&docs).contains(STEP), "docs/deploy.md §8 gives another step than {STEP}");
    let args = step_args();
    bed.plane.kubectl(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
    old_scheduler.proc.kill();
    old_extender.kill();
    let kinds = "deployment,service,poddisruptionbudget,networkpolicy,configmap,secret,serviceaccount,role,rolebinding";
    let left = left_in_kube_system(&bed, kinds)?;
    anyhow::ensure!(left.is_empty(), "left in kube-system after the step: {left:?}");
    bed.until_pods(EARLIER_NAMESPACE, MINUTE, "the earlier release's pods gone", |pods| {
        let ours: Vec<&str> = pods
            .iter()
            .filter(|p| p.metadata.labels.as_ref().is_some_and(|l| l.contains_key("app.kubernetes.io/name")))
            .map(cluster::name)
            .collect();
        ours.is_empty().then_some(()).ok_or(format!("{ours:?}"))
    })
    .await?;

    // This release's topology: coloc-scheduler's pods (placed by the default scheduler) run
    // kube-scheduler and the extender, as the rendered pod template says.
    let placed = bed
        .until_pods(INSTALL_NAMESPACE, MINUTE, "coloc-scheduler's pods running", |pods| {
            let running: Vec<Pod> = pods
                .iter()
                .filter(|p| of_deployment(p, "coloc-scheduler") && cluster::phase(p) == "Running")
                .cloned()
                .collect();
            (running.len() == 2).then_some(running).ok_or(format!("{} running", pods.len()))
        })
        .await?;
    for p in &placed {
        anyhow::ensure!(scheduler_name(p) == "default-scheduler", "{}: {:?}", cluster::name(p), scheduler_name(p));
    }
    let template = Template::of(&objects)?;
    let pod = ColocPod::start(&bed, &template, cluster::name(&placed[0]), &["--mode", "enforce"]).await?;
    bed.coloc.push(pod);
    bed.requeue.push(start_requeue_pod(&bed, &objects, "coloc-requeue-0").await?);
    // This release routes once its coloc-scheduler runs (it publishes the policy's classes).
    until_routing_applies(&bed, "online").await?;
    routed_pod_placed(&bed, "web-2").await?;
    let asked = bed.coloc[0].extender.metric_sum("coloc_requests_total", "verb=\"preempt\"").await?;
    anyhow::ensure!(asked >= 1.0, "web-2 was placed without this release's extender");
    // Both victims back and placed: the earlier release's copy and this one's.
    nothing_lost(&bed, "batch", &originals).await?;
    copies_placed(&bed, 2).await?;
    bed.finish()
}
