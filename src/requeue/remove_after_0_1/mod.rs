//! What earlier releases left, finished by this one, and removed after 0.1: releases
//! before 0.1.0 put a finalizer and label (`GUARD`) on running bare pods; every 0.1
//! requeue controller (whatever its flags) and `uninstall` take them off, requeuing a pod
//! preempted meanwhile. A cluster that ran 0.1 has none left, so 0.2 drops this folder, and
//! with it `Pod::requeue_guarded`, the `GUARD` mark, the admission rules that let the
//! install's identities remove it, `uninstall`'s guard pass, the metrics
//! `coloc_requeue_guards_*` and the alert on them.

pub mod finish;
pub mod guard;
pub mod tries;
