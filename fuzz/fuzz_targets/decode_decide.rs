//! Arbitrary bytes through every verb, with and without a cluster view: the extender must
//! answer or reject, never panic.
#![no_main]

use std::sync::OnceLock;

use coloc_extender::cluster::{snapshot, View};
use coloc_extender::pipeline::{replay, Verb};
use coloc_extender::policy::Policy;
use libfuzzer_sys::fuzz_target;

fn fixtures() -> &'static (Policy, View) {
    static F: OnceLock<(Policy, View)> = OnceLock::new();
    F.get_or_init(|| {
        let policy = Policy::builtin_default().enforced();
        let snap = snapshot::parse(include_bytes!("../../tests/fixtures/payloads/r1-nodecache-false/0037-preempt.snapshot.json")).unwrap();
        let view = View::build(snap, &policy);
        (policy, view)
    })
}

fuzz_target!(|data: &[u8]| {
    let (policy, view) = fixtures();
    for verb in [Verb::Filter, Verb::Prioritize, Verb::Preempt] {
        let _ = replay(verb, data, policy, None, 1_800_000_000);
        let _ = replay(verb, data, policy, Some(view), 1_800_000_000);
    }
    let _ = Policy::from_yaml(&String::from_utf8_lossy(data));
    let _ = coloc_extender::quantity::parse(&String::from_utf8_lossy(data));
});
