//! Objects for scenarios, built as the Kubernetes JSON a user would write, and created
//! concurrently.

use futures::{stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// The label the default policy requires for offline pods (placement.requireNodeLabels).
pub const OFFLINE_ALLOWED: &str = "colocation.example.com/offline-allowed";

/// A Ready node with `milli_cpu` CPU, `mem_gi` GiB and 110 pods; labelled for offline work
/// and with a zone, as a cloud node would be.
pub fn node(name: &str, milli_cpu: i64, mem_gi: i64, zone: &str) -> Node {
    from(json!({
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, OFFLINE_ALLOWED: "true",
            "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "region-1"}},
        "status": {
            "capacity": {"cpu": format!("{milli_cpu}m"), "memory": format!("{mem_gi}Gi"), "pods": "110"},
            "allocatable": {"cpu": format!("{milli_cpu}m"), "memory": format!("{mem_gi}Gi"), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        }
    }))
}

pub fn priority_class(name: &str, value: i32) -> PriorityClass {
    from(json!({"metadata": {"name": name}, "value": value}))
}

/// PriorityClasses the default policy classifies: online-prod (online), offline-batch
/// and offline-batch-low (batch), free-high and free (free).
pub fn default_priority_classes() -> Vec<PriorityClass> {
    vec![
        priority_class("online-prod", 10_000),
        priority_class("offline-batch", 6_000),
        priority_class("offline-batch-low", 5_500),
        priority_class("free-high", 3_500),
        priority_class("free", 3_000),
    ]
}

/// Waits until the API server admits a pod of each class in `namespace` (a dry run:
/// nothing is stored). Its Priority admission plugin reads PriorityClasses through an
/// informer, so a class created a moment ago can still be refused ("no PriorityClass").
pub async fn until_admitted(client: &Client, namespace: &str, classes: &[&str]) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let dry = PostParams { dry_run: true, ..Default::default() };
    for class in classes {
        let probe = PodBuilder::new(namespace, "admission-probe", class, 1).build();
        crate::wait::until(std::time::Duration::from_secs(30), &format!("PriorityClass {class} admitted"), || async {
            api.create(&dry, &probe).await.map(|_| ()).map_err(|e| e.to_string())
        })
        .await?;
    }
    Ok(())
}

pub fn namespace(name: &str) -> Namespace {
    from(json!({"metadata": {"name": name}}))
}

/// A ServiceAccount (the `default` one the ServiceAccount controller would make).
pub fn service_account(namespace: &str, name: &str) -> ServiceAccount {
    from(json!({"metadata": {"name": name, "namespace": namespace}}))
}

/// The label by which a namespace takes requeue copies of its preempted bare pods (as the
/// extender documents it: the test bed depends on nothing of the extender's).
pub const REQUEUE_OPT_IN: &str = "coloc-extender.io/requeue";

/// A namespace labelled to take requeue copies of its preempted bare pods.
pub fn requeue_namespace(name: &str) -> Namespace {
    from(json!({"metadata": {"name": name, "labels": {REQUEUE_OPT_IN: "enabled"}}}))
}

/// A pod template's spec: one container requesting `milli_cpu` and 64 MiB.
pub fn pod_spec(priority_class: &str, milli_cpu: i64) -> Value {
    json!({
        "priorityClassName": priority_class,
        "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "main", "image": "registry.example/work:1",
            "resources": {"requests": {"cpu": format!("{milli_cpu}m", ), "memory": "64Mi"}}}],
    })
}

/// A pod as a user writes it; `PodBuilder::on` binds it directly (no scheduling).
pub struct PodBuilder(Value);

impl PodBuilder {
    pub fn new(namespace: &str, name: &str, priority_class: &str, milli_cpu: i64) -> PodBuilder {
        PodBuilder(
            json!({"metadata": {"name": name, "namespace": namespace, "labels": {"app": name}}, "spec": pod_spec(priority_class, milli_cpu)}),
        )
    }

    pub fn on(mut self, node: &str) -> PodBuilder {
        self.0["spec"]["nodeName"] = json!(node);
        self
    }

    /// Lets kube-scheduler place it on `node` only (a `nodeSelector` on the hostname).
    pub fn only_on(mut self, node: &str) -> PodBuilder {
        self.0["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
        self
    }

    /// Lets kube-scheduler place it only on nodes labelled `key: value`.
    pub fn select(mut self, key: &str, value: &str) -> PodBuilder {
        self.0["spec"]["nodeSelector"][key] = json!(value);
        self
    }

    /// Tolerates the `NoSchedule` taint `key` (any value).
    pub fn tolerate(mut self, key: &str) -> PodBuilder {
        let toleration = json!({"key": key, "operator": "Exists", "effect": "NoSchedule"});
        match self.0["spec"]["tolerations"].as_array_mut() {
            Some(all) => all.push(toleration),
            None => self.0["spec"]["tolerations"] = json!([toleration]),
        }
        self
    }

    pub fn label(mut self, k: &str, v: &str) -> PodBuilder {
        self.0["metadata"]["labels"][k] = json!(v);
        self
    }

    pub fn annotate(mut self, k: &str, v: &str) -> PodBuilder {
        self.0["metadata"]["annotations"][k] = json!(v);
        self
    }

    pub fn never_preempts(mut self) -> PodBuilder {
        self.0["spec"]["preemptionPolicy"] = json!("Never");
        self
    }

    /// Adds an extended resource request (e.g. a marker resource) of 1.
    pub fn request(mut self, resource: &str) -> PodBuilder {
        self.0["spec"]["containers"][0]["resources"]["requests"][resource] = json!("1");
        self.0["spec"]["containers"][0]["resources"]["limits"][resource] = json!("1");
        self
    }

    /// Requests `quantity` of memory instead of 64 MiB.
    pub fn memory(mut self, quantity: &str) -> PodBuilder {
        self.0["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!(quantity);
        self
    }

    /// Any other change, to the pod's JSON.
    pub fn edit(mut self, f: impl FnOnce(&mut Value)) -> PodBuilder {
        f(&mut self.0);
        self
    }

    pub fn build(self) -> Pod {
        from(self.0)
    }
}

/// A ReplicaSet of `replicas` pods labelled `app: name`.
pub fn replica_set(namespace: &str, name: &str, replicas: i32, priority_class: &str, milli_cpu: i64) -> ReplicaSet {
    from(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(priority_class, milli_cpu)}}
    }))
}

/// A PDB over `app: app` allowing `max_unavailable` disruptions.
pub fn pdb(namespace: &str, name: &str, app: &str, max_unavailable: i32) -> PodDisruptionBudget {
    from(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": app}}}
    }))
}

/// A Job of `parallelism` pods labelled `app: name`, each running `run_seconds` (0: until
/// evicted), with `backoff_limit` and an optional podFailurePolicy action on DisruptionTarget.
pub fn job(
    namespace: &str,
    name: &str,
    parallelism: i32,
    backoff_limit: i32,
    on_disruption: Option<&str>,
    priority_class: &str,
    milli_cpu: i64,
) -> Job {
    let mut spec = pod_spec(priority_class, milli_cpu);
    spec["restartPolicy"] = json!("Never");
    let mut job = json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"parallelism": parallelism, "completions": parallelism * 100, "backoffLimit": backoff_limit,
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
    });
    if let Some(action) = on_disruption {
        job["spec"]["podFailurePolicy"] =
            json!({"rules": [{"action": action, "onPodConditions": [{"type": "DisruptionTarget"}]}]});
    }
    from(job)
}

fn from<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a test-bed object is valid Kubernetes JSON")
}

/// Creates every object, 64 at a time.
pub async fn create_all<K>(client: &Client, objects: Vec<K>) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    create_all_with(client, objects, 64).await
}

/// Creates every object, `concurrency` requests at a time (the loop benchmark builds tens
/// of thousands of pods).
pub async fn create_all_with<K>(client: &Client, objects: Vec<K>, concurrency: usize) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let resource = ApiResource::erase::<K>(&());
    let objects: Vec<DynamicObject> =
        objects.iter().map(|o| serde_json::to_value(o).and_then(serde_json::from_value)).collect::<Result<_, _>>()?;
    stream::iter(objects.into_iter().map(|o| {
        let api: Api<DynamicObject> = match o.metadata.namespace.as_deref() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        async move { api.create(&PostParams::default(), &o).await.map(|_| ()) }
    }))
    .buffer_unordered(concurrency.max(1))
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

/// Creates every object, one at a time, each once: an object already there (a retry after
/// a dropped answer) is fine, and a failed request is tried again, up to 10 times a second
/// apart (a long measurement is not lost to a busy API server closing a connection).
pub async fn create_each<K>(client: &Client, objects: Vec<K>) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let resource = ApiResource::erase::<K>(&());
    for o in &objects {
        let o: DynamicObject = serde_json::from_value(serde_json::to_value(o)?)?;
        let api: Api<DynamicObject> = match o.metadata.namespace.as_deref() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let mut tries = 0;
        loop {
            match api.create(&PostParams::default(), &o).await {
                Ok(_) => break,
                Err(kube::Error::Api(e)) if e.code == 409 => break,
                Err(e) if tries < 10 => {
                    tries += 1;
                    tracing::warn!(error = %e, "create failed; trying again");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

pub async fn create<K>(client: &Client, object: K) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    create_all(client, vec![object]).await
}

/// Every pod in `namespace` (all namespaces for `None`).
pub async fn pods(client: &Client, namespace: Option<&str>) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    Ok(api.list(&ListParams::default()).await?.items)
}

pub fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

pub fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

/// Running or about to run on a node, and not being deleted.
pub fn is_placed(pod: &Pod) -> bool {
    node_of(pod).is_some() && pod.metadata.deletion_timestamp.is_none() && !matches!(phase(pod), "Failed" | "Succeeded")
}
