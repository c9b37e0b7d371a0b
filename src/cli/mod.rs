//! Command line: `serve` (the extender's composition root is in serve.rs), `requeue` (the
//! requeue controller's, requeue.rs), `check-policy`, `policy-schema`, `replay`, `explain`
//! and `uninstall`, one module each.

mod apart;
mod args;
mod check_policy;
pub mod explain;
mod policy_reload;
mod replay;
mod replica_name;
mod requeue;
mod serve;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

pub use args::{AdminAuth, AdminListen, LimitArgs, OpsArgs, RequeueArgs, ServeArgs};

use crate::pipeline::Verb;
use crate::policy::{Mode, Policy};

#[derive(Parser)]
#[command(name = "coloc-extender", version, about = "kube-scheduler extender for co-located online/offline clusters")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// `serve` carries many flags; the enum is parsed once, at start.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Serve filter, prioritize and preempt over HTTP(S).
    Serve(ServeArgs),
    /// Run the requeue controller (in pods of its own, as the requeue identity): once
    /// kube-scheduler preempts a bare pod of a `requeue` class, whoever asked it to, store a
    /// gated copy of it and release it once the original is gone. One replica leads (a
    /// Lease), and says there whether it can store copies: `serve --requeue` reads that.
    Requeue(RequeueArgs),
    /// Validate a policy file and print its classes.
    CheckPolicy { file: PathBuf },
    /// Print the policy's JSON Schema (for editors and CI; check-policy also checks meaning,
    /// e.g. that every class named exists).
    PolicySchema,
    /// Answer one recorded request without a server: the wire answer on stdout, the
    /// explanation on stderr.
    Replay {
        #[arg(long)]
        verb: Verb,
        payload: PathBuf,
        /// Policy file, replayed in its own mode (default: the shipped default policy's
        /// rules, enforced).
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Cluster snapshot (`kubectl get nodes,pods,pdb,priorityclasses,jobs -A -o json`)
        /// for full victim re-selection.
        #[arg(long)]
        snapshot: Option<PathBuf>,
        /// The decision time, RFC 3339 or Unix seconds (default: now).
        #[arg(long)]
        now: Option<String>,
        /// Decide as `serve` without a requeue controller would: bare pods of `requeue` classes are
        /// victims of last resort (taken only for an online pod nothing else places, and
        /// lost). By default replay shows what would be requeued (it never writes).
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
    /// admin port), e.g. `kubectl -n coloc-system port-forward deploy/coloc-scheduler 8082`
    /// then `coloc-extender explain online/web-0`. Behind `serve --admin-auth kube` (as
    /// shipped) it needs the token of an identity bound to ClusterRole
    /// coloc-extender-decisions-reader: `--token-file`, or $COLOC_TOKEN.
    Explain {
        /// NAMESPACE/NAME
        pod: String,
        /// The extender's admin listener (`serve --admin-listen`).
        #[arg(long, default_value = explain::DEFAULT_SERVER)]
        server: String,
        /// A file holding the bearer token to send (default: $COLOC_TOKEN, if set).
        #[arg(long)]
        token_file: Option<PathBuf>,
    },
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::PolicySchema => check_policy::print_schema(),
        Command::CheckPolicy { file } => check_policy::run(&file),
        Command::Uninstall(args) => crate::uninstall::run(args),
        Command::Explain { pod, server, token_file } => {
            let token = explain::token(token_file.as_deref())?;
            print!("{}", explain::run(&pod, &server, token.as_deref())?);
            Ok(())
        }
        Command::Replay { verb, payload, policy, snapshot, now, no_requeue, mode } => {
            replay::run(replay::ReplayArgs { verb, payload, policy, snapshot, now, no_requeue, mode })
        }
        Command::Serve(args) => {
            init_logging(args.log_json);
            let runtime =
                tokio::runtime::Builder::new_multi_thread().worker_threads(args.io_threads).enable_all().build()?;
            runtime.block_on(serve::serve(args))
        }
        Command::Requeue(args) => {
            init_logging(args.log_json);
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            runtime.block_on(requeue::run(args))
        }
    }
}

pub fn load_policy(path: Option<&Path>) -> anyhow::Result<Policy> {
    match path {
        Some(p) => Ok(Policy::load(p)?),
        None => Ok(Policy::builtin_default()),
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
