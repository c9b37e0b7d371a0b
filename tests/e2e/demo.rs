//! coloc-demo, the demo a newcomer runs first, on one small generated cluster with mixed
//! grace periods: it runs to the end and its figures make sense (every online pod placed,
//! no bare pod lost, no Job failed behind the extender). So a change that breaks the demo
//! (an install that moved, a flag renamed) fails here, not in a user's hands.

use coloc_testbed::{demo, Binaries};

use crate::bed::EXTENDER;
use crate::{Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "coloc_demo_places_every_online_pod_and_loses_nothing_on_a_small_generated_cluster",
        run: |b, m| Box::pin(smoke(b, m)),
    }]
}

/// Stock beside names in one mode, objects alone in the other, placing its own offline
/// pods (`--own-placement`): each mode's case stays about a minute.
async fn smoke(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let (runs, placement) = match mode {
        Mode::Names => ("stock,names", None),
        Mode::Objects => ("objects", Some("--own-placement")),
    };
    let argv = ["--generate", "6", "--seed", "4", "--mixed-grace", "--time-scale", "0.1", "--runs", runs];
    let argv = argv.into_iter().chain(["--extender", EXTENDER, "--quiet"]).chain(placement).map(String::from);
    let args = demo::parse_args(argv).map_err(anyhow::Error::msg)?;
    let report = demo::demo(&bins, &args).await?;
    let runs = report["runs"].as_array().ok_or_else(|| anyhow::anyhow!("no runs in {report}"))?;
    anyhow::ensure!(runs.len() == runs_asked(mode), "{} runs reported\n{report:#}", runs.len());
    anyhow::ensure!(report["own_placement"] == placement.is_some(), "own_placement not as asked\n{report:#}");
    for run in runs {
        let (kind, online) = (&run["kind"], &run["online"]);
        anyhow::ensure!(online.as_u64() > Some(0), "{kind}: no online pod arrived\n{run:#}");
        anyhow::ensure!(run["online_placed"] == *online, "{kind}: not every online pod placed\n{run:#}");
        if kind != "stock" {
            anyhow::ensure!(run["bare_lost"] == 0, "{kind}: bare pods lost\n{run:#}");
            anyhow::ensure!(run["jobs_failed"] == 0, "{kind}: Jobs failed\n{run:#}");
        }
    }
    Ok(())
}

fn runs_asked(mode: Mode) -> usize {
    match mode {
        Mode::Names => 2,
        Mode::Objects => 1,
    }
}
