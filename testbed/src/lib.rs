//! A local Kubernetes control plane for coloc-extender's end-to-end tests and its
//! scheduler-loop benchmark, in the manner of controller-runtime's envtest: the real
//! release binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
//! kubectl), found through one environment variable, `KUBE_BIN_DIR`, started on free
//! loopback ports in a temporary directory and stopped when the handles are dropped, also
//! when a test panics.
//!
//! There is no kubelet: [`kubelet`] stands in for one (bound pods become Running and
//! Ready; terminating pods reach a terminal phase, keeping their conditions, and are then
//! deleted; pods can complete after a set run time).

pub mod binaries;
pub mod bound;
pub mod cluster;
pub mod control_plane;
pub mod curve;
pub mod demo;
pub mod extender;
pub mod ids;
pub mod kubelet;
pub mod openb;
pub mod pki;
pub mod ports;
pub mod prepared;
pub mod process;
pub mod proxy;
pub mod scenario;
pub mod scheduler;
pub mod sweep;
pub mod trace;
pub mod wait;

pub use binaries::Binaries;
pub use control_plane::ControlPlane;
pub use extender::Extender;
pub use kubelet::Kubelet;
pub use scheduler::{ExtenderEntry, Scheduler};
