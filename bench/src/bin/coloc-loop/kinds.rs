//! The runs compared side by side: kube-scheduler alone (also with its opportunistic
//! batching off, as any extender registration turns it off), behind the echo extender (the
//! protocol's floor), behind coloc-extender in either nodeCacheCapable mode, and behind
//! coloc-extender in the per-pod-verbs registration profile.

use std::path::Path;

use coloc_testbed::scheduler::ClientTls;
use coloc_testbed::ExtenderEntry;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// No extender.
    Stock,
    /// No extender, and kube-scheduler's opportunistic batching off
    /// (`--feature-gates=OpportunisticBatching=false`): what any extender registration
    /// costs kube-scheduler by itself, since it turns batching off for its profiles.
    StockNoBatching,
    /// coloc-echo: filter + prioritize, names mode.
    Echo,
    /// coloc-echo with nodeCacheCapable: false: the floor of full mode (kube-scheduler
    /// encodes every candidate Node object, twice per pod).
    EchoObjects,
    /// coloc-extender `serve --kube`, default policy, all three verbs, nodeCacheCapable: true.
    ColocNames,
    /// The same with nodeCacheCapable: false (full Node and Pod objects).
    ColocObjects,
    /// coloc-names called over mutual TLS, as the standalone install (the cluster's own
    /// kube-scheduler) calls it; on loopback, so the Service's network hop is not in it.
    /// Beside coloc-names: what the default install's loopback hop saves.
    ColocNamesTls,
    /// manifests/scheduler/kube-scheduler-config-per-pod-verbs.yaml: preempt for every
    /// pod, filter and prioritize only for pods carrying the marker resource (the online
    /// pods here carry none).
    ColocPerPodVerbs,
    /// The per-pod-verbs registration with coloc-echo behind it: what the registration
    /// itself costs kube-scheduler, with no watches and no decisions.
    EchoPerPodVerbs,
    /// coloc-extender in shadow mode with requeue (names mode, all verbs): kube-scheduler's
    /// own decisions with nothing lost. Beside echo, the cost of nothing lost alone.
    RequeueOnly,
}

/// The extender binaries a run may start.
pub struct Programs<'a> {
    pub extender: &'a Path,
    pub echo: &'a Path,
}

impl Kind {
    /// The floor a run is measured against in a storm: the echo extender in the same mode
    /// (requeue-only answers in names mode; stock and echo against themselves).
    pub fn storm_floor(self) -> Option<Kind> {
        match self {
            Kind::ColocNames | Kind::ColocNamesTls | Kind::RequeueOnly | Kind::ColocPerPodVerbs => Some(Kind::Echo),
            Kind::ColocObjects => Some(Kind::EchoObjects),
            _ => None,
        }
    }

    /// An echo extender: the protocol's floor, which decides nothing and writes nothing.
    pub fn is_echo(self) -> bool {
        matches!(self, Kind::Echo | Kind::EchoObjects | Kind::EchoPerPodVerbs)
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Stock => "stock",
            Kind::StockNoBatching => "stock-no-batching",
            Kind::Echo => "echo",
            Kind::EchoObjects => "echo-objects",
            Kind::ColocNames => "coloc-names",
            Kind::ColocNamesTls => "coloc-names-tls",
            Kind::ColocObjects => "coloc-objects",
            Kind::ColocPerPodVerbs => "coloc-per-pod-verbs",
            Kind::EchoPerPodVerbs => "echo-per-pod-verbs",
            Kind::RequeueOnly => "requeue-only",
        }
    }

    /// The binary to start and the flags after `serve --listen … --health-listen …
    /// --admin-listen …`.
    pub fn program<'a>(self, p: &Programs<'a>) -> Option<(&'a Path, &'static [&'static str])> {
        match self {
            Kind::Stock | Kind::StockNoBatching => None,
            Kind::Echo | Kind::EchoObjects | Kind::EchoPerPodVerbs => Some((p.echo, &[])),
            // The shipped default is in shadow: the benchmarks measure it enforcing.
            Kind::ColocNames | Kind::ColocNamesTls | Kind::ColocObjects | Kind::ColocPerPodVerbs => {
                Some((p.extender, &["--kube", "--mode", "enforce"]))
            }
            Kind::RequeueOnly => Some((p.extender, &["--kube", "--mode", "shadow"])),
        }
    }

    /// kube-scheduler's flags beyond the test bed's own.
    pub fn scheduler_flags(self) -> &'static [&'static str] {
        match self {
            Kind::StockNoBatching => &["--feature-gates=OpportunisticBatching=false"],
            _ => &[],
        }
    }

    /// The registration kube-scheduler gets for an extender at `url`: its entries.
    pub fn entries(self, url: &str) -> Vec<ExtenderEntry> {
        match self {
            Kind::Echo | Kind::EchoObjects => {
                vec![ExtenderEntry { preempt: false, ..ExtenderEntry::all_verbs(url, self == Kind::Echo) }]
            }
            Kind::ColocPerPodVerbs | Kind::EchoPerPodVerbs => vec![
                ExtenderEntry { filter: false, prioritize: false, ..ExtenderEntry::all_verbs(url, true) },
                ExtenderEntry {
                    preempt: false,
                    managed_resources: vec![coloc_extender::model::marks::PER_POD_VERBS_MARKER.to_string()],
                    ..ExtenderEntry::all_verbs(url, true)
                },
            ],
            _ => vec![ExtenderEntry::all_verbs(
                url,
                matches!(self, Kind::ColocNames | Kind::ColocNamesTls | Kind::RequeueOnly),
            )],
        }
    }
}

/// How kube-scheduler reaches the extender: plain HTTP, or mutual TLS with files of a CA
/// made for the run.
pub enum Hop {
    Plain,
    Tls(coloc_testbed::pki::HopTls),
}

impl Hop {
    /// The hop `kind` runs over; TLS files go into `dir`.
    pub fn for_kind(kind: Kind, dir: &Path) -> anyhow::Result<Hop> {
        if kind != Kind::ColocNamesTls {
            return Ok(Hop::Plain);
        }
        Ok(Hop::Tls(coloc_testbed::pki::write_hop(dir, "coloc-extender")?))
    }

    /// The extender's flags for this hop.
    pub fn extender_args(&self) -> Vec<String> {
        match self {
            Hop::Plain => Vec::new(),
            Hop::Tls(t) => {
                [("--tls-cert", &t.serving_cert), ("--tls-key", &t.serving_key), ("--client-ca", &t.ca_cert)]
                    .iter()
                    .flat_map(|(flag, path)| [flag.to_string(), path.display().to_string()])
                    .collect()
            }
        }
    }

    /// `entries` as kube-scheduler registers them over this hop.
    pub fn register(&self, entries: Vec<ExtenderEntry>) -> Vec<ExtenderEntry> {
        let Hop::Tls(t) = self else { return entries };
        entries
            .into_iter()
            .map(|e| ExtenderEntry {
                url_prefix: e.url_prefix.replacen("http://", "https://", 1),
                tls: Some(ClientTls {
                    cert_file: t.client_cert.clone(),
                    key_file: t.client_key.clone(),
                    ca_file: t.ca_cert.clone(),
                    server_name: t.server_name.clone(),
                }),
                ..e
            })
            .collect()
    }
}

/// The verbs an entry registers, as the result files name them.
pub fn verbs(e: &ExtenderEntry) -> String {
    [(e.filter, "filter"), (e.prioritize, "prioritize"), (e.preempt, "preempt")]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, v)| *v)
        .collect::<Vec<_>>()
        .join(",")
}
