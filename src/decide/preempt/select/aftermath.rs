//! What follows an eviction. A victim that comes back (recreated by its controller, or
//! requeued) comes back at its priority and with its preemption policy (a requeued pod
//! with its class's `requeue.preemption`). Where the view has no room for it, it preempts
//! in turn: those expected evictions, and the run time they discard, are part of the cost
//! of choosing it. One that waits for room evicts nobody.
//!
//! And a pod that came back a moment ago has just been disrupted: evicting it again
//! costs more than evicting one that has run its course.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use crate::cluster::usage::NodeUsage;
use crate::cluster::View;
use crate::decide::eligibility::{self, Fate, Preemptor};
use crate::decide::fit::fits;
use crate::decide::preempt::held::held_room;
use crate::decide::preempt::plan::Victim;
use crate::decide::Context;
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::{Node, Pod, Timestamp};
use crate::policy::{ClassId, ReplacementPreemption};

/// A pod that came back less than this long ago (seconds) counts as just disrupted.
pub(super) const RECENTLY_BACK_S: i64 = 300;

/// A copy's earlier interruptions counted at most (its attempt is the requeue controller's
/// own annotation, and `maxAttempts` bounds it too; this bounds what any value can weigh).
const MOST_INTERRUPTIONS_COUNTED: u32 = 8;

/// Room for this many pods of a shape elsewhere is plenty: the scan stops.
const PLENTY: u32 = 64;

/// Nodes where a returning pod could make room that are looked at in full, at most: an
/// estimate, bounded so that a preempt call with many victim shapes stays cheap.
const DISPLACE_NODES_TRIED: usize = 8;

/// What one victim set is expected to set off.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct FollowOn {
    /// Pods the returning victims are expected to preempt.
    pub evictions: i64,
    /// Work those pods have done (milli-CPU-seconds, as `Cost::work_thrown_away`).
    pub runtime: i64,
    /// Their restarts (milli-CPU-seconds, as `Cost::restarts`).
    pub restarts: i64,
}

/// Per preempt request: the room each shape of returning pod finds, looked up once.
pub(super) struct Aftermath<'a> {
    ctx: Context<'a>,
    view: &'a View,
    rooms: RefCell<HashMap<Shape, Rc<Room>>>,
}

/// What a returning pod needs and may do: pods of one shape find the same room. Built for
/// every victim of every plan, so it allocates nothing: extended resources and host ports
/// enter as a hash (a collision would only share a room estimate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Shape {
    class: ClassId,
    priority: i32,
    milli_cpu: i64,
    memory: i64,
    ephemeral_storage: i64,
    rest: u64,
}

impl Shape {
    fn of(pod: &Pod, class: ClassId, priority: i32) -> Shape {
        use std::hash::{Hash, Hasher};
        let r = &pod.requests;
        let rest = if r.scalar.is_empty() && pod.host_ports.is_empty() {
            0
        } else {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            r.scalar.hash(&mut h);
            for p in &pod.host_ports {
                (p.port, &p.protocol, &p.ip).hash(&mut h);
            }
            h.finish()
        };
        Shape {
            class,
            priority,
            milli_cpu: r.milli_cpu,
            memory: r.memory,
            ephemeral_storage: r.ephemeral_storage,
            rest,
        }
    }
}

/// Free room for a shape, and how it would make room where there is none.
struct Room {
    /// Nodes with room for at least one more, and for how many.
    free: Vec<(String, u32)>,
    /// The scan found room for `PLENTY` and stopped.
    plenty: bool,
    displaced: OnceCell<Option<Displaced>>,
}

impl Room {
    fn elsewhere(&self, node: &str) -> u32 {
        self.free.iter().filter(|(n, _)| n != node).map(|(_, k)| *k).sum()
    }
}

/// The cheapest way a returning pod makes room: on `node`, by evicting `evictions` pods.
#[derive(Debug, Clone)]
struct Displaced {
    node: String,
    evictions: i64,
    /// Milli-CPU-seconds those pods have run.
    runtime: i64,
    /// Their restarts, milli-CPU-seconds.
    restarts: i64,
    /// The first pod it would evict, to name in explanations.
    first: String,
}

/// How a victim comes back, if it does.
enum Return {
    /// It may preempt: recreated with `PreemptLowerPriority`, or requeued with
    /// `requeue.preemption: keep`, and its class preempts some class.
    Preempts,
    /// It waits for free room.
    Waits,
}

impl<'a> Aftermath<'a> {
    pub(super) fn new(ctx: Context<'a>, view: &'a View) -> Self {
        Aftermath { ctx, view, rooms: RefCell::default() }
    }

    /// Charges `chosen` (evicted from `node`) with what their return sets off, marks each
    /// victim it concerns and explains the first. What the preemptor leaves on `node` is no
    /// room for them: each victim is needed, so less than any of them is left there.
    pub(super) fn charge(&self, node: &Node, chosen: &mut [Victim], ex: &mut Vec<Explanation>) -> FollowOn {
        let mut out = FollowOn::default();
        let mut claimed: HashMap<Shape, u32> = HashMap::new();
        // One line per node (a plan may have dozens of returning victims): the first one.
        let mut returning = 0;
        let mut example: Option<(&Victim, Displaced)> = None;
        for v in chosen.iter_mut() {
            let Some(back) = self.comes_back(v) else { continue };
            let shape = Shape::of(v.pod, v.class, v.pod_priority);
            let room = self.room(&shape, v.pod);
            let used = claimed.entry(shape).or_default();
            if room.plenty || room.elsewhere(&node.name) > *used {
                *used += 1;
                continue;
            }
            if let Return::Waits = back {
                continue;
            }
            let Some(d) = room.displaced.get_or_init(|| self.displaced(v.pod, v.class)) else {
                continue; // nowhere could it make room: it waits
            };
            out.evictions += d.evictions;
            out.runtime += d.runtime;
            out.restarts += d.restarts;
            returning += 1;
            v.follow_on = true;
            if example.is_none() {
                example = Some((&*v, d.clone()));
            }
        }
        if let Some((v, d)) = example {
            let others = if returning > 1 {
                format!(" (and {} more returning victim(s))", returning - 1)
            } else {
                String::new()
            };
            ex.push(Explanation::pod(&node.name, &v.pod.key(), Verdict::Charged, Code::FollowOn, format!(
                "comes back at priority {} and would find no free room: expected to evict {} pod(s) (e.g. {} on {}){others}; {} in all",
                v.pod_priority, d.evictions, d.first, d.node, out.evictions
            )));
        }
        out
    }

    /// Why `pod` counts as just disrupted, if it came back less than `RECENTLY_BACK_S` ago.
    pub(super) fn recently_back(&self, pod: &Pod) -> Option<String> {
        let age = self.ctx.now - pod.running_since()?;
        if age > RECENTLY_BACK_S {
            return None;
        }
        if crate::model::marks::is_replacement(pod) {
            return Some(format!(
                "requeued {age}s ago (attempt {}): evicted once already",
                crate::model::marks::attempt_of(pod)
            ));
        }
        let c = pod.controller.as_ref()?;
        self.recreated_after_preemption(pod)
            .then(|| format!("recreated by {} {} {age}s ago, after one of its pods was preempted", c.kind, c.name))
    }

    /// How many times `pod`'s work was interrupted before: a requeued copy's attempt
    /// (whatever its age: its owner paid for each), or one for a pod its controller
    /// recreated less than `RECENTLY_BACK_S` ago after one of its pods was preempted.
    pub(super) fn interrupted_before(&self, pod: &Pod) -> u32 {
        if crate::model::marks::is_replacement(pod) {
            return crate::model::marks::attempt_of(pod).clamp(1, MOST_INTERRUPTIONS_COUNTED);
        }
        let recent = pod.running_since().is_some_and(|t| self.ctx.now - t <= RECENTLY_BACK_S);
        u32::from(recent && self.recreated_after_preemption(pod))
    }

    /// Was `pod` created by its controller after the view last saw that controller's pod
    /// preempted?
    fn recreated_after_preemption(&self, pod: &Pod) -> bool {
        let (Some(preempted_at), Some(created)) = (self.view.last_preemption_by_controller(pod), pod.creation_time)
        else {
            return false;
        };
        pod.controller.is_some() && created >= preempted_at
    }

    fn comes_back(&self, v: &Victim) -> Option<Return> {
        let policy = self.ctx.policy;
        let preempts = !v.pod.preemption_never && policy.preempts_anything(v.class);
        let may = match v.fate {
            // A DaemonSet's pod comes back on the same node; a finished Job makes no more.
            Fate::Recreated => {
                let c = v.pod.controller.as_ref()?;
                if c.kind == "DaemonSet" || self.view.jobs().of(v.pod).is_some_and(|j| j.finished) {
                    return None;
                }
                preempts
            }
            Fate::Requeued => preempts && policy.class(v.class).requeue.preemption == ReplacementPreemption::Keep,
            Fate::Lost | Fate::LeftToOwner | Fate::LastResort(_) => return None,
        };
        Some(if may { Return::Preempts } else { Return::Waits })
    }

    /// May pods of `class` be placed on `node` at all (schedulable, untainted, placement)?
    fn admits(&self, node: &Node, class: ClassId) -> bool {
        !node.unschedulable
            && !node.taints.iter().any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            && self.ctx.policy.class(class).placement.admits(&node.labels)
    }

    fn room(&self, shape: &Shape, pod: &Pod) -> Rc<Room> {
        if let Some(r) = self.rooms.borrow().get(shape) {
            return r.clone();
        }
        let mut room = Room { free: Vec::new(), plenty: false, displaced: OnceCell::new() };
        let mut total = 0;
        for (node, info) in self.view.nodes() {
            if !self.admits(node, shape.class) {
                continue;
            }
            // Room held for nominated pods only takes room away: a node with none before it
            // (a full cluster: nearly all of them) is passed without looking at it.
            let k = slots(pod, node, &info.usage().all);
            if k == 0 {
                continue;
            }
            let mut held = held_room(self.view, info.nominated(), shape.priority, &pod.uid).peekable();
            let k = if held.peek().is_none() {
                k
            } else {
                let mut usage = info.usage().all.clone();
                held.for_each(|p| usage.add(p));
                slots(pod, node, &usage)
            };
            if k > 0 {
                room.free.push((node.name.clone(), k));
                total += k;
                if total >= PLENTY {
                    room.plenty = true;
                    break;
                }
            }
        }
        let room = Rc::new(room);
        self.rooms.borrow_mut().insert(*shape, room.clone());
        room
    }

    /// Where `pod` (of `class`) would make room with the fewest evictions, as this policy
    /// would answer its preempt call: least valuable pods first.
    fn displaced(&self, pod: &Pod, class: ClassId) -> Option<Displaced> {
        let ctx = &self.ctx;
        let key = pod.key();
        let preemptor = Preemptor { priority: ctx.priority_of(pod), class, key: &key };
        let mut best: Option<Displaced> = None;
        let mut tried = 0;
        for (node, info) in self.view.nodes() {
            if !self.admits(node, class)
                || fits(pod, node, &info.usage().after_evicting(ctx.policy, class, ctx.requeue.enabled)).is_err()
            {
                continue;
            }
            tried += 1;
            if tried > DISPLACE_NODES_TRIED {
                break;
            }
            let mut usage = info.usage().all.clone();
            held_room(self.view, info.nominated(), preemptor.priority, &pod.uid).for_each(|p| usage.add(p));
            let mut victims: Vec<(ClassId, &Pod)> = info
                .pods()
                .iter()
                .filter_map(|p| {
                    let eligible = eligibility::check(ctx, preemptor, p).ok()?;
                    // Victims of last resort are taken only where nothing else makes room.
                    (!eligible.fate.is_last_resort()).then_some((eligible.class, &**p))
                })
                .collect();
            // Least valuable first: later class, lower priority, ran least.
            victims.sort_by_key(|(c, p)| {
                (
                    std::cmp::Reverse(*c),
                    ctx.priority_of(p),
                    std::cmp::Reverse(p.running_since().unwrap_or(Timestamp::MAX)),
                )
            });
            let (mut evictions, mut runtime, mut restarts, mut first) = (0, 0, 0, None);
            for (c, p) in victims {
                if fits(pod, node, &usage).is_ok() {
                    break;
                }
                usage.remove(p);
                evictions += 1;
                runtime += crate::decide::preempt::plan::run_thrown_away(ctx, c, p);
                restarts += crate::decide::preempt::plan::restart_cost(ctx, c, p.requests.milli_cpu);
                first.get_or_insert_with(|| p.key());
            }
            let (Ok(()), Some(first)) = (fits(pod, node, &usage), first) else { continue };
            if best.as_ref().is_none_or(|b| (evictions, runtime) < (b.evictions, b.runtime)) {
                best = Some(Displaced { node: node.name.clone(), evictions, runtime, restarts, first });
            }
            if evictions == 1 {
                break; // none evicts fewer
            }
        }
        best
    }
}

/// How many more pods like `pod` fit on `node` beside `usage` (up to `PLENTY`).
fn slots(pod: &Pod, node: &Node, usage: &NodeUsage) -> u32 {
    if fits(pod, node, usage).is_err() {
        return 0;
    }
    if !pod.host_ports.is_empty() {
        return 1;
    }
    let per = |want: i64, used: i64, allocatable: i64| {
        if want > 0 {
            (allocatable.saturating_sub(used) / want).max(0)
        } else {
            i64::MAX
        }
    };
    let (r, a, u) = (&pod.requests, &node.allocatable, &usage.requested);
    let mut k = per(r.milli_cpu, u.milli_cpu, a.milli_cpu)
        .min(per(r.memory, u.memory, a.memory))
        .min(per(r.ephemeral_storage, u.ephemeral_storage, a.ephemeral_storage))
        .min(node.allocatable_pods.saturating_sub(usage.pods).max(0));
    for (name, want) in &r.scalar {
        k = k.min(per(*want, u.scalar(name), a.scalar(name)));
    }
    k.clamp(0, PLENTY as i64) as u32
}
