//! `check-policy FILE`: validate a policy offline and say what it asks of the cluster;
//! `policy-schema`: the policy's JSON Schema.

use std::path::Path;

use crate::policy::Policy;

pub fn run(file: &Path) -> anyhow::Result<()> {
    let policy = Policy::load(file)?;
    println!(
        "{}: valid, {} classes (default class: {}), mode {}, fingerprint {} (coloc_policy_info's hash)",
        file.display(),
        policy.classes.len(),
        policy.default_class,
        policy.mode.as_str(),
        policy.fingerprint()
    );
    for c in &policy.classes {
        println!(
            "  {:<14} preempts [{}]; victim: {}",
            c.name,
            c.preempts.join(", "),
            if c.victim.allowed {
                format!(
                    "yes (pdb {:?}, bare pods: {:?}, minRuntime {}s)",
                    c.victim.pdb,
                    c.victim.bare(),
                    c.victim.min_runtime
                )
            } else {
                "never".into()
            }
        );
    }
    if policy.api_version.is_none() {
        println!(
            "note: no apiVersion: read as {}; add `apiVersion: {}` and `kind: {}` at the top",
            crate::policy::API_VERSION,
            crate::policy::API_VERSION,
            crate::policy::KIND
        );
    }
    print!("{}", per_pod_verbs_advice(&policy));
    let requeueing = policy.requeue_classes();
    if !requeueing.is_empty() {
        println!(
            "note: {} requeue bare victims: that needs serve --kube --requeue (and the manifests/requeue RBAC); without it their bare pods are victims of last resort (lost if evicted)",
            requeueing.join(", ")
        );
    }
    Ok(())
}

/// The JSON Schema on stdout. A closed pipe (`| head`) ends the output, not the process
/// with a panic.
pub fn print_schema() -> anyhow::Result<()> {
    use std::io::Write;
    match writeln!(std::io::stdout(), "{}", crate::policy::json_schema()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Which classes need filter/prioritize, and how to spare the others (the per-pod-verbs
/// registration and the marker the shipped MutatingAdmissionPolicy adds).
fn per_pod_verbs_advice(policy: &Policy) -> String {
    use crate::model::marks::PER_POD_VERBS_MARKER as MARKER;
    const PROFILE: &str = "manifests/scheduler/kube-scheduler-config-per-pod-verbs.yaml";
    let needing: Vec<(&crate::policy::Class, Vec<&str>)> =
        policy.classes.iter().map(|c| (c, c.per_pod_verbs_reasons())).filter(|(_, why)| !why.is_empty()).collect();
    if needing.is_empty() {
        return format!("per-pod verbs: no class needs filter/prioritize; preempt alone carries the policy (entry A of {PROFILE} is enough)\n");
    }
    let names: Vec<&str> = needing.iter().map(|(c, _)| c.name.as_str()).collect();
    let listed: Vec<String> = needing.iter().map(|(c, why)| format!("{} ({})", c.name, why.join(", "))).collect();
    let mut out = format!(
        "per-pod verbs (filter, prioritize) needed by: {}; the other classes need only preempt\n",
        listed.join(", ")
    );
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
        if c.name == policy.default_class
            || c.r#match.is_empty()
            || c.r#match.iter().any(|s| s.priority_class_names.is_empty() && s.priority.is_none())
        {
            out += &format!(
                "note: class {} also matches pods by namespace or labels only (or is the default class): add a matchCondition for them to manifests/per-pod-verbs, or keep the all-verbs registration\n",
                c.name
            );
        }
    }
    out
}
