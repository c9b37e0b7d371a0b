//! When pods kept off online room may take it: the wakes owed at future times.

use std::collections::BTreeSet;

use crate::model::Timestamp;

/// Seconds at which a wake is owed, each once. Bounded: a pod is kept off for at most
/// ten minutes, so at most that many seconds are ever pending.
#[derive(Debug, Default)]
pub struct Due {
    at: BTreeSet<Timestamp>,
}

/// More than any policy can owe (one a second over the longest `keepOffOnlineRoom`).
const MOST: usize = 1024;

impl Due {
    /// A wake is owed at `at`. Beyond the bound, the latest owed stands for it: woken
    /// late rather than never.
    pub fn owe(&mut self, at: Timestamp) {
        if self.at.len() >= MOST && !self.at.contains(&at) {
            // The latest owed moves to `at` if that is later; an earlier one is woken then.
            if self.at.last().is_some_and(|latest| *latest < at) {
                self.at.pop_last();
                self.at.insert(at);
            }
            return;
        }
        self.at.insert(at);
    }

    /// Is a wake owed by `now`? Settles every one owed by then: one wake serves them all.
    pub fn take(&mut self, now: Timestamp) -> bool {
        let later = self.at.split_off(&(now + 1));
        let owed = !self.at.is_empty();
        self.at = later;
        owed
    }

    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_is_owed_once_at_its_time_and_not_before() {
        let mut due = Due::default();
        due.owe(100);
        due.owe(100);
        due.owe(130);
        assert!(!due.take(99));
        assert!(due.take(100));
        assert!(!due.take(100), "settled");
        assert!(due.take(131));
        assert!(due.is_empty());
    }

    #[test]
    fn what_is_owed_stays_bounded() {
        let mut due = Due::default();
        for t in 0..10_000 {
            due.owe(t);
        }
        assert!(due.len() <= MOST);
        assert!(due.take(9_998), "the earliest");
        assert!(due.take(9_999), "the latest is still owed");
        assert!(due.is_empty());
    }
}
