//! One Lease, two readers: the requeue controller (`coloc-extender requeue`, pods of its
//! own) elects its leader with it and publishes there whether copies can be stored; the
//! extender beside kube-scheduler reads it to know whether a bare victim will come back.
//! The extender shares no process with the controller, so this is all it knows of it.
//! Pure: what the Lease says and what to do about it; `leader` and `published` talk to
//! the API server.

use crate::model::Timestamp;

/// The Lease's name in the install namespace (`requeue --lease`, `serve --requeue-lease`).
pub const NAME: &str = "coloc-requeue";
/// How long a leader's claim holds without a renewal.
pub const DURATION_SECS: i64 = 15;
/// How often the leader renews, and a follower looks.
pub const RENEW_EVERY_SECS: u64 = 2;
/// Annotation on the Lease: `allowed` while the leader may store copies, else why not.
pub const COPIES: &str = "coloc-extender.io/requeue-copies";
/// The annotation's value while copies can be stored.
pub const ALLOWED: &str = "allowed";

/// What the Lease says, as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseState {
    pub holder: Option<String>,
    /// Seconds since the epoch of the last renewal.
    pub renewed: Option<Timestamp>,
    pub duration_secs: Option<i64>,
    /// `COPIES`, as the leader last wrote it.
    pub copies: Option<String>,
}

impl LeaseState {
    /// Has the holder's claim lapsed at `now`? A Lease nobody holds has.
    pub fn lapsed(&self, now: Timestamp) -> bool {
        let duration = self.duration_secs.unwrap_or(DURATION_SECS);
        match (&self.holder, self.renewed) {
            (Some(h), Some(at)) if !h.is_empty() => now > at + duration,
            _ => true,
        }
    }
}

/// What a replica of the controller does at a look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leading {
    /// No Lease yet: create it, holding it.
    Create,
    /// Nobody holds it, or the holder's claim lapsed: take it (an update that fails on a
    /// conflict, so only one of two replicas gets it).
    TakeOver,
    /// It is ours: renew it.
    Renew,
    /// Another replica leads.
    Follow { leader: String },
}

/// What replica `me` does with `lease` at `now`.
pub fn step(lease: Option<&LeaseState>, me: &str, now: Timestamp) -> Leading {
    let Some(lease) = lease else { return Leading::Create };
    match lease.holder.as_deref() {
        Some(h) if h == me => Leading::Renew,
        Some(h) if !lease.lapsed(now) => Leading::Follow { leader: h.to_string() },
        _ => Leading::TakeOver,
    }
}

/// What the extender may count on, read from the Lease at `now`: `Ok` while a leader of
/// the controller renews it and says copies can be stored, else why not (for `/readyz`,
/// the log and the decisions' reasons). A takeover may leave it unrenewed for a look
/// beyond its duration: that much slack is allowed before requeue counts as gone.
pub fn copies_possible(lease: Option<&LeaseState>, now: Timestamp) -> Result<(), String> {
    let Some(lease) = lease else {
        return Err(format!(
            "no requeue controller has published its Lease {NAME} (is the requeue component's Deployment coloc-requeue running?)"
        ));
    };
    let slack = 2 * RENEW_EVERY_SECS as i64;
    let stale = match lease.renewed {
        Some(at) => now > at + lease.duration_secs.unwrap_or(DURATION_SECS) + slack,
        None => true,
    };
    if stale || lease.holder.as_deref().is_none_or(str::is_empty) {
        let ago = lease.renewed.map(|at| format!("{}s ago", now - at)).unwrap_or_else(|| "never".into());
        return Err(format!("no replica of the requeue controller leads (its Lease {NAME} was last renewed {ago})"));
    }
    match lease.copies.as_deref() {
        Some(ALLOWED) => Ok(()),
        Some(why) => Err(format!("the requeue controller cannot store copies: {why}")),
        None => Err("the requeue controller has not said yet whether it can store copies".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(holder: &str, renewed: Timestamp, copies: Option<&str>) -> LeaseState {
        LeaseState {
            holder: Some(holder.into()),
            renewed: Some(renewed),
            duration_secs: Some(DURATION_SECS),
            copies: copies.map(String::from),
        }
    }

    #[test]
    fn the_first_replica_creates_the_lease_and_renews_it_while_it_holds_it() {
        assert_eq!(step(None, "a", 100), Leading::Create);
        assert_eq!(step(Some(&held("a", 100, None)), "a", 101), Leading::Renew);
        assert_eq!(step(Some(&held("a", 50, None)), "a", 101), Leading::Renew, "its own, even lapsed");
    }

    #[test]
    fn another_replica_follows_a_live_leader_and_takes_over_a_lapsed_one() {
        assert_eq!(step(Some(&held("a", 100, None)), "b", 110), Leading::Follow { leader: "a".into() });
        assert_eq!(step(Some(&held("a", 100, None)), "b", 100 + DURATION_SECS), Leading::Follow { leader: "a".into() });
        assert_eq!(step(Some(&held("a", 100, None)), "b", 101 + DURATION_SECS), Leading::TakeOver);
        let released = LeaseState { holder: Some(String::new()), ..held("a", 100, None) };
        assert_eq!(step(Some(&released), "b", 101), Leading::TakeOver, "a holder that let go");
    }

    #[test]
    fn the_extender_counts_on_copies_only_while_a_leader_renews_and_says_they_can_be_stored() {
        let now = 1_000;
        let missing = copies_possible(None, now).unwrap_err();
        assert!(missing.contains("coloc-requeue running"), "{missing}");
        assert_eq!(copies_possible(Some(&held("a", now - 3, Some(ALLOWED))), now), Ok(()));
        let refused = copies_possible(Some(&held("a", now, Some("pods create is forbidden"))), now).unwrap_err();
        assert!(refused.ends_with("pods create is forbidden"), "{refused}");
        let unsaid = copies_possible(Some(&held("a", now, None)), now).unwrap_err();
        assert!(unsaid.contains("not said yet"), "{unsaid}");
    }

    #[test]
    fn a_lease_nobody_renews_means_no_requeue_after_its_duration_and_a_takeovers_slack() {
        let renewed = 1_000;
        let last_good = renewed + DURATION_SECS + 2 * RENEW_EVERY_SECS as i64;
        assert_eq!(copies_possible(Some(&held("a", renewed, Some(ALLOWED))), last_good), Ok(()));
        let gone = copies_possible(Some(&held("a", renewed, Some(ALLOWED))), last_good + 1).unwrap_err();
        assert!(gone.contains("no replica of the requeue controller leads") && gone.contains("20s ago"), "{gone}");
    }
}
