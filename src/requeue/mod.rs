//! Requeue: a bare offline pod (no controller would recreate it) that is preempted goes
//! back to the pending queue instead of being lost, whoever preempted it.
//!
//! A controller apart from the verbs' answers, in pods of its own (`coloc-extender
//! requeue`, the requeue identity, one replica leading: `leader`): when its cluster view
//! sees such a pod marked by kube-scheduler (`DisruptionTarget`, `PreemptionByScheduler`)
//! and being deleted, it stores a copy built from the pod's last state, held back by a
//! scheduling gate so that it cannot run beside the original, and removes the gate once
//! the original is gone. It publishes on its Lease (`lease`) whether it can store copies;
//! the extender reads that (`published`) and nothing else of it. The pure parts (the
//! copy's manifest, what to do now, the Lease's rules) live here; `kube` carries them out
//! against the API server. The names it writes on pods are in `model::marks`, read below
//! requeue too (the view, the wire decoder); the intents decisions make are
//! `model::RequeueIntent`.

pub mod availability;
pub mod controller;
pub mod give_up;
pub mod kube;
pub mod leader;
pub mod lease;
pub mod pace;
pub mod plan;
pub mod published;
pub mod remove_after_0_1;
pub mod replacement;
mod retry;
