//! How soon the room a preemption frees is free: a victim is gone once it stops (what its
//! owner's or class's pods were seen to take, else its declared grace period), a pod
//! already terminating once what is left of its stop is over; the room is free when the
//! last of the pods it waits for is gone.

use super::Context;
use crate::cluster::stop_times::{self, Basis, Stop};
use crate::model::Pod;
use crate::policy::ClassId;

/// The room waits for pods to go: how long, and for whom last.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Wait {
    /// Milliseconds from the decision until the last of them is expected gone.
    pub ms: i64,
    /// The pod gone last, and what its stop is expected from.
    pub last: Option<(String, Basis)>,
}

impl Wait {
    /// "~12.0 s (batch/w-3: its declared grace period)"; "at once" waiting for nobody.
    pub fn describe(&self) -> String {
        match &self.last {
            None => "at once".into(),
            Some((pod, basis)) => format!("~{} ({pod}: {})", seconds(self.ms), basis.describe()),
        }
    }

    fn with(mut self, pod: &Pod, ms: i64, basis: Basis) -> Wait {
        if self.last.is_none() || ms > self.ms {
            self.ms = ms;
            self.last = Some((pod.key(), basis));
        }
        self
    }
}

/// "4.5 s", "3 min 20 s".
pub fn seconds(ms: i64) -> String {
    match ms {
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

/// How long `pod`, if deleted now (or what is left, if it is being deleted), is expected
/// to take to go.
pub fn left(ctx: &Context, pod: &Pod) -> (i64, Basis) {
    left_in(ctx, pod, ctx.class_of(pod))
}

/// `left`, for a pod whose class is known.
pub fn left_in(ctx: &Context, pod: &Pod, class: ClassId) -> (i64, Basis) {
    let stop = match ctx.view {
        Some(view) => view.expected_stop(pod, &ctx.policy.class(class).name),
        None => Stop { ms: stop_times::declared_grace_ms(pod), basis: Basis::Declared },
    };
    (stop_times::left_ms(pod, stop, ctx.now), stop.basis)
}

/// How long until every one of `pods` is gone.
pub fn until_gone<'p>(ctx: &Context, pods: impl IntoIterator<Item = &'p Pod>) -> Wait {
    pods.into_iter().fold(Wait::default(), |w, p| {
        let (ms, basis) = left(ctx, p);
        w.with(p, ms, basis)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_as_a_person_reads_them() {
        assert_eq!(seconds(4_500), "4.5 s");
        assert_eq!(seconds(200_000), "3 min 20 s");
    }
}
