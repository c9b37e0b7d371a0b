//! Fails safe: no state of the install can stop anyone else's pod writes. The rendered
//! install (base, requeue and wake components) in its namespace of its own, but its
//! Deployments (no image runs here); each of its objects deleted in turn, then the whole
//! install namespace (its Namespace object, last): an admin's and a tenant's pod create
//! and delete, and kube-scheduler's preemption, go on; the extender's identities stay
//! refused or unable to act. Each object is applied again after its turn, the wake
//! component's included: a re-applied install admits the extender's own writes again. The
//! mode does not reach admission: the two runs share the objects between them (every
//! other one each), and each deletes the namespace.

use std::time::{Duration, Instant};

use coloc_extender::wake;
use coloc_testbed::cluster::{self, PodBuilder};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

use crate::coloc_pod::{default_install_with, without};
use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "fails_safe_no_missing_object_of_the_install_refuses_anyone_elses_pod_writes",
        run: |b, m| Box::pin(no_missing_object_refuses_anyone(b, m)),
    }]
}

/// The install's namespace, the base's: one that can be deleted (kube-system cannot).
const HOME: &str = coloc_testbed::control_plane::INSTALL_NAMESPACE;
/// How long each deletion is given to reach admission before the writes are judged, while
/// the writes are tried over and over.
const SETTLE: Duration = Duration::from_millis(1000);

async fn no_missing_object_refuses_anyone(bins: coloc_testbed::Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    let objects = render(&bed)?;
    let dir = bed.plane.dir().join("install");
    std::fs::create_dir_all(&dir)?;
    let mut files = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let file = dir.join(format!("{i:02}-{}-{}.yaml", o["kind"].as_str().unwrap_or("?"), name(o)));
        std::fs::write(&file, serde_yaml_ng::to_string(o)?)?;
        files.push((describe(o), file));
    }
    bed.plane.kubectl(&["apply", "--validate=false", "-f", &dir.display().to_string()])?;

    // A node full of offline pods, kube-scheduler alone (no extender: its preemption is
    // what must keep working), and a tenant who may create and delete pods in batch.
    let victims = files.len() / 2 + 4;
    bed.nodes(&["node-1"], 100 * victims as i64).await?;
    bed.bound((0..victims).map(|i| PodBuilder::new("batch", &format!("free-{i}"), "free", 100).on("node-1")).collect())
        .await?;
    bed.until_running("batch", victims).await?;
    bed.schedule_with(&[]).await?;
    let alice = tenant(&bed).await?;
    let requeue = as_user(&bed, &format!("system:serviceaccount:{HOME}:coloc-extender-requeue")).await?;
    let wake_identity = as_user(&bed, &format!("system:serviceaccount:{HOME}:coloc-extender-wake")).await?;
    // The installed policies are enforced before the first turn.
    let identity_pods: Api<Pod> = Api::namespaced(requeue.clone(), "batch");
    coloc_testbed::wait::until(MINUTE, "the installed policies enforced", || async {
        match identity_pods.create(&dry(), &PodBuilder::new("batch", "by-requeue", "free", 100).build()).await {
            Err(kube::Error::Api(s)) if s.code == 403 => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.metadata.name))),
        }
    })
    .await?;

    let mut turn = 0;
    let share = match mode {
        Mode::Names => 0,
        Mode::Objects => 1,
    };
    for (what, file) in files.iter().skip(share).step_by(2) {
        let path = file.display().to_string();
        bed.plane.kubectl(&["delete", "--wait=true", "-f", &path])?;
        everyone_writes(&bed, &alice, &format!("{what} deleted"), turn).await?;
        identities_refused(&requeue, &format!("{what} deleted")).await?;
        bed.plane.kubectl(&["apply", "--validate=false", "-f", &path])?;
        turn += 1;
    }

    // Re-applied, the install admits the extender's own writes again: a placeholder as wake
    // builds it (an install whose policy looked up a parameter refused every one until the
    // API server restarted), and still refuses any other.
    let placeholders: Api<Pod> = Api::namespaced(wake_identity, HOME);
    let placeholder: Pod = serde_json::from_value(wake::placeholder(HOME))?;
    coloc_testbed::wait::until(MINUTE, "a placeholder admitted after the install was re-applied", || async {
        placeholders.create(&dry(), &placeholder).await.map(drop).map_err(|e| e.to_string())
    })
    .await?;
    let mut envy = wake::placeholder(HOME);
    envy["spec"]["containers"][0]["envFrom"] = json!([{"secretRef": {"name": "anything"}}]);
    match placeholders.create(&dry(), &serde_json::from_value(envy)?).await {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => anyhow::bail!("a placeholder with a Secret's environment: {:?}", other.map(|p| p.metadata.name)),
    }

    // The whole install namespace, while it terminates and once it is gone.
    bed.plane.kubectl(&["delete", "namespace", HOME, "--wait=false"])?;
    everyone_writes(&bed, &alice, "the install namespace terminating", turn).await?;
    identities_refused(&requeue, "the install namespace terminating").await?;
    turn += 1;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(bed.client.clone());
    coloc_testbed::wait::until(MINUTE, "the install namespace gone", || async {
        match namespaces.get_opt(HOME).await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|n| n.and_then(|n| n.status).and_then(|s| s.phase)))),
        }
    })
    .await?;
    everyone_writes(&bed, &alice, "the install namespace gone", turn).await?;
    identities_refused(&requeue, "the install namespace gone").await?;
    bed.finish()
}

/// The install as a platform team renders it: the base with the requeue and wake
/// components, in [`HOME`], but the Deployments and its Namespace (whose deletion is the
/// last turn).
fn render(bed: &Bed) -> anyhow::Result<Vec<Value>> {
    let objects = without(&default_install_with(bed, &["requeue", "wake"])?, &["Deployment", "Namespace"]);
    anyhow::ensure!(objects.len() > 20, "the rendered install holds {} objects", objects.len());
    Ok(objects)
}

fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("?")
}

fn describe(o: &Value) -> String {
    format!("{} {}", o["kind"].as_str().unwrap_or("?"), name(o))
}

fn dry() -> PostParams {
    PostParams { dry_run: true, ..Default::default() }
}

async fn as_user(bed: &Bed, user: &str) -> anyhow::Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(&bed.plane.admin_kubeconfig)?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    config.auth_info.impersonate = Some(user.into());
    Ok(Client::try_from(config)?)
}

/// A tenant who may create, read and delete pods in batch.
async fn tenant(bed: &Bed) -> anyhow::Result<Api<Pod>> {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "pod-owner", "namespace": "batch"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create", "delete"]}],
    }))?;
    Api::<Role>::namespaced(bed.client.clone(), "batch").create(&PostParams::default(), &role).await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-owns-pods", "namespace": "batch"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-owner"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }))?;
    Api::<RoleBinding>::namespaced(bed.client.clone(), "batch").create(&PostParams::default(), &binding).await?;
    Ok(Api::namespaced(as_user(bed, "alice").await?, "batch"))
}

/// With `what` missing: an admin's and a tenant's pod creates pass all along [`SETTLE`];
/// each then creates and deletes a pod for real; and kube-scheduler places an online pod,
/// created halfway through [`SETTLE`], by preempting an offline one (its status writes,
/// the victim's delete, the binding).
async fn everyone_writes(bed: &Bed, alice: &Api<Pod>, what: &str, turn: usize) -> anyhow::Result<()> {
    let online: Api<Pod> = Api::namespaced(bed.client.clone(), "online");
    let web = format!("web-{turn}");
    let (web_pod, post) = (PodBuilder::new("online", &web, "online-prod", 100).build(), PostParams::default());
    let create_web = || online.create(&post, &web_pod);
    let admin: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    let pod = |who: &str| PodBuilder::new("batch", &format!("{who}-{turn}"), "free", 10).build();
    let (start, mut web_created) = (Instant::now(), false);
    while start.elapsed() < SETTLE {
        // The online pod halfway: kube-scheduler's preemption runs while the creates go on.
        if !web_created && start.elapsed() >= SETTLE / 2 {
            create_web().await?;
            web_created = true;
        }
        for (who, api) in [("admin", &admin), ("alice", alice)] {
            if let Err(e) = api.create(&dry(), &pod(who)).await {
                anyhow::bail!("with {what}, {who}'s pod create was refused: {e}");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !web_created {
        create_web().await?;
    }
    let now = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    for (who, api) in [("admin", &admin), ("alice", alice)] {
        api.create(&PostParams::default(), &pod(who))
            .await
            .map_err(|e| anyhow::anyhow!("with {what}, {who}'s pod create was refused: {e}"))?;
        api.delete(&format!("{who}-{turn}"), &now)
            .await
            .map_err(|e| anyhow::anyhow!("with {what}, {who}'s pod delete was refused: {e}"))?;
    }
    bed.until_pods("online", MINUTE, &format!("{web} placed by preemption with {what}"), |pods| {
        match pods.iter().find(|p| cluster::name(p) == web).and_then(cluster::node_of) {
            Some(_) => Ok(()),
            None => Err(format!("{web} pending")),
        }
    })
    .await
}

/// The extender's identities write nothing but their own pods, whatever is missing: a plain
/// pod as the requeue identity is refused (by the policy or its backstop, or by RBAC when
/// its grant is what went).
async fn identities_refused(requeue: &Client, what: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(requeue.clone(), "batch");
    match pods.create(&dry(), &PodBuilder::new("batch", "by-requeue", "free", 100).build()).await {
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(()),
        other => {
            anyhow::bail!("with {what}, the requeue identity created a plain pod: {:?}", other.map(|p| p.metadata.name))
        }
    }
}
