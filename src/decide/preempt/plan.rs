//! The decision's vocabulary for preempt: a `Victim` as decisions rank it, a `Plan` (a
//! candidate node with its victims) and its `Cost`. Free of the wire: kube-scheduler's
//! forms are read through `proposed::Proposed` only.

use std::cmp::Ordering;

use crate::cluster::View;
use crate::decide::eligibility::{self, Fate, Preemptor};
use crate::decide::promised;
use crate::decide::wait::{self, Wait};
use crate::decide::Context;
use crate::explanation::Code;
use crate::model::{GangInfo, Pod, Timestamp};
use crate::policy::ClassId;

/// What evicting a victim set costs; compared field by field, lower is better.
///
/// Ahead of everything: victims of last resort, then PDB violations, then work nothing
/// brings back (a failed Job, a bare pod of a `lose` class), then the policy's class
/// order, then budgets a later arrival would have to break (a PDB's or a Job's last).
/// Then one figure: what the owners lose (the work thrown away plus a restart for every
/// pod interrupted), shared among the online pods the freed room places (the preemptor
/// and those already waiting that fit in what is left over), and the preemptor's wait
/// until the room is free, priced at its class's `waitPrice`. So a plan that frees the
/// room sooner wins only where the work it adds costs less than the seconds it saves are
/// worth, and a slower plan that is also dearer never wins. Then the sooner of two equal figures. A broken gang is no tier of
/// its own: its survivors' run and restarts are in the figure, so a gang is broken only
/// where keeping it whole throws away more.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cost {
    /// Work lost that nobody agreed to lose: a bare pod whose class asks for requeue but
    /// that cannot be requeued (namespace not opted in, `maxAttempts` reached, requeue
    /// unavailable, beyond baseline: a victim of last resort), and a pod whose eviction fails
    /// its Job. First, ahead of PDB violations: a violated PDB's pods come back, these do
    /// not, and a `lose` class agreed to lose its pods. So such a victim is taken only
    /// where no other victims place the preemptor, and then as few as can be.
    pub lost_unasked: i64,
    pub pdb_violations: i64,
    /// Victims that nothing brings back (allowed only where the policy says so).
    pub lost_pods: i64,
    /// How valuable the most valuable victim's class is (0: no victims).
    pub top_class_value: i64,
    /// Budgets this eviction uses up: a PDB's last allowed disruption, a Job's last
    /// allowed failure. Nothing is lost now, but a later arrival whose only room is
    /// behind that budget would have to violate it (budgets are shared over time).
    pub budgets_spent: i64,
    /// `owners_loss / placed + priced_wait`, milli-CPU-seconds: the one figure plans are
    /// weighed on.
    pub priced_loss: i64,
    /// Milliseconds until the room is free: the last victim gone, and the pods already
    /// terminating the plan waits for (`wait::until_gone`).
    pub wait_ms: i64,
    /// `work_thrown_away + restarts`, milli-CPU-seconds.
    pub owners_loss: i64,
    /// The wait at the preemptor class's `waitPrice`, milli-CPU-seconds (`Cost::price_wait`).
    pub priced_wait: i64,
    /// What the owners lose per online pod the freed room places (`owners_loss / placed`).
    pub loss_per_placed: i64,
    /// Online pods the freed room places: the preemptor, and those already waiting that
    /// fit in the room left over (`Cost::share`). 0 stands for 1 (a cost not yet shared).
    pub placed: i64,
    pub max_priority: i64,
    pub priority_sum: i64,
    pub victims: i64,
    /// Prefer taking from tenants with a high weighted share: minus the lowest share
    /// among victims' tenants, in millionths.
    pub tenant_penalty: i64,
    /// Bare victims that go back to the pending queue through a copy: nothing is lost
    /// either way, so only the copies' API writes tell it from a recreated victim, last.
    pub requeued: i64,
    /// Run time thrown away in milli-CPU-seconds (seconds run × CPU requested): the
    /// victims', a broken gang's survivors' and the expected follow-on evictions'.
    pub work_thrown_away: i64,
    /// Each interrupted pod's `victim.restartCost` at its CPU request plus its
    /// `victim.interruptionCost`, milli-CPU-seconds.
    pub restarts: i64,
    /// Pods interrupted: victims, survivors of the gangs they break, follow-on evictions.
    pub interrupted: i64,
    /// Members a broken gang keeps elsewhere: they run on but cannot progress.
    pub gang_survivors: i64,
    /// Pods the returning victims are expected to preempt, where they would find no room.
    pub follow_on_evictions: i64,
    /// Victims that came back a moment ago (recreated after a preemption, or requeued).
    pub re_evicted: i64,
    /// Of `lost_unasked`, the bare pods that cannot be requeued (the rest fail a Job).
    pub last_resort: i64,
    /// Victims whose gang is below its minimum already: their run was lost, and their
    /// restart charged, when it broke; evicting them now costs nothing more.
    pub of_gangs_broken_already: i64,
}

impl Cost {
    /// Adds `work` thrown away and `pods` interrupted whose restarts cost `restarts`.
    pub(super) fn interrupt(&mut self, work: i64, pods: i64, restarts: i64) {
        self.work_thrown_away = self.work_thrown_away.saturating_add(work);
        self.restarts = self.restarts.saturating_add(restarts);
        self.interrupted += pods;
        self.owners_loss = self.work_thrown_away.saturating_add(self.restarts);
        self.weigh();
    }

    /// Shares what the owners lose among `placed` online pods (at least the preemptor).
    pub(super) fn share(&mut self, placed: i64) {
        self.placed = placed.max(1);
        self.weigh();
    }

    fn weigh(&mut self) {
        self.loss_per_placed = self.owners_loss / self.placed.max(1);
        self.priced_loss = self.loss_per_placed.saturating_add(self.priced_wait);
    }

    /// Sets the wait until the room is free, `wait_ms`, and its price: `price` CPU-seconds
    /// a second is `price` milli-CPU-seconds a millisecond.
    pub(super) fn price_wait(&mut self, wait_ms: i64, price: WaitPrice) {
        self.wait_ms = wait_ms;
        self.priced_wait = price.of(wait_ms);
        self.weigh();
    }

    /// The figure owners lose and what it is made of, for explanations.
    pub fn describe(&self) -> String {
        let cpu_s = |m: i64| m / 1000;
        let mut parts = vec![format!("{} evicted", self.victims)];
        if self.of_gangs_broken_already > 0 {
            parts.push(format!("{} of them not counted, their gang broken already", self.of_gangs_broken_already));
        }
        if self.gang_survivors > 0 {
            parts.push(format!("{} gang survivor(s)", self.gang_survivors));
        }
        if self.follow_on_evictions > 0 {
            parts.push(format!("{} follow-on eviction(s)", self.follow_on_evictions));
        }
        let budgets = match self.budgets_spent {
            0 => String::new(),
            n => format!(", {n} last budget(s) spent (a PDB's last disruption, a Job's last failure)"),
        };
        let last_resort = match self.last_resort {
            0 => String::new(),
            n => format!(" ({n} a last resort: bare, cannot be requeued)"),
        };
        let shared = match self.placed {
            0 | 1 => String::new(),
            n => format!(", {} CPU-s for each of the {n} online pods its room places", cpu_s(self.loss_per_placed)),
        };
        format!(
            "owners lose {} CPU-s{shared}: {} run thrown away + {} for {} pod(s) interrupted ({}); {} PDB violation(s), {} lost{last_resort}{budgets}",
            cpu_s(self.owners_loss),
            cpu_s(self.work_thrown_away),
            cpu_s(self.restarts),
            self.interrupted,
            parts.join(", "),
            self.pdb_violations,
            self.lost_pods,
        )
    }
}

/// What a second of the preemptor's wait is worth in CPU-seconds of offline work: its
/// class's `waitPrice`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct WaitPrice(pub(super) f64);

impl WaitPrice {
    pub(super) fn of_preemptor(ctx: &Context, preemptor: Preemptor) -> WaitPrice {
        WaitPrice(ctx.policy.class(preemptor.class).wait_price)
    }

    /// "1,000 CPU-s per second".
    pub(super) fn said(self) -> String {
        match self.0.fract() {
            0.0 => format!("{} per second", cpu_seconds_said((self.0 * 1000.0) as i64)),
            _ => format!("{} CPU-s per second", self.0),
        }
    }

    /// `ms` of waiting, in milli-CPU-seconds of work.
    pub(super) fn of(self, ms: i64) -> i64 {
        (self.0 * ms.max(0) as f64).min(i64::MAX as f64) as i64
    }

    /// How `other` compares with the `chosen` plan where their waits differ, in the
    /// policy's units: "3.0 s sooner for 198,000 CPU-s more, not worth it at 1,000
    /// CPU-s per second". `None` where they tie on time, or a rank ahead of the price
    /// (losses, PDB violations, class, budgets) already tells them apart.
    pub(super) fn trade(self, chosen: &Cost, other: &Cost) -> Option<String> {
        let ahead = |c: &Cost| (c.lost_unasked, c.pdb_violations, c.lost_pods, c.top_class_value, c.budgets_spent);
        if ahead(chosen) != ahead(other) || chosen.wait_ms == other.wait_ms {
            return None;
        }
        let seconds = wait::seconds((chosen.wait_ms - other.wait_ms).abs());
        // Per online pod placed: a plan whose room places waiting pods too shares its loss.
        let each = match chosen.placed.max(other.placed) {
            0 | 1 => "",
            _ => " per online pod placed",
        };
        let work = format!("{}{each}", cpu_seconds_said((chosen.loss_per_placed - other.loss_per_placed).abs()));
        let price = self.said();
        let dearer = other.loss_per_placed > chosen.loss_per_placed;
        Some(match (other.wait_ms < chosen.wait_ms, dearer) {
            (true, true) => format!("{seconds} sooner for {work} more, not worth it at {price}"),
            (true, false) => format!("{seconds} sooner and {work} cheaper, yet ranked after"),
            (false, true) => format!("{seconds} later and {work} dearer"),
            (false, false) => format!("{seconds} later for {work} less: the seconds are worth more at {price}"),
        })
    }
}

/// The first rank ahead of the price (losses, PDB violations, class, budgets) on which
/// `other` is worse than `chosen`, said: "1 PDB violation(s) against 0". `None` where
/// they tie on all of them.
pub(super) fn worse_ahead_of_price(chosen: &Cost, other: &Cost) -> Option<String> {
    let ranks = [
        ("victim(s) nobody agreed to lose", chosen.lost_unasked, other.lost_unasked),
        ("PDB violation(s)", chosen.pdb_violations, other.pdb_violations),
        ("victim(s) nothing brings back", chosen.lost_pods, other.lost_pods),
        ("for its most valuable victim's class value", chosen.top_class_value, other.top_class_value),
        ("last budget(s) spent", chosen.budgets_spent, other.budgets_spent),
    ];
    let (what, c, o) = ranks.into_iter().find(|(_, c, o)| c != o)?;
    (o > c).then(|| format!("{o} {what} against {c}"))
}

/// "198,000 CPU-s", from milli-CPU-seconds.
pub fn cpu_seconds_said(milli: i64) -> String {
    let digits = (milli / 1000).to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 && c != '-' && !out.ends_with('-') {
            out.push(',');
        }
        out.push(c);
    }
    format!("{out} CPU-s")
}

/// One victim as decisions rank it.
#[derive(Debug, Clone)]
pub(super) struct Victim<'a> {
    pub(super) pod: &'a Pod,
    pub(super) class: ClassId,
    /// The priority victims are ranked by: its PodGroup's, if that sets one, else its own.
    pub(super) priority: i32,
    /// The pod's own priority: the answer's order (kube-scheduler reads Pods[0] as the
    /// highest-priority victim from its own cache).
    pub(super) pod_priority: i32,
    /// `status.startTime`: `None` for pods that never started.
    pub(super) running_since: Option<Timestamp>,
    /// Milliseconds until it would be gone if evicted now (`wait::left`).
    pub(super) left_ms: i64,
    pub(super) tenant_share: f64,
    pub(super) gang: Option<GangInfo>,
    /// Its gang is below its minimum already (members being deleted, or chosen by earlier
    /// answers): its run is lost and its restart paid whoever evicts it now.
    pub(super) gang_broken_already: bool,
    pub(super) fate: Fate,
    /// kube-scheduler proposed it: among equals, prefer kube's own choice (its cache
    /// certainly holds that pod on that node).
    pub(super) proposed: bool,
    /// What its eviction does to its Job, once the victim set is known (`jobs::charge`).
    pub(super) job_note: Option<String>,
    /// Its eviction uses up its Job's last allowed failure (`jobs::charge`).
    pub(super) last_job_failure: bool,
    /// Its return is expected to evict (`aftermath` explains it).
    pub(super) follow_on: bool,
    /// It came back a moment ago (`aftermath`).
    pub(super) recently_back: Option<String>,
    /// Times its work was interrupted before (a requeued copy's attempt, a pod recreated
    /// after a preemption): each is a restart its owner already paid (`aftermath`).
    pub(super) interrupted_before: u32,
    /// What its eviction does to the PDBs covering it (`reprieve`), said only where the
    /// plan is kept: a pod on an outranked candidate is not a victim.
    pub(super) pdb_notes: Vec<(Code, String)>,
}

impl Victim<'_> {
    /// Most valuable first: class order, priority, longer running, lower tenant share,
    /// not proposed by kube-scheduler, then smaller (evicting the bigger of two equals
    /// frees more with fewer victims).
    pub(super) fn value_order(&self, other: &Self) -> Ordering {
        let size = |v: &Victim| (v.pod.requests.milli_cpu, v.pod.requests.memory);
        self.class
            .cmp(&other.class)
            .then(other.priority.cmp(&self.priority))
            .then(self.running_since.unwrap_or(i64::MAX).cmp(&other.running_since.unwrap_or(i64::MAX)))
            .then(self.tenant_share.total_cmp(&other.tenant_share))
            .then(self.proposed.cmp(&other.proposed))
            .then(size(self).cmp(&size(other)))
            .then_with(|| (&self.pod.namespace, &self.pod.name).cmp(&(&other.pod.namespace, &other.pod.name)))
    }
}

/// A candidate node that survived, with its victims.
pub(super) struct Plan<'a> {
    pub(super) node: String,
    /// In answer order (descending priority).
    pub(super) victims: Vec<Victim<'a>>,
    pub(super) pdb_violations: i64,
    pub(super) cost: Cost,
    /// How soon its room is free (`cost.wait_ms`), and for whom last.
    pub(super) wait: Wait,
}

/// One victim as decisions rank it, from what eligibility found.
pub(super) fn victim<'a>(
    ctx: &Context,
    pod: &'a Pod,
    eligible: eligibility::Eligible,
    view: Option<&View>,
    proposed: bool,
) -> Victim<'a> {
    let gang = view.and_then(|v| Some(v.gang(&v.gang_of(pod)?, pod)));
    let gang_broken_already = match (view, &gang) {
        (Some(v), Some(g)) => g.broken_already(promised::gang_members(ctx.undeleted, v, &g.gang).len()),
        _ => false,
    };
    let pod_priority = ctx.priority_of(pod);
    Victim {
        pod,
        class: eligible.class,
        fate: eligible.fate,
        priority: gang.as_ref().and_then(|g| g.priority).unwrap_or(pod_priority),
        pod_priority,
        // Like kube-scheduler, a pod that never started has run for no time at all.
        running_since: pod.start_time,
        left_ms: wait::left_in(ctx, pod, eligible.class).0,
        tenant_share: view.map(|v| v.tenant_share(&ctx.policy.tenants.tenant_of(pod))).unwrap_or(0.0),
        gang,
        gang_broken_already,
        proposed,
        job_note: None,
        last_job_failure: false,
        follow_on: false,
        recently_back: None,
        interrupted_before: 0,
        pdb_notes: Vec::new(),
    }
}

/// Work a pod has done so far: seconds run × milli-CPU requested (at least 1 milli-CPU,
/// so a pod without requests still counts its time).
pub(super) fn cpu_seconds(now: crate::model::Timestamp, pod: &Pod) -> i64 {
    let ran = pod.start_time.map_or(0, |t| (now - t).max(0));
    ran.saturating_mul(pod.requests.milli_cpu.max(1))
}

/// The run evicting `pod` of `class` throws away: all of it, unless its class saves its
/// progress on SIGTERM (`victim.checkpointsOnTerm`): then none.
pub(super) fn run_thrown_away(ctx: &Context, class: ClassId, pod: &Pod) -> i64 {
    match ctx.policy.class(class).victim.checkpoints_on_term {
        true => 0,
        false => cpu_seconds(ctx.now, pod),
    }
}

/// What restarting a pod of `class` requesting `milli_cpu` costs its owner, in
/// milli-CPU-seconds: `victim.restartCost` at its CPU, but at least one CPU's (a small
/// pod's restart takes as long: an eviction is never cheap because the pod is small),
/// plus `victim.interruptionCost` whatever its size (so fewer pods go before more of
/// the same CPU in all).
pub(super) fn restart_cost(ctx: &Context, class: ClassId, milli_cpu: i64) -> i64 {
    let victim = &ctx.policy.class(class).victim;
    victim
        .restart_cost
        .saturating_mul(milli_cpu.max(1000))
        .saturating_add(victim.interruption_cost.saturating_mul(1000))
}

/// What interrupting `v` costs its owner in restarts: one, and one more for each time its
/// work was interrupted before. A copy just released is young, and so throws away little
/// run, but its owner already restarted it once for an online pod: it is no cheap victim.
pub(super) fn restarts_of(ctx: &Context, v: &Victim) -> i64 {
    restart_cost(ctx, v.class, v.pod.requests.milli_cpu).saturating_mul(1 + i64::from(v.interrupted_before))
}
