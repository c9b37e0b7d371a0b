//! The extender wire format: decoding requests, encoding answers.

pub mod baseline;
pub mod bounds;
pub mod error;
mod first_name;
pub mod job;
pub mod k8s;
pub mod list_items;
pub mod request;
pub mod response;
mod seeds;
mod strict;

pub use bounds::{Bounds, Caps};
pub use request::{
    decode_extender_args, decode_extender_args_for, decode_extender_args_within, decode_preempt_args,
    decode_preempt_args_for, Candidates, ExtenderArgs, NodeSet, PreemptArgs,
};
pub use response::{FilterResult, HostPriority, MetaPod, MetaVictims, PreemptionResult};
