//! coloc-extender: a kube-scheduler extender for clusters that co-locate online services
//! with offline batch work.
//!
//! A verb's bytes go `wire` (extender JSON) → `decide` (pure decisions over `model`,
//! `policy` and the `cluster` view) → `wire` again, through `pipeline`; `service` runs that
//! without HTTP and `http` carries it. The requeue controller (`requeue`) reacts to the
//! evictions it observes, in a process of its own; `cli` composes both. ARCHITECTURE.md
//! gives the layers in order.

pub mod cli;
pub mod clock;
pub mod cluster;
pub mod decide;
pub mod discarded;
pub mod events;
pub mod explanation;
pub mod http;
pub mod model;
pub mod pipeline;
pub mod policy;
pub mod quantity;
pub mod reload;
pub mod requeue;
pub mod routing;
pub mod service;
pub mod shadow;
pub mod tls;
pub mod uninstall;
pub mod waiting;
pub mod wake;
pub mod wire;
pub mod workers;
