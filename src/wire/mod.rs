//! The extender wire format: decoding requests, encoding answers.

pub mod k8s;
pub mod request;
pub mod response;

pub use request::{decode_extender_args, decode_preempt_args, decode_preempt_args_for, Candidates, DecodeError, ExtenderArgs, NodeSet, PreemptArgs};
pub use response::{FilterResult, HostPriority, MetaPod, MetaVictims, PreemptionResult};
