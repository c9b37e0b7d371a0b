//! The annotations decisions read of a pod: all the cluster view keeps of a pod's
//! annotations. A tenant may write up to 256 KiB of them on each pod; the view keeps only
//! these keys, each value at most `LONGEST_VALUE` bytes, so what a replica holds per pod
//! does not follow what tenants write. A request's pods keep theirs (they live for one
//! answer), and requeue copies a pod from its whole JSON (`RequeueView::last_state`, or a read of
//! it), never from this model: a copy carries every annotation its original had.
//!
//! Which gang minimum annotations are read is the policy's (`gangs.minMemberAnnotations`):
//! a policy that reads a key the view left out needs the pods listed again
//! (`AnnotationsRead::reads_more_than`; the watches do it).

use super::model::{GangConfig, KUEUE_TOTAL_COUNT, VOLCANO_ANNOTATION};
use crate::model::{marks, Labels, COMPLETION_INDEX, INDEX_FAILURE_COUNT};

/// Keys read whatever the policy says: requeue's opt-out (a tenant's) and the marks only
/// the extender writes on its copies, an Indexed Job's index and its failures, and the
/// gang annotations of Volcano and Kueue.
pub const ALWAYS_READ: &[&str] = &[
    marks::OPT_OUT,
    marks::FROM_UID,
    marks::FROM_POD,
    marks::ATTEMPT,
    marks::BASE_NAME,
    COMPLETION_INDEX,
    INDEX_FAILURE_COUNT,
    VOLCANO_ANNOTATION,
    KUEUE_TOTAL_COUNT,
];

/// The longest value a read key can mean anything with: a `namespace/name` (63 + 1 + 253
/// bytes). UIDs, names, counts and `never` are shorter. A longer value is left out: no
/// decision could act on it, and it would be a tenant's way to make the view hold more.
pub const LONGEST_VALUE: usize = 63 + 1 + 253;

/// The keys one policy reads, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationsRead {
    keys: Box<[String]>,
}

impl Default for AnnotationsRead {
    /// What the default gang settings read.
    fn default() -> Self {
        AnnotationsRead::of(&GangConfig::default())
    }
}

impl AnnotationsRead {
    pub fn of(gangs: &GangConfig) -> AnnotationsRead {
        let mut keys: Vec<String> = ALWAYS_READ.iter().map(|k| k.to_string()).collect();
        keys.extend(gangs.min_member_annotations.iter().cloned());
        keys.sort();
        keys.dedup();
        AnnotationsRead { keys: keys.into_boxed_slice() }
    }

    pub fn reads(&self, key: &str) -> bool {
        self.keys.binary_search_by(|k| k.as_str().cmp(key)).is_ok()
    }

    /// Is this entry kept?
    fn keeps(&self, key: &str, value: &str) -> bool {
        value.len() <= LONGEST_VALUE && self.reads(key)
    }

    /// `annotations` cut down to what is read; `None` when nothing needs to go, so a pod
    /// that carries only read keys (most carry none) costs no copy.
    pub fn kept(&self, annotations: &Labels) -> Option<Labels> {
        if annotations.iter().all(|(k, v)| self.keeps(k, v)) {
            return None;
        }
        Some(annotations.iter().filter(|(k, v)| self.keeps(k, v)).collect())
    }

    /// Does this read a key `other` does not? Pods cut down by `other` lack it: they must
    /// be read again.
    pub fn reads_more_than(&self, other: &AnnotationsRead) -> bool {
        self.keys.iter().any(|k| !other.reads(k))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_min(keys: &[&str]) -> AnnotationsRead {
        AnnotationsRead::of(&GangConfig {
            min_member_annotations: keys.iter().map(|k| k.to_string()).collect(),
            ..GangConfig::default()
        })
    }

    #[test]
    fn the_marks_job_and_gang_keys_are_read_and_nothing_else() {
        let read = with_min(&["example.com/min"]);
        for key in ALWAYS_READ.iter().chain(&["example.com/min"]) {
            assert!(read.reads(key), "{key}");
        }
        for key in ["", "team", "kubectl.kubernetes.io/last-applied-configuration", marks::PREEMPTED_ON] {
            assert!(!read.reads(key), "{key}");
        }
        assert_eq!(read.keys().count(), ALWAYS_READ.len() + 1);
    }

    #[test]
    fn a_pod_with_only_read_keys_is_not_copied_and_any_other_is_cut_down() {
        let read = AnnotationsRead::default();
        let only_read = Labels::from([(marks::ATTEMPT, "2"), (VOLCANO_ANNOTATION, "train-7")]);
        assert_eq!(read.kept(&only_read), None);
        assert_eq!(read.kept(&Labels::new()), None);
        let mixed = Labels::from([(marks::ATTEMPT, "2"), ("team", "ml")]);
        assert_eq!(read.kept(&mixed), Some(Labels::from([(marks::ATTEMPT, "2")])));
    }

    #[test]
    fn a_value_longer_than_any_name_is_left_out_even_under_a_read_key() {
        let read = AnnotationsRead::default();
        let longest = "n".repeat(LONGEST_VALUE);
        let a = Labels::from([(marks::FROM_POD, longest.as_str())]);
        assert_eq!(read.kept(&a), None, "a namespace/name at its longest is kept");
        let tenants = "n".repeat(LONGEST_VALUE + 1);
        let b = Labels::from([(VOLCANO_ANNOTATION, tenants.as_str()), (marks::OPT_OUT, "never")]);
        assert_eq!(read.kept(&b), Some(Labels::from([(marks::OPT_OUT, "never")])));
    }

    #[test]
    fn a_policy_reading_another_minimum_key_reads_more_than_the_one_before() {
        let before = with_min(&["a/min"]);
        assert!(with_min(&["a/min", "b/min"]).reads_more_than(&before));
        assert!(with_min(&["b/min"]).reads_more_than(&before));
        assert!(!with_min(&[]).reads_more_than(&before), "reading less needs nothing read again");
        assert!(!with_min(&["a/min"]).reads_more_than(&before));
    }
}
