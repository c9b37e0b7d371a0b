//! Failed tries to finish a guard an earlier release left, counted per pod across looks,
//! so that one that can never succeed is given up after a bound.

use std::collections::HashMap;
use std::sync::Mutex;

/// Failed tries per preempted pod (UID), across looks.
#[derive(Default)]
pub struct Tries(Mutex<HashMap<String, u32>>);

impl Tries {
    pub(crate) fn failed(&self, uid: &str) -> u32 {
        let mut tries = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = tries.entry(uid.to_string()).or_default();
        *n += 1;
        *n
    }

    pub(crate) fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(uid);
    }

    /// Keeps only the pods still guarded: one that went meanwhile is not counted forever.
    pub(crate) fn keep_only(&self, guarded: &std::collections::HashSet<&str>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).retain(|uid, _| guarded.contains(uid.as_str()));
    }
}
