//! The workload-class policy as loaded from YAML (see docs/policy.md).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::model::{GangRef, GangSource, Labels, Pod, Timestamp};

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// The policy file's API, `coloc-extender.io/v1alpha2` (`policy::API_VERSION`), or the
    /// v1alpha1 it replaced. A file without it (written before the policy was versioned) is
    /// read as either: they differ only in `waitTolerance`, which is refused with its
    /// replacement named.
    #[serde(default)]
    pub api_version: Option<String>,
    /// `Policy` (`policy::KIND`).
    #[serde(default)]
    pub kind: Option<String>,
    /// `enforce` (default) answers with the policy's decisions; `shadow` answers exactly as
    /// kube-scheduler would decide without the extender and only counts the differences.
    /// `serve --mode` overrides it.
    #[serde(default)]
    pub mode: Mode,
    /// Class for pods no class matches.
    pub default_class: String,
    /// How many candidate nodes preempt returns (best first); kube-scheduler picks among them.
    #[serde(default = "one")]
    pub max_candidates: usize,
    #[serde(default)]
    pub gangs: GangConfig,
    #[serde(default)]
    pub tenants: TenantConfig,
    pub classes: Vec<Class>,
    /// `may_preempt[a][b]`: class `a` may evict pods of class `b` (filled by validation).
    #[serde(skip)]
    pub(crate) may_preempt: Vec<Vec<bool>>,
    #[serde(skip)]
    pub(crate) default_index: usize,
}

fn one() -> usize {
    1
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Class {
    pub name: String,
    /// Any one selector matching puts the pod in this class (first class wins).
    #[serde(default)]
    pub r#match: Vec<Selector>,
    /// Classes whose pods this class may evict.
    #[serde(default)]
    pub preempts: Vec<String>,
    #[serde(default)]
    pub victim: VictimRules,
    #[serde(default)]
    pub placement: Placement,
    #[serde(default)]
    pub scoring: Scoring,
    /// What a preemptor of this class gets while the cluster view is expected but not
    /// usable (not synced yet, or its watches failing): `degrade` judges kube-scheduler's
    /// own victims (fail-open), `refuse` answers no candidates (fail-closed).
    #[serde(default)]
    pub without_view: WithoutView,
    /// How this class's requeued pods come back.
    #[serde(default)]
    pub requeue: RequeueRules,
    /// What one second of this class's pod's wait for room is worth, in CPU-seconds of
    /// offline work (run thrown away and restarts): a way to place the pod that frees its
    /// room sooner wins only where the work it adds costs less than the seconds it saves
    /// are worth. Never ahead of losses, PDB violations, the victims' class or budgets.
    /// 0: the wait only breaks ties.
    #[serde(default = "default_wait_price")]
    pub wait_price: f64,
    /// Replaced by `waitPrice` (`coloc-extender.io/v1alpha2`): read only to say so.
    #[serde(default)]
    #[schemars(skip)]
    pub wait_tolerance: Option<serde_yaml_ng::Value>,
}

/// `waitPrice` by default, CPU-seconds of offline work per second of wait: chosen on
/// public co-location traces and generated clusters (docs/decisions.md, "The price of a
/// second").
pub const DEFAULT_WAIT_PRICE: f64 = 1000.0;

fn default_wait_price() -> f64 {
    DEFAULT_WAIT_PRICE
}

/// How a requeued pod (a released replacement) comes back, and how often one workload may
/// be requeued.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequeueRules {
    /// `keep`: the replacement may preempt as its original could; `never`: it waits for
    /// free room (the extender answers its preempt calls with no candidates).
    #[serde(default)]
    pub preemption: ReplacementPreemption,
    /// Requeues of one workload (the original and its replacements) after which its pod is
    /// not copied again: a victim of last resort, lost if evicted (`last_resort`,
    /// `max_attempts`). Unset: no bound.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Also bring back a bare pod of this class evicted through the Eviction API (a drain,
    /// the descheduler, a cluster autoscaler's scale-down: condition `DisruptionTarget`,
    /// reason `EvictionByEvictionAPI`), not only one kube-scheduler preempts. Off: whoever
    /// evicts through the API decides what follows.
    #[serde(default)]
    pub after_eviction: bool,
}

impl RequeueRules {
    /// Is `pod` marked as this class brings back: preempted by a kube-scheduler, or evicted
    /// through the Eviction API where `afterEviction` says so?
    pub fn brings_back(&self, pod: &Pod) -> bool {
        pod.preempted || (pod.evicted && self.after_eviction)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReplacementPreemption {
    #[default]
    Keep,
    Never,
}

impl Class {
    /// What this class gets from filter/prioritize beyond kube-scheduler's own fit and
    /// spreading: placement rules, packing, preferred nodes. Empty: preempt alone carries
    /// its policy, and its pods can skip the per-pod verbs (docs/registration.md, "Online pods pay nothing").
    pub fn per_pod_verbs_reasons(&self) -> Vec<&'static str> {
        let mut why = Vec::new();
        if !self.placement.require_node_labels.is_empty() || !self.placement.forbid_node_labels.is_empty() {
            why.push("placement");
        }
        if self.scoring.pack {
            why.push("packing");
        }
        if !self.scoring.prefer_node_labels.is_empty() {
            why.push("preferred nodes");
        }
        why
    }
}

/// Whether decisions reach kube-scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, clap::ValueEnum, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Enforce,
    /// Decide, explain and count, but answer as if the extender were absent.
    Shadow,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WithoutView {
    #[default]
    Degrade,
    Refuse,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Selector {
    #[serde(default)]
    pub priority_class_names: Vec<String>,
    #[serde(default)]
    pub priority: Option<PriorityRange>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[schemars(with = "BTreeMap<String, String>")]
    #[serde(default)]
    pub labels: Labels,
}

#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriorityRange {
    #[serde(default = "i32_min")]
    pub min: i32,
    #[serde(default = "i32_max")]
    pub max: i32,
}

fn i32_min() -> i32 {
    i32::MIN
}
fn i32_max() -> i32 {
    i32::MAX
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PdbMode {
    /// Never evict a pod if that would exceed its PDB's disruptionsAllowed.
    #[default]
    Strict,
    /// kube-scheduler's best effort: prefer nodes and victims that violate no PDB.
    Prefer,
}

/// What happens to a victim that no controller would recreate (a bare pod).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BareVictims {
    /// Copy it once it is evicted, the copy released when the original is gone (needs
    /// `serve --kube --requeue` and a namespace that opts in). One that cannot be copied
    /// (requeue off or unavailable, namespace not opted in, `maxAttempts` reached, host
    /// access) is a victim of last resort: taken only where no other victims place the
    /// preemptor, and lost.
    #[default]
    Requeue,
    /// Never evict it.
    Protect,
    /// Evict it and let it be lost (only where the policy says so).
    Lose,
}

/// What may happen to a Job's pod whose preemption would fail its Job (its last failure
/// under `backoffLimit` or `backoffLimitPerIndex`, or a `FailJob`/`FailIndex` rule on
/// `DisruptionTarget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobVictims {
    /// Cost it as lost work: chosen only where no other candidate places the preemptor.
    #[default]
    Count,
    /// Never evict it.
    Protect,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VictimRules {
    /// May pods of this class be evicted at all?
    #[serde(default)]
    pub allowed: bool,
    #[serde(default)]
    pub pdb: PdbMode,
    /// Bare victims: `requeue` (default), `protect` or `lose`.
    #[serde(default)]
    pub bare: Option<BareVictims>,
    /// Older spelling: `true` is `bare: protect`, `false` is `bare: lose`.
    #[serde(default)]
    pub recreatable_only: Option<bool>,
    /// Time a pod must have run before it may be evicted (anti-thrash), e.g. "10m".
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(with = "String", regex(pattern = r"^\s*(0|([0-9]+[smhd])+)\s*$"))]
    pub min_runtime: i64,
    /// Job pods whose preemption would fail their Job: `count` (default) or `protect`.
    #[serde(default)]
    pub jobs: JobVictims,
    /// What one interruption costs its owner beyond the work it throws away, as run time
    /// at the pod's CPU request, counted as at least one CPU (a restart is never free:
    /// scheduled and started again, a cold cache), e.g. "30m"; 2h by default. Victim sets
    /// are compared by work thrown away plus this per pod interrupted, so fewer, older pods
    /// are not traded for more, younger ones.
    #[serde(default = "default_restart_cost", deserialize_with = "duration::deserialize")]
    #[schemars(with = "String", regex(pattern = r"^\s*(0|([0-9]+[smhd])+)\s*$"))]
    pub restart_cost: i64,
    /// What one interruption costs its owner whatever the pod's size, in CPU-seconds,
    /// on top of `restartCost`: a pod is rescheduled, pulls and starts once however many
    /// CPUs it asks for, so one 32-CPU pod interrupted is cheaper than four 8-CPU pods
    /// (`restartCost` alone weighs them the same). 28,800 (8 CPU-hours) by default.
    #[serde(default = "default_interruption_cost")]
    #[schemars(range(min = 0))]
    pub interruption_cost: i64,
    /// Pods of this class save their progress when sent SIGTERM (a checkpoint written
    /// within their grace period): an eviction throws none of their run away, only a
    /// restart is charged. Their room comes free once the checkpoint is written, which
    /// the wait weighs (`waitTolerance` of the preemptor's class).
    #[serde(default)]
    pub checkpoints_on_term: bool,
}

/// `victim.restartCost` by default, in seconds.
pub const DEFAULT_RESTART_COST_S: i64 = 2 * 60 * 60;

fn default_restart_cost() -> i64 {
    DEFAULT_RESTART_COST_S
}

/// `victim.interruptionCost` by default, in CPU-seconds.
pub const DEFAULT_INTERRUPTION_COST_CPU_S: i64 = 8 * 60 * 60;

fn default_interruption_cost() -> i64 {
    DEFAULT_INTERRUPTION_COST_CPU_S
}

impl VictimRules {
    /// The effective rule for bare victims (validation rejects both spellings at once).
    pub fn bare(&self) -> BareVictims {
        match (self.bare, self.recreatable_only) {
            (Some(b), _) => b,
            (None, Some(true)) => BareVictims::Protect,
            (None, Some(false)) => BareVictims::Lose,
            (None, None) => BareVictims::Requeue,
        }
    }
}

impl Default for VictimRules {
    fn default() -> Self {
        VictimRules {
            allowed: false,
            pdb: PdbMode::Strict,
            bare: None,
            recreatable_only: None,
            min_runtime: 0,
            restart_cost: DEFAULT_RESTART_COST_S,
            interruption_cost: DEFAULT_INTERRUPTION_COST_CPU_S,
            jobs: JobVictims::Count,
            checkpoints_on_term: false,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Placement {
    /// Nodes must carry all of these labels (else: unresolvable for this class).
    #[schemars(with = "BTreeMap<String, String>")]
    #[serde(default)]
    pub require_node_labels: Labels,
    /// Nodes carrying any of these labels are off limits.
    #[schemars(with = "BTreeMap<String, String>")]
    #[serde(default)]
    pub forbid_node_labels: Labels,
    /// For this long after it is created, a pod of the class is kept off nodes where it
    /// would take room an online pod of a size bound now fits in as is (filter:
    /// unresolvable there), e.g. "60s"; at most 10m; 0 (default): never. Room an online
    /// arrival finds free spares it a preemption; a released copy that fills it is evicted
    /// again. The pod waits instead, or goes where it leaves that room.
    #[serde(default, deserialize_with = "duration::deserialize")]
    #[schemars(with = "String", regex(pattern = r"^\s*(0|([0-9]+[smhd])+)\s*$"))]
    pub keep_off_online_room: i64,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scoring {
    /// Prefer fuller nodes (bin packing) instead of emptier ones.
    #[serde(default)]
    pub pack: bool,
    /// Nodes with all these labels score higher.
    #[schemars(with = "BTreeMap<String, String>")]
    #[serde(default)]
    pub prefer_node_labels: Labels,
}

impl Scoring {
    /// Prefers nothing: the class's nodes are ranked by kube-scheduler's scores alone.
    pub fn is_neutral(&self) -> bool {
        !self.pack && self.prefer_node_labels.is_empty()
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GangConfig {
    /// Which declarations make a gang; all on by default.
    #[serde(default)]
    pub sources: GangSources,
    /// Labels whose value names a pod's group (the `labels` source).
    #[serde(default = "default_group_labels")]
    pub group_labels: Vec<String>,
    /// Annotations holding the group's minimum member count: the `labels` source's
    /// minimum, and the fallback of every source whose object gives none.
    #[serde(default = "default_min_annotations")]
    pub min_member_annotations: Vec<String>,
}

/// Gang sources, in precedence order: when a pod declares several, the first enabled one
/// wins. Native first: kube-scheduler itself enforces it and it sits in the pod's spec
/// (immutable), so it says how the pod was actually admitted; plugin labels and
/// annotations are often copied from templates and may outlive their scheduler.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GangSources {
    /// `spec.schedulingGroup.podGroupName` + PodGroup `scheduling.k8s.io/v1beta1|v1alpha2`.
    #[serde(default = "yes")]
    pub native: bool,
    /// Label `scheduling.x-k8s.io/pod-group` + PodGroup `scheduling.x-k8s.io/v1alpha1`.
    #[serde(default = "yes")]
    pub coscheduling: bool,
    /// Annotation `scheduling.k8s.io/group-name` + PodGroup `scheduling.volcano.sh/v1beta1`.
    #[serde(default = "yes")]
    pub volcano: bool,
    /// Label `kueue.x-k8s.io/pod-group-name` + annotation `kueue.x-k8s.io/pod-group-total-count`.
    #[serde(default = "yes")]
    pub kueue: bool,
    /// `groupLabels` + `minMemberAnnotations`.
    #[serde(default = "yes")]
    pub labels: bool,
}

fn yes() -> bool {
    true
}

impl Default for GangSources {
    fn default() -> Self {
        GangSources { native: true, coscheduling: true, volcano: true, kueue: true, labels: true }
    }
}

impl GangSources {
    pub fn enabled(&self, source: GangSource) -> bool {
        match source {
            GangSource::Native => self.native,
            GangSource::Coscheduling => self.coscheduling,
            GangSource::Volcano => self.volcano,
            GangSource::Kueue => self.kueue,
            GangSource::Labels => self.labels,
        }
    }
}

pub const COSCHEDULING_LABEL: &str = "scheduling.x-k8s.io/pod-group";
pub const VOLCANO_ANNOTATION: &str = "scheduling.k8s.io/group-name";
pub const KUEUE_LABEL: &str = "kueue.x-k8s.io/pod-group-name";
pub const KUEUE_TOTAL_COUNT: &str = "kueue.x-k8s.io/pod-group-total-count";

fn default_group_labels() -> Vec<String> {
    vec![COSCHEDULING_LABEL.into(), "pod-group.scheduling.sigs.k8s.io/name".into()]
}

fn default_min_annotations() -> Vec<String> {
    vec!["pod-group.scheduling.sigs.k8s.io/min-available".into(), "scheduling.x-k8s.io/min-member".into()]
}

impl Default for GangConfig {
    fn default() -> Self {
        GangConfig {
            sources: GangSources::default(),
            group_labels: default_group_labels(),
            min_member_annotations: default_min_annotations(),
        }
    }
}

impl GangConfig {
    /// The pod's gang: the first enabled source, in precedence order, that names one.
    pub fn gang_of(&self, pod: &Pod) -> Option<GangRef> {
        let non_empty = |v: Option<&str>| v.filter(|s| !s.is_empty()).map(str::to_owned);
        let declared = [
            (GangSource::Native, pod.scheduling_group.clone()),
            (GangSource::Coscheduling, non_empty(pod.labels.get(COSCHEDULING_LABEL))),
            (GangSource::Volcano, non_empty(pod.annotations.get(VOLCANO_ANNOTATION))),
            (GangSource::Kueue, non_empty(pod.labels.get(KUEUE_LABEL))),
            (GangSource::Labels, non_empty(self.group_labels.iter().find_map(|l| pod.labels.get(l)))),
        ];
        declared
            .into_iter()
            .filter(|(source, _)| self.sources.enabled(*source))
            .find_map(|(source, name)| Some(GangRef { source, namespace: pod.namespace.clone(), name: name? }))
    }

    /// The minimum a member itself declares: Kueue's total count for Kueue gangs, else the
    /// first `minMemberAnnotations` annotation. (A PodGroup object, where there is one, wins.)
    pub fn declared_minimum(&self, source: GangSource, member: &Pod) -> Option<(usize, String)> {
        let parse = |a: &str| member.annotations.get(a)?.trim().parse::<usize>().ok();
        if source == GangSource::Kueue {
            if let Some(n) = parse(KUEUE_TOTAL_COUNT) {
                return Some((n, format!("pod-group-total-count {n}")));
            }
        }
        self.min_member_annotations
            .iter()
            .find_map(|a| Some((parse(a)?, a)))
            .map(|(n, a)| (n, format!("{} {n}", a.rsplit('/').next().unwrap_or(a))))
    }
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantConfig {
    /// When an offline (evictable-class) pod preempts, apply Kueue's fair-sharing rules
    /// between its tenant and the victims' tenants.
    #[serde(default)]
    pub fair_sharing: bool,
    /// Label naming a pod's queue (e.g. `kueue.x-k8s.io/queue-name`). A pod's tenant is
    /// `namespace/queue` only where the policy names that queue (`queues`, or a
    /// `namespace/queue` key of `weights`); otherwise its namespace.
    #[serde(default)]
    pub label: Option<String>,
    /// Queues that are tenants of their own, as `namespace/queue`. A queue the policy does
    /// not name is its namespace's: a namespace cannot split itself into many tenants by
    /// giving each pod a queue name of its own.
    #[serde(default)]
    pub queues: Vec<String>,
    /// Weight per tenant (default 1): a tenant's share is its usage divided by its weight.
    /// Keys are tenants: a namespace, or `namespace/queue` (which names that queue).
    #[serde(default)]
    pub weights: BTreeMap<String, f64>,
    /// `namespace/queue` of every queue the policy names (filled by validation).
    #[serde(skip)]
    pub(crate) named_queues: std::collections::BTreeSet<String>,
}

impl TenantConfig {
    /// A pod's tenant: `namespace/queue` where the policy names that queue, else its
    /// namespace. A queue is its namespace's own (like a Kueue LocalQueue): a pod labelled
    /// with another namespace's queue name is still of its own namespace.
    pub fn tenant_of(&self, pod: &Pod) -> String {
        if let Some(queue) = self.label.as_ref().and_then(|l| pod.labels.get(l)) {
            let tenant = format!("{}/{queue}", pod.namespace);
            if self.named_queues.contains(&tenant) {
                return tenant;
            }
        }
        pod.namespace.clone()
    }

    pub fn weight(&self, tenant: &str) -> f64 {
        weight_in(&self.weights, tenant)
    }

    /// Every queue `queues` and `weights` name, as `namespace/queue`.
    pub(crate) fn name_queues(&mut self) {
        let keys = self.weights.keys().filter(|k| k.contains('/'));
        self.named_queues = self.queues.iter().chain(keys).cloned().collect();
    }
}

/// `tenant`'s weight in `weights`: its own key, else 1.
pub fn weight_in(weights: &BTreeMap<String, f64>, tenant: &str) -> f64 {
    weights.get(tenant).copied().unwrap_or(1.0)
}

/// Durations as "90s", "10m", "1h30m", "0".
mod duration {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

pub fn parse_duration(s: &str) -> Result<i64, String> {
    let t = s.trim();
    if t == "0" {
        return Ok(0);
    }
    let bad = || format!("invalid duration {s:?}: use e.g. 30s, 10m, 1h30m");
    let (mut total, mut num) = (0i64, String::new());
    if t.is_empty() {
        return Err(bad());
    }
    for c in t.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86400,
            _ => return Err(bad()),
        };
        let n: i64 = num.parse().map_err(|_| bad())?;
        total = total.checked_add(n.checked_mul(unit).ok_or_else(bad)?).ok_or_else(bad)?;
        num.clear();
    }
    if !num.is_empty() {
        return Err(bad());
    }
    Ok(total)
}

impl Selector {
    pub fn matches(&self, pod: &Pod, priority: i32) -> bool {
        (self.priority_class_names.is_empty()
            || pod.priority_class_name.as_ref().is_some_and(|n| self.priority_class_names.contains(n)))
            && self.priority.is_none_or(|r| r.min <= priority && priority <= r.max)
            && (self.namespaces.is_empty() || self.namespaces.contains(&pod.namespace))
            && self.labels.iter().all(|(k, v)| pod.labels.get(k) == Some(v))
    }
}

impl Placement {
    /// No label rule: every node is allowed, whatever its labels (`keepOffOnlineRoom`
    /// judges the room on a node, not the node).
    pub fn is_empty(&self) -> bool {
        self.require_node_labels.is_empty() && self.forbid_node_labels.is_empty()
    }

    /// For how many more seconds a pod created at `created` is kept off online pods' room
    /// at `now`, if it still is (its age counted from 0 against clock skew). Never for a
    /// pod whose creation is unknown: nothing would bound the wait.
    pub fn kept_off_online_room_for(&self, created: Option<Timestamp>, now: Timestamp) -> Option<i64> {
        let age = now.saturating_sub(created?).max(0);
        let left = self.keep_off_online_room - age;
        (left > 0).then_some(left)
    }

    /// May pods of the class use a node with `labels`? (`rejects` says why not.)
    pub fn admits(&self, labels: &Labels) -> bool {
        self.broken_rule(labels).is_none()
    }

    /// Why a node with `labels` is off limits, if it is.
    pub fn rejects(&self, labels: &Labels) -> Option<String> {
        Some(match self.broken_rule(labels)? {
            BrokenRule::Required { key, value, got: Some(got) } => {
                format!("node label {key}={got}, class requires {key}={value}")
            }
            BrokenRule::Required { key, value, got: None } => {
                format!("node lacks label {key}={value} required by the class")
            }
            BrokenRule::Forbidden { key, value } => format!("node label {key}={value} is forbidden for the class"),
        })
    }

    /// The first rule a node with `labels` breaks, found without allocating (`admits` asks
    /// it of every node of a preempt call).
    fn broken_rule<'a>(&'a self, labels: &'a Labels) -> Option<BrokenRule<'a>> {
        if let Some((key, value)) = self.require_node_labels.iter().find(|(k, v)| labels.get(k) != Some(*v)) {
            return Some(BrokenRule::Required { key, value, got: labels.get(key) });
        }
        self.forbid_node_labels
            .iter()
            .find(|(k, v)| labels.get(k) == Some(*v))
            .map(|(key, value)| BrokenRule::Forbidden { key, value })
    }
}

/// A placement rule a node breaks.
enum BrokenRule<'a> {
    Required { key: &'a str, value: &'a str, got: Option<&'a str> },
    Forbidden { key: &'a str, value: &'a str },
}
