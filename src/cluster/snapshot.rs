//! Loading a cluster view from `kubectl get nodes,pods,pdb,priorityclasses,jobs -A -o json`,
//! optionally with the gang objects (`podgroups.scheduling.k8s.io`,
//! `podgroups.scheduling.x-k8s.io`, `podgroups.scheduling.volcano.sh`).

use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::view::Objects;
use crate::model::PriorityClass;
use crate::wire::k8s;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot read snapshot {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("snapshot is not a JSON List of Kubernetes objects: {0}")]
    Json(#[from] serde_json::Error),
    #[error("snapshot items[{index}] ({kind} {name}): {message}")]
    Item { index: usize, kind: String, name: String, message: String },
}

#[derive(Deserialize)]
struct List<'a> {
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Kind {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    api_version: Option<String>,
}

pub fn load(path: &Path) -> Result<Objects, SnapshotError> {
    let text =
        std::fs::read(path).map_err(|source| SnapshotError::Read { path: path.display().to_string(), source })?;
    parse(&text)
}

pub fn parse(bytes: &[u8]) -> Result<Objects, SnapshotError> {
    let list: List = serde_json::from_slice(bytes)?;
    let mut objects = Objects::default();
    for (index, raw) in list.items.into_iter().enumerate() {
        let head = serde_json::from_str::<Kind>(raw.get())?;
        let kind = head.kind.unwrap_or_default();
        let item_err = |name: String, message: String| SnapshotError::Item { index, kind: kind.clone(), name, message };
        match kind.as_str() {
            "Node" => {
                let n: k8s::Node = serde_json::from_str(raw.get())?;
                let name = n.metadata.name.clone();
                objects.nodes.push(n.into_model().map_err(|e| item_err(name, e.to_string()))?);
            }
            "Pod" => {
                let p: k8s::Pod = serde_json::from_str(raw.get())?;
                let name = format!("{}/{}", p.metadata.namespace, p.metadata.name);
                objects.pods.push(p.into_model().map_err(|e| item_err(name, e.to_string()))?);
            }
            "PodDisruptionBudget" => {
                let p: k8s::Pdb = serde_json::from_str(raw.get())?;
                objects.pdbs.push(p.into_model());
            }
            "Job" => {
                let j: crate::wire::job::JobJson = serde_json::from_str(raw.get())?;
                let name = format!("{}/{}", j.metadata.namespace, j.metadata.name);
                objects.jobs.push(j.into_model().map_err(|e| item_err(name, e.to_string()))?);
            }
            // A snapshot with namespaces copies only into those that opt in, as a
            // cluster does; one without them (recorded before they were) into any.
            "Namespace" => {
                let n: k8s::NamespaceJson = serde_json::from_str(raw.get())?;
                objects.namespaces.get_or_insert_with(Vec::new).push(n.into_model());
            }
            "PriorityClass" => {
                let p: k8s::PriorityClassJson = serde_json::from_str(raw.get())?;
                objects.priority_classes.push(PriorityClass { name: p.metadata.name, value: p.value });
            }
            "PodGroup" => {
                // PodGroups of other API groups (a scheduler we do not know) are skipped.
                let Some(source) = k8s::pod_group_source(head.api_version.as_deref().unwrap_or("")) else { continue };
                let g: k8s::PodGroupJson = serde_json::from_str(raw.get())?;
                let name = format!("{}/{}", g.metadata.namespace, g.metadata.name);
                objects.pod_groups.push(g.into_model(source).map_err(|e| item_err(name, e.to_string()))?);
            }
            // Other kinds (events, services...) are not part of the view.
            _ => {}
        }
    }
    Ok(objects)
}
