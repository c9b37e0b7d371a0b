//! The resource table: which kinds the fake serves, and where.

/// One servable resource. Group "" is the core group (`/api/v1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

const fn r(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Resource {
    Resource { group, version, plural, kind, namespaced }
}

/// Add a kind with one line: (group, version, plural, kind, namespaced). Two entries may share a
/// kind (core and events.k8s.io `Event`): each entry is its own store, and the kind-based helpers
/// (`get`, `list`, `remove`, `count`, faults) cover all of them.
pub const RESOURCES: &[Resource] = &[
    r("", "v1", "nodes", "Node", false),
    r("", "v1", "pods", "Pod", true),
    r("", "v1", "events", "Event", true),
    r("", "v1", "namespaces", "Namespace", false),
    r("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true),
    r("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false),
    r("batch", "v1", "jobs", "Job", true),
    r("events.k8s.io", "v1", "events", "Event", true),
    r("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", true),
    r("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", true),
    r("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup", true),
    r("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", true),
];

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The table index serving `group`/`version`/`plural`.
pub fn by_path(group: &str, version: &str, plural: &str) -> Option<usize> {
    RESOURCES.iter().position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Every table index serving `kind`.
pub fn by_kind(kind: &str) -> impl Iterator<Item = usize> + '_ {
    RESOURCES.iter().enumerate().filter(move |(_, r)| r.kind == kind).map(|(i, _)| i)
}

/// The table index for an object's `kind` and `apiVersion`: the entry whose group and
/// version match, else the first whose group matches, else (no or unknown apiVersion) the
/// first entry with that kind.
pub fn for_object(kind: &str, api_version: Option<&str>) -> Option<usize> {
    let group = api_version.map(|av| av.rsplit_once('/').map_or("", |(g, _)| g));
    by_kind(kind)
        .find(|&i| api_version.is_some_and(|av| RESOURCES[i].api_version() == av))
        .or_else(|| by_kind(kind).find(|&i| group.is_none_or(|g| RESOURCES[i].group == g)))
        .or_else(|| by_kind(kind).next())
}

/// Discovery for one group version (`GET /apis/{group}/{version}`), if the table has it.
pub fn api_resource_list(api_version: &str) -> Option<serde_json::Value> {
    let served: Vec<serde_json::Value> = RESOURCES
        .iter()
        .filter(|r| !r.group.is_empty() && r.api_version() == api_version)
        .map(|r| serde_json::json!({"name": r.plural, "singularName": "", "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}))
        .collect();
    (!served.is_empty()).then(|| serde_json::json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version, "resources": served}))
}
