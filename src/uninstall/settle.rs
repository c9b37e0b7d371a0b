//! What becomes of a gated copy when the extender goes: pure, from the copy, its original
//! as the API server has it now, and the other pods claiming that original.
//!
//! Whoever holds the requeue identity can create a gated "copy" of no original (root,
//! another ServiceAccount, every toleration). The replicas release only a copy of an
//! eviction they recorded; uninstall runs with no replica, so it has no records. What it
//! can check is a copy whose original still exists: that it is the copy requeue builds of
//! that original (`verify`). A copy so checked is released once its original is gone; one
//! that cannot be checked is never released, and deleted (`Settle::NotVerified`).

use serde_json::Value;

use crate::model::RequeueIntent;
use crate::model::{copy_spec, marks, Phase, Pod, Timestamp};
use crate::requeue::replacement;

/// Why uninstall cannot tell a gated pod claiming to be a copy from a forged one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unverified {
    /// The pod it names is gone, or never was: nothing is left to check it against.
    NoOriginal,
    /// It is not in its original's namespace.
    OtherNamespace,
    /// Its original is not a pod requeue copies: owned, opted out, or reaching into its node.
    NotCopied,
    /// It is not under a name requeue gives the copy, or not under the first of them that
    /// holds a pod claiming the same original; `first`, that pod, if any.
    OtherName { first: Option<String> },
    /// Its spec is not the one requeue builds from its original.
    SpecDiffers,
}

impl Unverified {
    /// A short code, for the report and tests.
    pub fn reason(&self) -> &'static str {
        match self {
            Unverified::NoOriginal => "no_original",
            Unverified::OtherNamespace => "other_namespace",
            Unverified::NotCopied => "not_copied",
            Unverified::OtherName { .. } => "other_name",
            Unverified::SpecDiffers => "spec_differs",
        }
    }

    /// Why, for the pod `from` (`namespace/name (uid)`) it claims to copy.
    pub fn describe(&self, from: &str) -> String {
        match self {
            Unverified::NoOriginal => {
                format!("{from}, which it claims to copy, is gone: a copy is checked only against its original")
            }
            Unverified::OtherNamespace => format!("it is not in the namespace of {from}"),
            Unverified::NotCopied => {
                format!("{from} is not a pod requeue copies (owned, opted out, or reaching into its node)")
            }
            Unverified::OtherName { first: Some(first) } => {
                format!("{first} claims {from} under an earlier of the names its copy takes")
            }
            Unverified::OtherName { first: None } => format!("it is not under a name requeue gives the copy of {from}"),
            Unverified::SpecDiffers => format!("its spec is not the one requeue builds from {from}"),
        }
    }

    /// What the user loses by its deletion.
    pub fn lost(&self, from: &str) -> String {
        match self {
            Unverified::NoOriginal => format!("if it was the copy of {from}, that pod is lost"),
            Unverified::OtherName { first: Some(first) } => format!("nothing: {first} stands for {from}"),
            Unverified::OtherNamespace | Unverified::NotCopied => "nothing requeue would have brought back".into(),
            Unverified::OtherName { first: None } | Unverified::SpecDiffers => {
                format!("{from} is not brought back")
            }
        }
    }
}

/// Is `copy` (its JSON as listed, and decoded) the copy requeue builds of `original` (its
/// JSON as the API server has it now, and decoded)? `holder`: the pod under a name in the
/// original's namespace, if any. The same checks as the replicas' (`RequeueView::recorded_copy`),
/// with the original read now in place of a record.
pub fn verify<'a>(
    copy: (&Value, &Pod),
    original: (&Value, &Pod),
    holder: impl Fn(&str) -> Option<&'a Pod>,
) -> Result<(), Unverified> {
    let ((copy_json, copy), (original_json, original)) = (copy, original);
    if copy.namespace != original.namespace {
        return Err(Unverified::OtherNamespace);
    }
    // Beyond baseline is no reason here: the copy exists, so admission judged it against
    // its namespace's opt-in, and the digest below holds it to its original's spec.
    if !original.is_bare() || marks::opted_out(original) {
        return Err(Unverified::NotCopied);
    }
    // A second pod claiming the same original is never released: it would run twice.
    let names = marks::replacement_names(original);
    let first = names
        .iter()
        .find(|n| holder(n).is_some_and(|p| p.annotations.get(marks::FROM_UID) == Some(original.uid.as_str())));
    if first != Some(&copy.name) {
        let first = first.map(|n| format!("{}/{n}", original.namespace));
        return Err(Unverified::OtherName { first });
    }
    let node = original.node_name.as_deref().unwrap_or_default();
    let intent = RequeueIntent { replacement: copy.name.clone(), ..RequeueIntent::for_victim(original, node, "") };
    let built = replacement::build(original_json, &intent).map_err(|_| Unverified::SpecDiffers)?;
    let expected = copy_spec::digest(&built);
    match expected.is_some() && copy_spec::digest(copy_json) == expected {
        true => Ok(()),
        false => Err(Unverified::SpecDiffers),
    }
}

/// What becomes of a gated copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Checked against its original, which was preempted and is gone, or stopped: it runs
    /// instead.
    Release(String),
    /// Its original runs on, or ended or was deleted on its own: it would run twice.
    Delete(String),
    /// It cannot be told from a forged one: never released, deleted.
    NotVerified(Unverified),
    /// Checked, and its original was preempted and is still terminating.
    Wait,
}

/// `original`: the pod the copy's annotations name, if it still exists with the UID they
/// name; `checked`: `verify` against it, or, where it is gone, whether an earlier look
/// verified the copy while it was there; `now` in Unix seconds.
pub fn settle(original: Option<&Pod>, checked: Result<(), Unverified>, now: Timestamp) -> Settle {
    let released = |why: String| match &checked {
        Ok(()) => Settle::Release(why),
        Err(u) => Settle::NotVerified(u.clone()),
    };
    let Some(o) = original else {
        return released("its original, checked while it terminated, is gone".into());
    };
    let marked = o.preempted || o.evicted;
    match o.deletion_time {
        _ if o.phase == Some(Phase::Succeeded) => Settle::Delete(format!("its original {} finished its work", o.key())),
        _ if marked && o.is_terminal() => released(format!("its original {} stopped", o.key())),
        _ if o.is_terminal() => Settle::Delete(format!("its original {} ended on its own", o.key())),
        Some(_) if !marked => {
            Settle::Delete(format!("its original {} was deleted, not by preemption or eviction", o.key()))
        }
        None => Settle::Delete(format!("its original {} still runs", o.key())),
        Some(at) if now - at > crate::requeue::plan::STUCK_AFTER => {
            released(format!("its original {} is still terminating {}s past its deletionTimestamp", o.key(), now - at))
        }
        Some(_) => match checked {
            Ok(()) => Settle::Wait,
            Err(u) => Settle::NotVerified(u),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::marks::{FROM_UID, GATE};
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;

    fn original_json() -> Value {
        json!({"metadata": {"name": "free-1", "namespace": "batch", "uid": "u"},
            "spec": {"nodeName": "n1", "priority": 10, "containers": [{"name": "main", "image": "work"}]},
            "status": {"phase": "Running"}})
    }

    fn original() -> Pod {
        Pod {
            name: "free-1".into(),
            namespace: "batch".into(),
            uid: "u".into(),
            phase: Some(Phase::Running),
            ..Default::default()
        }
    }

    fn going() -> Pod {
        Pod { preempted: true, deletion_time: Some(NOW - 10), ..original() }
    }

    /// The copy requeue builds of `original_json` under its first name, as stored.
    fn copy_json() -> Value {
        let intent = RequeueIntent::for_victim(&original(), "n1", "");
        let mut c = replacement::build(&original_json(), &intent).unwrap();
        c["metadata"]["uid"] = json!("c");
        c["spec"]["priority"] = json!(10);
        c
    }

    fn copy() -> Pod {
        let mut c = Pod {
            name: crate::model::marks::replacement_name(&original()),
            namespace: "batch".into(),
            uid: "c".into(),
            scheduling_gates: vec![GATE.into()],
            ..Default::default()
        };
        c.annotations.insert(FROM_UID.into(), "u".into());
        c
    }

    fn check(copy: (&Value, &Pod), original: &Pod, held: &[&Pod]) -> Result<(), Unverified> {
        verify(copy, (&original_json(), original), |n| held.iter().copied().find(|p| p.name == n))
    }

    #[test]
    fn the_copy_requeue_builds_of_its_original_is_verified() {
        let c = copy();
        assert_eq!(check((&copy_json(), &c), &going(), &[&c]), Ok(()));
    }

    #[test]
    fn a_copy_whose_spec_is_not_the_one_requeue_builds_is_not() {
        let c = copy();
        let mut root = copy_json();
        root["spec"]["securityContext"] = json!({"runAsUser": 0});
        assert_eq!(check((&root, &c), &going(), &[&c]), Err(Unverified::SpecDiffers));
    }

    #[test]
    fn only_the_first_pod_claiming_an_original_under_its_names_is_verified() {
        let first = copy();
        let names = crate::model::marks::replacement_names(&original());
        let second = Pod { name: names[1].clone(), uid: "c2".into(), ..copy() };
        let got = check((&copy_json(), &second), &going(), &[&first, &second]);
        assert_eq!(got, Err(Unverified::OtherName { first: Some(format!("batch/{}", names[0])) }));
        // A pod under the first name that claims nothing does not count.
        let stranger = Pod { annotations: Default::default(), ..first };
        assert_eq!(check((&copy_json(), &second), &going(), &[&stranger, &second]), Ok(()));
        let elsewhere = Pod { name: "free-1-d".into(), ..copy() };
        assert_eq!(
            check((&copy_json(), &elsewhere), &going(), &[&elsewhere]),
            Err(Unverified::OtherName { first: None })
        );
    }

    #[test]
    fn a_copy_in_another_namespace_or_of_a_pod_requeue_never_copies_is_not() {
        let c = Pod { namespace: "other".into(), ..copy() };
        assert_eq!(check((&copy_json(), &c), &going(), &[&c]), Err(Unverified::OtherNamespace));
        let c = copy();
        let owned = Pod {
            controller: Some(crate::model::OwnerRef { kind: "ReplicaSet".into(), name: "web".into() }),
            ..going()
        };
        assert_eq!(check((&copy_json(), &c), &owned, &[&c]), Err(Unverified::NotCopied));
    }

    #[test]
    fn a_verified_copy_runs_once_its_original_is_gone_and_never_beside_it() {
        assert_eq!(settle(Some(&going()), Ok(()), NOW), Settle::Wait);
        assert!(matches!(settle(None, Ok(()), NOW), Settle::Release(_)));
        let stopped = Pod { phase: Some(Phase::Failed), ..going() };
        assert!(matches!(settle(Some(&stopped), Ok(()), NOW), Settle::Release(_)));
        // Unless it is stuck, as the requeue controller bounds it.
        let stuck = Pod { deletion_time: Some(NOW - crate::requeue::plan::STUCK_AFTER - 1), ..going() };
        assert!(matches!(settle(Some(&stuck), Ok(()), NOW), Settle::Release(why) if why.contains("still terminating")));
    }

    #[test]
    fn a_copy_that_cannot_be_verified_is_never_released() {
        let no_original = settle(None, Err(Unverified::NoOriginal), NOW);
        assert_eq!(no_original, Settle::NotVerified(Unverified::NoOriginal));
        for original in [going(), Pod { phase: Some(Phase::Failed), ..going() }] {
            let got = settle(Some(&original), Err(Unverified::SpecDiffers), NOW);
            assert_eq!(got, Settle::NotVerified(Unverified::SpecDiffers), "{original:?}");
        }
    }

    #[test]
    fn a_copy_whose_original_did_not_go_by_preemption_is_deleted() {
        assert!(matches!(settle(Some(&original()), Ok(()), NOW), Settle::Delete(why) if why.contains("still runs")));
        let done = Pod { phase: Some(Phase::Succeeded), ..original() };
        assert!(matches!(settle(Some(&done), Ok(()), NOW), Settle::Delete(why) if why.contains("finished")));
        let done_while_going = Pod { phase: Some(Phase::Succeeded), ..going() };
        assert!(matches!(settle(Some(&done_while_going), Ok(()), NOW), Settle::Delete(_)));
        let deleted = Pod { deletion_time: Some(NOW), ..original() };
        assert!(
            matches!(settle(Some(&deleted), Ok(()), NOW), Settle::Delete(why) if why.contains("not by preemption"))
        );
    }
}
