//! Copies are Pod Security baseline, all of it: as the requeue identity, a copy exceeding
//! any one control of baseline (pod-security-admission v1.36) is refused naming that
//! control, what baseline allows is admitted (no stricter), a namespace's own opt-in lets
//! copies keep what is beyond baseline (never kube-system or the install namespace), and a
//! copy's metadata is what requeue builds.

use coloc_extender::model::marks::{ATTEMPT, BASE_NAME, FROM_POD, GUARD};
use coloc_extender::model::RequeueIntent;
use coloc_extender::requeue::replacement;
use coloc_extender::routing;
use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::control_plane::Options;
use coloc_testbed::Binaries;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use crate::invariants::{bare_pods, nothing_lost};
use crate::privilege::{refused, CREATE};
use crate::scenarios::MINUTE;
use crate::scenarios::{online, online_placed};
use crate::shipped_admission::{self, as_user, dry};
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "privilege_copies_hold_to_every_control_of_pod_security_baseline_unless_their_namespace_opts_in",
            run: |b, m| Box::pin(every_control(b, m)),
        },
        Case {
            name:
                "requeue_bare_pods_holding_a_host_port_are_a_last_resort_until_their_namespace_opts_in_beyond_baseline",
            run: |b, m| Box::pin(host_ports_come_back_once_opted_in(b, m)),
        },
    ]
}

const REQUEUE_USER: &str = "system:serviceaccount:coloc-system:coloc-extender-requeue";
const HOME: &str = coloc_testbed::control_plane::INSTALL_NAMESPACE;
const BASELINE: &str = "coloc-extender may create a requeue copy only within Pod Security baseline";
const METADATA: &str = "coloc-extender may create a requeue copy only as requeue builds it";
const COPY_HOME: &str = "coloc-extender may create a requeue copy only in a namespace that opted in";

type Change = fn(&mut Value);

/// One shape per control and place baseline looks, with the control's ID (what the
/// refusal names).
const CONTROLS: [(&str, &str, Change); 21] = [
    // The API server wants a HostProcess pod on the host network: both are named.
    ("windowsHostProcess", "a Windows HostProcess pod", |v| {
        v["spec"]["hostNetwork"] = json!(true);
        v["spec"]["securityContext"] = json!({"windowsOptions": {"hostProcess": true}});
    }),
    ("hostNamespaces", "in the host's PID namespace", |v| v["spec"]["hostPID"] = json!(true)),
    ("hostNamespaces", "in the host's IPC namespace", |v| v["spec"]["hostIPC"] = json!(true)),
    ("hostNamespaces", "on the host network", |v| v["spec"]["hostNetwork"] = json!(true)),
    ("privileged", "with a privileged init container", |v| {
        v["spec"]["initContainers"] =
            json!([{"name": "i", "image": "registry.example/i:1", "securityContext": {"privileged": true}}]);
    }),
    ("capabilities_baseline", "adding NET_RAW", |v| {
        v["spec"]["containers"][0]["securityContext"] = json!({"capabilities": {"add": ["NET_RAW"]}});
    }),
    ("capabilities_baseline", "adding SYS_ADMIN beside CHOWN", |v| {
        v["spec"]["containers"][0]["securityContext"] = json!({"capabilities": {"add": ["CHOWN", "SYS_ADMIN"]}});
    }),
    ("hostPathVolumes", "mounting the host's root", |v| {
        v["spec"]["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
        v["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "root", "mountPath": "/host"}]);
    }),
    ("hostPorts", "holding a hostPort", |v| {
        v["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 8080}]);
    }),
    ("appArmorProfile", "without AppArmor (pod)", |v| {
        v["spec"]["securityContext"] = json!({"appArmorProfile": {"type": "Unconfined"}});
    }),
    ("appArmorProfile", "without AppArmor (container)", |v| {
        v["spec"]["containers"][0]["securityContext"] = json!({"appArmorProfile": {"type": "Unconfined"}});
    }),
    ("appArmorProfile", "without AppArmor (the deprecated annotation)", |v| {
        v["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/main"] = json!("unconfined");
    }),
    ("seLinuxOptions", "as spc_t, a container escape where SELinux enforces", |v| {
        v["spec"]["securityContext"] = json!({"seLinuxOptions": {"type": "spc_t"}});
    }),
    ("seLinuxOptions", "with an SELinux user", |v| {
        v["spec"]["containers"][0]["securityContext"] = json!({"seLinuxOptions": {"user": "system_u"}});
    }),
    ("seLinuxOptions", "with an SELinux role", |v| {
        v["spec"]["containers"][0]["securityContext"] = json!({"seLinuxOptions": {"role": "system_r"}});
    }),
    ("seccompProfile_baseline", "without seccomp (pod)", |v| {
        v["spec"]["securityContext"] = json!({"seccompProfile": {"type": "Unconfined"}});
    }),
    ("seccompProfile_baseline", "without seccomp (container)", |v| {
        v["spec"]["containers"][0]["securityContext"] = json!({"seccompProfile": {"type": "Unconfined"}});
    }),
    ("sysctls", "with the unsafe sysctl kernel.msgmax", |v| {
        v["spec"]["securityContext"] = json!({"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]});
    }),
    ("hostProbesAndHostLifecycle", "probing another host", |v| {
        v["spec"]["containers"][0]["livenessProbe"] = json!({"httpGet": {"host": "169.254.169.254", "port": 80}});
    }),
    ("hostProbesAndHostLifecycle", "checking readiness on another host", |v| {
        v["spec"]["containers"][0]["readinessProbe"] = json!({"tcpSocket": {"host": "10.0.0.1", "port": 80}});
    }),
    ("hostProbesAndHostLifecycle", "calling another host before it stops", |v| {
        v["spec"]["containers"][0]["lifecycle"] = json!({"preStop": {"httpGet": {"host": "10.0.0.1", "port": 80}}});
    }),
];

/// What baseline allows, each set explicitly: a copy carrying it is admitted.
const WITHIN: [(&str, Change); 8] = [
    ("adding the default capabilities", |v| {
        v["spec"]["containers"][0]["securityContext"] =
            json!({"capabilities": {"drop": ["ALL"], "add": ["CHOWN", "NET_BIND_SERVICE", "SYS_CHROOT"]}});
    }),
    ("of SELinux types container_t and container_engine_t", |v| {
        v["spec"]["securityContext"] = json!({"seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"}});
        v["spec"]["containers"][0]["securityContext"] = json!({"seLinuxOptions": {"type": "container_engine_t"}});
    }),
    ("with RuntimeDefault and Localhost seccomp", |v| {
        v["spec"]["securityContext"] = json!({"seccompProfile": {"type": "RuntimeDefault"}});
        v["spec"]["containers"][0]["securityContext"] =
            json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/work.json"}});
    }),
    ("with RuntimeDefault and Localhost AppArmor", |v| {
        v["spec"]["securityContext"] = json!({"appArmorProfile": {"type": "RuntimeDefault"}});
        v["spec"]["containers"][0]["securityContext"] =
            json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-work"}});
    }),
    ("with safe sysctls", |v| {
        v["spec"]["securityContext"] = json!({"sysctls": [
            {"name": "net.ipv4.tcp_keepalive_time", "value": "60"},
            {"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}]});
    }),
    ("with an unmasked /proc in a user namespace", |v| {
        v["spec"]["hostUsers"] = json!(false);
        v["spec"]["containers"][0]["securityContext"] = json!({"procMount": "Unmasked"});
    }),
    ("probing itself", |v| {
        v["spec"]["containers"][0]["livenessProbe"] = json!({"httpGet": {"path": "/healthz", "port": 8080}});
    }),
    ("not a HostProcess pod, said explicitly", |v| {
        v["spec"]["securityContext"] = json!({"windowsOptions": {"hostProcess": false}});
    }),
];

/// Metadata a copy as requeue builds it never has.
const NOT_AS_BUILT: [(&str, Change); 9] = [
    ("carrying a finalizer that is not the install's", |v| {
        v["metadata"]["finalizers"] = json!(["example.com/never-deleted"]);
    }),
    ("carrying the guard's finalizer", |v| v["metadata"]["finalizers"] = json!([GUARD])),
    ("owned by another object", |v| {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "0b0e0e0e-0000-4000-8000-000000000001"}]);
    }),
    ("with a generateName", |v| v["metadata"]["generateName"] = json!("free-1-")),
    ("under a name requeue does not give", |v| v["metadata"]["name"] = json!("free-1-copy")),
    ("labelled a wake placeholder too", |v| v["metadata"]["labels"]["coloc-extender.io/wake"] = json!("true")),
    ("labelled with the guard", |v| v["metadata"]["labels"][GUARD] = json!("true")),
    ("naming an original of another namespace", |v| v["metadata"]["annotations"][FROM_POD] = json!("online/web-1")),
    ("with a requeue count that is no count", |v| v["metadata"]["annotations"][ATTEMPT] = json!("many")),
];

/// The copy requeue builds in `namespace` of a bare `free` pod free-1 there (its original
/// need not exist: admission does not look), with `change` made.
fn copy_in(namespace: &str, change: Change) -> anyhow::Result<Pod> {
    let mut original = serde_json::to_value(PodBuilder::new(namespace, "free-1", "free", 100).build())?;
    original["metadata"]["uid"] = json!("0b0e0e0e-0000-4000-8000-00000000f1ee");
    // What a copy may not carry is left behind by the builder.
    original["metadata"]["finalizers"] = json!(["example.com/cleanup", GUARD]);
    original["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "0b0e0e0e-0000-4000-8000-000000000003"}]);
    let intent = RequeueIntent {
        namespace: namespace.into(),
        name: "free-1".into(),
        uid: "0b0e0e0e-0000-4000-8000-00000000f1ee".into(),
        node: "node-1".into(),
        replacement: "free-1-rq-00000000a1".into(),
        attempt: 1,
        preemptor: "online/web-1".into(),
    };
    let mut copy = replacement::build(&original, &intent)?;
    change(&mut copy);
    Ok(serde_json::from_value(copy)?)
}

/// The controls baseline names in a refusal of the policy (`…: it exceeds a, b`).
fn exceeded(result: Result<Pod, kube::Error>) -> Result<Vec<String>, String> {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(BASELINE) => {
            let list = s.message.rsplit_once("it exceeds ").map(|(_, l)| l).unwrap_or_default();
            Ok(list.split(", ").map(|c| c.trim().to_string()).collect())
        }
        Ok(_) => Err("admitted".into()),
        Err(e) => Err(format!("refused otherwise: {e}")),
    }
}

/// The mode does not reach admission; no kube-scheduler, extender or controllers.
async fn every_control(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let bed = Bed::up_with(bins, mode, Options { controllers: false, ..Default::default() }).await?;
    let admin = bed.client.clone();
    shipped_admission::apply(&admin).await?;
    let (opt_in, enabled) = coloc_extender::model::marks::NAMESPACE_OPT_IN;
    let (beyond, beyond_enabled) = coloc_extender::model::marks::NAMESPACE_BEYOND_BASELINE;
    let namespace = |name: &str, labels: Value| -> anyhow::Result<Namespace> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?)
    };
    cluster::create_all(
        &admin,
        vec![
            namespace("beyond", json!({opt_in: enabled, beyond: beyond_enabled}))?,
            namespace("beyond-only", json!({beyond: beyond_enabled}))?,
        ],
    )
    .await?;
    for system in ["kube-system", HOME] {
        let both = json!({"metadata": {"labels": {opt_in: enabled, beyond: beyond_enabled}}});
        Api::<Namespace>::all(admin.clone()).patch(system, &PatchParams::default(), &Patch::Merge(both)).await?;
    }
    let requeue = as_user(&bed, REQUEUE_USER, &[]).await?;
    let create = |ns: &str, pod: Pod| {
        let api: Api<Pod> = Api::namespaced(requeue.clone(), ns);
        async move { api.create(&dry(), &pod).await }
    };

    // Enforcement starts a moment after the policies are stored: a plain pod refused.
    let plain = PodBuilder::new("batch", "plain", "free", 100).build();
    coloc_testbed::wait::until(MINUTE, "the policy enforced", || async {
        match create("batch", plain.clone()).await {
            Err(e) if e.to_string().contains(CREATE) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.metadata.name))),
        }
    })
    .await?;

    // The copy as built is admitted, and so is everything baseline allows: no stricter.
    let keep: Change = |_| {};
    create("batch", copy_in("batch", keep)?)
        .await
        .map_err(|e| anyhow::anyhow!("the copy as requeue builds it was refused: {e}"))?;
    for (what, change) in WITHIN {
        create("batch", copy_in("batch", change)?)
            .await
            .map_err(|e| anyhow::anyhow!("a copy {what}, which baseline allows, was refused: {e}"))?;
    }
    // Each control on its own: refused, naming it (and only it, but where the API server
    // wants two together).
    let mut wrong = Vec::new();
    for (id, what, change) in CONTROLS {
        match exceeded(create("batch", copy_in("batch", change)?).await) {
            Ok(named) if named.iter().any(|c| c == id) && (id == "windowsHostProcess" || named == [id]) => {}
            Ok(named) => wrong.push(format!("a copy {what}: refused naming {named:?}, not {id}")),
            Err(e) => wrong.push(format!("a copy {what}: {e}")),
        }
    }
    anyhow::ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
    // procMount: v1.36's own validation refuses an unmasked /proc outside a user
    // namespace before admission is asked (the policy holds that control too).
    let unmasked = copy_in("batch", |v| {
        v["spec"]["containers"][0]["securityContext"] = json!({"procMount": "Unmasked"});
    })?;
    match create("batch", unmasked).await {
        Err(kube::Error::Api(s)) if s.message.contains("procMount") => {}
        other => anyhow::bail!("an unmasked /proc outside a user namespace: {:?}", other.map(|p| p.metadata.name)),
    }

    // Beyond baseline, where the namespace opted in by its own label: every shape admitted.
    for (_, what, change) in CONTROLS {
        create("beyond", copy_in("beyond", change)?)
            .await
            .map_err(|e| anyhow::anyhow!("a copy {what} in a namespace opted in beyond baseline was refused: {e}"))?;
    }
    // Never without the opt-in to copies, nor in kube-system or the install namespace.
    let host_port = CONTROLS.iter().find(|c| c.0 == "hostPorts").expect("listed").2;
    for ns in ["beyond-only", "kube-system", HOME] {
        refused(
            &format!("a copy holding a hostPort in {ns}, labelled beyond baseline"),
            COPY_HOME,
            create(ns, copy_in(ns, host_port)?).await,
        )?;
    }

    // Metadata as built: anything else refused.
    for (what, change) in NOT_AS_BUILT {
        refused(&format!("a copy {what}"), METADATA, create("batch", copy_in("batch", change)?).await)?;
    }
    let unnamed: Change = |v| {
        v["metadata"]["annotations"].as_object_mut().map(|a| a.remove(BASE_NAME));
    };
    refused("a copy without its base name", METADATA, create("batch", copy_in("batch", unnamed)?).await)?;
    placeholders_are_what_wake_builds(&bed).await?;
    bed.finish()
}

/// A placeholder's metadata and shape are exactly what wake builds: anything else is
/// refused, a finalizer first of all (it would hold the install namespace for ever).
async fn placeholders_are_what_wake_builds(bed: &Bed) -> anyhow::Result<()> {
    use coloc_extender::wake;
    let waker: Client = as_user(bed, "system:serviceaccount:coloc-system:coloc-extender-wake", &[]).await?;
    let api: Api<Pod> = Api::namespaced(waker, HOME);
    api.create(&dry(), &serde_json::from_value(wake::placeholder(HOME))?)
        .await
        .map_err(|e| anyhow::anyhow!("a placeholder as wake builds it was refused: {e}"))?;
    let shapes: [(&str, Change); 12] = [
        ("carrying a finalizer", |p| p["metadata"]["finalizers"] = json!(["example.com/never-deleted"])),
        ("owned by another object", |p| {
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "0b0e0e0e-0000-4000-8000-000000000002"}]);
        }),
        ("with a label of its own", |p| p["metadata"]["labels"]["team"] = json!("a")),
        ("with another annotation", |p| p["metadata"]["annotations"]["example.com/x"] = json!("y")),
        ("under a name of its own", |p| {
            p["metadata"].as_object_mut().map(|m| m.remove("generateName"));
            p["metadata"]["name"] = json!("anything");
        }),
        ("without its security context", |p| {
            p["spec"].as_object_mut().map(|s| s.remove("securityContext"));
        }),
        ("as root", |p| p["spec"]["securityContext"]["runAsUser"] = json!(0)),
        ("allowed to escalate privilege", |p| {
            p["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true);
        }),
        ("adding a capability", |p| {
            p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["NET_BIND_SERVICE"]);
        }),
        ("in a user namespace", |p| p["spec"]["hostUsers"] = json!(false)),
        ("as spc_t", |p| p["spec"]["securityContext"]["seLinuxOptions"] = json!({"type": "spc_t"})),
        ("with an unsafe sysctl", |p| {
            p["spec"]["securityContext"]["sysctls"] = json!([{"name": "kernel.msgmax", "value": "1"}]);
        }),
    ];
    for (how, change) in shapes {
        let mut p = wake::placeholder(HOME);
        change(&mut p);
        refused(
            &format!("a placeholder {how}"),
            crate::privilege::PLACEHOLDER,
            api.create(&dry(), &serde_json::from_value(p)?).await,
        )?;
    }
    Ok(())
}

/// Two bare `free` pods of a namespace that opted in to copies, each holding a hostPort:
/// beyond baseline, so a copy of either is refused, and they are a last resort. web-1 has
/// no other way: it is placed, they are lost, said (`beyond_baseline`). Once the namespace
/// opts in beyond baseline by its own label, the next two are copied (admitted by the
/// shipped policies, the copy-class one reading the classes the extender publishes),
/// released, nothing lost.
async fn host_ports_come_back_once_opted_in(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    shipped_admission::apply(&bed.client).await?;
    let (opt_in, enabled) = coloc_extender::model::marks::NAMESPACE_OPT_IN;
    let ports: Namespace = serde_json::from_value(json!({"metadata": {"name": "ports", "labels": {opt_in: enabled}}}))?;
    cluster::create(&bed.client, ports).await?;
    let holding = |name: &str, port: i32, node: &str| {
        let pod = PodBuilder::new("ports", name, "free", 1900).on(node).build();
        let mut pod = serde_json::to_value(pod).expect("a pod");
        pod["spec"]["containers"][0]["ports"] = json!([{"containerPort": 8080, "hostPort": port}]);
        serde_json::from_value::<Pod>(pod).expect("a pod")
    };
    bed.nodes(&["node-1"], 4000).await?;
    cluster::create_all(&bed.client, vec![holding("free-1", 9001, "node-1"), holding("free-2", 9002, "node-1")])
        .await?;
    bed.until_running("ports", 2).await?;
    let uid = crate::coloc_pod::pod_object(&bed, HOME, "coloc-extender-0").await?;
    let e = bed
        .extender(&["--requeue", "--events", "--publish-classes", "--pod-name", "coloc-extender-0", "--pod-uid", &uid])
        .await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    let maps: Api<ConfigMap> = Api::namespaced(bed.client.clone(), HOME);
    coloc_testbed::wait::until(MINUTE, "the classes published", || async {
        let map = maps.get_opt(routing::NAME).await.map_err(|e| e.to_string())?;
        let requeued = map.and_then(|m| m.data).and_then(|d| d.get(routing::REQUEUED).cloned());
        requeued.filter(|r| !r.is_empty()).map(drop).ok_or_else(|| "no requeued classes yet".to_string())
    })
    .await?;

    online(&bed, "web-1", 3000).await?;
    anyhow::ensure!(online_placed(&bed, "web-1").await? == "node-1", "web-1 not placed on node-1");
    bed.until_pods("ports", MINUTE, "the hostPort pods gone, not copied", |pods| {
        pods.is_empty().then_some(()).ok_or_else(|| format!("{:?}", pods.iter().map(cluster::name).collect::<Vec<_>>()))
    })
    .await?;
    let lost = bed.extenders[e].metric_sum("coloc_bare_lost_total", r#"reason="beyond_baseline""#).await?;
    anyhow::ensure!(lost >= 2.0, "coloc_bare_lost_total{{reason=\"beyond_baseline\"}} is {lost}");

    // Opted in beyond baseline: the next ones come back. (Bound before their node exists,
    // so that nothing else takes node-2 first.)
    let (beyond, beyond_enabled) = coloc_extender::model::marks::NAMESPACE_BEYOND_BASELINE;
    let label = json!({"metadata": {"labels": {beyond: beyond_enabled}}});
    Api::<Namespace>::all(bed.client.clone()).patch("ports", &PatchParams::default(), &Patch::Merge(&label)).await?;
    cluster::create_all(&bed.client, vec![holding("free-3", 9001, "node-2"), holding("free-4", 9002, "node-2")])
        .await?;
    bed.nodes(&["node-2"], 4000).await?;
    bed.until_running("ports", 2).await?;
    let originals = bare_pods(&bed, "ports").await?;
    online(&bed, "web-2", 3000).await?;
    anyhow::ensure!(online_placed(&bed, "web-2").await? == "node-2", "web-2 not placed on node-2");
    nothing_lost(&bed, "ports", &originals).await?;
    bed.finish()
}
