//! Requeue within its bounds, end to end: a victim too large for the bytes a replica keeps
//! is copied from a read of the original; a copy's name held by a stranger goes to the
//! next of its names. Either way nothing is lost.

use coloc_extender::model::marks::{replacement_name, replacement_names};
use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::Binaries;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::invariants::{bare_pods, is_replacement, nothing_lost};
use crate::scenarios::{online, online_placed};
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "requeue_copies_a_victim_too_large_to_keep_from_a_read_of_the_original",
            run: |b, m| Box::pin(too_large_to_keep(b, m)),
        },
        Case {
            name: "requeue_gives_a_copy_its_next_name_where_a_stranger_holds_the_first",
            run: |b, m| Box::pin(name_taken(b, m)),
        },
    ]
}

/// A pod of about 300 KB (a 200 KB annotation, a 100 KB environment variable): over the
/// 256 KiB a replica keeps of one marked pod.
fn large(name: &str) -> Pod {
    let mut pod =
        PodBuilder::new("batch", name, "free", 1900).on("node-1").annotate("notes", &"n".repeat(200_000)).build();
    let spec = pod.spec.get_or_insert_with(Default::default);
    let env = json!([{"name": "BLOB", "value": "b".repeat(100_000)}]);
    spec.containers[0].env = Some(serde_json::from_value(env).expect("an env var"));
    pod
}

async fn too_large_to_keep(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    // The originals terminate for their grace period, as on real nodes: a read finds them.
    let mut bed = Bed::up_honouring_grace(bins, mode).await?;
    bed.nodes(&["node-1"], 4000).await?;
    cluster::create_all(&bed.client, vec![large("free-1"), large("free-2")]).await?;
    bed.until_running("batch", 2).await?;
    let originals = bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    online(&bed, "web", 3000).await?;
    online_placed(&bed, "web").await?;
    nothing_lost(&bed, "batch", &originals).await?;
    let from_a_read = bed.extenders[e].metric_sum("coloc_requeue_copies_from_get_total", "").await?;
    anyhow::ensure!(from_a_read >= 2.0, "{from_a_read} copies built from a read of 2 victims too large to keep");
    let kept = bed.extenders[e].metric_sum("coloc_requeue_kept_bytes", "").await?;
    anyhow::ensure!(kept < 256.0 * 1024.0, "{kept} bytes kept of pods too large to keep");
    bed.finish()
}

async fn name_taken(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.one_node_two_free_pods().await?;
    let originals = bare_pods(&bed, "batch").await?;
    // A stranger, pending where no node matches, under free-1's copy's first name.
    let free_1 = cluster::pods(&bed.client, Some("batch"))
        .await?
        .into_iter()
        .find(|p| cluster::name(p) == "free-1")
        .ok_or_else(|| anyhow::anyhow!("no free-1"))?;
    let model = coloc_extender::model::Pod {
        name: "free-1".into(),
        namespace: "batch".into(),
        uid: free_1.metadata.uid.clone().unwrap_or_default(),
        ..Default::default()
    };
    let first = replacement_name(&model);
    let stranger = PodBuilder::new("batch", &first, "free", 100).select("nowhere", "at-all").build();
    cluster::create(&bed.client, stranger).await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    online(&bed, "web", 3000).await?;
    online_placed(&bed, "web").await?;
    nothing_lost(&bed, "batch", &originals).await?;
    let pods = cluster::pods(&bed.client, Some("batch")).await?;
    let copy_of_free_1 = pods
        .iter()
        .filter(|p| is_replacement(p))
        .find(|p| {
            p.metadata.annotations.as_ref().and_then(|a| a.get(coloc_extender::model::marks::FROM_UID))
                == free_1.metadata.uid.as_ref()
        })
        .ok_or_else(|| anyhow::anyhow!("no copy of free-1"))?;
    let name = cluster::name(copy_of_free_1);
    anyhow::ensure!(name == replacement_names(&model)[1], "free-1's copy is {name}, not its second name");
    anyhow::ensure!(
        pods.iter().any(|p| cluster::name(p) == first && !is_replacement(p)),
        "the stranger under {first} is left as it was"
    );
    bed.finish()
}
