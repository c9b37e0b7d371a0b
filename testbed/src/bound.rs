//! How long a trace's online pods wait whatever is evicted: the trace replayed with every
//! offline pod gone the instant an online pod arrives. Online pods there before keep their
//! nodes until they end; arriving ones, in arrival order, each take the node where its CPU
//! fits tightest (its memory fitting too) and otherwise wait for an online pod to end. A
//! p99 target below what this gives is out of any preemption's reach: on such a trace the
//! online pods wait for each other (packing), not for victims.

use crate::scenario::Scenario;

/// What the bound found for the arriving online pods.
#[derive(Debug, Default, PartialEq)]
pub struct OnlineWaits {
    /// Each placed arrival and how long it waited, seconds, in the order they are placed.
    pub placed: Vec<(String, f64)>,
    /// Arrivals no node ever has room for (online pods that never end hold it): never placed.
    pub never: Vec<String>,
}

impl OnlineWaits {
    /// How many arrivals had to wait (more than a millisecond) or were never placed.
    pub fn waiting(&self) -> usize {
        self.placed.iter().filter(|(_, w)| *w > 0.001).count() + self.never.len()
    }

    /// The longest wait of a placed arrival, 0 for none.
    pub fn longest_s(&self) -> f64 {
        self.placed.iter().map(|(_, w)| *w).fold(0.0, f64::max)
    }

    /// The waits' `q` quantile (nearest rank, as coloc-demo counts it), 0 for none.
    pub fn quantile_s(&self, q: f64) -> f64 {
        crate::demo::quantile(self.placed.iter().map(|(_, w)| *w).collect(), q)
    }
}

/// Free room on one node: CPU in millicores, memory in MiB.
#[derive(Clone, Copy)]
struct Room {
    cpu_m: i64,
    memory_mi: i64,
}

/// An online pod running until `at_s` on `node`, holding `cpu_m` and `memory_mi`.
struct Ending {
    at_s: f64,
    node: usize,
    cpu_m: i64,
    memory_mi: i64,
}

/// The bound for `sc`'s arrivals of class `online_class` (offline arrivals and every
/// offline pod there before are left out: gone the instant they are in the way).
pub fn online_waits(sc: &Scenario, online_class: &str) -> OnlineWaits {
    let mut room: Vec<Room> =
        sc.nodes.iter().map(|n| Room { cpu_m: n.cpu_m, memory_mi: n.memory_gi.unwrap_or(64) * 1024 }).collect();
    let mut endings = Vec::new();
    // Online pods there before, on their nodes (one without a node takes the tightest fit).
    for b in sc.bare.iter().filter(|b| b.class == online_class) {
        let (cpu_m, memory_mi) = (b.cpu_m, b.memory_mi.unwrap_or(0));
        let node = match &b.node {
            Some(name) => sc.nodes.iter().position(|n| &n.name == name),
            None => tightest(&room, cpu_m, memory_mi),
        };
        if let Some(node) = node {
            take(&mut room[node], cpu_m, memory_mi);
            if let Some(run) = b.run_s {
                endings.push(Ending { at_s: run as f64, node, cpu_m, memory_mi });
            }
        }
    }
    let arrivals: Vec<_> = sc.online.iter().filter(|o| o.class == online_class).collect();
    let mut waits = OnlineWaits::default();
    let mut waiting: Vec<usize> = Vec::new();
    let mut next = 0;
    loop {
        let arrival = arrivals.get(next).map(|o| o.at_s.unwrap_or(0.0));
        let ending = endings.iter().enumerate().min_by(|a, b| a.1.at_s.total_cmp(&b.1.at_s)).map(|(i, e)| (i, e.at_s));
        let arrival_first = match (arrival, ending) {
            (None, None) => break,
            (Some(a), Some((_, at))) => a <= at,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        let now = match (arrival, ending) {
            (Some(a), _) if arrival_first => {
                waiting.push(next);
                next += 1;
                a
            }
            (_, Some((i, at))) => {
                let e = endings.swap_remove(i);
                give(&mut room[e.node], e.cpu_m, e.memory_mi);
                at
            }
            _ => break,
        };
        waiting.retain(|&i| {
            let o = arrivals[i];
            let (cpu_m, memory_mi) = (o.cpu_m, o.memory_mi.unwrap_or(0));
            let Some(node) = tightest(&room, cpu_m, memory_mi) else {
                return true;
            };
            take(&mut room[node], cpu_m, memory_mi);
            waits.placed.push((o.name.clone(), now - o.at_s.unwrap_or(0.0)));
            if let Some(run) = o.run_s {
                endings.push(Ending { at_s: now + run as f64, node, cpu_m, memory_mi });
            }
            false
        });
    }
    waits.never = waiting.into_iter().map(|i| arrivals[i].name.clone()).collect();
    waits
}

/// The node whose free CPU is least once the pod is on it, among those where it fits.
fn tightest(room: &[Room], cpu_m: i64, memory_mi: i64) -> Option<usize> {
    room.iter()
        .enumerate()
        .filter(|(_, r)| r.cpu_m >= cpu_m && r.memory_mi >= memory_mi)
        .min_by_key(|(i, r)| (r.cpu_m - cpu_m, *i))
        .map(|(i, _)| i)
}

fn take(r: &mut Room, cpu_m: i64, memory_mi: i64) {
    r.cpu_m -= cpu_m;
    r.memory_mi -= memory_mi;
}

fn give(r: &mut Room, cpu_m: i64, memory_mi: i64) {
    r.cpu_m += cpu_m;
    r.memory_mi += memory_mi;
}

/// One line for a person: how many online pods wait whatever is evicted, and how long.
pub fn describe(w: &OnlineWaits) -> String {
    let arrived = w.placed.len() + w.never.len();
    let never = match w.never.len() {
        0 => String::new(),
        n => format!(", {n} never placed (no node ever has room for them)"),
    };
    format!(
        "online pods that wait whatever is evicted: {} of {arrived}, the longest {:.1} s, p99 {:.1} s{never}",
        w.waiting(),
        w.longest_s(),
        w.quantile_s(0.99),
    )
}
