//! Recent verdicts, so that a scrape every 30 s costs the API server a review now and
//! then, not two per scrape. Keyed by an HMAC of the token under a key of this process's
//! own: the token itself is never stored, and a memory dump gives nothing to replay.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ring::hmac;

use super::Verdict;

/// How long verdicts are kept, and how many at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// An allowed token: a revoked binding takes effect within this.
    pub allowed_for: Duration,
    /// A refused one (401, 403): a binding just made takes effect within this, and a
    /// client retrying a bad token still costs the API server little.
    pub refused_for: Duration,
    pub entries: usize,
}

impl Default for CacheLimits {
    fn default() -> Self {
        CacheLimits { allowed_for: Duration::from_secs(30), refused_for: Duration::from_secs(5), entries: 1024 }
    }
}

/// The HMAC-SHA256 of a token.
type TokenKey = [u8; 32];

pub struct VerdictCache {
    key: hmac::Key,
    limits: CacheLimits,
    entries: Mutex<HashMap<(TokenKey, &'static str), Kept>>,
}

struct Kept {
    verdict: Verdict,
    until: Instant,
}

impl VerdictCache {
    /// A cache with a fresh random key; `None` if the system has no randomness to give.
    pub fn new(limits: CacheLimits) -> Option<VerdictCache> {
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &ring::rand::SystemRandom::new()).ok()?;
        Some(VerdictCache { key, limits, entries: Mutex::new(HashMap::new()) })
    }

    fn key_of(&self, token: &str) -> TokenKey {
        let mut key = [0; 32];
        key.copy_from_slice(hmac::sign(&self.key, token.as_bytes()).as_ref());
        key
    }

    /// The verdict on `token` for `path`, while it is fresh at `now`.
    pub fn get(&self, token: &str, path: &'static str, now: Instant) -> Option<Verdict> {
        let key = (self.key_of(token), path);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(&key) {
            Some(kept) if now < kept.until => Some(kept.verdict.clone()),
            Some(_) => {
                entries.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Keeps `verdict` from `now`. When full, expired entries go first, then the one
    /// that would expire soonest.
    pub fn put(&self, token: &str, path: &'static str, verdict: Verdict, now: Instant) {
        let ttl = if verdict.is_allowed() { self.limits.allowed_for } else { self.limits.refused_for };
        let key = (self.key_of(token), path);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.limits.entries && !entries.contains_key(&key) {
            entries.retain(|_, kept| now < kept.until);
            if entries.len() >= self.limits.entries {
                if let Some(soonest) = entries.iter().min_by_key(|(_, kept)| kept.until).map(|(k, _)| *k) {
                    entries.remove(&soonest);
                }
            }
        }
        if self.limits.entries > 0 {
            entries.insert(key, Kept { verdict, until: now + ttl });
        }
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> Verdict {
        Verdict::Allowed { user: "system:serviceaccount:monitoring:prometheus".into() }
    }

    fn forbidden() -> Verdict {
        Verdict::Forbidden { user: "alice".into(), reason: String::new() }
    }

    fn cache(entries: usize) -> VerdictCache {
        VerdictCache::new(CacheLimits { entries, ..CacheLimits::default() }).unwrap()
    }

    #[test]
    fn an_allowed_token_is_kept_thirty_seconds_and_a_refused_one_five() {
        let c = cache(16);
        let t0 = Instant::now();
        c.put("good", "/metrics", allowed(), t0);
        c.put("bad", "/metrics", Verdict::Unauthenticated, t0);
        c.put("alice", "/decisions", forbidden(), t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(c.get("good", "/metrics", at(29)), Some(allowed()));
        assert_eq!(c.get("bad", "/metrics", at(4)), Some(Verdict::Unauthenticated));
        assert_eq!(c.get("alice", "/decisions", at(4)), Some(forbidden()));
        assert_eq!(c.get("bad", "/metrics", at(5)), None, "a refusal is asked again after 5 s");
        assert_eq!(c.get("alice", "/decisions", at(5)), None);
        assert_eq!(c.get("good", "/metrics", at(30)), None, "an allowed token is asked again after 30 s");
        assert!(c.is_empty(), "expired entries are dropped when read");
    }

    #[test]
    fn a_verdict_holds_for_its_token_and_path_only() {
        let c = cache(16);
        let now = Instant::now();
        c.put("good", "/metrics", allowed(), now);
        assert_eq!(c.get("good", "/decisions", now), None, "allowed to scrape is not allowed to read decisions");
        assert_eq!(c.get("good ", "/metrics", now), None);
        assert_eq!(c.get("goo", "/metrics", now), None);
    }

    #[test]
    fn the_cache_never_holds_more_than_its_bound_and_drops_the_soonest_to_expire() {
        let c = cache(2);
        let t0 = Instant::now();
        c.put("a", "/metrics", allowed(), t0);
        c.put("b", "/metrics", Verdict::Unauthenticated, t0);
        c.put("c", "/metrics", allowed(), t0);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get("b", "/metrics", t0), None, "the refusal expired soonest");
        assert!(c.get("a", "/metrics", t0).is_some() && c.get("c", "/metrics", t0).is_some());
        // Expired entries make room before live ones.
        let later = t0 + Duration::from_secs(31);
        c.put("d", "/metrics", allowed(), later);
        c.put("e", "/metrics", allowed(), later);
        assert_eq!(c.len(), 2);
        assert!(c.get("d", "/metrics", later).is_some() && c.get("e", "/metrics", later).is_some());
        // Replacing a kept entry evicts nothing.
        c.put("e", "/metrics", forbidden(), later);
        assert!(c.get("d", "/metrics", later).is_some());
    }

    #[test]
    fn two_processes_key_the_same_token_differently() {
        let (a, b) = (cache(1), cache(1));
        assert_ne!(a.key_of("token"), b.key_of("token"));
        assert_eq!(a.key_of("token"), a.key_of("token"));
    }
}
