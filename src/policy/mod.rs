//! Workload classes: loading, validation and classification of pods.

mod annotations_read;
mod model;
mod requeue_rule;
pub mod routing;

use std::path::Path;

pub use model::{
    parse_duration, weight_in, BareVictims, Class, GangConfig, GangSources, JobVictims, Mode, PdbMode, Placement,
    Policy, ReplacementPreemption, RequeueRules, Scoring, Selector, TenantConfig, VictimRules, WithoutView,
    DEFAULT_WAIT_PRICE,
};

pub use annotations_read::{AnnotationsRead, ALWAYS_READ, LONGEST_VALUE};
pub use requeue_rule::{requeue_rule, CannotRequeue, Circumstances, NotRequeued};

use crate::model::Pod;

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read policy {path}: {source}")]
    Read { path: String, source: std::io::Error },
    /// Syntax and type errors: serde names the field, line and column.
    #[error("{0}")]
    Yaml(String),
    #[error("{field}: {message}{}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Invalid { field: String, message: String, line: Option<usize> },
}

/// The policy file's JSON Schema, generated from its types: shape only (fields, types,
/// enums, durations). What refers to what (a class named in `preempts` exists, the default
/// class is listed) is checked by `Policy::load`, i.e. `check-policy`.
pub fn json_schema() -> String {
    let mut schema = schemars::schema_for!(Policy);
    schema.insert("title".into(), "coloc-extender policy".into());
    serde_json::to_string_pretty(&schema).unwrap_or_default()
}

/// The policy file's API version and kind, as a KubeSchedulerConfiguration names its own.
/// v1alpha2 replaced the classes' `waitTolerance` with `waitPrice`.
pub const API_VERSION: &str = "coloc-extender.io/v1alpha2";
/// The earlier API this release still reads: the same fields but `waitTolerance`.
pub const API_VERSION_BEFORE: &str = "coloc-extender.io/v1alpha1";
pub const KIND: &str = "Policy";

/// Index of a class in the policy: lower means listed earlier, i.e. more valuable.
pub type ClassId = usize;

impl Policy {
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| PolicyError::Read { path: path.display().to_string(), source })?;
        Policy::from_yaml(&text)
    }

    pub fn from_yaml(text: &str) -> Result<Policy, PolicyError> {
        check_shape(text)?;
        let mut policy: Policy = serde_yaml_ng::from_str(text).map_err(|e| PolicyError::Yaml(e.to_string()))?;
        policy.validate(text)?;
        Ok(policy)
    }

    /// The same rules, enforced: what replays and tests of decisions read.
    pub fn enforced(mut self) -> Policy {
        self.mode = Mode::Enforce;
        self
    }

    /// What the policy decides by, as 16 hex digits: equal for the same rules whatever
    /// the file's layout or comments, and whatever the mode (reported apart). The `hash`
    /// of `coloc_policy_info`, and what `check-policy` prints, so an operator can tell
    /// which file a replica runs.
    pub fn fingerprint(&self) -> String {
        let rules = Policy { mode: Mode::Enforce, api_version: None, kind: None, ..self.clone() };
        format!("{:016x}", crate::model::marks::fnv1a(format!("{rules:?}").as_bytes()))
    }

    /// The shipped default policy (policy/default.yaml, shadow mode for a first install),
    /// compiled in so `serve` works with no files.
    pub fn builtin_default() -> Policy {
        Policy::from_yaml(include_str!("../../policy/default.yaml")).expect("shipped default policy is valid")
    }

    fn validate(&mut self, text: &str) -> Result<(), PolicyError> {
        let invalid = |field: String, message: String, needle: Option<&str>| PolicyError::Invalid {
            line: needle.and_then(|n| line_of(text, n)),
            field,
            message,
        };
        if let Some(v) = self.api_version.as_deref().filter(|v| ![API_VERSION, API_VERSION_BEFORE].contains(v)) {
            return Err(invalid(
                "apiVersion".into(),
                format!("{v:?} is not an API this release reads: write {API_VERSION}"),
                Some("apiVersion"),
            ));
        }
        if let Some(k) = self.kind.as_deref().filter(|k| *k != KIND) {
            return Err(invalid("kind".into(), format!("{k:?} is not a policy: write kind: {KIND}"), Some("kind")));
        }
        if self.classes.is_empty() {
            return Err(invalid("classes".into(), "at least one class is required".into(), None));
        }
        if self.max_candidates == 0 {
            return Err(invalid("maxCandidates".into(), "must be at least 1".into(), Some("maxCandidates")));
        }
        for (i, c) in self.classes.iter().enumerate() {
            let field = |f: &str| format!("classes[{i}]{f}");
            if c.name.is_empty() || !c.name.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_') {
                return Err(invalid(
                    field(".name"),
                    format!("{:?} must be non-empty letters, digits, - or _", c.name),
                    None,
                ));
            }
            if self.classes[..i].iter().any(|o| o.name == c.name) {
                return Err(invalid(field(".name"), format!("duplicate class name {:?}", c.name), Some(&c.name)));
            }
            for (j, s) in c.r#match.iter().enumerate() {
                // Names as Kubernetes writes them: what admission reads of the classes
                // (`routing`) is split on these characters.
                let names = s.priority_class_names.iter().map(|n| ("priorityClassNames", n.as_str()));
                let names = names.chain(s.namespaces.iter().map(|n| ("namespaces", n.as_str())));
                let names = names.chain(s.labels.iter().flat_map(|(k, v)| [("labels", k), ("labels", v)]));
                for (what, name) in names {
                    if name.chars().any(|ch| matches!(ch, '|' | ',' | '=' | '\n' | '\r') || ch.is_whitespace()) {
                        return Err(invalid(
                            field(&format!(".match[{j}].{what}")),
                            format!("{name:?} is no Kubernetes name: no spaces, '|', ',' or '='"),
                            Some(name),
                        ));
                    }
                }
                if let Some(r) = s.priority {
                    if r.min > r.max {
                        return Err(invalid(
                            field(&format!(".match[{j}].priority")),
                            format!("min {} is greater than max {}", r.min, r.max),
                            Some(&format!("min: {}", r.min)),
                        ));
                    }
                }
            }
            if c.victim.bare.is_some() && c.victim.recreatable_only.is_some() {
                return Err(invalid(
                    field(".victim"),
                    "set either bare (requeue|protect|lose) or the older recreatableOnly, not both".into(),
                    Some("recreatableOnly"),
                ));
            }
            if c.victim.min_runtime < 0 {
                return Err(invalid(field(".victim.minRuntime"), "must not be negative".into(), None));
            }
            if c.victim.restart_cost < 0 {
                return Err(invalid(field(".victim.restartCost"), "must not be negative".into(), None));
            }
            if c.victim.interruption_cost < 0 {
                return Err(invalid(field(".victim.interruptionCost"), "must not be negative".into(), None));
            }
            if c.victim.checkpoints_on_term && !c.victim.allowed {
                return Err(invalid(
                    field(".victim.checkpointsOnTerm"),
                    "its pods are never victims (victim.allowed is false): nothing to checkpoint".into(),
                    Some("checkpointsOnTerm"),
                ));
            }
            if c.wait_tolerance.is_some() {
                return Err(invalid(
                    field(".waitTolerance"),
                    format!(
                        "waitTolerance was replaced by waitPrice in {API_VERSION}: what a second of the pod's wait is worth in CPU-seconds of offline work (default {DEFAULT_WAIT_PRICE}; 0: the wait only breaks ties)"
                    ),
                    Some("waitTolerance"),
                ));
            }
            if !(c.wait_price.is_finite() && c.wait_price >= 0.0) {
                return Err(invalid(
                    field(".waitPrice"),
                    format!("{} must be a number of CPU-seconds, 0 or more", c.wait_price),
                    Some("waitPrice"),
                ));
            }
            if c.placement.keep_off_online_room > 0 && !c.victim.allowed {
                return Err(invalid(
                    field(".placement.keepOffOnlineRoom"),
                    "only for offline classes (victim.allowed: true): online pods' own room is theirs".into(),
                    Some("keepOffOnlineRoom"),
                ));
            }
            if c.placement.keep_off_online_room > MAX_KEEP_OFF_ONLINE_ROOM {
                return Err(invalid(
                    field(".placement.keepOffOnlineRoom"),
                    format!(
                        "at most {}m: a pod kept off is pending that long, whatever room there is",
                        MAX_KEEP_OFF_ONLINE_ROOM / 60
                    ),
                    Some("keepOffOnlineRoom"),
                ));
            }
            if c.requeue.max_attempts == Some(0) {
                return Err(invalid(
                    field(".requeue.maxAttempts"),
                    "must be at least 1 (leave it out for no bound)".into(),
                    Some("maxAttempts"),
                ));
            }
        }
        let index = |name: &str| self.classes.iter().position(|c| c.name == name);
        let mut matrix = vec![vec![false; self.classes.len()]; self.classes.len()];
        for (i, c) in self.classes.iter().enumerate() {
            for (j, target) in c.preempts.iter().enumerate() {
                let t = index(target).ok_or_else(|| {
                    invalid(
                        format!("classes[{i}].preempts[{j}]"),
                        format!("unknown class {target:?} (classes: {})", self.class_names().join(", ")),
                        Some(target),
                    )
                })?;
                if !self.classes[t].victim.allowed {
                    return Err(invalid(
                        format!("classes[{i}].preempts[{j}]"),
                        format!("class {target:?} may preempt nothing of {target:?}: its victim.allowed is false"),
                        Some(target),
                    ));
                }
                matrix[i][t] = true;
            }
        }
        self.default_index = index(&self.default_class).ok_or_else(|| {
            invalid(
                "defaultClass".into(),
                format!("unknown class {:?} (classes: {})", self.default_class, self.class_names().join(", ")),
                Some("defaultClass"),
            )
        })?;
        for (t, w) in &self.tenants.weights {
            if !(w.is_finite() && *w > 0.0) {
                return Err(invalid(format!("tenants.weights.{t}"), format!("weight {w} must be positive"), Some(t)));
            }
            if t.contains('/') && !is_queue_name(t) {
                return Err(invalid(
                    format!("tenants.weights.{t}"),
                    format!("{t:?} must be a namespace, or namespace/queue"),
                    Some(t),
                ));
            }
        }
        for (i, q) in self.tenants.queues.iter().enumerate() {
            if !is_queue_name(q) {
                return Err(invalid(
                    format!("tenants.queues[{i}]"),
                    format!("{q:?} must be namespace/queue (a queue is its namespace's own)"),
                    Some(q),
                ));
            }
        }
        if self.tenants.label.is_none() && !self.tenants.queues.is_empty() {
            return Err(invalid(
                "tenants.queues".into(),
                "queues are named but tenants.label, the label that says a pod's queue, is not set".into(),
                Some("queues"),
            ));
        }
        self.tenants.name_queues();
        self.may_preempt = matrix;
        Ok(())
    }

    fn class_names(&self) -> Vec<&str> {
        self.classes.iter().map(|c| c.name.as_str()).collect()
    }

    /// The first class whose match fits, else the default class.
    pub fn classify(&self, pod: &Pod, priority: i32) -> ClassId {
        self.classes
            .iter()
            .position(|c| c.r#match.iter().any(|s| s.matches(pod, priority)))
            .unwrap_or(self.default_index)
    }

    pub fn class(&self, id: ClassId) -> &Class {
        &self.classes[id]
    }

    pub fn may_preempt(&self, preemptor: ClassId, victim: ClassId) -> bool {
        self.may_preempt[preemptor][victim]
    }

    /// Names of the classes whose bare victims are requeued (they need `--requeue`).
    pub fn requeue_classes(&self) -> Vec<&str> {
        self.classes
            .iter()
            .filter(|c| c.victim.allowed && c.victim.bare() == BareVictims::Requeue)
            .map(|c| c.name.as_str())
            .collect()
    }

    pub fn preempts_anything(&self, preemptor: ClassId) -> bool {
        self.may_preempt[preemptor].iter().any(|b| *b)
    }

    /// Online: a class that may preempt and is never a victim itself.
    pub fn is_online(&self, class: ClassId) -> bool {
        !self.class(class).victim.allowed && self.preempts_anything(class)
    }
}

/// `namespace/queue`: both parts non-empty, one `/`.
fn is_queue_name(s: &str) -> bool {
    s.split_once('/').is_some_and(|(ns, q)| !ns.is_empty() && !q.is_empty() && !q.contains('/'))
}

/// The longest `placement.keepOffOnlineRoom`: a pod kept off is pending that long at
/// least, whatever room there is.
const MAX_KEEP_OFF_ONLINE_ROOM: i64 = 600;

/// Far above any real policy; the YAML parser's cost grows with depth, so hostile files
/// are refused before parsing.
const MAX_POLICY_BYTES: usize = 1 << 20;
const MAX_DEPTH: usize = 64;

fn check_shape(text: &str) -> Result<(), PolicyError> {
    if text.len() > MAX_POLICY_BYTES {
        return Err(PolicyError::Yaml(format!("policy is {} bytes; at most {MAX_POLICY_BYTES} are read", text.len())));
    }
    let (mut depth, mut deepest) = (0usize, 0usize);
    for (i, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches([' ', '-']).len();
        if indent > 2 * MAX_DEPTH {
            return Err(PolicyError::Invalid {
                field: "(document)".into(),
                message: format!("nested deeper than {MAX_DEPTH} levels"),
                line: Some(i + 1),
            });
        }
        for c in line.bytes() {
            match c {
                b'[' | b'{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            if deepest > MAX_DEPTH {
                return Err(PolicyError::Invalid {
                    field: "(document)".into(),
                    message: format!("nested deeper than {MAX_DEPTH} levels"),
                    line: Some(i + 1),
                });
            }
        }
    }
    Ok(())
}

/// 1-based line of the first line containing `needle` (for semantic errors serde can't place).
fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}

#[cfg(test)]
mod tests;
