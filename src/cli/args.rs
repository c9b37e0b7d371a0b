//! The flags of `serve`: where it listens, what it may write, what one request may cost.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::http::state::Limits;
use crate::policy::Mode;
use crate::wire::Caps;

#[derive(clap::Args)]
pub struct ServeArgs {
    #[arg(long, default_value = "127.0.0.1:8888")]
    pub listen: SocketAddr,
    /// Policy file, reloaded when it changes (default: the shipped default policy).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// URL prefix before /filter, /prioritize, /preempt (e.g. /scheduler).
    #[arg(long, default_value = "")]
    pub path_prefix: String,
    /// Cluster view from a snapshot file instead of the Kubernetes API.
    #[arg(long, conflicts_with = "kube")]
    pub snapshot: Option<PathBuf>,
    /// Cluster view from the Kubernetes API (in-cluster config or KUBECONFIG).
    #[arg(long)]
    pub kube: bool,
    /// Count on the requeue controller (`coloc-extender requeue`, the requeue component's
    /// Deployment coloc-requeue) to bring bare victims of `requeue` classes back, while its
    /// Lease says it stores copies; otherwise they are victims of last resort. This process
    /// writes no pod for it: it reads the Lease (--requeue-lease, in --namespace).
    #[arg(long, requires = "kube")]
    pub requeue: bool,
    /// The requeue controller's Lease, in --namespace.
    #[arg(long, default_value = crate::requeue::lease::NAME)]
    pub requeue_lease: String,
    /// Wake pods kube-scheduler parked while we could not answer a preempt well (restart,
    /// view not ready, a failed answer): once ready again, store and delete a
    /// placeholder pod bound to no real node, which kube-scheduler takes as a reason to
    /// retry them. Writes pods in --namespace: needs the `manifests/wake` RBAC component.
    #[arg(long, requires = "kube")]
    pub wake: bool,
    /// Publish the policy's classes for admission: the ConfigMap coloc-extender-classes in
    /// --namespace, owned by this replica's pod (--pod-name, --pod-uid), which the routing
    /// and per-pod-verbs admission policies read; once no pod running the extender is left,
    /// it goes, and so does the routing. Writes that one ConfigMap.
    #[arg(long, requires = "kube", overrides_with = "publish_classes")]
    pub publish_classes: bool,
    /// Check every --check-routing-every that routing is in effect: a dry run of a pod it must send to
    /// coloc-scheduler in a namespace labelled for it, as --routing-check-as (stored
    /// nowhere; the `routing-check` component grants it); coloc_routing_in_effect, and a
    /// Warning Event `NotRouted` on each governed pod left to the default scheduler
    /// meanwhile (with --events).
    #[arg(long, requires = "publish_classes")]
    pub check_routing: bool,
    /// How often routing is checked, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = parse_secs)]
    pub check_routing_every: Duration,
    /// The identity the routing check's dry runs are made as (impersonated). Default:
    /// system:serviceaccount:<--namespace>:coloc-extender-routing-check.
    #[arg(long)]
    pub routing_check_as: Option<String>,
    /// This replica's pod (the downward API): an owner of what it publishes.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// That pod's UID, for the owner reference of what it publishes.
    #[arg(long, env = "POD_UID")]
    pub pod_uid: Option<String>,
    /// The install namespace: where the wake placeholders, the requeue controller's Lease
    /// and the published classes are (default: $POD_NAMESPACE, else coloc-system).
    #[arg(long, env = "POD_NAMESPACE", default_value = "coloc-system")]
    pub namespace: String,
    /// The identity every API call is made as but placeholders' (impersonated), where the
    /// pod's own ServiceAccount is another's: beside kube-scheduler in coloc-scheduler's
    /// pod, system:serviceaccount:<namespace>:coloc-extender. Placeholders are still
    /// written as --wake-as, impersonated by the pod's own identity. Default: the pod's own
    /// identity.
    #[arg(long, requires = "kube")]
    pub act_as: Option<String>,
    /// The identity placeholders are written as (impersonated; the `wake` component).
    /// Default: system:serviceaccount:<--namespace>:coloc-extender-wake.
    #[arg(long)]
    pub wake_as: Option<String>,
    /// Least time between two wakes, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = parse_secs)]
    pub wake_min_interval: Duration,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (only kube-scheduler may call).
    #[arg(long, requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// Plain-HTTP listener for /healthz and /readyz (probes carry no client certificate).
    #[arg(long)]
    pub health_listen: Option<SocketAddr>,
    /// Plain-HTTP listener for /metrics and /decisions (`explain`), or `off`. Decisions name
    /// pods and reasons: off loopback, say who may read them (--admin-auth).
    #[arg(long, default_value = "127.0.0.1:8082", value_parser = parse_admin_listen)]
    pub admin_listen: AdminListen,
    /// Who may read the admin port. `kube` (needs --kube): a bearer token the API server
    /// accepts (TokenReview), of a user it allows to GET the path (SubjectAccessReview:
    /// ClusterRoles coloc-extender-metrics-reader, coloc-extender-decisions-reader).
    /// `none`: whoever reaches the port. Default: none on loopback; off loopback it must
    /// be said.
    #[arg(long, value_enum)]
    pub admin_auth: Option<AdminAuth>,
    /// Threads serving the verbs and running Events and wakes. kube-scheduler calls
    /// one verb at a time and large decisions run on --decision-workers, so one thread
    /// spares the wake-ups of handing each request between two (measured:
    /// docs/journal/performance.md, "One I/O thread").
    #[arg(long, default_value_t = 1, value_parser = parse_threads)]
    pub io_threads: usize,
    /// Log lines as JSON (for log pipelines) instead of text.
    #[arg(long)]
    pub log_json: bool,
    #[command(flatten)]
    pub ops: OpsArgs,
}

/// The flags of `requeue`: the requeue controller in pods of its own, as the requeue
/// identity, one replica leading.
#[derive(clap::Args)]
pub struct RequeueArgs {
    /// Policy file, reloaded when it changes (default: the shipped default policy): which
    /// classes requeue their bare victims, and how often.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Store copies of preempted bare pods. `--copies=false` only finishes what an earlier
    /// run left (releases or deletes its gated copies): the way to turn requeue off without
    /// leaving a copy gated for ever.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub copies: bool,
    /// The install namespace, where the Lease is (default: $POD_NAMESPACE, else coloc-system).
    #[arg(long, env = "POD_NAMESPACE", default_value = "coloc-system")]
    pub namespace: String,
    /// The Lease its replicas elect a leader with, and where the leader says whether it
    /// can store copies (what `serve --requeue` reads).
    #[arg(long, default_value = crate::requeue::lease::NAME)]
    pub lease: String,
    /// This replica's name on the Lease (default: $POD_NAME, else $HOSTNAME, else the host's
    /// own name).
    #[arg(long, env = "POD_NAME")]
    pub name: Option<String>,
    /// A gated copy whose original is still terminating this long past its
    /// deletionTimestamp (its node gone, say) is released anyway, with a Warning Event.
    #[arg(long, default_value = "120s", value_parser = parse_secs)]
    pub stuck_after: Duration,
    /// A gated copy requeue did not record is deleted this long after its creation (never
    /// released). For tests; the shipped bound is 10 minutes.
    #[arg(long, hide = true, default_value = "600s", value_parser = parse_secs)]
    pub unrecorded_after: Duration,
    /// Plain-HTTP listener for /healthz and /readyz.
    #[arg(long)]
    pub health_listen: Option<SocketAddr>,
    /// Plain-HTTP listener for /metrics, or `off`.
    #[arg(long, default_value = "127.0.0.1:8083", value_parser = parse_admin_listen)]
    pub admin_listen: AdminListen,
    /// Who may read the admin port: `kube` (a bearer token the API server accepts and
    /// allows) or `none` (whoever reaches it; the default on loopback).
    #[arg(long, value_enum)]
    pub admin_auth: Option<AdminAuth>,
    /// Log lines as JSON (for log pipelines) instead of text.
    #[arg(long)]
    pub log_json: bool,
}

impl RequeueArgs {
    /// Who may read the admin port (`admin_auth`); the controller always has the API.
    pub fn admin_auth(&self) -> Result<AdminAuth, String> {
        admin_auth(self.admin_auth, self.admin_listen, true)
    }
}

/// Adoption and day-2 operations: shadow mode, decision lookup, Events.
#[derive(clap::Args)]
pub struct OpsArgs {
    /// Override the policy's `mode`: `shadow` answers exactly as kube-scheduler would decide
    /// without the extender and counts what the policy would change
    /// (coloc_shadow_diffs_total); nothing is written to the API server.
    #[arg(long)]
    pub mode: Option<Mode>,
    /// Decisions kept for GET /decisions and `explain` (on --admin-listen), newest kept.
    #[arg(long, default_value_t = 10_000)]
    pub decisions_entries: usize,
    /// Memory bound of the kept decisions, in bytes.
    #[arg(long, default_value_t = 32 << 20)]
    pub decisions_bytes: usize,
    /// Write Events on preemptors: a Warning when no node can make room under the policy
    /// (with the reason per node), a Normal naming the victims. Needs events create/patch.
    #[arg(long, requires = "kube")]
    pub events: bool,
    /// Per pod: an unchanged Event is written again only after this long, e.g. 10m.
    #[arg(long, default_value = "10m", value_parser = parse_secs)]
    pub events_repeat_after: Duration,
    /// Per pod: a changed Event waits at least this long after the previous one, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = parse_secs)]
    pub events_min_interval: Duration,
}

/// What one request may cost, and how many may run at once.
#[derive(clap::Args)]
pub struct LimitArgs {
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = 128 << 20)]
    pub max_body_bytes: usize,
    /// Bytes of request bodies held at once over all requests (at least --max-body-bytes);
    /// beyond it new requests get 503 and kube-scheduler retries.
    #[arg(long, default_value_t = 512 << 20)]
    pub max_inflight_body_bytes: usize,
    /// Whole-request time limit, e.g. 4s (kube-scheduler gives up at its httpTimeout, 5s by default).
    #[arg(long, default_value = "4s", value_parser = parse_secs)]
    pub request_timeout: Duration,
    /// Time for a request body to arrive, e.g. 2s (at most --request-timeout).
    #[arg(long, default_value = "2s", value_parser = parse_secs)]
    pub body_timeout: Duration,
    /// Requests admitted at once (bodies received, being decided) before new ones get 503.
    #[arg(long, default_value_t = 256, value_parser = parse_concurrency)]
    pub max_concurrency: usize,
    /// Threads deciding large requests (default: the CPUs available).
    #[arg(long, value_parser = parse_concurrency)]
    pub decision_workers: Option<usize>,
    /// Most nodes in one request (Nodes.items, NodeNames, preempt candidates).
    #[arg(long, default_value_t = Caps::default().max_nodes, value_parser = parse_cap)]
    pub max_nodes: usize,
    /// Most victims proposed on one candidate node.
    #[arg(long, default_value_t = Caps::default().max_victims_per_node, value_parser = parse_cap)]
    pub max_victims_per_node: usize,
    /// Most victims proposed over all candidate nodes of one preempt.
    #[arg(long, default_value_t = Caps::default().max_victims, value_parser = parse_cap)]
    pub max_victims: usize,
}

impl LimitArgs {
    pub fn limits(&self) -> anyhow::Result<Limits> {
        if self.max_inflight_body_bytes < self.max_body_bytes {
            anyhow::bail!(
                "--max-inflight-body-bytes {} is below --max-body-bytes {}: the largest body could never be admitted",
                self.max_inflight_body_bytes,
                self.max_body_bytes
            );
        }
        let defaults = Limits::default();
        Ok(Limits {
            max_body_bytes: self.max_body_bytes,
            max_inflight_body_bytes: self.max_inflight_body_bytes,
            request_timeout: self.request_timeout,
            body_timeout: self.body_timeout.min(self.request_timeout),
            max_concurrency: self.max_concurrency,
            decision_workers: self.decision_workers.unwrap_or(defaults.decision_workers),
            caps: Caps {
                max_nodes: self.max_nodes,
                max_victims_per_node: self.max_victims_per_node,
                max_victims: self.max_victims,
            },
            ..defaults
        })
    }
}

/// `--admin-auth`: who may read `/metrics` and `/decisions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AdminAuth {
    /// Delegated to the Kubernetes API: TokenReview, then SubjectAccessReview.
    Kube,
    /// Whoever reaches the port.
    #[value(name = "none")]
    Open,
}

/// `--admin-listen`: an address, or `off` (None).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminListen(pub Option<SocketAddr>);

fn parse_admin_listen(s: &str) -> Result<AdminListen, String> {
    if s == "off" {
        return Ok(AdminListen(None));
    }
    s.parse().map(|a| AdminListen(Some(a))).map_err(|_| format!("{s:?} is not ADDR:PORT (e.g. 127.0.0.1:8082) or off"))
}

fn parse_cap(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("0 would refuse every request: use at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

/// A duration of at least one second ("4s", "1m"): kube-scheduler's own timeouts are in
/// seconds, and zero would refuse every request.
fn parse_secs(s: &str) -> Result<Duration, String> {
    match crate::policy::parse_duration(s)? {
        0 => Err(format!("{s:?} is zero: use at least 1s")),
        n => Ok(Duration::from_secs(n as u64)),
    }
}

fn parse_threads(s: &str) -> Result<usize, String> {
    parse_count(s, 256, "0 threads would serve nothing")
}

fn parse_concurrency(s: &str) -> Result<usize, String> {
    parse_count(s, 65_536, "0 would refuse every request")
}

/// A count from 1 to `max`; `zero` says what 0 would do.
fn parse_count(s: &str, max: usize, zero: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err(format!("{zero}: use at least 1")),
        Ok(n) if n > max => Err(format!("{n} is more than {max}")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

/// Who may read the admin port, or why the flags do not say it safely: `kube` needs the
/// API server, and an admin port off loopback is never open unless asked for.
fn admin_auth(asked: Option<AdminAuth>, listen: AdminListen, kube: bool) -> Result<AdminAuth, String> {
    if asked == Some(AdminAuth::Kube) && !kube {
        return Err("--admin-auth kube checks each bearer token with the Kubernetes API: it needs --kube".into());
    }
    match (asked, listen.0) {
        (Some(auth), _) => Ok(auth),
        (None, Some(addr)) if !addr.ip().is_loopback() => Err(format!(
            "--admin-listen {addr} is not on loopback: whoever reaches it would read /decisions (pod names, why each was or was not preempted) and /metrics. Pass --admin-auth kube (with --kube: a bearer token the API server accepts and allows), or --admin-auth none to serve them to anyone who reaches the port"
        )),
        (None, _) => Ok(AdminAuth::Open),
    }
}

impl ServeArgs {
    /// Who may read the admin port (`admin_auth`).
    pub fn admin_auth(&self) -> Result<AdminAuth, String> {
        admin_auth(self.admin_auth, self.admin_listen, self.kube)
    }

    /// Who placeholders are written as.
    pub fn wake_identity(&self) -> String {
        self.wake_as.clone().unwrap_or_else(|| format!("system:serviceaccount:{}:coloc-extender-wake", self.namespace))
    }

    /// Who the routing check's dry runs are made as.
    pub fn routing_check_identity(&self) -> String {
        self.routing_check_as
            .clone()
            .unwrap_or_else(|| format!("system:serviceaccount:{}:coloc-extender-routing-check", self.namespace))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    fn admin_auth(flags: &[&str]) -> Result<AdminAuth, String> {
        let argv = std::iter::once("serve").chain(flags.iter().copied());
        Serve::try_parse_from(argv).map_err(|e| e.to_string())?.args.admin_auth()
    }

    #[test]
    fn the_admin_port_is_open_on_loopback_by_default_and_off_loopback_only_when_asked() {
        assert_eq!(admin_auth(&[]), Ok(AdminAuth::Open), "127.0.0.1:8082, no cluster needed");
        assert_eq!(admin_auth(&["--admin-listen", "[::1]:8082"]), Ok(AdminAuth::Open));
        assert_eq!(admin_auth(&["--admin-listen", "off"]), Ok(AdminAuth::Open));
        for addr in ["0.0.0.0:8082", "[::]:8082", "10.0.0.7:8082"] {
            let refused = admin_auth(&["--admin-listen", addr]).unwrap_err();
            assert!(refused.contains("not on loopback") && refused.contains("--admin-auth kube"), "{refused}");
            assert_eq!(admin_auth(&["--admin-listen", addr, "--admin-auth", "none"]), Ok(AdminAuth::Open));
            assert_eq!(admin_auth(&["--admin-listen", addr, "--admin-auth", "kube", "--kube"]), Ok(AdminAuth::Kube));
        }
    }

    #[test]
    fn acting_as_another_identity_needs_the_kubernetes_api() {
        let parse = |flags: &[&str]| {
            let argv = std::iter::once("serve").chain(flags.iter().copied());
            Serve::try_parse_from(argv).map(|s| s.args.act_as).map_err(|e| e.to_string())
        };
        let user = "system:serviceaccount:coloc-system:coloc-extender";
        assert_eq!(parse(&[]), Ok(None), "the pod's own identity by default");
        assert_eq!(parse(&["--kube", "--act-as", user]), Ok(Some(user.to_string())));
        let refused = parse(&["--act-as", user]).unwrap_err();
        assert!(refused.contains("--kube"), "{refused}");
    }

    #[test]
    fn kube_auth_needs_the_kubernetes_api() {
        let refused = admin_auth(&["--admin-auth", "kube"]).unwrap_err();
        assert!(refused.contains("it needs --kube"), "{refused}");
        assert_eq!(admin_auth(&["--admin-auth", "kube", "--kube"]), Ok(AdminAuth::Kube));
        let unknown = admin_auth(&["--admin-auth", "token"]).unwrap_err();
        assert!(unknown.contains("[possible values: kube, none]"), "{unknown}");
    }
}
