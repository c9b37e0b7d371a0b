//! Command line: `serve`, `check-policy`, `replay`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use arc_swap::{ArcSwap, ArcSwapOption};
use clap::{Parser, Subcommand};

use crate::cluster::{self, Objects, View, ViewCell};
use crate::http::{self, AppState, Limits, ViewSource};
use crate::pipeline::{self, Verb};
use crate::policy::{Mode, Policy};
use crate::tls::{self, TlsAcceptorCell, TlsFiles};
use crate::wire::Caps;

#[derive(Parser)]
#[command(name = "coloc-extender", version, about = "kube-scheduler extender for co-located online/offline clusters")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Serve filter, prioritize and preempt over HTTP(S).
    Serve(ServeArgs),
    /// Validate a policy file and print its classes.
    CheckPolicy {
        file: PathBuf,
    },
    /// Print the policy's JSON Schema (for editors and CI; check-policy also checks meaning,
    /// e.g. that every class named exists).
    PolicySchema,
    /// Answer one recorded request without a server: the wire answer on stdout, the
    /// explanation on stderr.
    Replay {
        #[arg(long)]
        verb: Verb,
        payload: PathBuf,
        /// Policy file (default: the shipped default policy).
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Cluster snapshot (`kubectl get nodes,pods,pdb,priorityclasses,jobs -A -o json`)
        /// for full victim re-selection.
        #[arg(long)]
        snapshot: Option<PathBuf>,
        /// The decision time, RFC 3339 or Unix seconds (default: now).
        #[arg(long)]
        now: Option<String>,
        /// Decide as `serve` without `--requeue` would: bare victims of `requeue` classes
        /// are protected. By default replay shows what would be requeued (it never writes).
        #[arg(long)]
        no_requeue: bool,
        /// Override the policy's mode: `shadow` prints kube-scheduler's own answer on stdout
        /// and the policy's answer, with what it would change, on stderr.
        #[arg(long)]
        mode: Option<Mode>,
    },
    /// Take the extender out and leave the cluster as it was: refuses while it is still
    /// registered or running, then finishes every guard an earlier release left, settles
    /// every gated replacement and deletes wake placeholders. Run it as a one-shot Job
    /// (manifests/uninstall) once kube-scheduler no longer calls the extender.
    Uninstall(crate::uninstall::UninstallArgs),
    /// Print a pod's recent decisions from a running extender (GET /decisions on its
    /// admin port), e.g. `kubectl -n kube-system port-forward deploy/coloc-extender 8082`
    /// then `coloc-extender explain online/web-0` (port-forward reaches the pod's loopback,
    /// where the admin port listens by default).
    Explain {
        /// NAMESPACE/NAME
        pod: String,
        /// The extender's admin listener (`serve --admin-listen`).
        #[arg(long, default_value = crate::explain::DEFAULT_SERVER)]
        server: String,
    },
}

#[derive(clap::Args)]
pub struct ServeArgs {
    #[arg(long, default_value = "127.0.0.1:8888")]
    pub listen: SocketAddr,
    /// Policy file, reloaded when it changes (default: the shipped default policy).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// URL prefix before /filter, /prioritize, /preempt (e.g. /scheduler).
    #[arg(long, default_value = "")]
    pub path_prefix: String,
    /// Cluster view from a snapshot file instead of the Kubernetes API.
    #[arg(long, conflicts_with = "kube")]
    pub snapshot: Option<PathBuf>,
    /// Cluster view from the Kubernetes API (in-cluster config or KUBECONFIG).
    #[arg(long)]
    pub kube: bool,
    /// Requeue bare victims of `requeue` classes: store a gated replacement before offering
    /// them, release it when the original is gone. Writes pods and events: needs the
    /// `manifests/requeue` RBAC component.
    #[arg(long, requires = "kube")]
    pub requeue: bool,
    /// Accepted so that manifests of earlier releases still start, and ignored: guards are
    /// no longer added (a finalizer outlives an extender scaled to zero). Guards an
    /// earlier release left are always finished.
    #[arg(long, hide = true, action = clap::ArgAction::Set, requires = "requeue")]
    pub requeue_guard: Option<bool>,
    /// Time for storing requeue replacements within one preempt, in milliseconds.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(100..=4000))]
    pub requeue_budget_ms: u64,
    /// Wake pods kube-scheduler parked while we could not answer a preempt well (restart,
    /// view not ready, replacements not stored): once ready again, store and delete a
    /// placeholder pod bound to no real node, which kube-scheduler takes as a reason to
    /// retry them. Writes pods in --wake-namespace: needs the `manifests/wake` RBAC component.
    #[arg(long, requires = "kube")]
    pub wake: bool,
    /// Namespace of the wake placeholders (default: $POD_NAMESPACE, else kube-system).
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub wake_namespace: String,
    /// Least time between two wakes, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = parse_secs)]
    pub wake_min_interval: Duration,
    /// A gated replacement whose original has not started terminating by then is deleted
    /// (kube-scheduler chose otherwise), e.g. 60s.
    #[arg(long, default_value = "60s", value_parser = parse_secs)]
    pub requeue_evict_within: Duration,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (only kube-scheduler may call).
    #[arg(long, requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// Plain-HTTP listener for /healthz and /readyz (probes carry no client certificate).
    #[arg(long)]
    pub health_listen: Option<SocketAddr>,
    /// Plain-HTTP listener for /metrics and /decisions (`explain`), or `off`. Decisions name
    /// pods and reasons: keep it on loopback, or restrict who reaches it (the shipped
    /// NetworkPolicy lets only the monitoring namespace in).
    #[arg(long, default_value = "127.0.0.1:8082", value_parser = parse_admin_listen)]
    pub admin_listen: AdminListen,
    /// Threads serving the verbs and running requeue, Events and wakes. kube-scheduler calls
    /// one verb at a time and large decisions run on --decision-workers, so one thread
    /// spares the wake-ups of handing each request between two (measured:
    /// docs/performance.md, "One I/O thread").
    #[arg(long, default_value_t = 1, value_parser = parse_threads)]
    pub io_threads: usize,
    /// Log lines as JSON (for log pipelines) instead of text.
    #[arg(long)]
    pub log_json: bool,
    #[command(flatten)]
    pub ops: OpsArgs,
}

/// Adoption and day-2 operations: shadow mode, decision lookup, Events.
#[derive(clap::Args)]
pub struct OpsArgs {
    /// Override the policy's `mode`: `shadow` answers exactly as kube-scheduler would decide
    /// without the extender and counts what the policy would change
    /// (coloc_shadow_diffs_total); nothing is written to the API server.
    #[arg(long)]
    pub mode: Option<Mode>,
    /// Decisions kept for GET /decisions and `explain` (on --admin-listen), newest kept.
    #[arg(long, default_value_t = 10_000)]
    pub decisions_entries: usize,
    /// Memory bound of the kept decisions, in bytes.
    #[arg(long, default_value_t = 32 << 20)]
    pub decisions_bytes: usize,
    /// Write Events on preemptors: a Warning when no node can make room under the policy
    /// (with the reason per node), a Normal naming the victims. Needs events create/patch.
    #[arg(long, requires = "kube")]
    pub events: bool,
    /// Per pod: an unchanged Event is written again only after this long, e.g. 10m.
    #[arg(long, default_value = "10m", value_parser = parse_secs)]
    pub events_repeat_after: Duration,
    /// Per pod: a changed Event waits at least this long after the previous one, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = parse_secs)]
    pub events_min_interval: Duration,
}

/// What one request may cost, and how many may run at once.
#[derive(clap::Args)]
pub struct LimitArgs {
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = 128 << 20)]
    pub max_body_bytes: usize,
    /// Bytes of request bodies held at once over all requests (at least --max-body-bytes);
    /// beyond it new requests get 503 and kube-scheduler retries.
    #[arg(long, default_value_t = 512 << 20)]
    pub max_inflight_body_bytes: usize,
    /// Whole-request time limit, e.g. 4s (kube-scheduler gives up at its httpTimeout, 5s by default).
    #[arg(long, default_value = "4s", value_parser = parse_secs)]
    pub request_timeout: Duration,
    /// Time for a request body to arrive, e.g. 2s (at most --request-timeout).
    #[arg(long, default_value = "2s", value_parser = parse_secs)]
    pub body_timeout: Duration,
    /// Requests admitted at once (bodies received, being decided) before new ones get 503.
    #[arg(long, default_value_t = 256, value_parser = parse_concurrency)]
    pub max_concurrency: usize,
    /// Threads deciding large requests (default: the CPUs available).
    #[arg(long, value_parser = parse_concurrency)]
    pub decision_workers: Option<usize>,
    /// Most nodes in one request (Nodes.items, NodeNames, preempt candidates).
    #[arg(long, default_value_t = Caps::default().max_nodes, value_parser = parse_cap)]
    pub max_nodes: usize,
    /// Most victims proposed on one candidate node.
    #[arg(long, default_value_t = Caps::default().max_victims_per_node, value_parser = parse_cap)]
    pub max_victims_per_node: usize,
    /// Most victims proposed over all candidate nodes of one preempt.
    #[arg(long, default_value_t = Caps::default().max_victims, value_parser = parse_cap)]
    pub max_victims: usize,
}

impl LimitArgs {
    pub fn limits(&self) -> anyhow::Result<Limits> {
        if self.max_inflight_body_bytes < self.max_body_bytes {
            bail!(
                "--max-inflight-body-bytes {} is below --max-body-bytes {}: the largest body could never be admitted",
                self.max_inflight_body_bytes,
                self.max_body_bytes
            );
        }
        let defaults = Limits::default();
        Ok(Limits {
            max_body_bytes: self.max_body_bytes,
            max_inflight_body_bytes: self.max_inflight_body_bytes,
            request_timeout: self.request_timeout,
            body_timeout: self.body_timeout.min(self.request_timeout),
            max_concurrency: self.max_concurrency,
            decision_workers: self.decision_workers.unwrap_or(defaults.decision_workers),
            caps: Caps { max_nodes: self.max_nodes, max_victims_per_node: self.max_victims_per_node, max_victims: self.max_victims },
            ..defaults
        })
    }
}

/// Which classes need filter/prioritize, and how to spare the others (the per-pod-verbs
/// registration and the marker the shipped MutatingAdmissionPolicy adds).
fn per_pod_verbs_advice(policy: &Policy) -> String {
    use crate::policy::PER_POD_VERBS_MARKER as MARKER;
    const PROFILE: &str = "manifests/scheduler/kube-scheduler-config-per-pod-verbs.yaml";
    let needing: Vec<(&crate::policy::Class, Vec<&str>)> =
        policy.classes.iter().map(|c| (c, c.per_pod_verbs_reasons())).filter(|(_, why)| !why.is_empty()).collect();
    if needing.is_empty() {
        return format!("per-pod verbs: no class needs filter/prioritize; preempt alone carries the policy (entry A of {PROFILE} is enough)\n");
    }
    let names: Vec<&str> = needing.iter().map(|(c, _)| c.name.as_str()).collect();
    let listed: Vec<String> = needing.iter().map(|(c, why)| format!("{} ({})", c.name, why.join(", "))).collect();
    let mut out = format!("per-pod verbs (filter, prioritize) needed by: {}; the other classes need only preempt\n", listed.join(", "));
    let selectors = || needing.iter().flat_map(|(c, _)| c.r#match.iter());
    let class_names: Vec<&str> = selectors().flat_map(|s| s.priority_class_names.iter().map(String::as_str)).collect();
    let ranges: Vec<String> = selectors().filter_map(|s| s.priority).map(|r| format!("{}..{}", r.min, r.max)).collect();
    let mut by = Vec::new();
    if !class_names.is_empty() {
        by.push(format!("priorityClassName in [{}]", class_names.join(", ")));
    }
    if !ranges.is_empty() {
        by.push(format!("priority in {}", ranges.join(" or ")));
    }
    out += &format!(
        "  to spare the others: register {PROFILE} and mark the pods of {} with {MARKER} (request and limit \"1\"), e.g. by manifests/per-pod-verbs with the match condition: {}\n",
        names.join(", "),
        if by.is_empty() { "(none: these classes match by namespace or labels)".to_string() } else { by.join(" or ") }
    );
    // A selector without a name or a priority range (namespaces, labels, or none at all)
    // matches pods the marker policy above cannot see by class.
    for (c, _) in &needing {
        if c.name == policy.default_class || c.r#match.is_empty() || c.r#match.iter().any(|s| s.priority_class_names.is_empty() && s.priority.is_none()) {
            out += &format!(
                "note: class {} also matches pods by namespace or labels only (or is the default class): add a matchCondition for them to manifests/per-pod-verbs, or keep the all-verbs registration\n",
                c.name
            );
        }
    }
    out
}

/// `--admin-listen`: an address, or `off` (None).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminListen(pub Option<SocketAddr>);

fn parse_admin_listen(s: &str) -> Result<AdminListen, String> {
    if s == "off" {
        return Ok(AdminListen(None));
    }
    s.parse().map(|a| AdminListen(Some(a))).map_err(|_| format!("{s:?} is not ADDR:PORT (e.g. 127.0.0.1:8082) or off"))
}

fn parse_cap(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("0 would refuse every request: use at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

/// A duration of at least one second ("4s", "1m"): kube-scheduler's own timeouts are in
/// seconds, and zero would refuse every request.
fn parse_secs(s: &str) -> Result<Duration, String> {
    match crate::policy::parse_duration(s)? {
        0 => Err(format!("{s:?} is zero: use at least 1s")),
        n => Ok(Duration::from_secs(n as u64)),
    }
}

fn parse_threads(s: &str) -> Result<usize, String> {
    parse_count(s, 256, "0 threads would serve nothing")
}

fn parse_concurrency(s: &str) -> Result<usize, String> {
    parse_count(s, 65_536, "0 would refuse every request")
}

/// A count from 1 to `max`; `zero` says what 0 would do.
fn parse_count(s: &str, max: usize, zero: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err(format!("{zero}: use at least 1")),
        Ok(n) if n > max => Err(format!("{n} is more than {max}")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

/// `/scheduler`-like prefixes only: braces and `*` would become route wildcards.
fn check_prefix(prefix: &str) -> anyhow::Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    if !prefix.starts_with('/') {
        bail!("--path-prefix {prefix:?} must start with '/'");
    }
    if let Some(c) = prefix.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.' | '~'))) {
        bail!("--path-prefix {prefix:?}: {c:?} is not allowed (letters, digits, / - _ . ~)");
    }
    if prefix.contains("//") {
        bail!("--path-prefix {prefix:?} has an empty segment");
    }
    Ok(())
}

pub fn load_policy(path: Option<&Path>) -> anyhow::Result<Policy> {
    match path {
        Some(p) => Ok(Policy::load(p)?),
        None => Ok(Policy::builtin_default()),
    }
}

fn parse_now(s: Option<&str>) -> anyhow::Result<i64> {
    match s {
        None => Ok(http::system_now()),
        Some(t) => match t.parse::<i64>() {
            Ok(secs) => Ok(secs),
            Err(_) => Ok(t.parse::<jiff::Timestamp>().with_context(|| format!("--now {t:?}: expected RFC 3339 or Unix seconds"))?.as_second()),
        },
    }
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::PolicySchema => {
            use std::io::Write;
            // A closed pipe (`| head`) ends the output, not the process with a panic.
            match writeln!(std::io::stdout(), "{}", crate::policy::json_schema()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(()),
            }
        }
        Command::CheckPolicy { file } => {
            let policy = Policy::load(&file)?;
            println!("{}: valid, {} classes (default class: {})", file.display(), policy.classes.len(), policy.default_class);
            for c in &policy.classes {
                println!(
                    "  {:<14} preempts [{}]; victim: {}",
                    c.name,
                    c.preempts.join(", "),
                    if c.victim.allowed {
                        format!("yes (pdb {:?}, bare pods: {:?}, minRuntime {}s)", c.victim.pdb, c.victim.bare(), c.victim.min_runtime)
                    } else {
                        "never".into()
                    }
                );
            }
            print!("{}", per_pod_verbs_advice(&policy));
            let requeueing = policy.requeue_classes();
            if !requeueing.is_empty() {
                println!(
                    "note: {} requeue bare victims: that needs serve --kube --requeue (and the manifests/requeue RBAC); without it their bare pods are protected",
                    requeueing.join(", ")
                );
            }
            Ok(())
        }
        Command::Uninstall(args) => crate::uninstall::run(args),
        Command::Explain { pod, server } => {
            print!("{}", crate::explain::run(&pod, &server)?);
            Ok(())
        }
        Command::Replay { verb, payload, policy, snapshot, now, no_requeue, mode } => {
            let mut policy = load_policy(policy.as_deref())?;
            if let Some(mode) = mode {
                policy.mode = mode;
            }
            let view = match snapshot {
                Some(s) => Some(View::build(cluster::snapshot::load(&s)?, &policy)),
                None => None,
            };
            let body = std::fs::read(&payload).with_context(|| format!("cannot read {}", payload.display()))?;
            let ctx = crate::decide::Context {
                policy: &policy,
                view: view.as_ref(),
                view_expected: view.is_some(),
                now: parse_now(now.as_deref())?,
                requeue: if no_requeue { crate::decide::Requeue::disabled() } else { crate::decide::Requeue::enabled() },
                // replay prints every line, each node's score too.
                detail: crate::decide::Detail::Routine,
            };
            let answer = pipeline::answer_in(verb, &body, &ctx).map_err(|e| anyhow::anyhow!("{}: {e}", payload.display()))?;
            eprintln!("{} {} ({})", verb.as_str(), answer.pod, if view.is_some() { "with cluster view" } else { "request only" });
            for e in &answer.explanations {
                eprintln!("  {e}");
            }
            for r in &answer.requeues {
                eprintln!("  would requeue {} as {} (attempt {}; replay writes nothing)", r.original_key(), r.replacement, r.attempt);
            }
            if let Some(would) = &answer.would_answer {
                eprintln!("shadow: stdout is kube-scheduler's own answer; the policy would answer ({}) and change: {}", answer.summary, answer.diffs);
                eprintln!("  {}", String::from_utf8_lossy(would));
            }
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(&answer.body)?;
            out.write_all(b"\n")?;
            Ok(())
        }
        Command::Serve(args) => {
            init_logging(args.log_json);
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(args.io_threads).enable_all().build()?;
            runtime.block_on(serve(args))
        }
    }
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    check_prefix(&args.path_prefix)?;
    // Before anything records: the watches register their counters once, as they start,
    // and a counter registered before the recorder would count nothing.
    http::metrics::handle();
    // An invalid policy file must not keep every replica in CrashLoop (a drain, an OOM
    // kill): serve the built-in default in shadow mode, say so, and take the file as soon
    // as it is fixed.
    let (policy, startup_problem) = match load_policy(args.policy.as_deref()) {
        Ok(mut policy) => {
            if let Some(mode) = args.ops.mode {
                policy.mode = mode;
            }
            (policy, None)
        }
        Err(e) => {
            let file = args.policy.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
            let why = format!("policy file {file} is invalid ({e:#}); serving the built-in default policy in shadow mode until it is fixed");
            tracing::error!(policy = %file, error = format!("{e:#}"), "invalid policy at start: serving the built-in default policy in shadow mode (kube-scheduler's own answers) until the file is fixed");
            http::metrics::record_policy_reload("error");
            http::metrics::record_policy_fallback(true);
            let mut fallback = Policy::builtin_default();
            fallback.mode = Mode::Shadow;
            (fallback, Some(why))
        }
    };
    if policy.mode == Mode::Shadow && startup_problem.is_none() {
        tracing::warn!("shadow mode: answers are kube-scheduler's own; the policy's decisions are only logged, counted (coloc_shadow_diffs_total) and kept for /decisions");
    }
    let view = Arc::new(ViewCell::default());
    let (source, snapshot) = match (&args.snapshot, args.kube) {
        (Some(path), _) => {
            let objects = cluster::snapshot::load(path)?;
            tracing::info!(snapshot = %path.display(), nodes = objects.nodes.len(), pods = objects.pods.len(), "cluster view from snapshot");
            view.publish(View::build(objects.clone(), &policy));
            (ViewSource::Snapshot, Some(objects))
        }
        (None, true) => (ViewSource::Kubernetes, None),
        (None, false) => {
            tracing::warn!("no cluster view (--snapshot or --kube): preempt judges kube-scheduler's victims only");
            (ViewSource::None, None)
        }
    };
    let requeue_classes = policy.requeue_classes().join(", ");
    http::memory::tune();
    let mut state = AppState::new(policy, view.clone(), source);
    state.policy_problem.store(startup_problem.map(Arc::new));
    state.decisions = Arc::new(http::decisions::DecisionLog::new(http::decisions::RingLimits {
        entries: args.ops.decisions_entries,
        bytes: args.ops.decisions_bytes,
    }));
    state.limits = Limits { requeue_budget: Duration::from_millis(args.requeue_budget_ms), ..args.limits.limits()? };
    if !args.requeue && !requeue_classes.is_empty() {
        tracing::warn!(classes = %requeue_classes,
            "requeue is off (serve --kube --requeue): bare victims of these classes are protected, as with bare: protect");
    }
    let reload = http::server::reload_signals();
    if source == ViewSource::Kubernetes {
        let config = kube::Config::infer().await.context("cannot find a Kubernetes client configuration (in-cluster config or KUBECONFIG)")?;
        let client = kube::Client::try_from(config.clone()).context("cannot build a Kubernetes client")?;
        let fresh = Arc::new(cluster::watch::Freshness::default());
        state.freshness = Some(fresh.clone());
        let instance = std::env::var("POD_NAME").ok().or_else(|| std::env::var("HOSTNAME").ok());
        if args.ops.events {
            let throttle = crate::events::Throttle::new(args.ops.events_min_interval.as_secs() as i64, args.ops.events_repeat_after.as_secs() as i64, 50_000);
            let reporter = crate::events::kube::reporter(instance.clone());
            state.events = Some(Arc::new(crate::events::kube::EventSink::start(client.clone(), reporter, throttle, state.clock.clone())));
            tracing::info!("events on preemptors are on");
        }
        if args.requeue_guard.is_some() {
            tracing::warn!("--requeue-guard is ignored: guards are no longer added, and those an earlier release left are finished");
        }
        let requeuer = Arc::new(crate::requeue::kube::Requeuer::new(client.clone(), instance));
        // Whatever the flags: guards an earlier release left would hold their pods forever.
        tokio::spawn(requeuer.clone().finish_leftover_guards());
        if args.requeue {
            tokio::spawn(requeuer.clone().reconcile_loop(view.clone(), Duration::from_secs(1), args.requeue_evict_within.as_secs() as i64));
            state.requeuer = Some(requeuer);
            tracing::info!(budget_ms = args.requeue_budget_ms, evict_within_s = args.requeue_evict_within.as_secs(), "requeue is on");
        }
        if args.wake {
            let waker = crate::wake::kube::Waker::new(client.clone(), args.wake_namespace.clone());
            tokio::spawn(waker.clone().run(view.clone(), args.wake_min_interval));
            state.waker = Some(waker);
            tracing::info!(namespace = %args.wake_namespace, min_interval_s = args.wake_min_interval.as_secs(), "waking parked pods is on");
        }
        watch_apart(config, view.clone(), state.policy.clone(), fresh)?;
    }
    if let Some(path) = args.policy.clone() {
        let alarm = policy_alarm(state.events.clone());
        tokio::spawn(reload_policy(path, args.ops.mode, state.policy.clone(), view.clone(), snapshot, state.policy_problem.clone(), reload.clone(), alarm));
    }

    let app = http::router(state.clone(), &args.path_prefix);
    let mut opts = http::server::ServeOptions::default();
    if let (Some(cert), Some(key)) = (args.tls_cert, args.tls_key) {
        let files = TlsFiles { cert, key, client_ca: args.client_ca };
        let cell = Arc::new(TlsAcceptorCell::new(files.load()?));
        tokio::spawn(tls::watch(files, cell.clone(), Duration::from_secs(5), reload.clone()));
        opts.tls = Some(cell);
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    if let Some(addr) = args.health_listen {
        let listener = std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
        serve_apart("health", listener, http::health_router(state.clone()), stop_rx.clone())?;
    }
    if let AdminListen(Some(addr)) = args.admin_listen {
        if !addr.ip().is_loopback() {
            tracing::warn!(admin_listen = %addr, "the admin port is not on loopback: whoever reaches it reads /decisions (pod names, why each was or was not preempted) and /metrics; restrict it (e.g. the shipped NetworkPolicy)");
        }
        let listener = std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr} (--admin-listen; `off` turns it off)"))?;
        serve_apart("admin", listener, http::admin_router(state.clone()), stop_rx.clone())?;
    }
    let listener = tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(listen = %args.listen, admin = ?args.admin_listen.0, prefix = %args.path_prefix, tls = opts.tls.is_some(), view = ?source, "serving");
    http::server::serve(listener, app, opts, async move {
        http::server::shutdown_signal().await;
        let _ = stop_tx.send(true);
    })
    .await;
    drop(stop_rx);
    Ok(())
}

/// Runs `task` on a thread named `name` with a single-threaded runtime of its own.
fn run_apart<F: std::future::Future<Output = ()>>(name: &str, task: impl FnOnce() -> F + Send + 'static) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().with_context(|| format!("cannot start the {name} thread's runtime"))?;
    std::thread::Builder::new().name(name.into()).spawn(move || runtime.block_on(task()))?;
    Ok(())
}

/// The watches get a thread, runtime and client of their own: an event that arrives alone
/// (a bind, every few ms) then wakes one thread, not a worker of the shared runtime that
/// wakes the other to share work it does not have (measured: the watch path's CPU per pod
/// bound, docs/performance.md).
fn watch_apart(config: kube::Config, view: Arc<cluster::ViewCell>, policy: Arc<arc_swap::ArcSwap<crate::policy::Policy>>, fresh: Arc<cluster::watch::Freshness>) -> anyhow::Result<()> {
    run_apart("watch", move || async move {
        match kube::Client::try_from(config) {
            Ok(client) => cluster::watch::run(client, view, policy, fresh, Duration::from_millis(500)).await,
            Err(e) => tracing::error!(error = %e, "cannot build the watches' Kubernetes client"),
        }
    })
}

/// Probes and scrapes get a thread and runtime of their own (one each): while the verb
/// threads are busy receiving large bodies, `/healthz` still answers within milliseconds
/// (measured by coloc-hostile), so a kubelet never restarts a busy extender.
fn serve_apart(name: &'static str, listener: std::net::TcpListener, app: axum::Router, mut stop: tokio::sync::watch::Receiver<bool>) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    run_apart(name, move || async move {
        match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => {
                http::server::serve(listener, app, Default::default(), async move {
                    let _ = stop.changed().await;
                })
                .await
            }
            Err(e) => tracing::error!(error = %e, listener = name, "listener failed"),
        }
    })
}

/// Says on this replica's own pod (a Warning Event) that its policy file was refused: with
/// --events, in a pod (POD_NAME and POD_NAMESPACE, as the shipped Deployment sets them).
type PolicyAlarm = Option<Box<dyn Fn(&str) + Send + Sync>>;

fn policy_alarm(events: Option<Arc<crate::events::kube::EventSink>>) -> PolicyAlarm {
    let sink = events?;
    let (Ok(namespace), Ok(pod)) = (std::env::var("POD_NAMESPACE"), std::env::var("POD_NAME")) else {
        tracing::info!("POD_NAME or POD_NAMESPACE unset: a refused policy file is said in the log, /readyz and metrics, not in an Event");
        return None;
    };
    Some(Box::new(move |problem: &str| sink.offer(crate::events::policy_invalid(&namespace, &pod, problem))))
}

/// Re-reads the policy file every 2 s, and at once on SIGHUP (mounted ConfigMaps change by
/// symlink swap, which file-event watchers easily miss). Parsing runs off the async
/// runtime. An invalid or unreadable file keeps the old policy, and says so in the log,
/// the metrics and `/readyz`.
async fn reload_policy(
    path: PathBuf,
    mode: Option<Mode>,
    policy: Arc<ArcSwap<Policy>>,
    view: Arc<ViewCell>,
    snapshot: Option<Objects>,
    problem: Arc<ArcSwapOption<String>>,
    reload: tokio::sync::watch::Receiver<u64>,
    alarm: PolicyAlarm,
) {
    let raise = |what: &str| {
        if let Some(alarm) = &alarm {
            alarm(what);
        }
    };
    let mut last = std::fs::read(&path).unwrap_or_default();
    // A problem before the first look can only be an invalid file at start: the built-in
    // default serves in shadow mode until a valid file is read.
    let mut serving_fallback = problem.load().is_some();
    if let Some(why) = problem.load_full() {
        raise(&why);
    }
    let mut ticker = http::server::ReloadTicker::new(Duration::from_secs(2), reload);
    loop {
        let forced = ticker.next().await;
        let now = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                let why = format!("policy file {} is unreadable ({e}); the last good policy stays in force", path.display());
                if problem.load().as_deref() != Some(&why) {
                    http::metrics::record_policy_reload("unreadable");
                    tracing::error!(policy = %path.display(), error = %e, "policy file unreadable; keeping the previous policy");
                    raise(&why);
                    problem.store(Some(Arc::new(why)));
                }
                continue;
            }
        };
        if now == last && !forced && problem.load().is_none() {
            continue;
        }
        last = now.clone();
        let parsed = tokio::task::spawn_blocking(move || {
            let text = String::from_utf8(now).map_err(|e| anyhow::anyhow!("not UTF-8: {e}"))?;
            let mut p = Policy::from_yaml(&text)?;
            if let Some(mode) = mode {
                p.mode = mode;
            }
            Ok::<_, anyhow::Error>(p)
        })
        .await;
        match parsed {
            Ok(Ok(p)) => {
                serving_fallback = false;
                http::metrics::record_policy_fallback(false);
                if let Some(objects) = &snapshot {
                    let (objects, p2) = (objects.clone(), p.clone());
                    if let Ok(v) = tokio::task::spawn_blocking(move || View::build(objects, &p2)).await {
                        view.publish(v);
                    }
                }
                policy.store(Arc::new(p));
                problem.store(None);
                http::metrics::record_policy_reload("ok");
                tracing::info!(policy = %path.display(), "policy reloaded");
            }
            Ok(Err(e)) => {
                let error = format!("{e:#}");
                // Tried again on every tick while the problem lasts: said once per new error.
                if problem.load().as_deref().is_none_or(|p| !p.contains(&error)) {
                    http::metrics::record_policy_reload("error");
                    tracing::error!(policy = %path.display(), error, "policy reload failed; keeping the previous policy");
                    let keeping = match serving_fallback {
                        true => "the built-in default policy stays in force, in shadow mode",
                        false => "the last good policy stays in force",
                    };
                    let why = format!("policy file {} is invalid ({error}); {keeping}", path.display());
                    raise(&why);
                    problem.store(Some(Arc::new(why)));
                }
            }
            Err(e) => tracing::error!(error = %e, "policy reload task failed"),
        }
    }
}
