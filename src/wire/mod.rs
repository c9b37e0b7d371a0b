//! The extender wire format: decoding requests, encoding answers.

pub mod baseline;
mod bounds;
pub mod error;
mod first_name;
pub mod job;
pub mod k8s;
pub mod list_items;
mod request;
mod response;
mod seeds;
mod strict;

pub use bounds::{Bounds, Caps};
pub use request::{
    decode_extender_args, decode_extender_args_for, decode_extender_args_within, decode_preempt_args,
    decode_preempt_args_for, Candidates, ExtenderArgs, NodeSet, PreemptArgs, VictimUids, Victims,
};
pub use response::{to_json, to_json_sized, FilterResult, HostPriority, MetaPod, MetaVictims, PreemptionResult};
