//! What must hold after any scenario or fault: nothing lost, nothing left gated.

use std::collections::BTreeSet;
use std::time::Duration;

use coloc_testbed::cluster;
use k8s_openapi::api::core::v1::Pod;

use crate::Bed;
use coloc_extender::model::marks::{BASE_NAME, FROM_UID};

pub fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

pub fn from_uid(p: &Pod) -> Option<&str> {
    p.metadata.annotations.as_ref()?.get(FROM_UID).map(String::as_str)
}

pub fn is_replacement(p: &Pod) -> bool {
    from_uid(p).is_some()
}

pub fn gated(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty())
}

fn live(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none() && !matches!(cluster::phase(p), "Failed" | "Succeeded")
}

/// The bare pods of `namespace` now, as (name, uid).
pub async fn bare_pods(bed: &Bed, namespace: &str) -> anyhow::Result<Vec<(String, String)>> {
    Ok(cluster::pods(&bed.client, Some(namespace))
        .await?
        .iter()
        .filter(|p| p.metadata.owner_references.as_ref().is_none_or(|o| o.is_empty()))
        .map(|p| (cluster::name(p).to_string(), uid(p)))
        .collect())
}

fn base_name(p: &Pod) -> Option<&str> {
    p.metadata.annotations.as_ref()?.get(BASE_NAME).map(String::as_str)
}

/// Every original is alive, or exactly one live replacement of its chain (replacements of
/// replacements keep the first pod's name as their base name) stands for it; no live
/// replacement is still gated once its own original is gone.
pub fn check_nothing_lost(pods: &[Pod], originals: &[(String, String)]) -> Result<(), String> {
    let live_uids: BTreeSet<String> =
        pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).map(uid).collect();
    for (name, original) in originals {
        let alive = pods.iter().any(|p| &uid(p) == original && live(p));
        let standing_in: Vec<&Pod> = pods.iter().filter(|p| live(p) && base_name(p) == Some(name.as_str())).collect();
        match (alive, standing_in.as_slice()) {
            (true, []) => {}
            (true, [r, ..]) if from_uid(r) == Some(original.as_str()) => {} // stored, not yet released
            (false, [one]) => {
                if gated(one) && !from_uid(one).is_some_and(|f| live_uids.contains(f)) {
                    return Err(format!(
                        "{name}: replacement {} still gated after its original is gone",
                        cluster::name(one)
                    ));
                }
            }
            (false, []) => return Err(format!("{name} lost: gone, and no live replacement")),
            (_, many) => {
                return Err(format!(
                    "{name}: {} live replacements ({})",
                    many.len(),
                    many.iter().map(|p| cluster::name(p)).collect::<Vec<_>>().join(", ")
                ))
            }
        }
    }
    Ok(())
}

/// Waits (up to a minute: the release loop runs every few seconds) until
/// [`check_nothing_lost`] holds.
pub async fn nothing_lost(bed: &Bed, namespace: &str, originals: &[(String, String)]) -> anyhow::Result<()> {
    bed.until_pods(namespace, Duration::from_secs(60), "nothing lost, nothing left gated", |pods| {
        check_nothing_lost(pods, originals)
    })
    .await
}
