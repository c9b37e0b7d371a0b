//! What must hold after any scenario or fault: nothing lost, nothing left gated.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use coloc_testbed::cluster;
use k8s_openapi::api::core::v1::Pod;

use crate::Bed;

pub const FROM_UID: &str = "coloc-extender.io/requeued-from-uid";

pub fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

pub fn from_uid(p: &Pod) -> Option<&str> {
    p.metadata
        .annotations
        .as_ref()?
        .get(FROM_UID)
        .map(String::as_str)
}

pub fn is_replacement(p: &Pod) -> bool {
    from_uid(p).is_some()
}

pub fn gated(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

fn live(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none() && !matches!(cluster::phase(p), "Failed" | "Succeeded")
}

/// The bare pods of `namespace` now, as (name, uid).
pub async fn bare_pods(bed: &Bed, namespace: &str) -> anyhow::Result<Vec<(String, String)>> {
    Ok(cluster::pods(&bed.client, Some(namespace))
        .await?
        .iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .as_ref()
                .is_none_or(|o| o.is_empty())
        })
        .map(|p| (cluster::name(p).to_string(), uid(p)))
        .collect())
}

/// Every original is alive, or is followed (through replacements of replacements) by
/// exactly one live pod; no live replacement is still gated once its original is gone.
pub fn check_nothing_lost(pods: &[Pod], originals: &[(String, String)]) -> Result<(), String> {
    let by_uid: BTreeMap<String, &Pod> = pods.iter().map(|p| (uid(p), p)).collect();
    let mut children: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for p in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        if let Some(from) = from_uid(p) {
            children.entry(from).or_default().push(p);
        }
    }
    for (name, original) in originals {
        let mut at = original.clone();
        let mut seen = BTreeSet::new();
        loop {
            if !seen.insert(at.clone()) {
                return Err(format!("{name}: requeue cycle"));
            }
            if by_uid.get(&at).is_some_and(|p| live(p)) {
                break;
            }
            match children.get(at.as_str()).map(Vec::as_slice) {
                None | Some([]) => {
                    return Err(format!("{name} lost: pod {at} gone and no replacement"))
                }
                Some([one]) => {
                    if gated(one) {
                        return Err(format!(
                            "{name}: replacement {} still gated after its original is gone",
                            cluster::name(one)
                        ));
                    }
                    at = uid(one);
                }
                Some(many) => {
                    return Err(format!("{name}: {} live replacements of {at}", many.len()))
                }
            }
        }
    }
    Ok(())
}

/// Waits (up to a minute: the release loop runs every few seconds) until
/// [`check_nothing_lost`] holds.
pub async fn nothing_lost(
    bed: &Bed,
    namespace: &str,
    originals: &[(String, String)],
) -> anyhow::Result<()> {
    bed.until_pods(
        namespace,
        Duration::from_secs(60),
        "nothing lost, nothing left gated",
        |pods| check_nothing_lost(pods, originals),
    )
    .await
}
