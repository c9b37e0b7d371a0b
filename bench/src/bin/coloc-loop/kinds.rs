//! The runs compared side by side: kube-scheduler alone, behind the echo extender (the
//! protocol's floor), and behind coloc-extender in either nodeCacheCapable mode.

use std::path::Path;

use coloc_testbed::ExtenderEntry;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// No extender.
    Stock,
    /// coloc-echo: filter + prioritize, names mode.
    Echo,
    /// coloc-extender `serve --kube`, default policy, all three verbs, nodeCacheCapable: true.
    ColocNames,
    /// The same with nodeCacheCapable: false (full Node and Pod objects).
    ColocObjects,
}

/// The extender binaries a run may start.
pub struct Programs<'a> {
    pub extender: &'a Path,
    pub echo: &'a Path,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Stock => "stock",
            Kind::Echo => "echo",
            Kind::ColocNames => "coloc-names",
            Kind::ColocObjects => "coloc-objects",
        }
    }

    /// The binary to start and the flags after `serve --listen … --health-listen …`.
    pub fn program<'a>(self, p: &Programs<'a>) -> Option<(&'a Path, &'static [&'static str])> {
        match self {
            Kind::Stock => None,
            Kind::Echo => Some((p.echo, &[])),
            Kind::ColocNames | Kind::ColocObjects => Some((p.extender, &["--kube"])),
        }
    }

    /// The registration kube-scheduler gets for an extender at `url`.
    pub fn entry(self, url: &str) -> ExtenderEntry {
        match self {
            Kind::Echo => ExtenderEntry {
                preempt: false,
                ..ExtenderEntry::all_verbs(url, true)
            },
            _ => ExtenderEntry::all_verbs(url, self == Kind::ColocNames),
        }
    }
}

/// The verbs an entry registers, as the result files name them.
pub fn verbs(e: &ExtenderEntry) -> String {
    [
        (e.filter, "filter"),
        (e.prioritize, "prioritize"),
        (e.preempt, "preempt"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, v)| *v)
    .collect::<Vec<_>>()
    .join(",")
}
