//! `replay`: answer one recorded request without a server. The wire answer goes to
//! stdout, the explanation to stderr; nothing is written to any cluster.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::cluster::{self, View};
use crate::pipeline::{self, Verb};
use crate::policy::Mode;
use crate::wire::Bounds;

/// What `replay` was asked.
pub struct ReplayArgs {
    pub verb: Verb,
    pub payload: PathBuf,
    pub policy: Option<PathBuf>,
    pub snapshot: Option<PathBuf>,
    pub now: Option<String>,
    pub no_requeue: bool,
    pub mode: Option<Mode>,
}

pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let ReplayArgs { verb, payload, policy, snapshot, now, no_requeue, mode } = args;
    // The shipped default is in shadow for a first install; replayed alone it shows what
    // its rules decide. A policy file given is replayed in its own mode.
    let mut policy = match policy.as_deref() {
        Some(file) => super::load_policy(Some(file))?,
        None => crate::policy::Policy::builtin_default().enforced(),
    };
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
        promised: &[],
        undeleted: &[],
    };
    let answer = pipeline::answer(verb, &body, &ctx, &Bounds::default())
        .map_err(|e| anyhow::anyhow!("{}: {e}", payload.display()))?;
    eprintln!(
        "{} {} ({})",
        verb.as_str(),
        answer.pod,
        if view.is_some() { "with cluster view" } else { "request only" }
    );
    for e in &answer.explanations {
        eprintln!("  {e}");
    }
    for r in answer.requeues() {
        eprintln!(
            "  would requeue {} as {} (attempt {}; replay writes nothing)",
            r.original_key(),
            r.replacement,
            r.attempt
        );
    }
    if let Some(would) = answer.would_answer() {
        eprintln!(
            "shadow: stdout is kube-scheduler's own answer; the policy would answer ({}) and change: {}",
            answer.summary,
            answer.diffs()
        );
        eprintln!("  {}", String::from_utf8_lossy(would));
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(&answer.body)?;
    out.write_all(b"\n")?;
    Ok(())
}

fn parse_now(s: Option<&str>) -> anyhow::Result<i64> {
    match s {
        None => Ok(crate::clock::system_now()),
        Some(t) => match t.parse::<i64>() {
            Ok(secs) => Ok(secs),
            Err(_) => Ok(t
                .parse::<jiff::Timestamp>()
                .with_context(|| format!("--now {t:?}: expected RFC 3339 or Unix seconds"))?
                .as_second()),
        },
    }
}
