//! End-to-end: the extender behind a real kube-scheduler, kube-apiserver and
//! kube-controller-manager (release binaries found through `KUBE_BIN_DIR`), with a kubelet
//! stand-in. Each case is one rule on the smallest cluster that shows it, run in both
//! `nodeCacheCapable` modes, each on a control plane of its own.
//!
//! `cargo test --locked --test e2e [FILTER]`. Without the binaries it prints one line
//! saying why it skipped. `E2E_JOBS` (default 2) cases run at once; `COLOC_E2E_KEEP=1`
//! keeps every case's directory (logs, configs).

mod acting_as;
mod admin;
mod apart;
mod baseline;
mod bed;
mod budgets;
mod coloc_pod;
mod deadlock;
mod demo;
mod eviction;
mod fails_safe;
mod faults;
#[path = "../common/forged.rs"]
mod forged;
mod grants;
mod half_removed;
mod install;
mod invariants;
mod jobs;
mod marks;
mod monitoring;
mod own_scheduler;
mod parameters;
mod privilege;
mod profiles;
mod release;
mod removal;
mod requeue_bounds;
mod scenarios;
mod shipped_admission;
mod sooner;
mod tls;
mod upgrade;
mod wake;

use std::time::{Duration, Instant};

use coloc_testbed::Binaries;
use futures::future::BoxFuture;

pub use bed::{Bed, Mode};

pub type CaseFn = fn(Binaries, Mode) -> BoxFuture<'static, anyhow::Result<()>>;

pub struct Case {
    pub name: &'static str,
    pub run: CaseFn,
}

fn all_cases() -> Vec<Case> {
    let mut v = scenarios::cases();
    v.extend(jobs::cases());
    v.extend(budgets::cases());
    v.extend(sooner::cases());
    v.extend(eviction::cases());
    v.extend(faults::cases());
    v.extend(fails_safe::cases());
    v.extend(profiles::cases());
    v.extend(removal::cases());
    v.extend(requeue_bounds::cases());
    v.extend(privilege::cases());
    v.extend(own_scheduler::cases());
    v.extend(tls::cases());
    v.extend(admin::cases());
    v.extend(monitoring::cases());
    v.extend(upgrade::cases());
    v.extend(deadlock::cases());
    v.extend(install::cases());
    v.extend(acting_as::cases());
    v.extend(half_removed::cases());
    v.extend(grants::cases());
    v.extend(baseline::cases());
    v.extend(marks::cases());
    v.extend(wake::cases());
    v.extend(demo::cases());
    v
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let list = std::env::args().any(|a| a == "--list");
    let mut runs: Vec<(String, CaseFn, Mode)> = Vec::new();
    for case in all_cases() {
        for mode in [Mode::Names, Mode::Objects] {
            let name = format!("{}::{}", case.name, mode.label());
            if args.is_empty() || args.iter().any(|f| name.contains(f.as_str())) {
                runs.push((name, case.run, mode));
            }
        }
    }
    if list {
        for (name, _, _) in &runs {
            println!("{name}: test");
        }
        return std::process::ExitCode::SUCCESS;
    }
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => {
            println!("e2e: skipped {} cases: {why}", runs.len());
            return std::process::ExitCode::SUCCESS;
        }
    };
    let jobs: usize = std::env::var("E2E_JOBS").ok().and_then(|j| j.parse().ok()).unwrap_or(2).max(1);
    println!("\nrunning {} e2e cases against {} ({jobs} at a time)", runs.len(), bins.dir.display());
    let started = Instant::now();
    let queue = std::sync::Mutex::new(runs.into_iter());
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let Some((name, run, mode)) = queue.lock().unwrap().next() else {
                    break;
                };
                let t = Instant::now();
                let bins = bins.clone();
                // A thread per case: a panic is that case's failure, and the processes it
                // started die with it (their handles drop while unwinding).
                let outcome = std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .enable_all()
                        .build()
                        .expect("runtime");
                    rt.block_on(async move { tokio::time::timeout(Duration::from_secs(300), run(bins, mode)).await })
                })
                .join();
                let verdict = match outcome {
                    Ok(Ok(Ok(()))) => Ok(()),
                    Ok(Ok(Err(e))) => Err(format!("{e:#}")),
                    Ok(Err(_)) => Err("timed out after 300 s".to_string()),
                    Err(panic) => Err(panic_text(&panic)),
                };
                let secs = t.elapsed().as_secs_f64();
                match &verdict {
                    Ok(()) => println!("test {name} ... ok ({secs:.1}s)"),
                    Err(_) => println!("test {name} ... FAILED ({secs:.1}s)"),
                }
                results.lock().unwrap().push((name, verdict));
            });
        }
    });
    let results = results.into_inner().unwrap();
    let failed: Vec<_> = results.iter().filter(|(_, v)| v.is_err()).collect();
    for (name, v) in &failed {
        println!("\n---- {name} ----\n{}", v.as_ref().unwrap_err());
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; 0 ignored; 0 measured; 0 filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        results.len() - failed.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}
