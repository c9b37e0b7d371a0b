//! How soon a preempt answer's room is expected free, on the node kube-scheduler picks
//! among its candidates (`shadow::pick`): for kube-scheduler's own choice, its victims gone
//! (`decide::wait`); for the policy's, its plan's wait (its victims, and the pods already
//! terminating it counts on). Said in `/decisions` and the preemptor's Event, and checked
//! against what happens (`coloc_preempt_wait_seconds`).

use crate::decide::wait::{self, Wait};
use crate::decide::Context;
use crate::shadow::{pick, pick_among, Resolver};
use crate::wire::{Candidates, PreemptArgs, PreemptionResult};

/// Where the room comes free and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub node: String,
    pub wait: Wait,
    /// The victims evicted there (UIDs), whose going ends the wait.
    pub victims: Vec<String>,
    /// Victims neither the view nor the request describes (UIDs only): not counted.
    pub unknown: usize,
}

impl Expected {
    /// "node-b in ~3.0 s (batch/w-1: its declared grace period)".
    pub fn describe(&self) -> String {
        let unknown = match self.unknown {
            0 => String::new(),
            n => format!(", {n} victim(s) unknown"),
        };
        match self.wait.last {
            None => format!("{} at once{unknown}", self.node),
            Some(_) => format!("{} in {}{unknown}", self.node, self.wait.describe()),
        }
    }
}

/// The wait of `result`'s victims on the node kube-scheduler picks; `None` without
/// candidates.
pub fn of(args: &PreemptArgs, result: &PreemptionResult, ctx: &Context) -> Option<Expected> {
    let pods = Resolver::new(args, ctx);
    let node = pick(result, &pods, ctx)?;
    let victims = result.node_name_to_meta_victims[node].pods.iter().map(|p| p.uid.as_str());
    Some(expected(node, victims, &pods, ctx))
}

/// The wait of kube-scheduler's own choice: the node it picks among the candidates it
/// proposed, with its own victims.
pub fn of_kube(args: &PreemptArgs, ctx: &Context) -> Option<Expected> {
    let pods = Resolver::new(args, ctx);
    let node = match &args.candidates {
        Candidates::Full(m) => {
            pick_among(m.iter().map(|(n, v)| (n, v.uids.iter().map(String::as_str), v.num_pdb_violations)), &pods, ctx)
        }
        Candidates::Meta(m) => {
            pick_among(m.iter().map(|(n, v)| (n, v.uids.iter().map(String::as_str), v.num_pdb_violations)), &pods, ctx)
        }
    }?;
    let victims: &[String] = match &args.candidates {
        Candidates::Full(m) => &m[node].uids,
        Candidates::Meta(m) => &m[node].uids,
    };
    Some(expected(node, victims.iter().map(String::as_str), &pods, ctx))
}

fn expected<'u>(node: &str, victims: impl Iterator<Item = &'u str>, pods: &Resolver, ctx: &Context) -> Expected {
    let victims: Vec<String> = victims.map(str::to_string).collect();
    let known: Vec<_> = victims.iter().filter_map(|uid| pods.pod(uid)).collect();
    Expected {
        node: node.to_string(),
        wait: wait::until_gone(ctx, known.iter().copied()),
        unknown: victims.len() - known.len(),
        victims,
    }
}

/// The policy's answer's wait on the node kube-scheduler picks among it: its plan's, where
/// the decision made one (`waits`), else its victims'.
pub fn of_plan(
    args: &PreemptArgs,
    result: &PreemptionResult,
    waits: &std::collections::BTreeMap<String, Wait>,
    ctx: &Context,
) -> Option<Expected> {
    let mut expected = of(args, result, ctx)?;
    if let Some(w) = waits.get(&expected.node) {
        expected.wait = w.clone();
    }
    Some(expected)
}

/// "room free on node-b in ~3.0 s (…); kube-scheduler's own choice, node-a, in ~2 min 0 s
/// (…)", naming which was sent.
pub fn line(policy: Option<&Expected>, kube: Option<&Expected>, shadow: bool) -> Option<String> {
    let say = |e: Option<&Expected>| e.map_or("no room: no candidate".to_string(), Expected::describe);
    match (policy, kube, shadow) {
        (None, None, _) => None,
        (_, _, false) => Some(format!("room free on {}; kube-scheduler's own choice: {}", say(policy), say(kube))),
        (_, _, true) => Some(format!(
            "room free on {} (kube-scheduler's own choice, sent); the policy's: {}",
            say(kube),
            say(policy)
        )),
    }
}
