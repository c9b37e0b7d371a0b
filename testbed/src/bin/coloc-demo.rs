//! coloc-demo: a scenario run on a local control plane (the release binaries in
//! KUBE_BIN_DIR): behind kube-scheduler alone, then behind coloc-extender
//! (`serve --kube --requeue --events --wake`, the default policy) in each
//! `nodeCacheCapable` mode asked for. Prints side by side what each placed, evicted (and
//! how many evictions were made for offline pods: recreated or requeued ones), requeued,
//! lost, the PDB violations, gangs broken, Jobs failed and the run time discarded, and
//! the extender's Events. Online pods arrive in their waves, `--wave-interval` apart.
//!
//!   cargo build --release && cargo run --release -p coloc-testbed --bin coloc-demo
//!   coloc-demo [--scenario FILE | --generate NODES [--seed N] [--no-gangs]] [--modes names,objects]
//!              [--wave-interval SECS] [--json FILE] [--extender PATH] [--hold]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use coloc_testbed::cluster::{self};
use coloc_testbed::control_plane::Options;
use coloc_testbed::scenario::Scenario;
use coloc_testbed::{kubelet, wait, Binaries, ControlPlane, Extender, ExtenderEntry, Kubelet, Scheduler};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::watcher;
use kube::Api;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

struct Args {
    scenario: PathBuf,
    /// Nodes of a generated scenario (`Scenario::generate`) instead of a file.
    generate: Option<usize>,
    seed: u64,
    /// Generated bare pods declare no gangs (to see what keeping gangs whole costs).
    no_gangs: bool,
    wave_interval: Duration,
    /// Where to write each run's figures as JSON.
    json: Option<PathBuf>,
    /// nodeCacheCapable per extender run: true for names, false for objects.
    modes: Vec<bool>,
    extender: PathBuf,
    hold: bool,
}

const USAGE: &str =
    "usage: coloc-demo [--scenario FILE | --generate NODES [--seed N] [--no-gangs]] [--modes names,objects] [--wave-interval SECS] [--json FILE] [--extender PATH] [--hold]";

fn args() -> Result<Args, String> {
    let mut a = Args {
        scenario: Path::new(REPO).join("testbed/scenarios/colocated.json"),
        generate: None,
        seed: 1,
        no_gangs: false,
        wave_interval: Duration::from_secs(3),
        json: None,
        modes: vec![true],
        extender: Path::new(REPO).join("target/release/coloc-extender"),
        hold: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--scenario" => a.scenario = it.next().ok_or("--scenario needs a file")?.into(),
            "--generate" => {
                let n = it.next().ok_or("--generate needs a number of nodes")?;
                a.generate = Some(
                    n.parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or(format!("--generate needs a number of nodes, not {n:?}"))?,
                );
            }
            "--seed" => {
                let n = it.next().ok_or("--seed needs a number")?;
                a.seed = n.parse().map_err(|_| format!("--seed needs a number, not {n:?}"))?;
            }
            "--wave-interval" => {
                let n = it.next().ok_or("--wave-interval needs seconds")?;
                a.wave_interval = Duration::from_secs_f64(
                    n.parse()
                        .ok()
                        .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                        .ok_or(format!("--wave-interval needs seconds, not {n:?}"))?,
                );
            }
            "--no-gangs" => a.no_gangs = true,
            "--json" => a.json = Some(it.next().ok_or("--json needs a file")?.into()),
            "--modes" => {
                let m = it.next().ok_or("--modes needs names, objects or both")?;
                a.modes = m
                    .split(',')
                    .map(|x| match x {
                        "names" => Ok(true),
                        "objects" => Ok(false),
                        other => Err(format!("--modes: {other:?} is neither names nor objects")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--extender" => a.extender = it.next().ok_or("--extender needs a path")?.into(),
            "--hold" => a.hold = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}; {USAGE}")),
        }
    }
    if !a.extender.is_file() {
        return Err(format!(
            "no extender binary at {} (build it: cargo build --release, or pass --extender)",
            a.extender.display()
        ));
    }
    Ok(a)
}

#[derive(Default)]
struct Outcome {
    /// online pod → (node, seconds from arrival to bound)
    placed: BTreeMap<String, (String, f64)>,
    evicted: BTreeSet<String>,
    /// Every eviction kube-scheduler made (its `Preempted` Events), of original pods,
    /// recreated ones and requeued ones alike.
    evictions: usize,
    /// Of those, made for an offline preemptor (a recreated or requeued pod).
    evictions_for_offline: usize,
    /// Covered pods disrupted while their PDB was at its floor (rises in
    /// desiredHealthy - currentHealthy, as the disruption controller reports them).
    pdb_violations: i64,
    /// Run time of every evicted pod × its CPU request.
    discarded_cpu_s: f64,
    /// Every evicted pod (originals, recreated and requeued ones) → CPU-seconds discarded.
    discarded_by_pod: BTreeMap<String, f64>,
    requeued: BTreeSet<String>,
    /// Requeued copies bound to a node by the end: they took room again.
    copies_bound: usize,
    lost: BTreeSet<String>,
    gangs_broken: BTreeSet<String>,
    /// Run time × CPU of the members a broken gang still has running: a gang runs as one,
    /// so their progress is lost with the evicted member's.
    broken_gang_survivors_cpu_s: f64,
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
    let mut scenario = match args.generate {
        Some(n) => Scenario::generate(n, args.seed),
        None => Scenario::load(&args.scenario)?,
    };
    if args.no_gangs {
        scenario.bare.iter_mut().for_each(|b| (b.gang, b.gang_min) = (None, None));
        scenario.about += " (no gangs)";
    }
    match args.generate {
        Some(_) => println!("scenario generated: {}", scenario.about),
        None => println!("scenario {}: {}", args.scenario.display(), scenario.about),
    }
    println!(
        "control plane: {} (kube-scheduler, kube-apiserver, kube-controller-manager; a kubelet stand-in)\n",
        bins.dir.display()
    );
    println!("run 1: kube-scheduler alone ...");
    let (stock, _) = run(bins, &scenario, None, args.wave_interval, false).await?;
    let mut runs = vec![("kube-scheduler alone".to_string(), stock)];
    let mut held = None;
    for (i, &names) in args.modes.iter().enumerate() {
        let label = format!("coloc-extender, {}", if names { "names" } else { "objects" });
        println!("run {}: kube-scheduler + {label} ...", i + 2);
        let last = i + 1 == args.modes.len();
        let (ours, plane) =
            run(bins, &scenario, Some((&args.extender, names)), args.wave_interval, args.hold && last).await?;
        held = plane;
        runs.push((label, ours));
    }
    if let Some(path) = &args.json {
        let figures: Vec<_> = runs.iter().map(|(label, o)| figures(label, o, &scenario)).collect();
        std::fs::write(
            path,
            serde_json::to_string_pretty(&serde_json::json!({"scenario": scenario.about, "runs": figures}))?,
        )?;
    }
    let rows: [Row; 13] = [
        ("online pods placed", Box::new(|o| format!("{}/{}", o.placed.len(), scenario.online.len()))),
        (
            "time to place, max",
            Box::new(|o| {
                o.placed
                    .values()
                    .map(|(_, s)| *s)
                    .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))))
                    .map_or("-".into(), |s| format!("{s:.1} s"))
            }),
        ),
        ("evictions", Box::new(|o| o.evictions.to_string())),
        ("  made for offline pods", Box::new(|o| o.evictions_for_offline.to_string())),
        ("original pods evicted", Box::new(|o| list(&o.evicted))),
        ("requeued (back in the queue)", Box::new(|o| list(&o.requeued))),
        ("  copies bound by the end", Box::new(|o| o.copies_bound.to_string())),
        ("lost (bare pods gone for good)", Box::new(|o| list(&o.lost))),
        ("PDB violations", Box::new(|o| o.pdb_violations.to_string())),
        ("gangs broken", Box::new(|o| list(&o.gangs_broken))),
        ("  their survivors' run, CPU-s", Box::new(|o| format!("{:.0}", o.broken_gang_survivors_cpu_s))),
        ("Jobs failed", Box::new(|o| list(&o.jobs_failed))),
        ("run time discarded, CPU-s", Box::new(|o| format!("{:.0}", o.discarded_cpu_s))),
    ];
    print!("\n{:<32}", "");
    for (label, _) in &runs {
        print!(" {label:<28}");
    }
    println!();
    for (label, f) in &rows {
        print!("{label:<32}");
        for (_, o) in &runs {
            print!(" {:<28}", f(o));
        }
        println!();
    }
    println!("\nwhere each online pod went:");
    for o in &scenario.online {
        print!("  online/{:<23}", o.name);
        for (_, x) in &runs {
            print!(" {:<28}", x.placed.get(&o.name).map_or("pending".to_string(), |(n, _)| n.clone()));
        }
        println!();
    }
    if let Some((_, last)) = runs.last().filter(|_| runs.len() > 1) {
        println!("\nthe extender's Events (what `kubectl describe pod -n online <name>` shows):\n{}", last.events);
    }
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

/// One run's figures, as `--json` writes them.
fn figures(label: &str, o: &Outcome, sc: &Scenario) -> serde_json::Value {
    serde_json::json!({
        "run": label,
        "online_placed": o.placed.len(),
        "online": sc.online.len(),
        "evictions": o.evictions,
        "evictions_by_online_pods": o.evictions - o.evictions_for_offline,
        "evictions_by_offline_pods": o.evictions_for_offline,
        "pdb_violations": o.pdb_violations,
        "jobs_failed": o.jobs_failed.len(),
        "gangs_broken": o.gangs_broken.len(),
        "broken_gang_survivors_cpu_seconds": o.broken_gang_survivors_cpu_s.round(),
        "bare_lost": o.lost.len(),
        "requeued": o.requeued.len(),
        "requeued_copies_bound": o.copies_bound,
        "cpu_seconds_discarded": o.discarded_cpu_s.round(),
        "discarded_by_pod": o.discarded_by_pod,
    })
}

/// A line of the comparison: its label, and what it shows of one run.
type Row<'a> = (&'a str, Box<dyn Fn(&Outcome) -> String + 'a>);

/// The names, or only how many when they would not fit a column.
fn list(s: &BTreeSet<String>) -> String {
    let all = s.iter().cloned().collect::<Vec<_>>().join(" ");
    match s.len() {
        0 => "none".into(),
        _ if all.len() <= 28 => all,
        n => format!("{n}"),
    }
}

/// What a run leaves behind that a final list cannot show: the last state of every
/// offline pod (evicted ones are gone by the end) and the PDBs' deficits as they rise.
#[derive(Default)]
struct Record {
    pods: BTreeMap<String, Pod>,
    deficit: BTreeMap<String, i32>,
    pdb_violations: i64,
}

fn record(client: kube::Client) -> (std::sync::Arc<std::sync::Mutex<Record>>, Vec<tokio::task::JoinHandle<()>>) {
    let rec = std::sync::Arc::new(std::sync::Mutex::new(Record::default()));
    let pods = {
        let rec = rec.clone();
        let api: Api<Pod> = Api::namespaced(client.clone(), "batch");
        tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(e)) = s.next().await {
                if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) | watcher::Event::Delete(p) = e {
                    rec.lock().unwrap().pods.insert(p.metadata.uid.clone().unwrap_or_default(), p);
                }
            }
        })
    };
    let pdbs = {
        let rec = rec.clone();
        let api: Api<PodDisruptionBudget> = Api::namespaced(client, "batch");
        tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(e)) = s.next().await {
                let (watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = e else { continue };
                let Some(st) = p.status.as_ref() else { continue };
                let deficit = (st.desired_healthy.unwrap_or(0) - st.current_healthy.unwrap_or(0)).max(0);
                let mut r = rec.lock().unwrap();
                let before = r.deficit.insert(p.metadata.name.clone().unwrap_or_default(), deficit).unwrap_or(deficit);
                r.pdb_violations += i64::from((deficit - before).max(0));
            }
        })
    };
    (rec, vec![pods, pdbs])
}

fn cpu_cores(p: &Pod) -> f64 {
    let q = p
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("cpu"));
    q.map_or(0.0, |q| {
        q.0.strip_suffix('m')
            .and_then(|m| m.parse::<f64>().ok())
            .map_or_else(|| q.0.parse().unwrap_or(0.0), |m| m / 1000.0)
    })
}

/// Seconds a preempted pod had run: from its start to kube-scheduler's DisruptionTarget.
fn run_seconds_discarded(p: &Pod) -> Option<f64> {
    let st = p.status.as_ref()?;
    let started = st.start_time.as_ref()?.0;
    let at = st
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")?
        .last_transition_time
        .as_ref()?
        .0;
    Some(at.duration_since(started).as_secs_f64().max(0.0))
}

async fn run(
    bins: &Binaries,
    sc: &Scenario,
    extender: Option<(&Path, bool)>,
    wave_interval: Duration,
    hold: bool,
) -> anyhow::Result<(Outcome, Option<ControlPlane>)> {
    let plane = ControlPlane::start(bins, Options::default()).await?;
    let client = plane.client().await?;
    cluster::create_all(&client, vec![cluster::namespace("online"), cluster::namespace("batch")]).await?;
    let classes = cluster::default_priority_classes();
    let names: Vec<String> = classes.iter().filter_map(|c| c.metadata.name.clone()).collect();
    cluster::create_all(&client, classes).await?;
    cluster::until_admitted(&client, "batch", &names.iter().map(String::as_str).collect::<Vec<_>>()).await?;
    for f in [
        "clusterrole.yaml",
        "clusterrolebinding.yaml",
        "requeue/clusterrole.yaml",
        "requeue/clusterrolebinding.yaml",
        "wake/role.yaml",
        "wake/rolebinding.yaml",
    ] {
        plane.apply(&Path::new(REPO).join("manifests").join(f))?;
    }
    let _kubelet = Kubelet::start(client.clone(), kubelet::Options::default());
    cluster::create_all(&client, sc.node_objects()).await?;
    cluster::create_all(&client, sc.bare_pods()).await?;
    cluster::create_all(&client, sc.job_objects()).await?;
    cluster::create_all(&client, sc.replica_set_objects()).await?;
    cluster::create_all(&client, sc.pdb_objects()).await?;
    let want = sc.offline_pod_count();
    // Job pods are placed by kube-scheduler: start it for them, without the extender, then
    // stop it, so both runs begin from the same cluster.
    let warmup = Scheduler::start(&plane, "kube-scheduler-warmup", &[], 1000).await?;
    let before = wait::until(Duration::from_secs(90), "the offline pods running", || async {
        let pods = cluster::pods(&client, Some("batch")).await.map_err(|e| e.to_string())?;
        let running: Vec<_> = pods.iter().filter(|p| cluster::phase(p) == "Running").collect();
        if running.len() == want {
            Ok(running
                .iter()
                .map(|p| (cluster::name(p).to_string(), p.metadata.uid.clone().unwrap_or_default()))
                .collect::<Vec<_>>())
        } else {
            Err(format!("{} of {want} running", running.len()))
        }
    })
    .await?;
    drop(warmup);
    // Offline pods have run for a while when online pods arrive (kube-scheduler and the
    // extender both prefer victims that ran least): the kubelet stand-in started them just
    // now, so their start times are moved back.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "batch");
    let now = jiff::Timestamp::now().as_second();
    for (name, _) in &before {
        let started = jiff::Timestamp::from_second(now - Scenario::age_seconds(name))?;
        let patch = serde_json::json!({"status": {"startTime": started.to_string()}});
        pods.patch_status(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await?;
    }

    let (record, recording) = record(client.clone());
    let ext = match extender {
        Some((path, _)) => {
            Some(Extender::start(&plane, "coloc-extender", path, &["--kube", "--requeue", "--events", "--wake"]).await?)
        }
        None => None,
    };
    let names = extender.is_none_or(|(_, names)| names);
    let entries: Vec<ExtenderEntry> = ext.iter().map(|e| ExtenderEntry::all_verbs(&e.url(), names)).collect();
    let _scheduler = Scheduler::start(&plane, "kube-scheduler", &entries, 1000).await?;
    let mut out = Outcome::default();
    let mut arrived: BTreeMap<String, Instant> = BTreeMap::new();
    let mut waves = sc.waves().into_iter();
    let mut next_wave = Instant::now();
    let mut deadline = Instant::now() + Duration::from_secs(60);
    while out.placed.len() < sc.online.len() && Instant::now() < deadline {
        if Instant::now() >= next_wave {
            if let Some(wave) = waves.next() {
                cluster::create_all(&client, wave.iter().map(|o| o.pod()).collect()).await?;
                arrived.extend(wave.iter().map(|o| (o.name.clone(), Instant::now())));
                next_wave += wave_interval;
                deadline = Instant::now() + Duration::from_secs(60);
            }
        }
        for p in cluster::pods(&client, Some("online")).await? {
            if let (Some(node), Some(at)) = (cluster::node_of(&p), arrived.get(cluster::name(&p))) {
                out.placed
                    .entry(cluster::name(&p).to_string())
                    .or_insert((node.to_string(), at.elapsed().as_secs_f64()));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let victims finish, recreated and requeued pods find their place (or preempt for
    // it), and the Job and disruption controllers count.
    tokio::time::sleep(Duration::from_secs(15)).await;

    let after = cluster::pods(&client, Some("batch")).await?;
    let alive = |uid: &str| {
        after.iter().any(|p| p.metadata.uid.as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none())
    };
    // A requeued copy names its original in this annotation.
    let base_name =
        |p: &Pod| p.metadata.annotations.as_ref().and_then(|a| a.get("coloc-extender.io/base-name")).cloned();
    let stands_in = |name: &str| after.iter().any(|p| base_name(p).is_some_and(|b| b == name));
    let bare: BTreeSet<&str> = sc.bare.iter().map(|b| b.name.as_str()).collect();
    out.copies_bound = after.iter().filter(|p| base_name(p).is_some() && cluster::node_of(p).is_some()).count();
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
            let now = jiff::Timestamp::now();
            for p in
                after.iter().filter(|p| members.contains(&cluster::name(p)) && p.metadata.deletion_timestamp.is_none())
            {
                let started = p.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
                let ran = started.map_or(0.0, |t| now.duration_since(t).as_secs_f64().max(0.0));
                out.broken_gang_survivors_cpu_s += ran * cpu_cores(p);
            }
        }
    }
    let preempted = Api::<Event>::namespaced(client.clone(), "batch").list(&Default::default()).await?;
    for e in preempted.items.iter().filter(|e| e.reason.as_deref() == Some("Preempted")) {
        out.evictions += 1;
        if e.related.as_ref().and_then(|r| r.namespace.as_deref()) == Some("batch") {
            out.evictions_for_offline += 1;
        }
    }
    for task in recording {
        task.abort();
    }
    {
        let r = record.lock().unwrap();
        out.pdb_violations = r.pdb_violations;
        out.discarded_by_pod = r
            .pods
            .values()
            .filter_map(|p| Some((cluster::name(p).to_string(), (run_seconds_discarded(p)? * cpu_cores(p)).round())))
            .collect();
        out.discarded_cpu_s = out.discarded_by_pod.values().sum();
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), "batch");
    for j in &sc.jobs {
        let job = jobs.get(&j.name).await?;
        let failed = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"));
        if failed {
            out.jobs_failed.insert(j.name.clone());
        }
    }
    if ext.is_some() {
        out.events = plane
            .kubectl(&[
                "get",
                "events",
                "-n",
                "online",
                "--sort-by=.metadata.creationTimestamp",
                "-o",
                "custom-columns=POD:.involvedObject.name,TYPE:.type,REASON:.reason,MESSAGE:.message",
            ])
            .unwrap_or_else(|e| format!("(cannot list events: {e})"));
    }
    drop(_scheduler);
    drop(ext);
    Ok((out, hold.then_some(plane)))
}
