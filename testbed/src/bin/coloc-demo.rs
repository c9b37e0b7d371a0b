//! coloc-demo: a scenario run twice on a local control plane (the release binaries in
//! KUBE_BIN_DIR): behind kube-scheduler alone, then behind coloc-extender
//! (`serve --kube --requeue --events --wake`, the default policy). Prints side by side what
//! each placed, evicted, requeued and lost, and the extender's Events.
//!
//!   cargo build --release && cargo run --release -p coloc-testbed --bin coloc-demo
//!   coloc-demo [--scenario FILE] [--extender PATH] [--hold]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use coloc_testbed::cluster::{self};
use coloc_testbed::control_plane::Options;
use coloc_testbed::scenario::Scenario;
use coloc_testbed::{kubelet, wait, Binaries, ControlPlane, Extender, ExtenderEntry, Kubelet, Scheduler};
use k8s_openapi::api::batch::v1::Job;
use kube::Api;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

struct Args {
    scenario: PathBuf,
    extender: PathBuf,
    hold: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        scenario: Path::new(REPO).join("testbed/scenarios/colocated.json"),
        extender: Path::new(REPO).join("target/release/coloc-extender"),
        hold: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--scenario" => a.scenario = it.next().ok_or("--scenario needs a file")?.into(),
            "--extender" => a.extender = it.next().ok_or("--extender needs a path")?.into(),
            "--hold" => a.hold = true,
            "-h" | "--help" => return Err("usage: coloc-demo [--scenario FILE] [--extender PATH] [--hold]".into()),
            other => return Err(format!("unknown argument {other:?}; usage: coloc-demo [--scenario FILE] [--extender PATH] [--hold]")),
        }
    }
    if !a.extender.is_file() {
        return Err(format!("no extender binary at {} (build it: cargo build --release, or pass --extender)", a.extender.display()));
    }
    Ok(a)
}

#[derive(Default)]
struct Outcome {
    /// online pod → (node, seconds from arrival to bound)
    placed: BTreeMap<String, (String, f64)>,
    evicted: BTreeSet<String>,
    requeued: BTreeSet<String>,
    lost: BTreeSet<String>,
    gangs_broken: BTreeSet<String>,
    jobs_failed: BTreeSet<String>,
    events: String,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("coloc-demo: {e}");
            return ExitCode::from(2);
        }
    };
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("coloc-demo: {why}");
            return ExitCode::from(2);
        }
    };
    match demo(&bins, &args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("coloc-demo: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn demo(bins: &Binaries, args: &Args) -> anyhow::Result<()> {
    let scenario = Scenario::load(&args.scenario)?;
    println!("scenario {}: {}", args.scenario.display(), scenario.about);
    println!("control plane: {} (kube-scheduler, kube-apiserver, kube-controller-manager; a kubelet stand-in)\n", bins.dir.display());
    println!("run 1: kube-scheduler alone ...");
    let (stock, _) = run(bins, &scenario, None, false).await?;
    println!("run 2: kube-scheduler + coloc-extender ...");
    let (ours, held) = run(bins, &scenario, Some(&args.extender), args.hold).await?;
    let rows: [(&str, Box<dyn Fn(&Outcome) -> String>); 7] = [
        ("online pods placed", Box::new(|o| format!("{}/{}", o.placed.len(), scenario.online.len()))),
        ("time to place, max", Box::new(|o| o.placed.values().map(|(_, s)| *s).fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s)))).map_or("-".into(), |s| format!("{s:.1} s")))),
        ("evicted", Box::new(|o| list(&o.evicted))),
        ("requeued (back in the queue)", Box::new(|o| list(&o.requeued))),
        ("lost (bare pods gone for good)", Box::new(|o| list(&o.lost))),
        ("gangs broken", Box::new(|o| list(&o.gangs_broken))),
        ("Jobs failed", Box::new(|o| list(&o.jobs_failed))),
    ];
    println!("\n{:<32} {:<28} with coloc-extender", "", "kube-scheduler alone");
    for (label, f) in &rows {
        let (a, b) = (f(&stock), f(&ours));
        if a.len() <= 28 {
            println!("{label:<32} {a:<28} {b}");
        } else {
            println!("{label:<32} {a}\n{:<32} {:<28} {b}", "", "");
        }
    }
    println!("\nwhere each online pod went:");
    for o in &scenario.online {
        let at = |x: &Outcome| x.placed.get(&o.name).map_or("pending".to_string(), |(n, _)| n.clone());
        println!("  online/{:<23} {:<28} {}", o.name, at(&stock), at(&ours));
    }
    println!("\nthe extender's Events (what `kubectl describe pod -n online <name>` shows):\n{}", ours.events);
    if let Some(plane) = held {
        println!(
            "\nthe second control plane is still up (--hold): kubectl --kubeconfig {} describe pod -n online web-1\npress Ctrl-C to stop it",
            plane.admin_kubeconfig.display()
        );
        let _ = tokio::signal::ctrl_c().await;
    } else {
        println!("(run with --hold to keep the second control plane up for kubectl)");
    }
    Ok(())
}

fn list(s: &BTreeSet<String>) -> String {
    if s.is_empty() {
        "none".into()
    } else {
        s.iter().cloned().collect::<Vec<_>>().join(" ")
    }
}

async fn run(bins: &Binaries, sc: &Scenario, extender: Option<&Path>, hold: bool) -> anyhow::Result<(Outcome, Option<ControlPlane>)> {
    let plane = ControlPlane::start(bins, Options::default()).await?;
    let client = plane.client().await?;
    cluster::create_all(&client, vec![cluster::namespace("online"), cluster::namespace("batch")]).await?;
    cluster::create_all(&client, cluster::default_priority_classes()).await?;
    for f in ["clusterrole.yaml", "clusterrolebinding.yaml", "requeue/clusterrole.yaml", "requeue/clusterrolebinding.yaml", "wake/role.yaml", "wake/rolebinding.yaml"] {
        plane.apply(&Path::new(REPO).join("manifests").join(f))?;
    }
    let _kubelet = Kubelet::start(client.clone(), kubelet::Options::default());
    cluster::create_all(&client, sc.node_objects()).await?;
    cluster::create_all(&client, sc.bare_pods()).await?;
    cluster::create_all(&client, sc.job_objects()).await?;
    let want: usize = sc.bare.len() + sc.jobs.iter().map(|j| j.pods as usize).sum::<usize>();
    // Job pods are placed by kube-scheduler: start it for them, without the extender, then
    // stop it, so both runs begin from the same cluster.
    let warmup = Scheduler::start(&plane, "kube-scheduler-warmup", &[], 1000).await?;
    let before = wait::until(Duration::from_secs(90), "the offline pods running", || async {
        let pods = cluster::pods(&client, Some("batch")).await.map_err(|e| e.to_string())?;
        let running: Vec<_> = pods.iter().filter(|p| cluster::phase(p) == "Running").collect();
        if running.len() == want { Ok(running.iter().map(|p| (cluster::name(p).to_string(), p.metadata.uid.clone().unwrap_or_default())).collect::<Vec<_>>()) } else { Err(format!("{} of {want} running", running.len())) }
    })
    .await?;
    drop(warmup);

    let ext = match extender {
        Some(path) => Some(Extender::start(&plane, "coloc-extender", path, &["--kube", "--requeue", "--events", "--wake"]).await?),
        None => None,
    };
    let entries: Vec<ExtenderEntry> = ext.iter().map(|e| ExtenderEntry::all_verbs(&e.url(), true)).collect();
    let _scheduler = Scheduler::start(&plane, "kube-scheduler", &entries, 1000).await?;
    let arrived = Instant::now();
    cluster::create_all(&client, sc.online_pods()).await?;
    let mut out = Outcome::default();
    let deadline = arrived + Duration::from_secs(60);
    while out.placed.len() < sc.online.len() && Instant::now() < deadline {
        for p in cluster::pods(&client, Some("online")).await? {
            if let Some(node) = cluster::node_of(&p) {
                out.placed.entry(cluster::name(&p).to_string()).or_insert((node.to_string(), arrived.elapsed().as_secs_f64()));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let victims finish, replacements be released and the Job controller count.
    tokio::time::sleep(Duration::from_secs(6)).await;

    let after = cluster::pods(&client, Some("batch")).await?;
    let alive = |uid: &str| after.iter().any(|p| p.metadata.uid.as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none());
    let stands_in = |name: &str| after.iter().any(|p| p.metadata.annotations.as_ref().and_then(|a| a.get("coloc-extender.io/base-name")).is_some_and(|b| b == name));
    let bare: BTreeSet<&str> = sc.bare.iter().map(|b| b.name.as_str()).collect();
    for (name, uid) in &before {
        if alive(uid) {
            continue;
        }
        out.evicted.insert(name.clone());
        if bare.contains(name.as_str()) {
            if stands_in(name) {
                out.requeued.insert(name.clone());
            } else {
                out.lost.insert(name.clone());
            }
        }
    }
    for (gang, members) in sc.gangs() {
        let gone = members.iter().filter(|m| out.evicted.contains(**m)).count();
        if gone > 0 && gone < members.len() {
            out.gangs_broken.insert(gang.to_string());
        }
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), "batch");
    for j in &sc.jobs {
        let job = jobs.get(&j.name).await?;
        let failed = job.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"));
        if failed {
            out.jobs_failed.insert(j.name.clone());
        }
    }
    if ext.is_some() {
        out.events = plane
            .kubectl(&["get", "events", "-n", "online", "--sort-by=.metadata.creationTimestamp", "-o", "custom-columns=POD:.involvedObject.name,TYPE:.type,REASON:.reason,MESSAGE:.message"])
            .unwrap_or_else(|e| format!("(cannot list events: {e})"));
    }
    drop(_scheduler);
    drop(ext);
    Ok((out, hold.then_some(plane)))
}
