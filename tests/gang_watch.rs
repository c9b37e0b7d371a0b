//! Gang kinds from a Kubernetes API server (the loopback fake): each PodGroup kind the
//! server serves is watched and builds the same gangs as a snapshot of the same objects;
//! a kind it does not serve is skipped without holding readiness back, and one installed
//! or removed later is picked up by the next discovery.

mod fake_api;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use coloc_extender::cluster::watch::{self, Freshness};
use coloc_extender::cluster::{snapshot, View, ViewCell};
use coloc_extender::model::{DisruptionMode, GangInfo};
use coloc_extender::policy::Policy;
use fake_api::wait_until;
use serde_json::{json, Value};

const NATIVE_BETA: &str = "scheduling.k8s.io/v1beta1";
const NATIVE_ALPHA: &str = "scheduling.k8s.io/v1alpha2";
const COSCHEDULING: &str = "scheduling.x-k8s.io/v1alpha1";
const VOLCANO: &str = "scheduling.volcano.sh/v1beta1";
const ALL: [&str; 4] = [NATIVE_BETA, NATIVE_ALPHA, COSCHEDULING, VOLCANO];

fn node(name: &str) -> Value {
    json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": name}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
}

/// A running batch pod on n1; `declare` adds its gang declaration.
fn member(name: &str, declare: impl FnOnce(&mut Value)) -> Value {
    let mut p = json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"), "labels": {}, "annotations": {}},
        "spec": {"nodeName": "n1", "priority": 100, "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running", "startTime": "2026-11-01T00:00:00Z"},
    });
    declare(&mut p);
    p
}

fn pod_group(api_version: &str, spec: Value) -> Value {
    json!({"kind": "PodGroup", "apiVersion": api_version, "metadata": {"name": "train-7", "namespace": "ml"}, "spec": spec})
}

/// The objects of one source: two members and their PodGroup.
fn cluster(api_version: &str) -> Vec<Value> {
    let (declare, spec): (fn(&mut Value), Value) = match api_version {
        NATIVE_BETA => (
            |p| p["spec"]["schedulingGroup"] = json!({"podGroupName": "train-7"}),
            json!({"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}}, "priority": 500}),
        ),
        NATIVE_ALPHA => (
            |p| p["spec"]["schedulingGroup"] = json!({"podGroupName": "train-7"}),
            json!({"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": "PodGroup", "priorityClassName": "gang-high"}),
        ),
        COSCHEDULING => {
            (|p| p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = json!("train-7"), json!({"minMember": 1}))
        }
        VOLCANO => (
            |p| p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = json!("train-7"),
            json!({"minMember": 2, "queue": "default"}),
        ),
        other => panic!("no such kind {other}"),
    };
    vec![
        node("n1"),
        json!({"kind": "PriorityClass", "apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": "gang-high"}, "value": 700}),
        member("m-1", declare),
        member("m-2", declare),
        pod_group(api_version, spec),
    ]
}

struct Watched {
    cell: Arc<ViewCell>,
    fresh: Arc<Freshness>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn watched(api: &fake_api::FakeApi) -> Watched {
    watched_under(api, Arc::new(ArcSwap::from_pointee(Policy::builtin_default().enforced()))).await
}

/// `watched`, under a policy the test may reload.
async fn watched_under(api: &fake_api::FakeApi, policy: Arc<ArcSwap<Policy>>) -> Watched {
    let cell = Arc::new(ViewCell::default());
    let fresh = Arc::new(Freshness::default());
    let run = watch::run_with(
        api.client(),
        cell.clone(),
        policy,
        fresh.clone(),
        Duration::from_millis(20),
        Duration::from_millis(100),
    );
    let w = Watched { cell: cell.clone(), fresh, task: tokio::spawn(run) };
    assert!(wait_until(|| cell.is_ready()).await, "view never synced");
    w
}

fn gang_of(view: &View, pod: &str) -> Option<GangInfo> {
    let p = view.pod(pod)?.clone();
    Some(view.gang(&view.gang_of(&p)?, &p))
}

/// Served: only `api_version` among the PodGroup APIs.
async fn api_serving(api_version: &str, items: &[Value]) -> fake_api::FakeApi {
    let api = fake_api::FakeApi::start().await;
    for other in ALL.iter().filter(|v| **v != api_version) {
        api.unserve(other);
    }
    api.seed(items);
    api
}

async fn watch_matches_snapshot(api_version: &str, expect: (usize, DisruptionMode, Option<i32>)) {
    let items = cluster(api_version);
    let api = api_serving(api_version, &items).await;
    let w = watched(&api).await;
    let snap = View::build(
        snapshot::parse(json!({"kind": "List", "items": items}).to_string().as_bytes()).unwrap(),
        &Policy::builtin_default().enforced(),
    );
    let from_snapshot = gang_of(&snap, "ml/m-1").expect("a gang in the snapshot");
    assert_eq!((from_snapshot.min, from_snapshot.disruption, from_snapshot.priority), expect, "{from_snapshot:?}");
    // The first view already holds the PodGroup: a served gang kind is listed before it is out.
    assert_eq!(gang_of(&w.cell.load().unwrap(), "ml/m-1"), Some(from_snapshot));
    assert!(w.fresh.unsynced_kinds().is_empty());
}

#[tokio::test]
async fn a_native_v1beta1_podgroup_watched_matches_the_snapshot() {
    watch_matches_snapshot(NATIVE_BETA, (2, DisruptionMode::All, Some(500))).await;
}

#[tokio::test]
async fn a_native_v1alpha2_podgroup_watched_matches_the_snapshot() {
    watch_matches_snapshot(NATIVE_ALPHA, (2, DisruptionMode::All, Some(700))).await;
}

#[tokio::test]
async fn a_coscheduling_podgroup_watched_matches_the_snapshot() {
    watch_matches_snapshot(COSCHEDULING, (1, DisruptionMode::Single, None)).await;
}

#[tokio::test]
async fn a_volcano_podgroup_watched_matches_the_snapshot() {
    watch_matches_snapshot(VOLCANO, (2, DisruptionMode::Single, None)).await;
}

#[tokio::test]
async fn unserved_gang_kinds_are_skipped_and_one_installed_later_is_picked_up() {
    let items = cluster(VOLCANO);
    let api = fake_api::FakeApi::start().await;
    for v in ALL {
        api.unserve(v);
    }
    api.seed(&items);
    let w = watched(&api).await;
    // Ready without any gang kind; the members are a gang by their annotation alone.
    assert!(w.fresh.unsynced_kinds().is_empty());
    let before = gang_of(&w.cell.load().unwrap(), "ml/m-1").unwrap();
    assert!(before.min_from.contains("PodGroup not in the view"), "{}", before.min_from);
    // The Volcano CRD is installed: the next discovery watches it.
    api.serve(VOLCANO);
    assert!(
        wait_until(|| gang_of(&w.cell.load().unwrap(), "ml/m-1").unwrap().min_from == "minMember 2").await,
        "volcano PodGroup never watched"
    );
    // ... and removed again: its PodGroups leave the view, which stays ready.
    api.unserve(VOLCANO);
    assert!(
        wait_until(|| gang_of(&w.cell.load().unwrap(), "ml/m-1").unwrap().min_from.contains("not in the view")).await
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(w.cell.is_ready());
    assert!(
        !w.fresh.failing_kinds().contains(&"PodGroup.scheduling.volcano.sh/v1beta1"),
        "{:?}",
        w.fresh.failing_kinds()
    );
}

#[tokio::test]
async fn native_v1beta1_is_preferred_to_v1alpha2_when_both_are_served() {
    let api = fake_api::FakeApi::start().await;
    api.seed(&cluster(NATIVE_BETA));
    let _w = watched(&api).await;
    assert!(api.count("list", "PodGroup") >= 1);
    let paths: Vec<String> =
        api.requests().into_iter().map(|(_, path, _)| path).filter(|p| p.ends_with("/podgroups")).collect();
    assert!(paths.iter().any(|p| p.contains("/v1beta1/")), "{paths:?}");
    assert!(!paths.iter().any(|p| p.contains("/v1alpha2/")), "{paths:?}");
}

#[tokio::test]
async fn a_podgroup_deleted_while_its_pods_run_leaves_the_view_and_its_gang_needs_every_member() {
    let items = cluster(NATIVE_BETA);
    let api = api_serving(NATIVE_BETA, &items).await;
    let w = watched(&api).await;
    assert_eq!(gang_of(&w.cell.load().unwrap(), "ml/m-1").unwrap().disruption, DisruptionMode::All);
    api.remove("PodGroup", "ml", "train-7");
    assert!(
        wait_until(|| gang_of(&w.cell.load().unwrap(), "ml/m-1").unwrap().disruption == DisruptionMode::Single).await
    );
    let after = gang_of(&w.cell.load().unwrap(), "ml/m-1").unwrap();
    assert_eq!((after.size, after.min, after.priority), (2, 2, None), "{after:?}");
}

/// The view keeps of each pod only the annotations the policy reads: a reloaded policy that
/// names another gang minimum finds it once the pods are listed again, which a reload
/// that reads no new key does not cost.
#[tokio::test]
async fn a_minimum_annotation_a_reloaded_policy_names_is_read_from_the_pods_listed_again() {
    const MIN_MEMBERS: &str = "example.com/min-members";
    let declare = |p: &mut Value| {
        p["metadata"]["labels"]["pod-group.scheduling.sigs.k8s.io/name"] = json!("train");
        p["metadata"]["annotations"][MIN_MEMBERS] = json!("2");
    };
    let api = fake_api::FakeApi::start().await;
    for v in ALL {
        api.unserve(v);
    }
    api.seed(&[node("n1"), member("m-1", declare), member("m-2", declare), member("m-3", declare)]);
    let policy = Arc::new(ArcSwap::from_pointee(Policy::builtin_default().enforced()));
    let w = watched_under(&api, policy.clone()).await;
    let minimum = || gang_of(&w.cell.load().unwrap(), "ml/m-1").map(|g| (g.min, g.min_from));
    assert_eq!(minimum(), Some((3, "no minimum declared: all 3 members".into())), "not a key the policy reads yet");
    let lists = api.count("list", "Pod");

    let mut reads_it = Policy::builtin_default().enforced();
    reads_it.gangs.min_member_annotations.push(MIN_MEMBERS.into());
    policy.store(Arc::new(reads_it.clone()));
    assert!(wait_until(|| minimum() == Some((2, "min-members 2".into()))).await, "{:?}", minimum());
    assert_eq!(api.count("list", "Pod"), lists + 1, "the pods were listed once again");
    assert!(w.cell.is_ready(), "the view stayed ready while they were");

    // Reading fewer keys, or the same ones, needs no list.
    let mut same_keys = reads_it;
    same_keys.max_candidates += 1;
    policy.store(Arc::new(same_keys));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(api.count("list", "Pod"), lists + 1);
    assert_eq!(minimum(), Some((2, "min-members 2".into())));
}
